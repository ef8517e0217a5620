//! The AMD tile lowering ([`TilePlan`]): HIP code on composable_kernel's element types and
//! 16x16x16 MFMAs for fused programs that are neither GEMM-shaped nor softmax attention.
//!
//! Requires: a spec planned with a `TilePlan`. Guarantees: one statement of the spec becomes
//! one commented block of C++ (`// spec N: text`); LDS barriers are placed where a shared
//! buffer is read after another thread wrote it, or written after another read it; the C
//! launcher contract is the NVIDIA targets' on `hipStream_t`.

use super::element;
use crate::back::{ConstantCtx, ElementCtx};
use crate::ast::*;
use crate::back::conv::{mentions, upper_first, Conv, Env};
use crate::back::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use crate::check::Symbol;
use crate::diag::Diagnostic;
use crate::layout::mfma::{TilePlan, WaveGrid, BLOCK};
use crate::Compiled;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

mod compute;
mod copy;

pub(super) const TEMPLATE: &str = include_str!("../../../../templates/ck/tile.hip.tera");

/// Names the tile lowering's code declares (kernel locals and helpers).
pub(crate) const RESERVED: [&str; 36] = [
    "ck", "kThreads", "lane", "wave", "lane_row", "lane_col", "bi", "bj", "r", "e", "kk", "k0", "g", "word", "nib",
    "ksplit", "kq", "a_rows", "b_cols", "mfma_16x16x16", "load_vec", "store_vec", "load_col4", "convert4", "Vec", "grid_x", "grid_y", "grid_z",
    "c", "grid", "word_scale", "word_zero", "total", "part", "row", "col",
];

#[derive(Serialize)]
pub(super) struct Context {
    #[serde(flatten)]
    header: HeaderCtx,
    constants: Vec<ConstantCtx>,
    threads: i64,
    waves: i64,
    threads_line: usize,
    elements: Vec<ElementCtx>,
    helpers: Vec<String>,
    /// The MFMA wrappers the products need: (operand type, builtin).
    mfmas: Vec<(String, String)>,
    kernel_params: Vec<String>,
    kernel_args: Vec<String>,
    block_indices: Vec<String>,
    lane_locals: Vec<String>,
    lds: Vec<String>,
    fragments: Vec<String>,
    body: Vec<String>,
    lds_total: u64,
    lds_budget: u64,
    grid: Vec<String>,
    #[serde(flatten)]
    launcher_ctx: LauncherCtx,
    doc_launch: String,
    doc_invalid: String,
    doc_errors: String,
}

/// A fragment's k-split state on the path being lowered (`WaveGrid::ks` > 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// Every wave group holds zeros.
    Zero,
    /// Each group holds a partial sum.
    Partial,
    /// Every group holds the whole value.
    Whole,
}

/// Shared buffers touched since the last barrier.
#[derive(Clone, Default)]
struct Hazards {
    written: BTreeSet<usize>,
    read: BTreeSet<usize>,
}

struct Lower<'a> {
    c: &'a Compiled,
    plan: &'a TilePlan,
    conv: Conv<'a>,
    lines: Vec<String>,
    depth: usize,
    hazards: Hazards,
    split: BTreeMap<usize, Split>,
    errors: Vec<Diagnostic>,
}

/// Spells element reads inside a `parallel` block: fragments by register, shared buffers by
/// LDS index.
struct ParEnv<'a> {
    c: &'a Compiled,
    plan: &'a TilePlan,
    conv: &'a Conv<'a>,
}

/// The tensor dimensions a tile of `op` spans, in the order of its `rank` buffer coordinates:
/// the sliced ones, all of the origin's, or (the whole tensor) every one.
fn tile_dims(op: &Operand, rank: usize) -> Vec<usize> {
    match (&op.origin, &op.tile_dims) {
        (Some(_), Some(d)) => d.clone(),
        (Some(o), None) => (0..o.len()).collect(),
        (None, _) => (0..rank).collect(),
    }
}

/// The register of element (bi, bj, r) of a fragment, or (bi) of row statistics.
fn register(name: &str, row_stats: bool) -> String {
    if row_stats { format!("{name}[bi]") } else { format!("{name}[bi][bj][r]") }
}

