//! The CPU reference interpreter: the meaning of a checked spec, independent of layouts.
//!
//! Requires: a checked spec ([`crate::check::Info`]). Guarantees: every block of the grid
//! runs the body on block-level tiles (a fragment is the block's whole tile; how threads
//! share it is a layout question this module ignores), with the spec's semantics:
//! - reads of a global tensor outside its bounds yield 0, writes outside are dropped;
//! - values are rounded to the declared dtype on every store (bf16 and f16 round to nearest
//!   even, exactly as the device converts); float arithmetic is f32, integer arithmetic i64;
//! - `gemm` accumulates each 16-deep k-block exactly, then rounds into the accumulator's
//!   dtype (as an MMA does), so f16 accumulation is modelled;
//! - buffers start as NaN, so a read of something never written shows in the output.
//!
//! Errors (missing inputs, wrong shapes, an index outside a buffer, division by zero) are
//! values, never panics. It is meant for small shapes: every multiply-add runs in Rust.

pub mod npy;

use crate::ast::*;
use crate::check::{ConstValue, Info, Symbol};
use npy::Array;
use std::collections::BTreeMap;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum InterpError {
    /// The inputs do not fit the spec.
    #[error("{0}")]
    Inputs(String),
    /// The program did something undefined; the message names the spec line.
    #[error("spec line {line}: {message}")]
    Runtime {
        /// 1-based spec line.
        line: usize,
        /// What happened.
        message: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Value {
    fn f(self) -> f64 {
        match self {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
            Value::Bool(b) => f64::from(u8::from(b)),
        }
    }
    fn i(self) -> i64 {
        match self {
            Value::Int(i) => i,
            Value::Float(f) => f as i64,
            Value::Bool(b) => i64::from(b),
        }
    }
    fn b(self) -> bool {
        match self {
            Value::Bool(b) => b,
            other => other.f() != 0.0,
        }
    }
}

/// Rounds a value to what a `dtype` holds; an integer value to a narrower integer type wraps
/// (two's complement, as C++ converts).
pub fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::F8E4M3 => e4m3_value(e4m3_bits(v)),
        DType::I8 => (v as i64) as i8 as f64,
        DType::I32 => (v as i64) as i32 as f64,
    }
}

/// The E4M3 (e4m3fn) bits of `v`: rounded to nearest, ties to even, saturating to ±448 (the
/// hardware's `cvt.rn.satfinite`); NaN stays NaN (0x7f).
pub fn e4m3_bits(v: f64) -> u8 {
    if v.is_nan() {
        return 0x7f;
    }
    let sign = if v.is_sign_negative() { 0x80 } else { 0 };
    let a = v.abs();
    if a >= 448.0 {
        return sign | 0x7e;
    }
    // Normal numbers have exponents -6 to 8 (bias 7); below 2^-6 the step is 2^-9.
    let e = if a >= 2f64.powi(-6) { a.log2().floor() as i32 } else { -6 };
    let step = 2f64.powi(e - 3);
    let q = (a / step).round_ties_even() * step;
    if q >= 448.0 {
        return sign | 0x7e;
    }
    // q may have rounded up into the next binade; re-derive its fields.
    if q < 2f64.powi(-6) {
        return sign | (q / 2f64.powi(-9)) as u8;
    }
    let e = q.log2().floor() as i32;
    let m = (q / 2f64.powi(e - 3)) as u32 - 8;
    sign | (((e + 7) as u8) << 3) | m as u8
}

/// The value of E4M3 (e4m3fn) bits.
pub fn e4m3_value(bits: u8) -> f64 {
    let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (((bits >> 3) & 0xf) as i32, (bits & 7) as f64);
    if e == 15 && m == 7.0 {
        return f64::NAN;
    }
    sign * if e == 0 { m * 2f64.powi(-9) } else { (1.0 + m / 8.0) * 2f64.powi(e - 7) }
}

/// Converts a floating-point value to what a `dtype` holds: to an integer type toward zero,
/// saturating to its range, NaN to 0 (generated code does the same with `float_to_i8` /
/// `float_to_i32`); to a float type, as [`round_to`].
pub fn float_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::I8 => v as i8 as f64,
        DType::I32 => v as i32 as f64,
        _ => round_to(dtype, v),
    }
}

