//! Typing of expressions and constant evaluation.

use super::{Checker, ConstValue, Symbol};
use crate::ast::*;
use crate::diag::{did_you_mean, Diagnostic};
use std::collections::BTreeMap;

/// Value types of expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// Integers (indices, sizes, i8/i32 elements).
    Int,
    /// Floating point (any float dtype; arithmetic is done in f32).
    Float,
    /// Conditions.
    Bool,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Int => "an integer",
            Ty::Float => "a float",
            Ty::Bool => "a boolean",
        }
    }
}

/// Built-in functions usable in expressions (casts are the dtype names).
pub const INTRINSICS: [&str; 17] = [
    "ceildiv", "min", "max", "exp2", "exp", "log2", "log", "sqrt", "rsqrt", "abs", "tanh", "select", "erf", "gelu", "silu",
    "sigmoid", "rint",
];

/// Whether an integer index expression cannot be negative: a constant expression that is not,
/// or one built from non-negative constants, runtime sizes, block indices and loop or parallel
/// variables (which all count up from 0) with `+`, `*`, `/`, `%`, `min`, `max` and `ceildiv`.
/// Generated code checks indices that may be negative (`j - 1`) against 0 as well as against
/// the tensor's extent, or refuses them where its copies check only the far edge.
pub fn non_negative(e: &Expr, symbols: &BTreeMap<String, Symbol>) -> bool {
    if let Some(v) = eval_int(e, symbols) {
        return v >= 0;
    }
    match &e.kind {
        ExprKind::Name(n) => matches!(symbols.get(n), Some(Symbol::RuntimeDim | Symbol::BlockIndex(_) | Symbol::Var)),
        ExprKind::Binary(BinOp::Add | BinOp::Mul | BinOp::Div | BinOp::Rem, a, b) => non_negative(a, symbols) && non_negative(b, symbols),
        ExprKind::Call(f, args) if matches!(f.name.as_str(), "min" | "max" | "ceildiv") => args.iter().all(|a| non_negative(&a.value, symbols)),
        _ => false,
    }
}

