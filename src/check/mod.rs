//! Checking: names, types, shapes and scopes of a parsed spec.
//!
//! Requires: a [`Spec`] from the front end. Guarantees: either an [`Info`] — every name
//! resolved to one [`Symbol`], every buffer shape evaluated, every expression well typed,
//! every copy and gemm consistent in rank, extent, dtype and scope — or every error found,
//! each with its span and a hint. Target limits (MMA shapes, shared-memory budgets) are
//! checked later, by layout inference, because they depend on what inference decides.

pub mod consts;
mod expr;
mod init;
mod stmt;

use crate::ast::*;
use crate::diag::{did_you_mean, Diagnostic, Span};
use std::collections::BTreeMap;

pub use expr::{eval_int, lower_bound, non_negative, Ty};

/// What a name refers to. Names are unique in a spec, except that loop and parallel
/// variables may be reused by blocks that do not nest.
#[derive(Clone, Debug, PartialEq)]
pub enum Symbol {
    /// A global tensor (index into `spec.tensors`).
    Tensor(usize),
    /// An on-chip buffer (index into `spec.buffers`).
    Buffer(usize),
    /// A compile-time constant.
    Constant(ConstValue),
    /// A runtime size, passed to the launcher.
    RuntimeDim,
    /// A block index (`grid` dimension 0 = x).
    BlockIndex(usize),
    /// A loop or parallel variable.
    Var,
}

/// A constant's value.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstValue {
    /// Integer.
    Int(i64),
    /// Float, with its spelling.
    Float(f64, String),
    /// Boolean.
    Bool(bool),
}

impl ConstValue {
    /// The value as the spec writes it (a float keeps its spelling).
    pub fn spelling(&self) -> String {
        match self {
            ConstValue::Int(v) => v.to_string(),
            ConstValue::Float(_, s) => s.clone(),
            ConstValue::Bool(b) => b.to_string(),
        }
    }
}

/// What checking learned; later stages take it as proof that the spec was checked.
#[derive(Clone, Debug)]
pub struct Info {
    /// Every name (loop and parallel variables included).
    pub symbols: BTreeMap<String, Symbol>,
    /// Runtime sizes in launcher order (first appearance in `tensors`).
    pub runtime_dims: Vec<String>,
    /// Evaluated shape of each buffer, by index.
    pub buffer_shapes: Vec<Vec<i64>>,
    /// For each `parallel` statement, the buffer whose index space it iterates.
    pub parallel_domains: BTreeMap<StmtId, usize>,
    /// For each `pipelined` statement, its stage count.
    pub stages: BTreeMap<StmtId, i64>,
    /// Parts of the spec that do nothing (an unused buffer, a result never read): the spec
    /// compiles, and the command line prints these as warnings.
    pub warnings: Vec<Diagnostic>,
}

impl Info {
    /// An extent known before run time: a literal, or a constant's value.
    pub fn fixed_extent(&self, d: &crate::ast::Dim) -> Option<i64> {
        match d {
            crate::ast::Dim::Fixed(n, _) => Some(*n),
            crate::ast::Dim::Named(name) => self.const_int(&name.name),
            crate::ast::Dim::Div(..) => None,
        }
    }

    /// The launcher's size checks of divided extents: `(n, div)` for each `n / div` in a
    /// tensor's shape with `n` a runtime size (`K % 128` for `scales [N, K/128]`), less those
    /// another one implies (`K % 8` by `K % 128`).
    pub fn size_divisors(&self, spec: &Spec) -> Vec<(String, i64)> {
        let mut divisors: Vec<(String, i64)> = Vec::new();
        for d in spec.tensors.iter().flat_map(|t| &t.shape) {
            if let Dim::Div(n, div, _) = d && self.runtime_dims.contains(&n.name) && !divisors.contains(&(n.name.clone(), *div)) {
                divisors.push((n.name.clone(), *div));
            }
        }
        let implied = |(n, div): &(String, i64)| divisors.iter().any(|(m, d)| m == n && d != div && d % div == 0);
        divisors.iter().filter(|d| !implied(d)).cloned().collect()
    }