/// Converts an element of type `from` to `to`: from a float type as [`float_to`], from an
/// integer type as [`round_to`].
pub fn convert(from: DType, to: DType, v: f64) -> f64 {
    if from.is_float() { float_to(to, v) } else { round_to(to, v) }
}

fn f32r(v: f64) -> f64 {
    v as f32 as f64
}

struct Machine<'a> {
    spec: &'a Spec,
    info: &'a Info,
    line_of: &'a dyn Fn(crate::diag::Span) -> usize,
    sizes: &'a BTreeMap<String, i64>,
    tensors: &'a mut BTreeMap<String, Array>,
    buffers: Vec<Vec<f64>>,
    vars: BTreeMap<String, i64>,
    /// Element operations left before the run gives up; `None`: no limit.
    work_left: Option<u64>,
}

/// The runtime sizes implied by the input arrays' shapes, plus `explicit` ones.
pub fn infer_sizes(spec: &Spec, info: &Info, tensors: &BTreeMap<String, Array>, explicit: &BTreeMap<String, i64>) -> Result<BTreeMap<String, i64>, InterpError> {
    for name in explicit.keys() {
        if !info.runtime_dims.contains(name) {
            let known = if info.runtime_dims.is_empty() { "it has none".to_string() } else { format!("they are {}", info.runtime_dims.join(", ")) };
            let hint = crate::diag::did_you_mean(name, info.runtime_dims.iter().map(String::as_str)).map(|h| format!("; {h}")).unwrap_or_default();
            return Err(InterpError::Inputs(format!("`{name}` is not a runtime size of this spec ({known}){hint}")));
        }
    }
    let mut sizes = explicit.clone();
    for t in &spec.tensors {
        let Some(a) = tensors.get(&t.name.name) else { continue };
        if a.shape.len() != t.shape.len() {
            return Err(InterpError::Inputs(format!("`{}` has {} dimensions in the spec but the array has shape {:?}", t.name.name, t.shape.len(), a.shape)));
        }
        for (d, &n) in t.shape.iter().zip(&a.shape) {
            let want = d.eval(|n| info.const_int(n).or_else(|| sizes.get(n).copied()));
            match (d, want) {
                (Dim::Div(i, div, _), Some(_)) if sizes.get(&i.name).is_some_and(|v| v % div != 0) => {
                    return Err(InterpError::Inputs(format!("`{}` is {:?}, but its spec shape divides {} = {} by {div}, which does not divide it", t.name.name, a.shape, i.name, sizes[&i.name])));
                }
                (_, Some(w)) if w != n as i64 => {
                    return Err(InterpError::Inputs(format!("`{}` is {:?}, which does not match its spec shape (expected {w} in that dimension)", t.name.name, a.shape)));
                }
                (Dim::Named(i), None) => {
                    sizes.insert(i.name.clone(), n as i64);
                }
                (Dim::Div(i, div, _), None) => {
                    sizes.insert(i.name.clone(), n as i64 * div);
                }
                _ => {}
            }
        }
    }
    for d in &info.runtime_dims {
        match sizes.get(d) {
            Some(&v) if v >= 1 => {}
            Some(&v) => return Err(InterpError::Inputs(format!("size {d} = {v} must be at least 1"))),
            None => return Err(InterpError::Inputs(format!("size `{d}` is not given by any input array; pass it explicitly"))),
        }
    }
    Ok(sizes)
}

/// Runs the spec over `tensors` (inputs present; outputs created NaN-filled when absent).
pub fn run(spec: &Spec, info: &Info, line_of: &dyn Fn(crate::diag::Span) -> usize, sizes: &BTreeMap<String, i64>, tensors: &mut BTreeMap<String, Array>) -> Result<(), InterpError> {
    run_within(spec, info, line_of, sizes, tensors, None)
}

