//! Spellings: dtypes as C++ types, spec expressions as C++ expressions.

use crate::ast::*;
use crate::check::{ConstValue, Info, Symbol};

/// The C math functions the spec's intrinsics render to (`max` on floats is `fmaxf`, `exp2` is
/// `exp2f` where not `fast_exp2`): a spec name spelled so would hide them. The generated
/// helpers (`fast_exp2`, `gelu_erf`, ...) are reserved by their own list, `back::CALLED_HELPERS`.
pub const MATH_FUNCTIONS: [&str; 12] = ["fminf", "fmaxf", "fabsf", "exp2f", "expf", "log2f", "logf", "sqrtf", "rsqrtf", "tanhf", "erff", "rintf"];

/// A float expression `x` converted to integer type `to` as the spec converts (toward zero,
/// saturating, NaN to 0; `float_to_int.cuh`, since a plain cast is undefined outside the
/// range), or `None` for a float type.
pub fn float_to_int(to: DType, x: &str) -> Option<String> {
    match to {
        DType::I8 => Some(format!("float_to_i8({x})")),
        DType::I32 => Some(format!("float_to_i32({x})")),
        _ => None,
    }
}

/// A float expression `x` rounded to f8e4m3 in integer arithmetic (`float_to_e4m3.cuh`: nearest
/// even, saturating at ±448, NaN kept), for code built for sm_80, which has no fp8 conversion
/// instruction (CUTLASS's portable conversion branches per value).
pub fn float_to_e4m3(x: &str) -> String {
    format!("float_to_e4m3({x})")
}

/// The CUTLASS type for a dtype.
pub fn cpp_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "cute::half_t",
        DType::BF16 => "cute::bfloat16_t",
        DType::F8E4M3 => "cute::float_e4m3_t",
        DType::I8 => "int8_t",
        DType::I32 => "int32_t",
    }
}

/// How names and element reads are spelled in the context an expression is emitted in.
pub trait Env {
    /// The C++ for element `name[idx]` of a buffer, or `None` if it cannot be read here.
    fn buffer_element(&self, buffer: usize, idx: &[Expr]) -> Option<String>;
    /// The C++ for a loop or parallel variable.
    fn var(&self, name: &str) -> String {
        name.to_string()
    }
    /// The C++ for element `idx` of a global tensor where this context has it at hand (a
    /// vector loaded for the row-wise lowering), or `None` for a bounds-checked read.
    fn tensor_element(&self, _tensor: usize, _idx: &[Expr]) -> Option<String> {
        None
    }
    /// The C++ for a runtime size (a launcher argument).
    fn runtime_dim(&self, name: &str) -> String {
        name.to_string()
    }
}

/// Host code's environment for the launch grid: no buffers, and runtime sizes widened to
/// `int64_t` before any arithmetic, so that `ceildiv(N, block_N)` cannot overflow `int` for an
/// `N` near `INT_MAX` before the launcher compares the grid with CUDA's limits.
pub struct GridEnv;

impl Env for GridEnv {
    fn buffer_element(&self, _buffer: usize, _idx: &[Expr]) -> Option<String> {
        None
    }
    fn runtime_dim(&self, name: &str) -> String {
        format!("int64_t({name})")
    }
}

/// Converts checked expressions to C++. Arithmetic on floats is done in `float`.
pub struct Conv<'a> {
    /// The spec.
    pub spec: &'a Spec,
    /// Its check info.
    pub info: &'a Info,
    /// HIP code on composable_kernel's types (`ck::bhalf_t` is a bit pattern, converted with
    /// `ck::type_convert`) instead of CUTLASS's.
    pub hip: bool,
    /// Code built for sm_80, which has no fp8 conversion instruction: roundings to f8e4m3
    /// (casts here, stores in the row-wise lowering) are spelled with [`float_to_e4m3`] rather
    /// than CUTLASS's portable conversion (3x slower in session 29's row-wise stores).
    pub fp8_in_software: bool,
}