    /// Whether extent `d` is a multiple of `v` without a check of its own: fixed when
    /// generated and divisible, or made whole by the size checks `divisors` (what
    /// [`Info::size_divisors`] returned): `K` by `K % 128` for v = 8, `K / 8` by it for v = 4
    /// (K / 8 is a multiple of 4 exactly when K is a multiple of 32, given that 8 divides K).
    pub fn whole_vectors(&self, divisors: &[(String, i64)], d: &Dim, v: i64) -> bool {
        if self.fixed_extent(d).is_some_and(|n| n % v == 0) {
            return true;
        }
        let (name, q) = match d {
            Dim::Named(n) => (&n.name, 1),
            Dim::Div(n, q, _) => (&n.name, *q),
            Dim::Fixed(..) => return false,
        };
        divisors.iter().any(|(m, div)| m == name && div % (q * v) == 0)
    }

    /// Integer value of a constant.
    pub fn const_int(&self, name: &str) -> Option<i64> {
        match self.symbols.get(name) {
            Some(Symbol::Constant(ConstValue::Int(v))) => Some(*v),
            _ => None,
        }
    }
}

/// The largest buffer extent accepted (a tile, not a tensor).
pub const MAX_BUFFER_EXTENT: i64 = 1 << 16;
/// The longest loop `unroll` accepts (its body is copied this many times).
pub const MAX_UNROLL: i64 = 1024;
/// The largest pipeline depth accepted.
pub const MAX_STAGES: i64 = 32;

pub(crate) struct Checker<'a> {
    pub spec: &'a Spec,
    pub info: Info,
    pub errors: Vec<Diagnostic>,
    /// Where each top-level name was declared, for "first declared here" labels.
    declared: BTreeMap<String, Span>,
    /// Loop/parallel variables in scope.
    pub scope_vars: Vec<String>,
    /// Buffers with an extent already reported as unknown: statements on them are not
    /// shape-checked (their stand-in extent of 1 would only cause follow-on errors).
    pub unknown_extents: std::collections::BTreeSet<String>,
}

/// Checks a spec, reporting every error found.
pub fn check(spec: &Spec) -> Result<Info, Vec<Diagnostic>> {
    check_body(spec, true)
}

/// As [`check`], for a spec whose body lost statements that failed to parse: reads before
/// writes are not looked for, since a missing statement may be the write.
pub fn check_partial(spec: &Spec) -> Result<Info, Vec<Diagnostic>> {
    check_body(spec, false)
}

fn check_body(spec: &Spec, whole: bool) -> Result<Info, Vec<Diagnostic>> {
    let mut c = Checker {
        spec,
        info: Info {
            symbols: BTreeMap::new(),
            runtime_dims: Vec::new(),
            buffer_shapes: Vec::new(),
            parallel_domains: BTreeMap::new(),
            stages: BTreeMap::new(),
            warnings: Vec::new(),
        },
        errors: Vec::new(),
        declared: BTreeMap::new(),
        unknown_extents: Default::default(),
        scope_vars: Vec::new(),
    };
    c.declarations();
    c.block(&spec.body);
    c.one_nibble_order();
    if whole && c.errors.is_empty() {
        c.flow();
    }
    if c.errors.is_empty() { Ok(c.info) } else { Err(c.errors) }
}

impl Checker<'_> {
    /// Every `dequant_int4` of a kernel reads its words in one order: the generated unpacking
    /// helpers are written for one.
    fn one_nibble_order(&mut self) {
        let mut first: Option<(NibbleOrder, Span)> = None;
        let mut conflicts = Vec::new();
        walk_stmts(&self.spec.body, &mut |s| {
            let StmtKind::Dequant { order, .. } = &s.kind else { return };
            match first {
                None => first = Some((*order, s.span)),
                Some((o, at)) if o != *order => conflicts.push(
                    Diagnostic::error(s.span, format!("this `dequant_int4` reads its words in {} order, an earlier one in {} order", order.name(), o.name()))
                        .label(at, "the earlier one")
                        .hint("a kernel's packed weights share one order: give every dequant_int4 the same `order=`"),
                ),
                Some(_) => {}
            }
        });
        self.errors.extend(conflicts);
    }
}