/// [`run`], giving up with [`InterpError::Inputs`] once the run has done `budget` element
/// operations (a multiply-add of a gemm, an element copied, cleared, reduced or assigned):
/// for callers that run specs they did not choose the sizes of, such as inference's probes.
pub fn run_within(spec: &Spec, info: &Info, line_of: &dyn Fn(crate::diag::Span) -> usize, sizes: &BTreeMap<String, i64>, tensors: &mut BTreeMap<String, Array>, budget: Option<u64>) -> Result<(), InterpError> {
    for t in &spec.tensors {
        let shape: Vec<usize> = t.shape.iter().map(|d| d.eval(|n| info.const_int(n).or_else(|| sizes.get(n).copied())).unwrap_or(0) as usize).collect();
        match tensors.get(&t.name.name) {
            Some(a) if a.shape != shape => {
                return Err(InterpError::Inputs(format!("`{}` has shape {:?}, expected {:?}", t.name.name, a.shape, shape)));
            }
            Some(_) => {}
            None if t.output => {
                let n = shape.iter().product();
                tensors.insert(t.name.name.clone(), Array { shape, dtype: t.dtype.0, data: vec![f64::NAN; n] });
            }
            None => return Err(InterpError::Inputs(format!("no array for input tensor `{}`", t.name.name))),
        }
    }
    check_zero_point_inputs(spec, line_of, tensors)?;
    let mut m = Machine { spec, info, line_of, sizes, tensors, buffers: Vec::new(), vars: BTreeMap::new(), work_left: budget };
    let extents: Vec<i64> = spec.grid.iter().map(|g| m.eval(&g.extent).map(Value::i)).collect::<Result<_, _>>()?;
    let total: i64 = extents.iter().product();
    if extents.iter().any(|&e| e < 0) || total > 1 << 24 {
        return Err(InterpError::Inputs(format!("grid {extents:?} is too large for the interpreter")));
    }
    for linear in 0..total {
        let mut rest = linear;
        for (g, &e) in spec.grid.iter().zip(&extents) {
            m.vars.insert(g.var.name.clone(), rest % e);
            rest /= e;
        }
        m.buffers = info.buffer_shapes.iter().map(|s| vec![f64::NAN; s.iter().product::<i64>() as usize]).collect();
        m.block(&spec.body)?;
    }
    Ok(())
}

/// Whether `z` can be a zero point: the kernels add it to a float whose ulp is 1, which is
/// exact for the integers 0 to 15 only.
fn is_zero_point(z: f64) -> bool {
    z.fract() == 0.0 && (0.0..16.0).contains(&z)
}

/// Zero points copied straight from an input tensor are checked there, so that a bad one is
/// named by its place in the tensor the user hands in (`zeros`[5, 1]) rather than in a tile;
/// `Machine`'s check at the `dequant_int4` covers zero points computed in the body.
fn check_zero_point_inputs(spec: &Spec, line_of: &dyn Fn(crate::diag::Span) -> usize, tensors: &BTreeMap<String, Array>) -> Result<(), InterpError> {
    let mut tiles = Vec::new();
    walk_stmts(&spec.body, &mut |s| {
        if let StmtKind::Dequant { zero: ZeroPoint::PerGroup(z), .. } = &s.kind {
            tiles.push((z, s.span));
        }
    });
    for (tile, at) in tiles {
        for name in spec.tensors_copied_into(&tile.name) {
            let Some(a) = tensors.get(&name) else { continue };
            let Some(bad) = a.data.iter().position(|&z| !is_zero_point(z)) else { continue };
            let mut index = Vec::with_capacity(a.shape.len());
            let mut rest = bad;
            for &extent in a.shape.iter().rev() {
                index.push(rest % extent.max(1));
                rest /= extent.max(1);
            }
            index.reverse();
            let index: Vec<String> = index.iter().map(usize::to_string).collect();
            return Err(InterpError::Inputs(format!(
                "`{name}`[{}] is {}; the dequant_int4 at spec line {} reads `{name}` as zero points (through `{}`), which are integers 0 to 15",
                index.join(", "),
                a.data[bad],
                line_of(at),
                tile.name
            )));
        }
    }
    Ok(())
}