impl Conv<'_> {
    /// Whether an expression is floating-point (mirrors the checker's typing).
    pub fn is_float(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Float(..) => true,
            ExprKind::Int(_) | ExprKind::Bool(_) | ExprKind::Slice(_) => false,
            ExprKind::Name(n) => matches!(self.info.symbols.get(n), Some(Symbol::Constant(ConstValue::Float(..)))),
            ExprKind::Index(name, _) => match self.info.symbols.get(&name.name) {
                Some(Symbol::Tensor(t)) => self.spec.tensors[*t].dtype.0.is_float(),
                Some(Symbol::Buffer(b)) => self.spec.buffers[*b].dtype.0.is_float(),
                _ => false,
            },
            ExprKind::Unary(_, x) => self.is_float(x),
            ExprKind::Binary(op, a, b) => !op.is_comparison() && !op.is_logical() && (self.is_float(a) || self.is_float(b)),
            ExprKind::Call(f, args) => match DType::from_name(&f.name) {
                Some(d) => d.is_float(),
                None => match f.name.as_str() {
                    "ceildiv" => false,
                    "min" | "max" => args.iter().any(|a| self.is_float(&a.value)),
                    "select" => args.iter().skip(1).any(|a| self.is_float(&a.value)),
                    "abs" => args.first().is_some_and(|a| self.is_float(&a.value)),
                    _ => true,
                },
            },
        }
    }

    /// C++ for `e`, fully parenthesised where precedence could surprise a reader.
    pub fn expr(&self, e: &Expr, env: &dyn Env) -> String {
        match &e.kind {
            ExprKind::Int(v) => v.to_string(),
            ExprKind::Float(_, lit) => float_literal(lit),
            ExprKind::Bool(b) => b.to_string(),
            ExprKind::Name(n) => match self.info.symbols.get(n) {
                Some(Symbol::Var) => env.var(n),
                Some(Symbol::RuntimeDim) => env.runtime_dim(n),
                _ => n.clone(),
            },
            ExprKind::Index(name, idx) => match self.info.symbols.get(&name.name) {
                Some(Symbol::Buffer(b)) => env.buffer_element(*b, idx).unwrap_or_else(|| "/* unsupported read */ 0".into()),
                Some(Symbol::Tensor(t)) => env.tensor_element(*t, idx).unwrap_or_else(|| self.tensor_element(*t, idx, env)),
                _ => "0".into(),
            },
            ExprKind::Unary(op, x) => {
                let inner = self.atom(x, env);
                match op {
                    UnOp::Neg => format!("-{inner}"),
                    UnOp::Not => format!("!{inner}"),
                }
            }
            ExprKind::Binary(op, a, b) => {
                // `k * (block_K / 8)` keeps its parentheses: integer division does not associate.
                let right = match &b.kind {
                    ExprKind::Binary(BinOp::Div | BinOp::Rem, ..) if *op == BinOp::Mul => format!("({})", self.expr(b, env)),
                    _ => self.operand(b, *op, true, env),
                };
                format!("{} {} {right}", self.operand(a, *op, false, env), op.symbol())
            }
            ExprKind::Call(f, args) => self.call(e, f, args, env),
            ExprKind::Slice(_) => "/* slice */ 0".into(),
        }
    }

    /// `e` as one C++ operand of any operator: parenthesised if it is an operation (or a
    /// negative literal, which a prefix `-` would turn into `--`).
    fn atom(&self, e: &Expr, env: &dyn Env) -> String {
        let s = self.expr(e, env);
        if matches!(e.kind, ExprKind::Binary(..) | ExprKind::Unary(..)) || s.starts_with('-') { format!("({s})") } else { s }
    }

    /// `e` as an operand of `<` in `min`/`max`'s conditional: parenthesised if it is itself a
    /// comparison or a logical operation.
    fn compared(&self, e: &Expr, env: &dyn Env) -> String {
        let s = self.expr(e, env);
        if matches!(&e.kind, ExprKind::Binary(op, ..) if op.is_comparison() || op.is_logical()) { format!("({s})") } else { s }
    }

    /// `e` as the left or `right` operand of `parent`: bracketed where C++ would group it
    /// otherwise. A right operand of equal precedence keeps its brackets even under `+` and
    /// `*`: `a + (b + c)` is not `a + b + c` in floating point.
    fn operand(&self, e: &Expr, parent: BinOp, right: bool, env: &dyn Env) -> String {
        let s = self.expr(e, env);
        match &e.kind {
            ExprKind::Binary(op, ..) if prec(*op) < prec(parent) || (prec(*op) == prec(parent) && (right || !matches!(parent, BinOp::Add | BinOp::Mul))) => format!("({s})"),
            _ => s,
        }
    }

    fn call(&self, _e: &Expr, f: &Ident, args: &[Arg], env: &dyn Env) -> String {
        let a: Vec<String> = args.iter().map(|a| self.expr(&a.value, env)).collect();
        let any_float = args.iter().any(|a| self.is_float(&a.value));
        if let Some(d) = DType::from_name(&f.name) {
            return match d {
                DType::F32 if any_float => self.atom(&args[0].value, env),
                DType::F32 => format!("static_cast<float>({})", a[0]),
                // Floats convert toward zero, saturating (NaN to 0); integers wrap.
                DType::I32 | DType::I8 if any_float => float_to_int(d, &a[0]).unwrap_or_default(),
                DType::I32 | DType::I8 => format!("static_cast<{}>({})", cpp_type(d), a[0]),
                // Rounding to a narrower float, then computing on in f32.
                DType::F8E4M3 if self.fp8_in_software => format!("static_cast<float>({})", float_to_e4m3(&format!("static_cast<float>({})", a[0]))),
                DType::BF16 | DType::F16 | DType::F8E4M3 if self.hip => format!("ck::type_convert<float>(ck::type_convert<{}>(static_cast<float>({})))", crate::back::ck::element(d), a[0]),
                DType::BF16 | DType::F16 | DType::F8E4M3 => format!("static_cast<float>({}(static_cast<float>({})))", cpp_type(d), a[0]),
            };
        }
        // The operands of the spelled-out integer forms, bracketed where the form's operators
        // would otherwise bind into them.
        let arg = |i: usize| &args[i].value;
        match f.name.as_str() {
            // Spelled out: namespace-scope constexprs cannot bind to the const& that
            // cute::ceil_div / cute::min take in device code.
            // The spec's ceildiv is the true ceiling; C++ division truncates, which is the
            // ceiling for a non-positive numerator (and a positive divisor).
            "ceildiv" if crate::check::non_negative(arg(0), &self.info.symbols) => {
                format!("(({} + {} - 1) / {})", self.operand(arg(0), BinOp::Add, false, env), self.operand(arg(1), BinOp::Add, true, env), self.atom(arg(1), env))
            }
            "ceildiv" => {
                let (n, d) = (self.atom(arg(0), env), self.atom(arg(1), env));
                format!("({n} > 0 ? ({n} + {d} - 1) / {d} : {n} / {d})")
            }
            "min" if any_float => format!("fminf({}, {})", a[0], a[1]),
            "max" if any_float => format!("fmaxf({}, {})", a[0], a[1]),
            "min" => format!("({0} < {1} ? {0} : {1})", self.compared(arg(0), env), self.compared(arg(1), env)),
            "max" => format!("({0} > {1} ? {0} : {1})", self.compared(arg(0), env), self.compared(arg(1), env)),
            "select" => format!("({} ? {} : {})", a[0], a[1], a[2]),
            "abs" if any_float => format!("fabsf({})", a[0]),
            "abs" => format!("({} < 0 ? -{} : {})", self.compared(arg(0), env), self.atom(arg(0), env), a[0]),
            "exp2" if self.hip => format!("exp2f({})", a[0]),
            "exp2" => format!("fast_exp2({})", a[0]),
            "exp" => format!("expf({})", a[0]),
            "log2" => format!("log2f({})", a[0]),
            "log" => format!("logf({})", a[0]),
            "sqrt" => format!("sqrtf({})", a[0]),
            "rsqrt" => format!("rsqrtf({})", a[0]),
            "tanh" => format!("tanhf({})", a[0]),
            "erf" => format!("erff({})", a[0]),
            // Activations are small device functions in the generated file (see `helpers`).
            "gelu" => format!("gelu_erf({})", a[0]),
            "silu" => format!("silu({})", a[0]),
            "sigmoid" => format!("sigmoid({})", a[0]),
            "rint" => format!("rintf({})", a[0]),
            other => format!("{other}({})", a.join(", ")),
        }
    }

    /// A global element read: zero outside the tensor (the spec's semantics at ragged edges,
    /// below 0 as past the end).
    fn tensor_element(&self, t: usize, idx: &[Expr], env: &dyn Env) -> String {
        let tensor = &self.spec.tensors[t];
        let ix: Vec<String> = idx.iter().map(|e| self.expr(e, env)).collect();
        let (linear, in_bounds) = offset(tensor, &ix);
        let in_bounds = with_lower_bounds(idx.iter().zip(&ix).filter(|(e, _)| !crate::check::non_negative(e, &self.info.symbols)).map(|(_, i)| i.as_str()), in_bounds);
        let zero = if tensor.dtype.0.is_float() { "0.f" } else { "0" };
        let conv = match (tensor.dtype.0.is_float(), self.hip) {
            (true, true) => "ck::type_convert<float>",
            (true, false) => "static_cast<float>",
            (false, _) => "static_cast<int32_t>",
        };
        format!("(({in_bounds}) ? {conv}({}[{linear}]) : {zero})", tensor.name.name)
    }
}

