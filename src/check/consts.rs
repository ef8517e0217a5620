//! Constant expressions: `constants` entries may compute their value from numbers and the
//! constants declared before them (`scale_log2: 1.4426950408889634 / sqrt(D)`,
//! `block_K2: 2 * block_K`). [`fold`] replaces each such expression with the literal it
//! evaluates to, after the target's overrides are applied, so that every later stage (the
//! checker, inference, the backends, the interpreter) sees literal constants only.

use crate::ast::{BinOp, Expr, ExprKind, Spec, UnOp};
use crate::diag::Diagnostic;
use std::collections::BTreeMap;

/// A constant's value while folding.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Val {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Val {
    fn float(self) -> Option<f64> {
        match self {
            Val::Int(v) => Some(v as f64),
            Val::Float(v) => Some(v),
            Val::Bool(_) => None,
        }
    }
}

/// What a constant's value may use, for the errors that refuse the rest.
const ALLOWED: &str = "numbers, the constants declared before it, + - * / %, min, max, ceildiv, abs, sqrt, rsqrt, exp, exp2, log, log2, f32 and i32";

/// Folds every constant whose value is an expression into the literal it evaluates to, in
/// declaration order (a constant may use only those before it). Integers stay integers (`/`
/// truncates toward zero, as in C++; `ceildiv` is the true ceiling) and must fit 32 bits;
/// an integer meeting a float becomes one; floats are evaluated in double precision and
/// spelled with the shortest text that reads back to the same double. Returns one error per
/// constant that cannot be folded.
pub fn fold(spec: &mut Spec) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let mut known: BTreeMap<String, Val> = BTreeMap::new();
    let declared: Vec<String> = spec.constants.iter().map(|c| c.name.name.clone()).collect();
    // Constants that could not be folded: one that uses them is left unreported.
    let mut failed: Vec<String> = Vec::new();
    for c in &mut spec.constants {
        let literal = matches!(c.value.kind, ExprKind::Int(_) | ExprKind::Float(..) | ExprKind::Bool(_));
        let mut uses_failed = false;
        c.value.visit(&mut |x| {
            uses_failed |= matches!(&x.kind, ExprKind::Name(n) if failed.contains(n));
            true
        });
        if uses_failed {
            failed.push(c.name.name.clone());
            continue;
        }
        match eval(&c.value, &known, &declared, &c.name.name) {
            Ok(v) => {
                known.insert(c.name.name.clone(), v);
                if let Val::Float(x) = v && let Some(d) = beyond_float(x, &c.value, &c.name.name) {
                    errors.push(d);
                    failed.push(c.name.name.clone());
                    continue;
                }
                if literal {
                    continue;
                }
                let kind = match v {
                    Val::Int(n) if i32::try_from(n).is_err() => {
                        errors.push(Diagnostic::error(c.value.span, format!("constant `{}` is {n}, beyond the 32-bit `int` the generated code declares it as", c.name.name)));
                        failed.push(c.name.name.clone());
                        continue;
                    }
                    Val::Int(n) => ExprKind::Int(n),
                    Val::Float(x) => ExprKind::Float(x, format!("{x:?}")),
                    Val::Bool(b) => ExprKind::Bool(b),
                };
                c.value = Expr { kind, span: c.value.span };
            }
            Err(d) => {
                errors.push(d);
                failed.push(c.name.name.clone());
            }
        }
    }
    errors
}