/// C++17 keywords and alternative tokens, C++20's, the standard macros, CUDA's built-in
/// variables and the C and CUDA types generated code uses: none can be a name in the
/// generated C++.
const CPP_WORDS: [&str; 126] = [
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch",
    "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr",
    "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete",
    "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for",
    "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
    "requires", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch",
    "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned",
    "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "NULL", "INFINITY", "NAN", "assert",
    "INT32_MAX", "INT64_MAX", "UINT32_MAX", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "int8_t",
    "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "uintptr_t",
    "ptrdiff_t", "dim3", "uint2", "uint4", "int2", "int4", "float2", "float4", "half", "half2", "nv_bfloat16",
    "nv_bfloat162",
];

/// Macros of the C standard headers the generated code includes (through `<cmath>`,
/// `<cfloat>`, `<climits>`, `<cstdint>`, `<cstdio>` and `<cerrno>`, directly or via CUTLASS),
/// beyond those in [`CPP_WORDS`] and the families [`standard_macro`] matches.
const STANDARD_MACROS: [&str; 24] = [
    "HUGE_VAL", "HUGE_VALF", "HUGE_VALL", "CHAR_BIT", "MB_LEN_MAX", "DECIMAL_DIG", "RAND_MAX", "EOF", "BUFSIZ",
    "FILENAME_MAX", "EXIT_SUCCESS", "EXIT_FAILURE", "CLOCKS_PER_SEC", "EDOM", "ERANGE", "EILSEQ", "errno",
    "math_errhandling", "MATH_ERRNO", "MATH_ERREXCEPT", "stdin", "stdout", "stderr", "offsetof",
];

/// Whether `name` is a macro of the C standard headers: one of [`STANDARD_MACROS`], the math
/// constants (`M_PI`), the floating-point limits and classes (`FLT_MAX`, `DBL_EPSILON`,
/// `FP_NAN`), CUDA's (`CUDART_INF_F`), or an integer type's limits and constant macros
/// (`INT_MAX`, `UINT64_MAX`, `INT_FAST16_MIN`, `SIZE_MAX`, `INT8_C`).
fn standard_macro(name: &str) -> bool {
    const PREFIXES: [&str; 6] = ["M_", "FLT_", "DBL_", "LDBL_", "FP_", "CUDART_"];
    const INTEGER_TYPES: [&str; 20] = [
        "CHAR", "SCHAR", "UCHAR", "SHRT", "USHRT", "INT", "UINT", "LONG", "ULONG", "LLONG", "ULLONG", "WCHAR", "WINT",
        "SIZE", "PTRDIFF", "SIG_ATOMIC", "INTPTR", "UINTPTR", "INTMAX", "UINTMAX",
    ];
    let integer_type = |t: &str| {
        let t = t.strip_prefix('U').unwrap_or(t);
        let sized = t.strip_prefix("INT_LEAST").or_else(|| t.strip_prefix("INT_FAST")).or_else(|| t.strip_prefix("INT"));
        INTEGER_TYPES.contains(&t) || sized.is_some_and(|bits| ["8", "16", "32", "64"].contains(&bits))
    };
    let limit = ["_MAX", "_MIN", "_WIDTH", "_C"].iter().any(|sfx| name.strip_suffix(sfx).is_some_and(|t| INTEGER_TYPES.contains(&t) || integer_type(t)));
    // Upper case or a digit after the prefix: `M_PI`, `M_2_SQRTPI`, not `M_tiles`.
    let prefixed = PREFIXES.iter().any(|p| name.strip_prefix(p).and_then(|rest| rest.chars().next()).is_some_and(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit()));
    STANDARD_MACROS.contains(&name) || prefixed || limit
}

/// Whether a spec name would be taken for C++, CUDA or the standard headers' own: a
/// [`CPP_WORDS`] entry or a [`standard_macro`].
pub fn cpp_word(name: &str) -> bool {
    CPP_WORDS.contains(&name) || standard_macro(name)
}