/// `in_bounds` with a `0 <= i` check in front for each C++ index of `may_be_negative`.
pub fn with_lower_bounds<'a>(may_be_negative: impl Iterator<Item = &'a str>, in_bounds: String) -> String {
    let lower: Vec<String> = may_be_negative.map(|i| format!("0 <= {i}")).collect();
    if lower.is_empty() { in_bounds } else { format!("{} && {in_bounds}", lower.join(" && ")) }
}

/// Whether `name` occurs in `text` as a whole C++ identifier.
pub fn mentions(text: &str, name: &str) -> bool {
    mention_count(text, name) > 0
}

/// How many times `text` names the identifier `name` (as a whole word).
pub fn mention_count(text: &str, name: &str) -> usize {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).filter(|&(i, _)| {
        let before = text[..i].chars().next_back().is_some_and(ident);
        let after = text[i + name.len()..].chars().next().is_some_and(ident);
        !before && !after
    }).count()
}

/// The element offset of `tensor` at the C++ indices `ix` (one per dimension, in its memory
/// order, 64-bit), and the condition that they are inside it.
pub fn offset(tensor: &Tensor, ix: &[String]) -> (String, String) {
    let dims: Vec<String> = tensor.shape.iter().map(Dim::text).collect();
    let in_bounds = ix.iter().zip(&dims).map(|(i, d)| format!("{i} < {d}")).collect::<Vec<_>>().join(" && ");
    let linear = match (ix.len(), tensor.order.0) {
        (1, _) => ix[0].clone(),
        (2, Order::RowMajor) => format!("int64_t({}) * {} + {}", ix[0], dims[1], ix[1]),
        (2, Order::ColMajor) => format!("int64_t({}) * {} + {}", ix[1], dims[0], ix[0]),
        _ => {
            let mut lin = format!("int64_t({}) * {} + {}", ix[0], dims[1], ix[1]);
            for (i, d) in ix.iter().zip(&dims).skip(2) {
                lin = format!("({lin}) * {d} + {i}");
            }
            lin
        }
    };
    (linear, in_bounds)
}