impl Env for ParEnv<'_> {
    fn buffer_element(&self, buffer: usize, idx: &[Expr]) -> Option<String> {
        let b = &self.c.spec.buffers[buffer];
        match b.scope.0 {
            Scope::Fragment => Some(to_float(b.dtype.0, &register(&self.c.spec.buffers[buffer].name.name, self.plan.fragments.get(&buffer).is_some_and(|g| g.cols == 0)))),
            Scope::Shared => {
                let ix: Vec<String> = idx.iter().map(|e| format!("[{}]", self.conv.expr(e, &PlainEnv))).collect();
                Some(to_float(b.dtype.0, &format!("{}{}", b.name.name, ix.concat())))
            }
        }
    }
}

struct PlainEnv;

impl Env for PlainEnv {
    fn buffer_element(&self, _buffer: usize, _idx: &[Expr]) -> Option<String> {
        None
    }
}

/// A stored element as f32 (CK's bf16 is a bit pattern: it must be converted).
fn to_float(d: DType, x: &str) -> String {
    match d {
        DType::BF16 | DType::F16 | DType::F8E4M3 => format!("ck::type_convert<float>({x})"),
        DType::F32 => x.to_string(),
        DType::I8 | DType::I32 => format!("static_cast<float>({x})"),
    }
}

/// An f32 value stored as `d`: to integers toward zero, saturating (as the spec converts; a
/// plain cast is undefined outside the range).
fn from_float(d: DType, x: &str) -> String {
    match d {
        DType::BF16 | DType::F16 | DType::F8E4M3 => format!("ck::type_convert<{}>({x})", element(d)),
        DType::F32 => x.to_string(),
        DType::I8 | DType::I32 => crate::back::conv::float_to_int(d, x).unwrap_or_default(),
    }
}

/// Zero as a `d`.
fn zero(d: DType) -> String {
    if d.is_float() { from_float(d, "0.f") } else { "0".into() }
}

/// The register type of one 16x16 block (4 values per lane).
fn block_type(d: DType) -> &'static str {
    match d {
        DType::BF16 => "ck::bhalf4_t",
        DType::F16 => "ck::half4_t",
        _ => "ck::float4_t",
    }
}

impl<'a> Lower<'a> {
    fn line(&mut self, text: impl AsRef<str>) {
        let pad = "  ".repeat(self.depth);
        for l in text.as_ref().lines() {
            self.lines.push(if l.is_empty() { String::new() } else { format!("{pad}{l}") });
        }
    }

    fn open(&mut self, header: impl AsRef<str>) {
        self.line(format!("{} {{", header.as_ref()));
        self.depth += 1;
    }

    fn close(&mut self) {
        self.depth -= 1;
        self.line("}");
    }

    /// `} else {` between the two branches of an open `if`.
    fn else_branch(&mut self) {
        self.depth -= 1;
        self.line("} else {");
        self.depth += 1;
    }

    fn comment(&mut self, s: &Stmt, extra: &str) {
        let text = self.c.file.snippet(s.span).lines().next().unwrap_or("").trim().to_string();
        let line = self.c.line(s.span);
        if extra.is_empty() {
            self.line(format!("// spec {line}: {text}"));
        } else {
            self.line(format!("// spec {line}: {text}: {extra}"));
        }
    }