/// A lower bound of an integer expression over every launch the launcher takes: runtime sizes
/// are at least 1, block indices and loop or parallel variables at least 0, constants their
/// values; `+`, `-` of a constant, `*` and `/` of non-negative bounds, `ceildiv` and `/` by a
/// positive constant, `min` and `max` combine them. `None` where no bound follows (a size
/// subtracted, say). Loop counts with a bound of at least 1 need no guard for an empty loop.
pub fn lower_bound(e: &Expr, symbols: &BTreeMap<String, Symbol>) -> Option<i64> {
    if let Some(v) = eval_int(e, symbols) {
        return Some(v);
    }
    let both = |a: &Expr, b: &Expr| Some((lower_bound(a, symbols)?, lower_bound(b, symbols)?));
    match &e.kind {
        ExprKind::Name(n) => match symbols.get(n) {
            Some(Symbol::RuntimeDim) => Some(1),
            Some(Symbol::BlockIndex(_) | Symbol::Var) => Some(0),
            _ => None,
        },
        ExprKind::Binary(BinOp::Add, a, b) => both(a, b).and_then(|(a, b)| a.checked_add(b)),
        ExprKind::Binary(BinOp::Sub, a, b) => lower_bound(a, symbols)?.checked_sub(eval_int(b, symbols)?),
        ExprKind::Binary(BinOp::Mul, a, b) => both(a, b).filter(|&(a, b)| a >= 0 && b >= 0).and_then(|(a, b)| a.checked_mul(b)),
        // Integer division rounds toward zero, which for a positive divisor keeps the order.
        ExprKind::Binary(BinOp::Div, a, b) => {
            let (a, b) = (lower_bound(a, symbols)?, eval_int(b, symbols).filter(|&b| b > 0)?);
            Some(a / b)
        }
        ExprKind::Call(f, args) if args.len() == 2 && args.iter().all(|a| a.key.is_none()) => {
            let (a, b) = (&args[0].value, &args[1].value);
            match f.name.as_str() {
                "min" => both(a, b).map(|(a, b)| a.min(b)),
                "max" => both(a, b).map(|(a, b)| a.max(b)),
                // For a non-negative numerator the generated `(a + b - 1) / b` is the ceiling.
                "ceildiv" => {
                    let a = lower_bound(a, symbols).filter(|&a| a >= 0)?;
                    let b = eval_int(b, symbols).filter(|&b| b > 0)?;
                    Some(a.checked_add(b - 1)? / b)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Evaluates an integer expression made of literals and integer constants.
pub fn eval_int(e: &Expr, symbols: &BTreeMap<String, Symbol>) -> Option<i64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v),
        ExprKind::Name(n) => match symbols.get(n) {
            Some(Symbol::Constant(ConstValue::Int(v))) => Some(*v),
            _ => None,
        },
        ExprKind::Unary(UnOp::Neg, x) => eval_int(x, symbols)?.checked_neg(),
        ExprKind::Binary(op, a, b) => {
            let (a, b) = (eval_int(a, symbols)?, eval_int(b, symbols)?);
            match op {
                BinOp::Add => a.checked_add(b),
                BinOp::Sub => a.checked_sub(b),
                BinOp::Mul => a.checked_mul(b),
                BinOp::Div if b != 0 => a.checked_div(b),
                BinOp::Rem if b != 0 => a.checked_rem(b),
                _ => None,
            }
        }
        ExprKind::Call(f, args) if args.len() == 2 && args.iter().all(|a| a.key.is_none()) => {
            let (a, b) = (eval_int(&args[0].value, symbols)?, eval_int(&args[1].value, symbols)?);
            match f.name.as_str() {
                // The true ceiling, for negative numerators too.
                "ceildiv" if b > 0 => Some(-(a.checked_neg()?.div_euclid(b))),
                "min" => Some(a.min(b)),
                "max" => Some(a.max(b)),
                _ => None,
            }
        }
        _ => None,
    }
}

impl Checker<'_> {
    /// Checks an integer-valued expression (an index, count or extent).
    pub fn int_expr(&mut self, e: &Expr, what: &str, allow_vars: bool) -> bool {
        match self.ty(e, false, allow_vars) {
            Some(Ty::Int) => true,
            Some(t) => {
                self.err(Diagnostic::error(e.span, format!("{what} must be an integer, but this is {}", t.name())));
                false
            }
            None => false,
        }
    }

    /// Types an expression. `elements`: buffer and tensor elements may be read (parallel
    /// bodies); otherwise only integer names are allowed. `vars`: loop variables allowed.
    pub fn ty(&mut self, e: &Expr, elements: bool, vars: bool) -> Option<Ty> {
        match &e.kind {
            ExprKind::Int(_) => Some(Ty::Int),
            ExprKind::Float(x, spelling) => {
                // Generated code writes the literal as a `float` (`1e400f` would not compile).
                let written_infinite = spelling.trim_start_matches('-') == "inf";
                let why = if (*x as f32).is_infinite() && !written_infinite {
                    Some(format!("beyond the range of the `float` the generated code writes it as (at most {:e} in magnitude)", f32::MAX))
                } else if *x != 0.0 && *x as f32 == 0.0 {
                    Some("a nonzero value that the `float` the generated code writes it as rounds to 0".to_string())
                } else {
                    None
                };
                if let Some(why) = why {
                    self.err(Diagnostic::error(e.span, format!("the literal `{spelling}` is {why}"))
                        .hint("write a value within float's range, or `inf` / `-inf`"));
                }
                Some(Ty::Float)
            }
            ExprKind::Bool(_) => Some(Ty::Bool),
            ExprKind::Slice(_) => {
                self.err(Diagnostic::error(e.span, "a slice `start:` marks a tile dimension and belongs only in a copy's tensor origin")
                    .hint("index with a plain expression here"));
                None
            }
            ExprKind::Name(n) => {
                let ident = Ident { name: n.clone(), span: e.span };
                match self.resolve(&ident)? {
                    Symbol::Constant(ConstValue::Int(_)) | Symbol::RuntimeDim => Some(Ty::Int),
                    Symbol::Constant(ConstValue::Float(..)) => Some(Ty::Float),
                    Symbol::Constant(ConstValue::Bool(_)) => Some(Ty::Bool),
                    Symbol::BlockIndex(_) => Some(Ty::Int),
                    Symbol::Var if vars => Some(Ty::Int),
                    Symbol::Var => {
                        self.err(Diagnostic::error(e.span, format!("`{n}` is a loop variable and cannot be used here")));
                        None
                    }
                    Symbol::Tensor(_) | Symbol::Buffer(_) => {
                        self.err(Diagnostic::error(e.span, format!("`{n}` is a whole tensor or buffer; index it to read an element"))
                            .hint(format!("write `{n}[i, j]`")));
                        None
                    }
                }
            }
            ExprKind::Index(name, idx) => {
                let sym = self.resolve(name)?;
                let (dtype, rank) = match sym {
                    Symbol::Tensor(t) => (self.spec.tensors[t].dtype.0, self.spec.tensors[t].shape.len()),
                    Symbol::Buffer(b) => (self.spec.buffers[b].dtype.0, self.info.buffer_shapes[b].len()),
                    _ => {
                        self.err(Diagnostic::error(name.span, format!("`{}` is not a tensor or buffer, so it cannot be indexed", name.name)));
                        return None;
                    }
                };
                if !elements {
                    self.err(Diagnostic::error(e.span, "elements of tensors and buffers can be read only inside `parallel` blocks"));
                    return None;
                }
                if idx.len() != rank {
                    self.err(Diagnostic::error(e.span, format!("`{}` has {rank} dimension{}, but {} ind{} given", name.name, if rank == 1 { "" } else { "s" }, idx.len(), if idx.len() == 1 { "ex is" } else { "ices are" })));
                }
                let mut ok = true;
                for i in idx {
                    ok &= self.int_expr(i, "an index", vars);
                }
                ok.then_some(if dtype.is_float() { Ty::Float } else { Ty::Int })
            }
            ExprKind::Unary(op, x) => {
                let t = self.ty(x, elements, vars)?;
                match (op, t) {
                    (UnOp::Neg, Ty::Int | Ty::Float) => Some(t),
                    (UnOp::Not, Ty::Bool) => Some(Ty::Bool),
                    _ => {
                        self.err(Diagnostic::error(e.span, format!("`{}` does not apply to {}", if *op == UnOp::Neg { "-" } else { "!" }, t.name())));
                        None
                    }
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (ta, tb) = (self.ty(a, elements, vars), self.ty(b, elements, vars));
                let (ta, tb) = (ta?, tb?);
                if op.is_logical() {
                    if ta != Ty::Bool || tb != Ty::Bool {
                        self.err(Diagnostic::error(e.span, format!("`{}` needs two booleans", op.symbol())));
                        return None;
                    }
                    return Some(Ty::Bool);
                }
                if ta == Ty::Bool || tb == Ty::Bool {
                    self.err(Diagnostic::error(e.span, format!("`{}` does not apply to booleans", op.symbol())).hint("use `&&`, `||` and `!` on conditions"));
                    return None;
                }
                if *op == BinOp::Rem && (ta == Ty::Float || tb == Ty::Float) {
                    self.err(Diagnostic::error(e.span, "`%` needs integers"));
                    return None;
                }
                let num = if ta == Ty::Float || tb == Ty::Float { Ty::Float } else { Ty::Int };
                if num == Ty::Int && matches!(op, BinOp::Div | BinOp::Rem) && eval_int(b, &self.info.symbols) == Some(0) {
                    self.err(Diagnostic::error(b.span, format!("integer {} by zero: this divisor is 0", if *op == BinOp::Div { "division" } else { "remainder" })));
                    return None;
                }
                if num == Ty::Int && !op.is_comparison() && eval_int(a, &self.info.symbols).is_some() && eval_int(b, &self.info.symbols).is_some() && eval_int(e, &self.info.symbols).is_none() {
                    self.err(Diagnostic::error(e.span, "this integer expression overflows 64 bits"));
                    return None;
                }
                Some(if op.is_comparison() { Ty::Bool } else { num })
            }
            ExprKind::Call(f, args) => self.call_ty(e, f, args, elements, vars),
        }
    }

    fn call_ty(&mut self, e: &Expr, f: &Ident, args: &[Arg], elements: bool, vars: bool) -> Option<Ty> {
        if let Some(k) = args.iter().find_map(|a| a.key.as_ref()) {
            self.err(Diagnostic::error(k.span, format!("`{}` takes no keyword arguments", f.name)));
            return None;
        }
        let mut tys = Vec::new();
        for a in args {
            tys.push(self.ty(&a.value, elements, vars));
        }
        let tys: Vec<Ty> = tys.into_iter().collect::<Option<_>>()?;
        let arity = |n: usize, this: &mut Self| {
            if tys.len() != n {
                this.err(Diagnostic::error(e.span, format!("`{}` takes {n} argument{}, found {}", f.name, if n == 1 { "" } else { "s" }, tys.len())));
                false
            } else {
                true
            }
        };
        if let Some(d) = DType::from_name(&f.name) {
            if !arity(1, self) {
                return None;
            }
            if tys[0] == Ty::Bool {
                self.err(Diagnostic::error(e.span, "cannot cast a boolean").hint("use `select(cond, 1.0, 0.0)`"));
                return None;
            }
            return Some(if d.is_float() { Ty::Float } else { Ty::Int });
        }
        match f.name.as_str() {
            "ceildiv" => {
                if !arity(2, self) {
                    return None;
                }
                if tys.iter().any(|t| *t != Ty::Int) {
                    self.err(Diagnostic::error(e.span, "`ceildiv` needs two integers"));
                    return None;
                }
                if let Some(d) = eval_int(&args[1].value, &self.info.symbols).filter(|d| *d <= 0) {
                    self.err(Diagnostic::error(args[1].value.span, format!("`ceildiv` needs a positive divisor, but this one is {d}")));
                    return None;
                }
                Some(Ty::Int)
            }
            "min" | "max" => {
                if !arity(2, self) {
                    return None;
                }
                if tys.contains(&Ty::Bool) {
                    self.err(Diagnostic::error(e.span, format!("`{}` needs numbers", f.name)));
                    return None;
                }
                Some(if tys.contains(&Ty::Float) { Ty::Float } else { Ty::Int })
            }
            "select" => {
                if !arity(3, self) {
                    return None;
                }
                if tys[0] != Ty::Bool {
                    self.err(Diagnostic::error(args[0].value.span, "`select`'s first argument must be a condition"));
                    return None;
                }
                if tys[1] == Ty::Bool || tys[2] == Ty::Bool {
                    self.err(Diagnostic::error(e.span, "`select` chooses between numbers"));
                    return None;
                }
                Some(if tys[1] == Ty::Float || tys[2] == Ty::Float { Ty::Float } else { Ty::Int })
            }
            "exp2" | "exp" | "log2" | "log" | "sqrt" | "rsqrt" | "abs" | "tanh" | "erf" | "gelu" | "silu" | "sigmoid" | "rint" => {
                if !arity(1, self) {
                    return None;
                }
                if tys[0] == Ty::Bool {
                    self.err(Diagnostic::error(e.span, format!("`{}` needs a number", f.name)));
                    return None;
                }
                Some(if f.name == "abs" { tys[0] } else { Ty::Float })
            }
            other => {
                let candidates = INTRINSICS.iter().copied().chain(DType::ALL.iter().map(|d| d.name()));
                let hint = did_you_mean(other, candidates).unwrap_or_else(|| format!("functions are {} and the casts {}", INTRINSICS.join(", "), DType::ALL.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")));
                self.err(Diagnostic::error(f.span, format!("unknown function `{other}`")).hint(hint));
                None
            }
        }
    }
}