impl Machine<'_> {
    fn fail(&self, span: crate::diag::Span, message: impl Into<String>) -> InterpError {
        InterpError::Runtime { line: (self.line_of)(span), message: message.into() }
    }

    fn block(&mut self, stmts: &[Stmt]) -> Result<(), InterpError> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn buffer_of(&self, name: &str) -> usize {
        match self.info.symbols.get(name) {
            Some(Symbol::Buffer(b)) => *b,
            _ => usize::MAX,
        }
    }

    /// The element operations a statement does (its loops' bodies are charged as they run).
    fn cost(&self, s: &Stmt) -> u64 {
        let elems = |name: &str| match self.info.symbols.get(name) {
            Some(Symbol::Buffer(b)) => self.info.buffer_shapes[*b].iter().product::<i64>().max(1) as u64,
            _ => 1,
        };
        match &s.kind {
            StmtKind::Gemm { a, c, transpose_a, .. } => {
                let sa = match self.info.symbols.get(&a.name) { Some(Symbol::Buffer(b)) => &self.info.buffer_shapes[*b], _ => return 1 };
                elems(&c.name) * (if *transpose_a { sa[0] } else { sa[1] }).max(1) as u64
            }
            StmtKind::Parallel { body, .. } => match self.info.parallel_domains.get(&s.id) {
                Some(&d) => self.info.buffer_shapes[d].iter().product::<i64>().max(1) as u64 * body.len() as u64,
                None => 1,
            },
            StmtKind::Copy { src, dst } => elems(&src.name.name).max(elems(&dst.name.name)),
            StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => elems(&buf.name),
            StmtKind::Reduce { src, .. } => elems(&src.name),
            StmtKind::Dequant { dst, .. } => elems(&dst.name),
            _ => 1,
        }
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), InterpError> {
        if let Some(left) = self.work_left {
            let cost = self.cost(s);
            if cost > left {
                return Err(InterpError::Inputs("the run exceeds its budget of element operations".into()));
            }
            self.work_left = Some(left - cost);
        }
        match &s.kind {
            StmtKind::Clear { buf } => {
                let b = self.buffer_of(&buf.name);
                self.buffers[b].iter_mut().for_each(|v| *v = 0.0);
            }
            StmtKind::Fill { buf, value } => {
                let b = self.buffer_of(&buf.name);
                let d = self.spec.buffers[b].dtype.0;
                let v = match self.eval(value)? {
                    Value::Float(x) => float_to(d, x),
                    other => round_to(d, other.f()),
                };
                self.buffers[b].iter_mut().for_each(|x| *x = v);
            }
            StmtKind::Copy { src, dst } => self.copy(s, src, dst)?,
            StmtKind::Reduce { op, src, dst, dim, clear } => {
                let (is, id) = (self.buffer_of(&src.name), self.buffer_of(&dst.name));
                let shape = self.info.buffer_shapes[is].clone();
                let (rows, cols) = (shape[0] as usize, shape[1] as usize);
                let dtype = self.spec.buffers[id].dtype.0;
                let outer = if dim.0 == 1 { rows } else { cols };
                let inner = if dim.0 == 1 { cols } else { rows };
                for o in 0..outer {
                    let mut acc = match (clear, op) {
                        (false, _) => self.buffers[id][o],
                        (true, ReduceOp::Max) => f64::NEG_INFINITY,
                        (true, ReduceOp::Sum) => 0.0,
                    };
                    for i in 0..inner {
                        let v = if dim.0 == 1 { self.buffers[is][o * cols + i] } else { self.buffers[is][i * cols + o] };
                        acc = match op {
                            ReduceOp::Max => acc.max(v),
                            ReduceOp::Sum => f32r(acc + v),
                        };
                    }
                    self.buffers[id][o] = convert(self.spec.buffers[is].dtype.0, dtype, acc);
                }
            }
            StmtKind::Gemm { a, b, c, transpose_a, transpose_b } => self.gemm(a, b, c, *transpose_a, *transpose_b),
            StmtKind::Dequant { src, dst, scales, zero, order } => {
                let (is, id, ic) = (self.buffer_of(&src.name), self.buffer_of(&dst.name), self.buffer_of(&scales.name));
                let (rows, cols) = (self.info.buffer_shapes[id][0] as usize, self.info.buffer_shapes[id][1] as usize);
                let groups = self.info.buffer_shapes[ic][1] as usize;
                let group = cols / groups;
                let dtype = self.spec.buffers[id].dtype.0;
                let zeros = zero.tile().map(|z| (self.buffer_of(&z.name), z));
                let constant_zero = if let ZeroPoint::Constant(v, _) = zero { *v } else { 0 };
                for r in 0..rows {
                    for c in 0..cols {
                        let word = self.buffers[is][r * (cols / 8) + c / 8];
                        if word.is_nan() {
                            return Err(self.fail(s.span, format!("`{}` is read before it is written", src.name)));
                        }
                        let nibble = ((word as i64 as u32) >> order.shift(c % 8)) & 15;
                        let scale = self.buffers[ic][r * groups + c / group];
                        let z = match zeros {
                            None => constant_zero,
                            Some((iz, name)) => {
                                let z = self.buffers[iz][r * groups + c / group];
                                if z.is_nan() {
                                    return Err(self.fail(s.span, format!("`{}` is read before it is written", name.name)));
                                }
                                if !is_zero_point(z) {
                                    let at: Vec<String> = self.vars.iter().map(|(v, i)| format!("{v} = {i}")).collect();
                                    return Err(self.fail(name.span, format!("`{}`[{r}, {}] is {z} (at {}); zero points are integers 0 to 15", name.name, c / group, at.join(", "))));
                                }
                                z as i64
                            }
                        };
                        // The product of a small integer and a 16-bit float is exact in f32;
                        // the one rounding is to the destination type.
                        self.buffers[id][r * cols + c] = round_to(dtype, f32r((nibble as i64 - z) as f64 * scale));
                    }
                }
            }
            StmtKind::Loop { var, count, body, .. } => {
                let n = self.eval(count)?.i();
                for k in 0..n.max(0) {
                    self.vars.insert(var.name.clone(), k);
                    self.block(body)?;
                }
                self.vars.remove(&var.name);
            }
            StmtKind::If { cond, then_body, else_body } => {
                if self.eval(cond)?.b() {
                    self.block(then_body)?;
                } else {
                    self.block(else_body)?;
                }
            }
            StmtKind::Parallel { vars, body } => {
                let Some(&domain) = self.info.parallel_domains.get(&s.id) else { return Ok(()) };
                let shape = self.info.buffer_shapes[domain].clone();
                let n: i64 = shape.iter().product();
                for linear in 0..n {
                    let mut rest = linear;
                    for (v, e) in vars.iter().zip(&shape).rev() {
                        self.vars.insert(v.name.clone(), rest % e);
                        rest /= e;
                    }
                    for st in body {
                        if let StmtKind::Assign { target, indices, op, value } = &st.kind {
                            let b = self.buffer_of(&target.name);
                            let at = self.buffer_index(b, indices, st.span)?;
                            let v = self.eval(value)?;
                            let old = self.buffers[b][at];
                            let dtype = self.spec.buffers[b].dtype.0;
                            let new = match (op, dtype.is_float()) {
                                (AssignOp::Set, _) => v.f(),
                                (AssignOp::Add, true) => f32r(old + v.f()),
                                (AssignOp::Sub, true) => f32r(old - v.f()),
                                (AssignOp::Mul, true) => f32r(old * v.f()),
                                (AssignOp::Add, false) => (old as i64).wrapping_add(v.i()) as f64,
                                (AssignOp::Sub, false) => (old as i64).wrapping_sub(v.i()) as f64,
                                (AssignOp::Mul, false) => (old as i64).wrapping_mul(v.i()) as f64,
                            };
                            self.buffers[b][at] = round_to(dtype, new);
                        }
                    }
                }
                for v in vars {
                    self.vars.remove(&v.name);
                }
            }
            StmtKind::Assign { .. } => return Err(self.fail(s.span, "assignment outside a parallel block")),
        }
        Ok(())
    }

    fn buffer_index(&mut self, b: usize, idx: &[Expr], span: crate::diag::Span) -> Result<usize, InterpError> {
        let shape = &self.info.buffer_shapes[b];
        let mut at = 0i64;
        for (e, &n) in idx.iter().zip(shape.clone().iter()) {
            let i = self.eval(e)?.i();
            if i < 0 || i >= n {
                return Err(self.fail(span, format!("index {i} is outside `{}` (extent {n})", self.spec.buffers[b].name.name)));
            }
            at = at * n + i;
        }
        Ok(at as usize)
    }

    fn tensor_offset(&self, t: &Tensor, coord: &[i64]) -> Option<usize> {
        let a = &self.tensors[&t.name.name];
        let mut at = 0usize;
        for (&c, &n) in coord.iter().zip(&a.shape) {
            if c < 0 || c as usize >= n {
                return None;
            }
            at = at * n + c as usize;
        }
        // Column-major 2-D tensors: the array holds the logical [r, c] row-major, as numpy does.
        Some(at)
    }

    fn copy(&mut self, s: &Stmt, src: &Operand, dst: &Operand) -> Result<(), InterpError> {
        let spec = self.spec;
        let side = |op: &Operand| match self.info.symbols.get(&op.name.name) {
            Some(Symbol::Tensor(t)) => (Some(*t), None),
            Some(Symbol::Buffer(b)) => (None, Some(*b)),
            _ => (None, None),
        };
        let (st, sb) = side(src);
        let (dt, db) = side(dst);
        match (st, sb, dt, db) {
            (Some(t), _, _, Some(b)) | (_, Some(b), Some(t), _) => {
                let tensor = &spec.tensors[t];
                let origin_ops = if st.is_some() { src } else { dst };
                let origin: Vec<i64> = origin_ops.origin.iter().flatten().map(|e| self.eval(e).map(Value::i)).collect::<Result<_, _>>()?;
                let shape = self.info.buffer_shapes[b].clone();
                let tile_dims: Vec<usize> = origin_ops.tile_dims.clone().unwrap_or_else(|| (0..origin.len()).collect());
                let n: i64 = shape.iter().product();
                let bdt = spec.buffers[b].dtype.0;
                for linear in 0..n {
                    let mut rest = linear;
                    let mut coord = origin.clone();
                    for d in (0..shape.len()).rev() {
                        coord[tile_dims[d]] += rest % shape[d];
                        rest /= shape[d];
                    }
                    let off = self.tensor_offset(tensor, &coord);
                    if st.is_some() {
                        let v = off.map_or(0.0, |o| self.tensors[&tensor.name.name].data[o]);
                        self.buffers[b][linear as usize] = convert(tensor.dtype.0, bdt, v);
                    } else if let Some(o) = off {
                        let v = convert(bdt, tensor.dtype.0, self.buffers[b][linear as usize]);
                        if let Some(a) = self.tensors.get_mut(&tensor.name.name) {
                            a.data[o] = v;
                        }
                    }
                }
            }
            (None, Some(x), None, Some(y)) => {
                let (from, to) = (spec.buffers[x].dtype.0, spec.buffers[y].dtype.0);
                let vals: Vec<f64> = self.buffers[x].iter().map(|v| convert(from, to, *v)).collect();
                self.buffers[y] = vals;
            }
            _ => return Err(self.fail(s.span, "unsupported copy")),
        }
        Ok(())
    }

    fn gemm(&mut self, a: &Ident, b: &Ident, c: &Ident, ta: bool, tb: bool) {
        let (ia, ib, ic) = (self.buffer_of(&a.name), self.buffer_of(&b.name), self.buffer_of(&c.name));
        let (sa, sb, sc) = (&self.info.buffer_shapes[ia], &self.info.buffer_shapes[ib], &self.info.buffer_shapes[ic]);
        let (m, n) = (sc[0] as usize, sc[1] as usize);
        let k = if ta { sa[0] } else { sa[1] } as usize;
        let (lda, ldb) = (sa[1] as usize, sb[1] as usize);
        let at = |i: usize, kk: usize| if ta { kk * lda + i } else { i * lda + kk };
        let bt = |kk: usize, j: usize| if tb { j * ldb + kk } else { kk * ldb + j };
        let cdt = self.spec.buffers[ic].dtype.0;
        let (av, bv) = (self.buffers[ia].clone(), self.buffers[ib].clone());
        let cv = &mut self.buffers[ic];
        for i in 0..m {
            for j in 0..n {
                let mut acc = cv[i * n + j];
                for k0 in (0..k).step_by(16) {
                    let mut partial = 0.0f64;
                    for kk in k0..(k0 + 16).min(k) {
                        partial += av[at(i, kk)] * bv[bt(kk, j)];
                    }
                    acc = round_to(cdt, acc + partial);
                }
                cv[i * n + j] = acc;
            }
        }
    }

    fn eval(&mut self, e: &Expr) -> Result<Value, InterpError> {
        Ok(match &e.kind {
            ExprKind::Int(v) => Value::Int(*v),
            ExprKind::Float(v, _) => Value::Float(f32r(*v)),
            ExprKind::Bool(b) => Value::Bool(*b),
            ExprKind::Slice(_) => return Err(self.fail(e.span, "a slice outside a copy origin")),
            ExprKind::Name(n) => match self.info.symbols.get(n) {
                Some(Symbol::Constant(ConstValue::Int(v))) => Value::Int(*v),
                Some(Symbol::Constant(ConstValue::Float(v, _))) => Value::Float(f32r(*v)),
                Some(Symbol::Constant(ConstValue::Bool(b))) => Value::Bool(*b),
                Some(Symbol::RuntimeDim) => Value::Int(self.sizes.get(n).copied().unwrap_or(0)),
                _ => match self.vars.get(n) {
                    Some(v) => Value::Int(*v),
                    None => return Err(self.fail(e.span, format!("`{n}` has no value here"))),
                },
            },
            ExprKind::Index(name, idx) => match self.info.symbols.get(&name.name) {
                Some(Symbol::Buffer(b)) => {
                    let b = *b;
                    let at = self.buffer_index(b, idx, e.span)?;
                    let v = self.buffers[b][at];
                    if self.spec.buffers[b].dtype.0.is_float() { Value::Float(v) } else { Value::Int(v as i64) }
                }
                Some(Symbol::Tensor(t)) => {
                    let t = *t;
                    let coord: Vec<i64> = idx.iter().map(|x| self.eval(x).map(Value::i)).collect::<Result<_, _>>()?;
                    let tensor = &self.spec.tensors[t];
                    let v = self.tensor_offset(tensor, &coord).map_or(0.0, |o| self.tensors[&tensor.name.name].data[o]);
                    if tensor.dtype.0.is_float() { Value::Float(v) } else { Value::Int(v as i64) }
                }
                _ => return Err(self.fail(e.span, "not indexable")),
            },
            ExprKind::Unary(op, x) => {
                let v = self.eval(x)?;
                match (op, v) {
                    (UnOp::Neg, Value::Int(i)) => Value::Int(i.wrapping_neg()),
                    (UnOp::Neg, v) => Value::Float(-v.f()),
                    (UnOp::Not, v) => Value::Bool(!v.b()),
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.eval(a)?, self.eval(b)?);
                let float = matches!(x, Value::Float(_)) || matches!(y, Value::Float(_));
                match op {
                    BinOp::And => Value::Bool(x.b() && y.b()),
                    BinOp::Or => Value::Bool(x.b() || y.b()),
                    BinOp::Lt => Value::Bool(if float { x.f() < y.f() } else { x.i() < y.i() }),
                    BinOp::Le => Value::Bool(if float { x.f() <= y.f() } else { x.i() <= y.i() }),
                    BinOp::Gt => Value::Bool(if float { x.f() > y.f() } else { x.i() > y.i() }),
                    BinOp::Ge => Value::Bool(if float { x.f() >= y.f() } else { x.i() >= y.i() }),
                    BinOp::Eq => Value::Bool(if float { x.f() == y.f() } else { x.i() == y.i() }),
                    BinOp::Ne => Value::Bool(if float { x.f() != y.f() } else { x.i() != y.i() }),
                    _ if float => Value::Float(f32r(match op {
                        BinOp::Add => x.f() + y.f(),
                        BinOp::Sub => x.f() - y.f(),
                        BinOp::Mul => x.f() * y.f(),
                        _ => x.f() / y.f(),
                    })),
                    _ => {
                        let (p, q) = (x.i(), y.i());
                        if matches!(op, BinOp::Div | BinOp::Rem) && q == 0 {
                            return Err(self.fail(e.span, "integer division by zero"));
                        }
                        Value::Int(match op {
                            BinOp::Add => p.wrapping_add(q),
                            BinOp::Sub => p.wrapping_sub(q),
                            BinOp::Mul => p.wrapping_mul(q),
                            BinOp::Div => p.wrapping_div(q),
                            _ => p.wrapping_rem(q),
                        })
                    }
                }
            }
            ExprKind::Call(f, args) => {
                let vals: Vec<Value> = args.iter().map(|a| self.eval(&a.value)).collect::<Result<_, _>>()?;
                if let Some(d) = DType::from_name(&f.name) {
                    let v = vals[0];
                    return Ok(match v {
                        _ if d.is_float() => Value::Float(round_to(d, v.f())),
                        Value::Float(x) => Value::Int(float_to(d, x) as i64),
                        _ => Value::Int(round_to(d, v.i() as f64) as i64),
                    });
                }
                let float = vals.iter().any(|v| matches!(v, Value::Float(_)));
                let un = |g: fn(f64) -> f64| Value::Float(f32r(g(vals[0].f())));
                match f.name.as_str() {
                    "ceildiv" => {
                        let (p, q) = (vals[0].i(), vals[1].i());
                        if q == 0 {
                            return Err(self.fail(e.span, "ceildiv by zero"));
                        }
                        Value::Int((p + q - 1).div_euclid(q))
                    }
                    "min" if float => Value::Float(vals[0].f().min(vals[1].f())),
                    "max" if float => Value::Float(vals[0].f().max(vals[1].f())),
                    "min" => Value::Int(vals[0].i().min(vals[1].i())),
                    "max" => Value::Int(vals[0].i().max(vals[1].i())),
                    "select" => {
                        let v = if vals[0].b() { vals[1] } else { vals[2] };
                        if matches!(vals[1], Value::Float(_)) || matches!(vals[2], Value::Float(_)) { Value::Float(v.f()) } else { v }
                    }
                    "abs" if float => Value::Float(vals[0].f().abs()),
                    "abs" => Value::Int(vals[0].i().wrapping_abs()),
                    "exp2" => un(f64::exp2),
                    "exp" => un(f64::exp),
                    "log2" => un(f64::log2),
                    "log" => un(f64::ln),
                    "sqrt" => un(f64::sqrt),
                    "rsqrt" => un(|x| 1.0 / x.sqrt()),
                    "tanh" => un(f64::tanh),
                    "erf" => un(erf),
                    "gelu" => un(|x| 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))),
                    "silu" => un(|x| x / (1.0 + (-x).exp())),
                    "sigmoid" => un(|x| 1.0 / (1.0 + (-x).exp())),
                    // Round to nearest, ties to even (torch.round, C's rintf).
                    "rint" => un(f64::round_ties_even),
                    other => return Err(self.fail(e.span, format!("unknown function `{other}`"))),
                }
            }
        })
    }
}