    fn name(&self, b: usize) -> &'a str {
        &self.c.spec.buffers[b].name.name
    }

    fn buffer(&self, id: &Ident) -> Option<usize> {
        self.buffer_named(&id.name)
    }

    fn buffer_named(&self, name: &str) -> Option<usize> {
        match self.c.info.symbols.get(name) {
            Some(Symbol::Buffer(b)) => Some(*b),
            _ => None,
        }
    }

    fn tensor(&self, id: &Ident) -> Option<usize> {
        match self.c.info.symbols.get(&id.name) {
            Some(Symbol::Tensor(t)) => Some(*t),
            _ => None,
        }
    }

    fn grid(&self, b: usize) -> WaveGrid {
        self.plan.fragments[&b]
    }

    fn ex(&self, e: &Expr) -> String {
        self.conv.expr(e, &PlainEnv)
    }

    /// `ex`, parenthesised if it is an operation (a binary one may start with a bracketed
    /// operand, `(a + b) * c`, and still need its own).
    fn atom(&self, e: &Expr) -> String {
        let s = self.ex(e);
        if matches!(e.kind, ExprKind::Binary(..) | ExprKind::Unary(..)) { format!("({s})") } else { s }
    }

    /// A barrier before a statement that reads `reads` and writes `writes` (shared buffers),
    /// when another thread may have written what it reads or read what it writes.
    fn sync_for(&mut self, reads: &[usize], writes: &[usize]) {
        let h = &self.hazards;
        let raw = reads.iter().find(|b| h.written.contains(b));
        let war = writes.iter().find(|b| h.read.contains(b) || h.written.contains(b));
        if raw.is_some() || war.is_some() {
            let reason = match (raw, war) {
                (Some(b), _) => format!("`{}` is read after other threads wrote it", self.name(*b)),
                (None, Some(b)) => format!("`{}` is overwritten after other threads {} it", self.name(*b), if self.hazards.read.contains(b) { "read" } else { "wrote" }),
                _ => unreachable!(),
            };
            self.line(format!("__syncthreads();  // {reason}"));
            self.hazards = Hazards::default();
        }
        self.hazards.read.extend(reads);
        self.hazards.written.extend(writes);
    }

    /// The loops over a fragment's blocks and registers; `body` sees `bi`, `bj`, `r`.
    fn for_each_element(&mut self, g: WaveGrid, body: impl FnOnce(&mut Self)) {
        self.line("#pragma unroll");
        self.open(format!("for (int bi = 0; bi < {}; ++bi)", g.row_blocks()));
        if g.cols == 0 {
            // Row statistics: one register per row block.
            body(self);
            self.close();
            return;
        }
        self.line("#pragma unroll");
        self.open(format!("for (int bj = 0; bj < {}; ++bj)", g.col_blocks()));
        self.line("#pragma unroll");
        self.open("for (int r = 0; r < 4; ++r)");
        body(self);
        self.close();
        self.close();
        self.close();
    }

    /// The row and column of element (bi, bj, r) of fragment `b`.
    fn coords(&self, b: usize) -> (String, String) {
        let n = self.name(b);
        (format!("{n}_row + bi * 16 + lane_row"), format!("{n}_col + bj * 16 + lane_col + r"))
    }

    /// The C++ linear offset and bounds condition of tensor `t` at the element of `op`'s tile
    /// whose buffer coordinates are `coords`; origins that may be negative are checked against
    /// 0 too.
    fn tile_address(&self, t: usize, op: &Operand, coords: &[String]) -> (String, String) {
        self.address(t, op, &self.tile_indices(op, coords))
    }

    /// As `tile_address`, for a fragment's element or vector: its tensor indices along the
    /// tile's two dimensions are sums of the fragment's coordinates, so they are declared first
    /// (`row`, `col`) and the bounds check and the address name them.
    fn tile_address_named(&mut self, t: usize, op: &Operand, coords: &[String]) -> (String, String) {
        let mut idx = self.tile_indices(op, coords);
        for (name, &d) in ["row", "col"].iter().zip(&tile_dims(op, coords.len())) {
            if idx[d].contains(' ') {
                self.line(format!("int const {name} = {};", idx[d]));
                idx[d] = name.to_string();
            }
        }
        self.address(t, op, &idx)
    }

    /// The element offset of tensor `t` at indices `idx` and the condition that they are inside
    /// it (with `0 <=` for the indices whose tile origin may be negative).
    fn address(&self, t: usize, op: &Operand, idx: &[String]) -> (String, String) {
        let (linear, bounds) = crate::back::conv::offset(&self.c.spec.tensors[t], idx);
        let origin = op.origin.as_deref().unwrap_or_default();
        let negative = idx.iter().zip(origin).filter(|(_, e)| !crate::check::non_negative(e, &self.c.info.symbols)).map(|(i, _)| i.as_str());
        (linear, crate::back::conv::with_lower_bounds(negative, bounds))
    }

    /// Tensor indices of a tile element whose buffer coordinates are `coords`.
    fn tile_indices(&self, op: &Operand, coords: &[String]) -> Vec<String> {
        let Some(origin) = op.origin.as_deref() else {
            // The whole tensor is the tile.
            return coords.to_vec();
        };
        let dims = tile_dims(op, coords.len());
        origin.iter().enumerate().map(|(d, e)| {
            let o = self.ex(e);
            match dims.iter().position(|x| *x == d).and_then(|p| coords.get(p)) {
                Some(c) if o == "0" => c.clone(),
                Some(c) => format!("{o} + {c}"),
                None => o,
            }
        }).collect()
    }

    /// The element-wise loop over a shared buffer's elements, every thread a strided share;
    /// `body` gets the buffer coordinates.
    fn for_each_shared(&mut self, b: usize, body: impl FnOnce(&mut Self, &[String])) {
        self.for_each_vector(b, 1, body)
    }

    /// As `for_each_shared`, `v` elements of a row at a time (`v` divides the row).
    fn for_each_vector(&mut self, b: usize, v: i64, body: impl FnOnce(&mut Self, &[String])) {
        let shape = self.c.info.buffer_shapes[b].clone();
        let mut extents: Vec<String> = self.c.spec.buffers[b].shape.iter().map(|e| self.atom(e)).collect();
        if v > 1 {
            let last = extents.pop().unwrap_or_default();
            extents.push(format!("({last} / {v})"));
        }
        self.open(format!("for (int e = threadIdx.x; e < {}; e += kThreads)", extents.join(" * ")));
        let scaled = |x: &str| if v > 1 { format!("{x} * {v}") } else { x.to_string() };
        let coords: Vec<String> = match shape.len() {
            1 if v > 1 => {
                self.line(format!("int const c = {};", scaled("e")));
                vec!["c".into()]
            }
            1 => vec!["e".into()],
            _ => {
                self.line(format!("int const r = e / {0}, c = {1};", extents[1], scaled(&format!("e % {}", extents[1]))));
                vec!["r".into(), "c".into()]
            }
        };
        body(self, &coords);
        self.close();
    }

    /// Elements per access of a copy (see `TilePlan::vectors`).
    fn vector(&self, s: &Stmt) -> i64 {
        self.plan.vectors.get(&s.id).copied().unwrap_or(1)
    }

    fn lds_ref(&self, b: usize, coords: &[String]) -> String {
        format!("{}{}", self.name(b), coords.iter().map(|c| format!("[{c}]")).collect::<String>())
    }

    /// Before a statement reads fragment `b`: a k-split fragment's partial sums are added.
    fn whole(&mut self, b: usize) {
        let g = self.grid(b);
        if g.ks == 1 || self.split.get(&b) != Some(&Split::Partial) {
            return;
        }
        let n = self.name(b);
        self.line(format!("// `{n}` is split along k over {} wave groups: add the partial sums through LDS.", g.ks));
        self.line("__syncthreads();  // the scratch space is free");
        let (row, col) = self.coords(b);
        self.for_each_element(g, |l| l.line(format!("ksplit[{n}_group][{row}][{col}] = {n}[bi][bj][r];")));
        self.line("__syncthreads();  // every group's partial sums are in LDS");
        self.for_each_element(g, |l| {
            l.line(format!("float total = 0.f;\n#pragma unroll\nfor (int g = 0; g < {}; ++g) {{\n  total += ksplit[g][{row}][{col}];\n}}\n{n}[bi][bj][r] = total;", g.ks));
        });
        self.hazards = Hazards::default();
        self.split.insert(b, Split::Whole);
    }

    fn stmts(&mut self, body: &[Stmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => {
                let Some(b) = self.buffer(buf) else { return };
                let (value, zero) = match &s.kind {
                    StmtKind::Fill { value, .. } => (self.ex(value), false),
                    _ => ("0.f".to_string(), true),
                };
                let d = self.c.spec.buffers[b].dtype.0;
                self.comment(s, "");
                match self.c.spec.buffers[b].scope.0 {
                    Scope::Fragment => {
                        let g = self.grid(b);
                        let n = self.name(b);
                        let v = from_float(d, &value);
                        let reg = register(n, g.cols == 0);
                        self.for_each_element(g, |l| l.line(format!("{reg} = {v};")));
                        self.split.insert(b, if zero { Split::Zero } else { Split::Whole });
                    }
                    Scope::Shared => {
                        self.sync_for(&[], &[b]);
                        let v = from_float(d, &value);
                        self.for_each_shared(b, |l, co| l.line(format!("{} = {v};", l.lds_ref(b, co))));
                    }
                }
            }
            StmtKind::Copy { src, dst } => self.copy(s, src, dst),
            StmtKind::Gemm { a, b, c, .. } => self.gemm(s, a, b, c),
            StmtKind::Dequant { src, dst, scales, zero, order } => {
                let (Some(w), Some(d), Some(sc)) = (self.buffer(src), self.buffer(dst), self.buffer(scales)) else { return };
                let shape = &self.c.info.buffer_shapes[d];
                let group = shape[1] / self.c.info.buffer_shapes[sc][1];
                let zeros = match zero.tile().map(|z| self.buffer(z)) {
                    Some(None) => return,
                    Some(Some(z)) => Some(z),
                    None => None,
                };
                let (wn, dn, sn) = (self.name(w), self.name(d), self.name(sc));
                let dt = self.c.spec.buffers[d].dtype.0;
                // Where value `nib` of a word starts (NibbleOrder::shift).
                let (shift, bits) = match order {
                    NibbleOrder::Sequential => ("4 * nib", "bits 4*(c%8) .."),
                    NibbleOrder::Interleaved => ("4 * (nib / 2) + 16 * (nib % 2)", "(interleaved) bits 4*(c%8/2) + 16*(c%2) .."),
                };
                let (zero_text, value) = match zero {
                    ZeroPoint::PerGroup(z) => (format!("the group's zero point in `{}`", z.name), format!("(static_cast<float>((word >> ({shift})) & 15u) - word_zero)")),
                    ZeroPoint::Constant(v, _) => (v.to_string(), format!("static_cast<float>(static_cast<int>((word >> ({shift})) & 15u) - {v})")),
                };
                self.comment(s, &format!("each thread unpacks whole words: element c of a row is {bits} of word c/8, minus {zero_text}, times the scale of group c/{group}"));
                self.sync_for(&[w, sc].into_iter().chain(zeros).collect::<Vec<_>>(), &[d]);
                let words = format!("{} * ({} / 8)", self.atom(&self.c.spec.buffers[d].shape[0]), self.atom(&self.c.spec.buffers[d].shape[1]));
                self.open(format!("for (int e = threadIdx.x; e < {words}; e += kThreads)"));
                self.line(format!("int const r = e / ({0} / 8), c = e % ({0} / 8);", self.atom(&self.c.spec.buffers[d].shape[1])));
                self.line(format!("uint32_t const word = static_cast<uint32_t>({wn}[r][c]);"));
                self.line(format!("float const word_scale = {};", to_float(self.c.spec.buffers[sc].dtype.0, &format!("{sn}[r][c * 8 / {group}]"))));
                if let Some(iz) = zeros {
                    let zn = self.name(iz);
                    self.line(format!("float const word_zero = {};", to_float(self.c.spec.buffers[iz].dtype.0, &format!("{zn}[r][c * 8 / {group}]"))));
                }
                self.line("#pragma unroll");
                self.open("for (int nib = 0; nib < 8; ++nib)");
                self.line(format!("{dn}[r][c * 8 + nib] = {};", from_float(dt, &format!("{value} * word_scale"))));
                self.close();
                self.close();
            }
            StmtKind::Loop { kind, var, count, body, .. } => {
                let extra = match kind {
                    LoopKind::Pipelined => format!("in order on {}: this lowering has no asynchronous global → LDS copies, so the spec's stages apply to the NVIDIA targets", self.c.plan.target),
                    _ => String::new(),
                };
                self.comment(s, &extra);
                // Conservatively, the accesses of the previous iteration are in flight.
                let (reads, writes) = shared_accesses(self, body);
                self.hazards.read.extend(reads);
                self.hazards.written.extend(writes);
                let head = self.hazards.clone();
                // The k-split states at the loop head must hold on entry and on the back
                // edge: a dry run of the body finds the back edge's.
                let saved = (self.lines.len(), self.depth, self.errors.len(), self.split.clone());
                self.stmts(body);
                let after = std::mem::replace(&mut self.split, saved.3.clone());
                self.lines.truncate(saved.0);
                self.errors.truncate(saved.2);
                self.depth = saved.1;
                self.hazards = head.clone();
                for (b, st) in after {
                    match join(self.split.get(&b).copied(), st) {
                        Some(j) => {
                            self.split.insert(b, j);
                        }
                        None => self.errors.push(Diagnostic::error(s.span, format!(
                            "the {} tile lowering cannot keep `{}`'s k-split partial sums consistent around this loop: it holds partial sums at one iteration's start and a whole value at another's",
                            self.c.plan.target, self.name(b))).hint("read the fragment (copy or parallel) after the loop only, or give it a row block of 16 per wave").unsupported_on_target()),
                    }
                }
                // A trip count too long for the loop's header line (a `min` of two ceildivs) is
                // named first (before any `#pragma unroll`, which must precede the `for`):
                // `num_<var>`, numbered past names the spec, a fragment's offsets
                // (`<fragment>_row`, `_col`, `_group`) or an earlier loop took. The template
                // indents the body two more columns than `depth` says.
                let (v, mut n) = (&var.name, self.ex(count));
                let header = |n: &str| format!("for (int {v} = 0; {v} < {n}; ++{v})");
                if 2 + 2 * self.depth + header(&n).chars().count() + 2 > crate::back::CODE_WIDTH {
                    let offsets = |name: &str| self.c.spec.buffers.iter().any(|b| ["_row", "_col", "_group"].iter().any(|x| name == format!("{}{x}", b.name.name)));
                    let taken = |name: &str| self.c.info.symbols.contains_key(name) || offsets(name)
                        || self.lines.iter().any(|l| l.trim_start().starts_with(&format!("int const {name} =")));
                    let name = (1..).map(|k| if k == 1 { format!("num_{v}") } else { format!("num_{v}{k}") }).find(|n| !taken(n)).unwrap_or_default();
                    self.line(format!("int const {name} = {n};"));
                    n = name;
                }
                if *kind == LoopKind::Unroll {
                    self.line("#pragma unroll");
                }
                self.open(header(&n));
                self.stmts(body);
                self.close();
                // The body may run zero times.
                self.hazards.read.extend(head.read);
                self.hazards.written.extend(head.written);
            }
            StmtKind::Parallel { vars, body } => self.parallel(s, vars, body),
            StmtKind::If { cond, then_body, else_body } => {
                self.comment(s, "");
                let entry = self.hazards.clone();
                self.open(format!("if ({})", self.ex(cond)));
                self.stmts(then_body);
                let then_h = std::mem::replace(&mut self.hazards, entry);
                if !else_body.is_empty() {
                    self.else_branch();
                    self.stmts(else_body);
                }
                self.close();
                self.hazards.read.extend(then_h.read);
                self.hazards.written.extend(then_h.written);
            }
            StmtKind::Reduce { op, src, dst, clear, .. } => self.reduce(s, *op, src, dst, *clear),
            StmtKind::Assign { .. } => {}
        }
    }

    /// A construct the plan let through that the lowering cannot emit: an error, not silence.
    fn unsupported(&mut self, s: &Stmt, what: &str) {
        self.errors.push(Diagnostic::error(s.span, format!("the {} tile lowering has no code for {what}", self.c.plan.target)).unsupported_on_target());
    }

}