fn prec(op: BinOp) -> u8 {
    match op {
        BinOp::Or => 0,
        BinOp::And => 1,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => 2,
        BinOp::Add | BinOp::Sub => 3,
        BinOp::Mul | BinOp::Div | BinOp::Rem => 4,
    }
}

/// `name` with its first letter upper-cased, for C++ type names (`bias` → `Bias`).
pub fn upper_first(name: &str) -> String {
    let mut ch = name.chars();
    ch.next().map(|f| f.to_ascii_uppercase().to_string() + ch.as_str()).unwrap_or_default()
}

/// A spec constant's C++ type and value, as every back end declares it
/// (`constexpr <type> <name> = <value>;`): folded by the checker, so `1.0 / sqrt(D)` is a float
/// literal here.
pub fn constant_decl(info: &Info, name: &str) -> (&'static str, String) {
    match info.symbols.get(name) {
        Some(Symbol::Constant(ConstValue::Int(v))) => ("int", v.to_string()),
        Some(Symbol::Constant(ConstValue::Float(_, s))) => ("float", float_literal(s)),
        Some(Symbol::Constant(ConstValue::Bool(b))) => ("bool", b.to_string()),
        _ => ("int", "0".into()),
    }
}

/// A float literal spelled as a C++ `float` literal: `0.0` → `0.0f`, `1e3` → `1e3f`, `2.` → `2.f`,
/// `inf` → `INFINITY`.
pub fn float_literal(lit: &str) -> String {
    match lit {
        "inf" => return "INFINITY".into(),
        "-inf" => return "-INFINITY".into(),
        _ => {}
    }
    let mut s = lit.to_string();
    if s.starts_with('.') {
        s.insert(0, '0');
    }
    if s.starts_with("-.") {
        s.insert(1, '0');
    }
    format!("{s}f")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_literals_get_the_f_suffix() {
        assert_eq!(float_literal("0.0"), "0.0f");
        assert_eq!(float_literal(".5"), "0.5f");
        assert_eq!(float_literal("1e-3"), "1e-3f");
        assert_eq!(float_literal("-inf"), "-INFINITY");
    }
}