/// The error function, from the Chebyshev fit of erfc in Numerical Recipes (relative error below 1.2e-7, under f32 rounding).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let y = 1.0 - t * (-x * x - 1.265_512_23 + t * (1.000_023_68 + t * (0.374_091_96 + t * (0.096_784_18 + t * (-0.186_288_06
        + t * (0.278_868_07 + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))))).exp();
    if x >= 0.0 { y } else { -y }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_the_device_conversions() {
        // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
        assert_eq!(round_to(DType::BF16, 1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round_to(DType::BF16, 1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round_to(DType::F16, 65520.0), f64::INFINITY);
        assert_eq!(round_to(DType::F16, 1e-7), 1.1920928955078125e-7);
        assert_eq!(round_to(DType::I8, 200.0), -56.0);
        // E4M3: 3 mantissa bits, ties to even, saturating at 448, subnormals down to 2^-9.
        assert_eq!(round_to(DType::F8E4M3, 1.0625), 1.0);
        assert_eq!(round_to(DType::F8E4M3, 1.1875), 1.25);
        assert_eq!(round_to(DType::F8E4M3, 1000.0), 448.0);
        assert_eq!(round_to(DType::F8E4M3, -460.0), -448.0);
        assert_eq!(round_to(DType::F8E4M3, f64::INFINITY), 448.0);
        // Subnormals step by 2^-9: 1.5 and 2.5 steps both round to 2.
        assert_eq!(round_to(DType::F8E4M3, 1.5 * 0.001953125), 2.0 * 0.001953125);
        assert_eq!(round_to(DType::F8E4M3, 2.5 * 0.001953125), 2.0 * 0.001953125);
        assert_eq!(round_to(DType::F8E4M3, 15.9), 16.0);
        assert!(round_to(DType::F8E4M3, f64::NAN).is_nan());
        for bits in 0..=255u8 {
            let v = e4m3_value(bits);
            if !v.is_nan() {
                assert_eq!(e4m3_bits(v), bits, "{v}");
            }
        }
        // Floats convert to integers toward zero, saturating, NaN to 0.
        assert_eq!(float_to(DType::I8, 200.7), 127.0);
        assert_eq!(float_to(DType::I8, -127.9), -127.0);
        assert_eq!(float_to(DType::I8, -1e9), -128.0);
        assert_eq!(float_to(DType::I32, 3e9), 2147483647.0);
        assert_eq!(float_to(DType::I32, f64::NAN), 0.0);
        assert_eq!(convert(DType::I32, DType::I8, 200.0), -56.0);
        assert_eq!(convert(DType::F32, DType::I8, 200.0), 127.0);
    }

    #[test]
    fn erf_is_accurate() {
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-7);
        assert!((erf(-1.5) + 0.966_105_146_475_310_7).abs() < 1e-7);
    }
}