/// The k-split state at a loop head that both `entry` and the back edge's `after` allow
/// (zeros start a sum like partial sums do, and take the zeroing a whole value gets).
fn join(entry: Option<Split>, after: Split) -> Option<Split> {
    match (entry.unwrap_or(Split::Whole), after) {
        (a, b) if a == b => Some(a),
        (Split::Zero, x) | (x, Split::Zero) => Some(x),
        _ => None,
    }
}

/// The shared buffers a body reads and writes (any depth).
fn shared_accesses(l: &Lower, body: &[Stmt]) -> (Vec<usize>, Vec<usize>) {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let shared = |name: &str| l.buffer_named(name).filter(|b| l.c.spec.buffers[*b].scope.0 == Scope::Shared);
    walk_stmts(body, &mut |s| {
        writes.extend(s.written().and_then(shared));
        match &s.kind {
            StmtKind::Copy { src, .. } => reads.extend(shared(&src.name.name)),
            StmtKind::Gemm { a, b, .. } => reads.extend([a, b].into_iter().filter_map(|x| shared(&x.name))),
            StmtKind::Dequant { src, scales, zero, .. } => {
                reads.extend([Some(src), Some(scales), zero.tile()].into_iter().flatten().filter_map(|x| shared(&x.name)));
            }
            StmtKind::Parallel { body, .. } => {
                for (n, _, _) in crate::layout::mfma::accesses(body) {
                    reads.extend(shared(&n.name));
                }
            }
            _ => {}
        }
    });
    (reads, writes)
}