/// A hint for a Python spelling of a spec-language literal (`True`, `None`, `float('inf')`
/// aside): the spec's `true`, `false` and `inf`.
pub fn python_literal(name: &str) -> Option<String> {
    spec_literal(name).map(|spec| format!("the spec language writes it `{spec}`"))
}

/// The spec language's spelling of a literal written the Python (or C macro) way: `True`,
/// `FALSE`, `Inf`.
pub fn spec_literal(name: &str) -> Option<&'static str> {
    match name {
        "True" | "TRUE" => Some("true"),
        "False" | "FALSE" => Some("false"),
        "Inf" | "INF" | "Infinity" => Some("inf"),
        _ => None,
    }
}

/// Whether the checker refuses `name` for every target: a C++ or CUDA word ([`cpp_word`]),
/// an intrinsic of the spec language, its literal `inf` or a dtype name.
pub fn refused_name(name: &str) -> bool {
    cpp_word(name) || crate::check::expr::INTRINSICS.contains(&name) || DType::from_name(name).is_some() || name == "inf"
}

impl Checker<'_> {
    pub fn err(&mut self, d: Diagnostic) {
        self.errors.push(d);
    }

    fn declare(&mut self, ident: &Ident, sym: Symbol) {
        self.not_cpp_word(ident);
        if let Some(first) = self.declared.get(&ident.name) {
            let first = *first;
            self.err(Diagnostic::error(ident.span, format!("`{}` is declared twice", ident.name))
                .label(first, "first declared here")
                .hint("tensors, constants, runtime sizes, block indices and buffers share one namespace; rename one"));
            return;
        }
        if crate::check::expr::INTRINSICS.contains(&ident.name.as_str()) || DType::from_name(&ident.name).is_some() || ident.name == "inf" {
            self.err(Diagnostic::error(ident.span, format!("`{}` is a built-in name and cannot be redeclared", ident.name)));
            return;
        }
        self.declared.insert(ident.name.clone(), ident.span);
        self.info.symbols.insert(ident.name.clone(), sym);
    }

    fn declarations(&mut self) {
        let spec = self.spec;
        if !crate::front::is_identifier(&spec.kernel.name) {
            self.err(Diagnostic::error(spec.kernel.span, "the kernel name must be a C identifier"));
        } else {
            self.not_cpp_word(&spec.kernel);
        }
        for c in &spec.constants {
            let v = match &c.value.kind {
                ExprKind::Int(v) => ConstValue::Int(*v),
                ExprKind::Float(v, s) => ConstValue::Float(*v, s.clone()),
                ExprKind::Bool(b) => ConstValue::Bool(*b),
                _ => continue,
            };
            self.declare(&c.name, Symbol::Constant(v));
        }
        for (i, t) in spec.tensors.iter().enumerate() {
            self.declare(&t.name, Symbol::Tensor(i));
        }
        // Runtime sizes: names in tensor shapes that are not constants, in launcher order:
        // the outputs' dimensions first (M, N of a GEMM), then the others (K).
        let outputs_first = spec.tensors.iter().filter(|t| t.output).chain(spec.tensors.iter().filter(|t| !t.output));
        for t in outputs_first {
            if t.shape.len() > 2 && t.order.0 == Order::ColMajor {
                self.err(Diagnostic::error(t.order.1, "`order` applies to 2-D tensors only").hint("tensors of other ranks are row-major (the last dimension contiguous)"));
            }
            for d in &t.shape {
                match d {
                    Dim::Fixed(v, span) if *v < 1 || *v > i32::MAX as i64 => self.err(Diagnostic::error(*span, format!("a tensor extent must be between 1 and {}, found {v}", i32::MAX))),
                    Dim::Fixed(..) => {}
                    Dim::Div(n, div, span) => match self.info.symbols.get(&n.name) {
                        _ if *div < 1 => self.err(Diagnostic::error(*span, format!("a tensor extent's divisor must be positive, found {div}"))),
                        Some(Symbol::Constant(ConstValue::Int(v))) if *v % div == 0 && *v / div >= 1 => {}
                        Some(Symbol::Constant(_)) => self.err(Diagnostic::error(*span, format!("constant `{}` is not a positive multiple of {div}, so `{}/{div}` cannot be an extent", n.name, n.name))),
                        Some(Symbol::RuntimeDim) => {}
                        Some(_) => self.err(Diagnostic::error(n.span, format!("`{}` names a tensor, not a size", n.name))),
                        None => {
                            self.declare(n, Symbol::RuntimeDim);
                            self.info.runtime_dims.push(n.name.clone());
                        }
                    },
                    Dim::Named(n) => match self.info.symbols.get(&n.name) {
                        Some(Symbol::Constant(ConstValue::Int(v))) if *v >= 1 && *v <= i32::MAX as i64 => {}
                        Some(Symbol::Constant(_)) => self.err(Diagnostic::error(n.span, format!("constant `{}` is not a positive integer, so it cannot be an extent", n.name))),
                        Some(Symbol::RuntimeDim) => {}
                        Some(_) => self.err(Diagnostic::error(n.span, format!("`{}` names a tensor, not a size", n.name))),
                        None => {
                            self.declare(n, Symbol::RuntimeDim);
                            self.info.runtime_dims.push(n.name.clone());
                        }
                    },
                }
            }
        }
        if !spec.tensors.iter().any(|t| t.output) && let Some(t) = spec.tensors.last() {
            self.err(Diagnostic::error(t.name.span, "no tensor is marked `output: true`").hint("mark the tensors the kernel writes with `output: true`"));
        }
        if spec.grid.is_empty() || spec.grid.len() > 3 {
            let span = spec.grid.first().map_or(spec.kernel.span, |g| g.var.span);
            self.err(Diagnostic::error(span, format!("the grid has {} dimensions; it needs 1 to 3", spec.grid.len()))
                .hint("write `grid:` with one `name: extent` line per dimension, x first"));
        }
        for (i, g) in spec.grid.iter().enumerate() {
            self.declare(&g.var, Symbol::BlockIndex(i));
        }
        for g in &spec.grid {
            self.int_expr(&g.extent, "a grid extent", false);
        }
        let (threads, span) = spec.threads;
        if !(32..=1024).contains(&threads) || threads % 32 != 0 {
            self.err(Diagnostic::error(span, format!("threads must be a multiple of 32 between 32 and 1024, found {threads}"))
                .hint(format!("use {}", ((threads.clamp(32, 1024) + 31) / 32) * 32)));
        }
        for (i, b) in spec.buffers.iter().enumerate() {
            self.declare(&b.name, Symbol::Buffer(i));
            let mut shape = Vec::new();
            for e in &b.shape {
                match eval_int(e, &self.info.symbols) {
                    Some(v) if v > MAX_BUFFER_EXTENT => {
                        self.err(Diagnostic::error(e.span, format!("a buffer extent of {v} is far beyond what fits on chip (at most {MAX_BUFFER_EXTENT})"))
                            .hint("buffers hold one tile; use tile sizes like 64 or 128"));
                        shape.push(1);
                    }
                    Some(v) if v >= 1 => shape.push(v),
                    Some(v) => {
                        self.err(Diagnostic::error(e.span, format!("a buffer extent must be at least 1, found {v}")));
                        shape.push(1);
                    }
                    None => {
                        // Unknown names, zero divisors and the like get their own error first.
                        if self.int_expr(e, "a buffer extent", false) {
                            self.err(Diagnostic::error(e.span, "a buffer extent must be a constant integer expression")
                                .hint("buffer shapes are fixed at compile time: use constants like `block_M`"));
                        }
                        self.unknown_extents.insert(b.name.name.clone());
                        shape.push(1);
                    }
                }
            }
            if shape.len() > 2 {
                self.err(Diagnostic::error(b.shape_span, format!("buffers have 1 or 2 dimensions, found {}", shape.len())));
            }
            self.info.buffer_shapes.push(shape);
        }
    }

    /// Where top-level name `name` was declared.
    pub fn declared_at(&self, name: &str) -> Option<Span> {
        self.declared.get(name).copied()
    }

    /// Looks a name up, reporting it if unknown.
    pub fn resolve(&mut self, ident: &Ident) -> Option<Symbol> {
        self.resolve_expecting(ident, |_| true)
    }

    /// As [`Self::resolve`], where the place wants a symbol `expected` accepts: an unknown
    /// name's suggestion comes from those first (`Bs` in a gemm suggests the buffer `B_s`, not
    /// the tensor `B`).
    pub fn resolve_expecting(&mut self, ident: &Ident, expected: fn(&Symbol) -> bool) -> Option<Symbol> {
        if let Some(s) = self.info.symbols.get(&ident.name) {
            if *s == Symbol::Var && !self.scope_vars.contains(&ident.name) {
                self.err(Diagnostic::error(ident.span, format!("`{}` is not in scope here", ident.name))
                    .hint("loop and parallel variables exist only inside their block"));
                return None;
            }
            return Some(s.clone());
        }
        let fitting = self.info.symbols.iter().filter(|(_, s)| expected(s)).map(|(n, _)| n.as_str());
        let hint = python_literal(&ident.name)
            .or_else(|| did_you_mean(&ident.name, fitting))
            .or_else(|| did_you_mean(&ident.name, self.info.symbols.keys().map(String::as_str)))
            .unwrap_or_else(|| "declare it under tensors, constants, grid or buffers".into());
        self.err(Diagnostic::error(ident.span, format!("unknown name `{}`", ident.name)).hint(hint));
        None
    }

    /// Refuses a name generated C++ cannot spell: a C++ keyword, a standard macro, a CUDA
    /// built-in variable or a C/CUDA type ([`cpp_word`]). Spec names appear in the generated
    /// code as written. The name is still declared, so that its uses report nothing more.
    fn not_cpp_word(&mut self, ident: &Ident) {
        if !cpp_word(&ident.name) {
            return;
        }
        self.err(Diagnostic::error(ident.span, format!("`{}` is reserved in C++ or CUDA (a keyword, a standard macro, a built-in variable or a type), and spec names appear in the generated C++ as written", ident.name))
            .hint("rename it"));
    }

    /// Binds a loop or parallel variable for the duration of a block.
    pub fn bind_var(&mut self, ident: &Ident) -> bool {
        self.not_cpp_word(ident);
        match self.info.symbols.get(&ident.name) {
            Some(Symbol::Var) if !self.scope_vars.contains(&ident.name) => {}
            Some(Symbol::Var) => {
                self.err(Diagnostic::error(ident.span, format!("`{}` is already a variable of an enclosing block", ident.name)).hint("pick another name"));
                return false;
            }
            Some(_) => {
                let first = self.declared.get(&ident.name).copied().unwrap_or(ident.span);
                self.err(Diagnostic::error(ident.span, format!("`{}` is already declared", ident.name)).label(first, "declared here").hint("pick another name for the variable"));
                return false;
            }
            None => {
                self.info.symbols.insert(ident.name.clone(), Symbol::Var);
            }
        }
        self.scope_vars.push(ident.name.clone());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_macros_are_refused_and_names_like_them_are_not() {
        for name in ["M_PI", "M_2_SQRTPI", "FLT_MAX", "DBL_EPSILON", "FP_NAN", "HUGE_VAL", "CUDART_INF_F", "INT_MAX",
            "UINT64_MAX", "INT_FAST16_MIN", "UINT_LEAST8_MAX", "SIZE_MAX", "INT8_C", "CHAR_BIT", "LLONG_MIN", "errno"] {
            assert!(cpp_word(name), "{name}");
        }
        for name in ["M", "M_tiles", "BLOCK_M", "BLOCK_MAX", "N_MAX", "INT", "MAX_C", "EPS", "FLT", "K_MIN"] {
            assert!(!cpp_word(name), "{name}");
        }
    }
}