fn eval(e: &Expr, known: &BTreeMap<String, Val>, declared: &[String], constant: &str) -> Result<Val, Diagnostic> {
    let recurse = |x: &Expr| eval(x, known, declared, constant);
    let refuse = |what: String| Diagnostic::error(e.span, format!("{what} cannot be part of constant `{constant}`'s value")).hint(format!("a constant may use {ALLOWED}"));
    match &e.kind {
        ExprKind::Int(v) => Ok(Val::Int(*v)),
        ExprKind::Float(v, _) => Ok(Val::Float(*v)),
        ExprKind::Bool(b) => Ok(Val::Bool(*b)),
        ExprKind::Name(n) => match known.get(n) {
            Some(v) => Ok(*v),
            None if n == constant => Err(Diagnostic::error(e.span, format!("constant `{constant}` refers to itself"))),
            None if declared.iter().any(|d| d == n) => {
                Err(Diagnostic::error(e.span, format!("`{n}` is declared after `{constant}`: a constant may use only the constants before it"))
                    .hint(format!("move `{n}` before `{constant}`")))
            }
            None => Err(Diagnostic::error(e.span, format!("`{n}` is not a constant: `{constant}`'s value is fixed when the code is generated"))
                .hint(super::python_literal(n).unwrap_or_else(|| format!("a constant may use {ALLOWED}")))),
        },
        ExprKind::Unary(UnOp::Neg, x) => match recurse(x)? {
            Val::Int(v) => v.checked_neg().map(Val::Int).ok_or_else(|| overflow(e, constant)),
            Val::Float(v) => Ok(Val::Float(-v)),
            Val::Bool(_) => Err(refuse("negating a condition".into())),
        },
        ExprKind::Binary(op, a, b) => {
            let (a, b) = (recurse(a)?, recurse(b)?);
            match (a, b) {
                (Val::Int(a), Val::Int(b)) => {
                    if matches!(op, BinOp::Div | BinOp::Rem) && b == 0 {
                        return Err(Diagnostic::error(e.span, format!("constant `{constant}` divides by zero")));
                    }
                    let v = match op {
                        BinOp::Add => a.checked_add(b),
                        BinOp::Sub => a.checked_sub(b),
                        BinOp::Mul => a.checked_mul(b),
                        BinOp::Div => a.checked_div(b),
                        BinOp::Rem => a.checked_rem(b),
                        _ => return Err(refuse(format!("`{}`", op.symbol()))),
                    };
                    v.map(Val::Int).ok_or_else(|| overflow(e, constant))
                }
                (a, b) => {
                    let (Some(a), Some(b)) = (a.float(), b.float()) else { return Err(refuse("a condition".into())) };
                    match op {
                        BinOp::Add => Ok(Val::Float(a + b)),
                        BinOp::Sub => Ok(Val::Float(a - b)),
                        BinOp::Mul => Ok(Val::Float(a * b)),
                        BinOp::Div => Ok(Val::Float(a / b)),
                        BinOp::Rem => Err(refuse("`%` of floats".into())),
                        _ => Err(refuse(format!("`{}`", op.symbol()))),
                    }
                }
            }
        }
        ExprKind::Call(f, args) if args.iter().all(|a| a.key.is_none()) => {
            let vals = args.iter().map(|a| recurse(&a.value)).collect::<Result<Vec<_>, _>>()?;
            let arity = |n: usize| if vals.len() == n { Ok(()) } else { Err(Diagnostic::error(e.span, format!("`{}` takes {n} argument(s), found {}", f.name, vals.len()))) };
            let float_of = |v: Val| v.float().ok_or_else(|| refuse(format!("a condition passed to `{}`", f.name)));
            match f.name.as_str() {
                "min" | "max" => {
                    arity(2)?;
                    let pick_min = f.name == "min";
                    match (vals[0], vals[1]) {
                        (Val::Int(a), Val::Int(b)) => Ok(Val::Int(if pick_min { a.min(b) } else { a.max(b) })),
                        (a, b) => {
                            let (a, b) = (float_of(a)?, float_of(b)?);
                            Ok(Val::Float(if pick_min { a.min(b) } else { a.max(b) }))
                        }
                    }
                }
                "ceildiv" => {
                    arity(2)?;
                    match (vals[0], vals[1]) {
                        (Val::Int(a), Val::Int(b)) if b > 0 => Ok(Val::Int(-(a.checked_neg().ok_or_else(|| overflow(e, constant))?.div_euclid(b)))),
                        (Val::Int(_), Val::Int(_)) => Err(Diagnostic::error(e.span, format!("constant `{constant}`: `ceildiv` needs a divisor of at least 1"))),
                        _ => Err(refuse("`ceildiv` of floats".into())),
                    }
                }
                "abs" => {
                    arity(1)?;
                    match vals[0] {
                        Val::Int(v) => v.checked_abs().map(Val::Int).ok_or_else(|| overflow(e, constant)),
                        v => Ok(Val::Float(float_of(v)?.abs())),
                    }
                }
                "i32" => {
                    arity(1)?;
                    match vals[0] {
                        Val::Int(v) => Ok(Val::Int(v)),
                        v => {
                            let x = float_of(v)?.trunc();
                            if x.is_nan() {
                                Err(Diagnostic::error(e.span, format!("constant `{constant}` converts a NaN to an integer")))
                            } else if x.is_finite() && x.abs() <= i64::MAX as f64 {
                                Ok(Val::Int(x as i64))
                            } else {
                                Err(overflow(e, constant))
                            }
                        }
                    }
                }
                "f32" | "sqrt" | "rsqrt" | "exp" | "exp2" | "log" | "log2" => {
                    arity(1)?;
                    let x = float_of(vals[0])?;
                    Ok(Val::Float(match f.name.as_str() {
                        "sqrt" => x.sqrt(),
                        "rsqrt" => 1.0 / x.sqrt(),
                        "exp" => x.exp(),
                        "exp2" => x.exp2(),
                        "log" => x.ln(),
                        "log2" => x.log2(),
                        // f32: rounded to single precision, as the generated code would.
                        _ => x as f32 as f64,
                    }))
                }
                other => Err(refuse(format!("`{other}`"))),
            }
        }
        ExprKind::Call(f, _) => Err(refuse(format!("a keyword argument of `{}`", f.name))),
        ExprKind::Index(t, _) => Err(refuse(format!("an element of `{}`", t.name))),
        ExprKind::Unary(UnOp::Not, _) => Err(refuse("`!`".into())),
        ExprKind::Slice(_) => Err(refuse("a slice".into())),
    }
}

/// Why float constant `name` = `x` cannot be the `float` the generated code declares: not a
/// number, infinite (unless written as `inf` or `-inf`), beyond float's range, or a nonzero
/// value that float rounds to zero.
fn beyond_float(x: f64, e: &Expr, name: &str) -> Option<Diagnostic> {
    let written_infinite = matches!(&e.kind, ExprKind::Float(_, spelling) if spelling.trim_start_matches('-') == "inf");
    let why = if x.is_nan() {
        "not a number".to_string()
    } else if x.is_infinite() && !written_infinite {
        format!("{x} (write `inf` for an infinite constant)")
    } else if (x as f32).is_infinite() && !written_infinite {
        format!("{x:e}, beyond the range of the `float` the generated code declares it as (at most {:e} in magnitude)", f32::MAX)
    } else if x != 0.0 && x as f32 == 0.0 {
        format!("{x:e}, which the `float` the generated code declares it as rounds to 0")
    } else {
        return None;
    };
    Some(Diagnostic::error(e.span, format!("constant `{name}` is {why}")))
}

fn overflow(e: &Expr, constant: &str) -> Diagnostic {
    Diagnostic::error(e.span, format!("constant `{constant}` overflows 64-bit integer arithmetic"))
}