/// The `__shared__` declarations: the spec's buffers, then the k-split scratch space.
fn lds_declarations(c: &Compiled, plan: &TilePlan, conv: &Conv) -> Vec<String> {
    let spec = &c.spec;
    let alias = |n: &str| format!("Element{}", upper_first(n));
    plan.shared.iter().map(|(b, lb)| {
        let buf = &spec.buffers[*b];
        let ext: Vec<String> = buf.shape.iter().map(|e| conv.expr(e, &PlainEnv)).collect();
        let dims = match ext.len() {
            2 if lb.pad > 0 => format!("[{}][{} + {}]", ext[0], ext[1], lb.pad),
            _ => ext.iter().map(|e| format!("[{e}]")).collect(),
        };
        format!("__shared__ {} {}{dims};  // spec {}: {} bytes; {}", alias(&buf.name.name), buf.name.name, c.line(buf.span), lb.bytes, lb.why)
    }).chain((plan.scratch_bytes > 0).then(|| {
        let (ks, rows, cols) = plan.fragments.values().filter(|g| g.ks > 1).map(|g| (g.ks, g.rows, g.cols)).max_by_key(|x| x.0 * x.1 * x.2).unwrap_or((1, 0, 0));
        format!("__shared__ float ksplit[{ks}][{rows}][{cols}];  // {} bytes: the k-split partial sums, one slice per wave group", plan.scratch_bytes)
    })).collect()
}

pub(super) fn context(c: &Compiled, plan: &TilePlan) -> Result<Context, Vec<Diagnostic>> {
    let spec = &c.spec;
    let conv = Conv { spec, info: &c.info, hip: true, fp8_in_software: false };
    let mut l = Lower { c, plan, conv: Conv { spec, info: &c.info, hip: true, fp8_in_software: false }, lines: Vec::new(), depth: 0, hazards: Hazards::default(), split: BTreeMap::new(), errors: Vec::new() };
    l.stmts(&spec.body);
    if !l.errors.is_empty() {
        return Err(l.errors);
    }
    let body = l.lines;
    // Every spec constant is declared, for the reader; those the kernel never reads (tile
    // settings of other targets) are marked by render_pair's scan (ConstantCtx::unused).
    let mut grid: Vec<String> = spec.grid.iter().map(|g| conv.expr(&g.extent, &crate::back::conv::GridEnv)).collect();
    while grid.len() < 3 {
        grid.push("1".into());
    }
    let lds = lds_declarations(c, plan, &conv);
    let code = |l: &String| l.split("//").next().unwrap_or("").to_string();
    // Whether the body, the LDS declarations or the grid read `name` (a lane or block index).
    let used = |name: &str| body.iter().chain(&lds).chain(&grid).any(|l| mentions(&code(l), name));
    let constants = crate::back::constants_ctx(c);
    let alias = |n: &str| format!("Element{}", upper_first(n));
    let mut elements: Vec<ElementCtx> = spec.tensors.iter().map(|t| ElementCtx { alias: alias(&t.name.name), cpp_type: element(t.dtype.0).into(), of: format!("tensor `{}`", t.name.name) })
        .chain(spec.buffers.iter().map(|b| ElementCtx { alias: alias(&b.name.name), cpp_type: element(b.dtype.0).into(), of: format!("{} buffer `{}`", b.scope.0.name(), b.name.name) }))
        .collect();
    let mut seen = BTreeSet::new();
    elements.retain(|e| seen.insert(e.alias.clone()));
    // Helpers called by name (float_to_i8, gelu_erf, ...) are added when rendering.
    let helpers = Vec::new();
    let mut mfmas: Vec<(String, String)> = Vec::new();
    for id in plan.gemms.keys() {
        if let Some(StmtKind::Gemm { a, .. }) = spec.stmt(*id).map(|s| &s.kind) && let Some(Symbol::Buffer(b)) = c.info.symbols.get(&a.name) {
            let d = spec.buffers[*b].dtype.0;
            let entry = (block_type(d).to_string(), if d == DType::BF16 { "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k" } else { "__builtin_amdgcn_mfma_f32_16x16x16f16" }.to_string());
            if !mfmas.contains(&entry) {
                mfmas.push(entry);
            }
        }
    }
    let (kernel_params, kernel_args) = crate::back::sm80::kernel_signature(c);
    let axes = ["x", "y", "z"];
    let block_indices: Vec<(String, String)> = spec.grid.iter().enumerate().map(|(i, g)| (g.var.name.clone(), if g.descending {
        format!("int const {} = gridDim.{d} - 1 - blockIdx.{d};  // descending: the first blocks take the last tiles", g.var.name, d = axes[i])
    } else {
        format!("int const {} = blockIdx.{};", g.var.name, axes[i])
    })).collect();
    // Fragment registers and their wave offsets; an offset no statement uses is left out.
    let fragments: Vec<String> = plan.fragments.iter().flat_map(|(b, g)| {
        let buf = &spec.buffers[*b];
        let n = &buf.name.name;
        let mut v = if g.cols == 0 {
            vec![
                format!("// `{n}` (spec {}): [{}] {}, row statistics: one value per row block of 16, for the row each lane holds; waves {} along the rows.", c.line(buf.span), g.rows, buf.dtype.0, g.wm),
                format!("{} {n}[{}];", element(buf.dtype.0), g.row_blocks()),
            ]
        } else {
            vec![
                format!("// `{n}` (spec {}): [{}, {}] {}, waves {}x{} (rows x columns){}; each holds {}x{} blocks.", c.line(buf.span), g.rows, g.cols, buf.dtype.0, g.wm, g.wn,
                    if g.ks > 1 { format!(" in {} k groups", g.ks) } else { String::new() }, g.row_blocks(), g.col_blocks()),
                format!("{} {n}[{}][{}];", block_type(buf.dtype.0), g.row_blocks(), g.col_blocks()),
            ]
        };
        let offsets = [
            (format!("{n}_row"), if g.wm == 1 { "0".into() } else { format!("wave % {} * {}", g.wm, g.row_blocks() * BLOCK) }, "the wave's first row"),
            (format!("{n}_col"), match (g.wm, g.wn) {
                (_, 1) => "0".to_string(),
                (1, wn) => format!("wave % {wn} * {}", g.col_blocks() * BLOCK),
                (wm, wn) => format!("wave / {wm} % {wn} * {}", g.col_blocks() * BLOCK),
            }, "and column"),
            (format!("{n}_group"), format!("wave / {}", g.wm * g.wn), "the k group"),
        ];
        for (name, value, what) in offsets {
            if used(&name) {
                v.push(format!("int const {name} = {value};  // {what}"));
            }
        }
        v
    }).collect();
    // The lane's place in its wave, as far as the code uses it.
    let with_fragments = |name: &str| used(name) || fragments.iter().any(|l| mentions(&code(l), name));
    let mut lane_locals = Vec::new();
    let (row, col, wave) = (used("lane_row"), used("lane_col"), with_fragments("wave"));
    if row || col {
        lane_locals.push("int const lane = threadIdx.x % 64;".to_string());
    }
    if wave {
        lane_locals.push("int const wave = threadIdx.x / 64;".to_string());
    }
    if row {
        lane_locals.push("int const lane_row = lane % 16;  // the row this lane holds in every 16x16 block".to_string());
    }
    if col {
        lane_locals.push("int const lane_col = 4 * (lane / 16);  // and its first column".to_string());
    }
    let block_indices = block_indices.into_iter().filter(|(n, _)| with_fragments(n)).map(|(_, l)| l).collect();
    Ok(Context {
        header: header(c),
        constants,
        threads: spec.threads.0,
        waves: plan.waves,
        threads_line: c.line(spec.threads.1),
        elements,
        helpers,
        mfmas,
        kernel_params,
        kernel_args,
        block_indices,
        lane_locals,
        lds,
        fragments,
        body,
        lds_total: plan.lds_total,
        lds_budget: c.plan.target.smem_budget(),
        grid,
        launcher_ctx: launcher(c),
        doc_launch: format!("a grid of {} workgroups of {} threads ({} waves of 64), {} bytes of LDS each", spec.grid.iter().map(|g| c.file.snippet(g.extent.span).to_string()).collect::<Vec<_>>().join(" x "), spec.threads.0, plan.waves, plan.lds_total),
        doc_invalid: "the grid exceeds HIP's limits".into(),
        doc_errors: "the launch".into(),
    })
}
