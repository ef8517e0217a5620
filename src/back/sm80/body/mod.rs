//! Lowers the spec body to a flat list of template items, one per emitted block of code.

use super::common::{element_alias, static_extents, PlainEnv};
use super::context::{mma_suffix, operand_key};
use super::tma::{empty_barrier, full_barrier};
use crate::ast::*;
use crate::back::conv::{Conv, Env};
use crate::check::Symbol;
use crate::diag::Diagnostic;
use crate::layout::{CopyKind, FragmentLayout, PipelineMode};
use crate::Compiled;
use crate::back::conv::upper_first;
use serde::Serialize;

mod pipeline;

/// One block of emitted code.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BodyItem {
    Clear { pad: String, line: usize, text: String, target: String },
    Fill { pad: String, line: usize, text: String, target: String, value: String },
    Open { pad: String, line: usize, text: String, header: String },
    Else { pad: String },
    Close { pad: String },
    PipelineOpen(Box<PipelineCtx>),
    /// `in_flight`: the loop's gemm keeps its last batch of MMAs in flight
    /// (`PipelinePlan::mma_in_flight`); the stage before the current one is released, and
    /// after the loop the last batch is waited for, on accumulator `acc`.
    PipelineClose { pad: String, var: String, stages: String, multistage: bool, sync_after: bool, tma: bool, empty: String, in_flight: bool, acc: String },
    /// An overlapped loop's gemm as a lambda that issues and commits its MMAs on `stage`
    /// without waiting (`layout::MmaOverlap`); `zero`: the first k-block zeroes the
    /// accumulator, for the `clear` at spec `zero_line`.
    GemmIssue { pad: String, line: usize, text: String, name: String, step: GemmCtx, zero: bool, zero_line: usize, zero_text: String },
    /// `auto name = [&](int param) {`, with a comment; closed by `LambdaClose`.
    LambdaOpen { pad: String, name: String, param: String, comment: Vec<String> },
    LambdaClose { pad: String },
    /// The overlapped loop itself, calling the lambdas above; closes the pipeline's block.
    OverlapLoop(Box<OverlapCtx>),
    /// `deferred`: the wait is left to the multistage pipeline that follows (cp.async
    /// groups complete in order, so its first wait covers this copy too). `sync`: a barrier
    /// first, so that earlier readers of the tile are done (none before the kernel's first
    /// use of shared memory, outside any loop).
    CopyToShared { pad: String, line: usize, text: String, producer: ProducerCtx, deferred: bool, sync: bool },
    /// `in_flight`: a warpgroup MMA batch left running (`PipelinePlan::mma_in_flight`): the
    /// previous batch is waited for, not this one.
    Gemm { pad: String, line: usize, text: String, step: GemmCtx, in_flight: bool },
    /// A statement that emits no code of its own (a dequant fused into its gemm).
    Note { pad: String, line: usize, text: String, note: String },
    /// Element-wise over an accumulator, register by register.
    Parallel { pad: String, line: usize, text: String, thr_mma: String, frag: String, coords: String, shape: String, var_decls: Vec<String>, assigns: Vec<AssignCtx> },
    /// Element-wise over an accumulator that also reads row statistics: (row, col) loops.
    /// `unit_scales`: the row statistics a warp checks before running the block (skipped
    /// when every one it holds is 1: the block only multiplies by them), `unit_scales_text`
    /// their names for the comment; `body_pad`: the loops' indent (inside the check if any).
    ParallelRows { pad: String, body_pad: String, line: usize, text: String, frag: String, views: Vec<String>, coords: Vec<String>, var_decls: Vec<String>, assigns: Vec<AssignCtx>, unit_scales: Vec<String>, unit_scales_text: String },
    /// Element-wise over row statistics.
    ParallelStats { pad: String, line: usize, text: String, frag: String, assigns: Vec<AssignCtx> },
    /// `dequant_int4`: each thread unpacks whole words into 16-byte stores.
    /// `load` and `store`: the body lines of the two per-word loops (loads first, so that
    /// they are in flight together).
    Dequant { pad: String, line: usize, text: String, why: String, dst: String, per_thread: i64, row_col: String, zeros: bool, scale_elem: String, load: Vec<String>, store: Vec<String> },
    Reduce { pad: String, line: usize, text: String, why: String, view: String, src: String, dst: String, init: String, fold: String, shuffles: Vec<String>, combine: String },
    Store(Box<StoreItem>),
    /// `copy(acc, shared)`: each thread writes its converted accumulator values in place.
    AccToShared { pad: String, line: usize, text: String, why: String, acc: String, converted: String, value: String, elem: String, atom: String, tiled_mma: String, copy: String, thr: String, smem: String },
}

#[derive(Serialize)]
pub struct PipelineCtx {
    pub pad: String,
    pub line: usize,
    pub text: String,
    pub why: String,
    pub var: String,
    pub count: String,
    pub stages: String,
    pub multistage: bool,
    pub producers: Vec<ProducerCtx>,
    /// The producers are TMA loads completing on the mbarriers `barrier[stage]`, which
    /// expect `tma_bytes` per tile.
    pub tma: bool,
    pub barrier: String,
    /// Warp-specialised: the "empty" mbarriers the consumers release stages on.
    pub empty: String,
    pub tma_bytes: String,
    /// Waits for TMA copies before the loop that left their wait to it (after its
    /// prologue, so that their loads overlap the first stages').
    pub tma_waits: Vec<String>,
    /// The loop's second gemm overlaps the next tile: `OverlapLoop` follows the lambdas.
    pub overlap: bool,
    /// The loop's gemm keeps its last batch of MMAs in flight (`PipelinePlan::mma_in_flight`).
    pub in_flight: bool,
}

/// The loop of a pipeline whose second gemm overlaps the next tile (`layout::MmaOverlap`).
#[derive(Serialize)]
pub struct OverlapCtx {
    pub pad: String,
    pub var: String,
    pub stages: String,
    pub barrier: String,
    pub empty: String,
    /// The lambdas: the first gemm's, the second's, the work between, the work after.
    pub issue_first: String,
    pub issue_deferred: String,
    pub during: String,
    pub after: String,
    /// `after` takes the loop variable.
    pub after_arg: bool,
    pub first_line: usize,
    pub deferred_line: usize,
    /// The first gemm's accumulator and the second's.
    pub s_acc: String,
    pub o_acc: String,
    /// The loop may run no tiles (its count has no lower bound of 1, [`crate::check::lower_bound`]):
    /// the first tile's and the last gemm's code sit under `if (num_tiles > 0)`.
    pub may_be_empty: bool,
    /// The indentation of that code: one level deeper when it is guarded.
    pub edge_pad: String,
}

#[derive(Serialize)]
pub struct ProducerCtx {
    pub line: usize,
    pub text: String,
    pub copy_type: String,
    pub copy_var: String,
    pub thr: String,
    pub view: String,
    pub view_decl: String,
    pub view_comment: String,
    pub tile_shape: String,
    pub coord: String,
    pub g: String,
    pub id: String,
    pub tg: String,
    pub ts: String,
    pub tc: String,
    pub smem: String,
    pub pipelined: bool,
    /// Threads that copy when fewer than the block do (a small tile), else 0.
    pub active: i64,
    /// Extra indentation of the copy code inside the `tid < active` guard.
    pub ind: String,
    /// TMA loads: the tensor map's kernel parameter, the coordinate tensor it reads
    /// (`tma_view`, declared by `tma_view_decl`), sliced at the copy's fixed indices
    /// (`tma_slice`), this block's slice of the copy, the barrier of a copy outside
    /// pipelines and the tile's bytes.
    pub tma: bool,
    pub tma_var: String,
    pub tma_view: String,
    pub tma_view_decl: String,
    pub tma_slice: String,
    pub tma_thr: String,
    pub barrier: String,
    pub tma_bytes: String,
    /// `CopyPlan::odd_rows`: the odd-rows instantiation's copy of the tile, line by line
    /// (empty otherwise), and the extra indentation of the usual copy in the other branch.
    pub odd_rows: Vec<String>,
    pub odd_pad: String,
}

#[derive(Serialize)]
pub struct GemmCtx {
    pub line: usize,
    pub text: String,
    pub tiled_mma: String,
    pub thr_mma: String,
    pub acc: String,
    pub frag_a: String,
    pub frag_b: String,
    pub src_a: String,
    pub src_b: String,
    pub dst_a: String,
    pub dst_b: String,
    pub s2r_copy_a: String,
    pub s2r_copy_b: String,
    pub stage_a: String,
    pub stage_b: String,
    pub k_blocks: i64,
    pub a_in_registers: bool,
    /// A is loaded by this gemm's own ldmatrix copies; else `a_note` says where it is.
    pub loads_a: bool,
    pub a_note: String,
    /// sm90a: one batch of warpgroup MMAs instead of ldmatrix + mma.sync.
    pub wgmma: bool,
    /// B unpacked in registers from packed words (a fused dequant).
    pub packed_b: Option<PackedBCtx>,
}

/// dequant_int4x2's bias (`-(magic + zero)` in both halves) as a C++ expression: folded from a
/// constant zero point, or built from the per-group one `zero_at` names.
pub(super) fn neg_bias_expr(zero: &ZeroPoint, scale_elem: &str, zero_at: impl FnOnce(&Ident) -> String) -> String {
    match zero {
        ZeroPoint::Constant(z, _) => format!("dequant_neg_bias<{z}, {scale_elem}>()"),
        ZeroPoint::PerGroup(zeros) => format!("dequant_neg_bias<{scale_elem}>(uint32_t({}.raw()) * 0x10001u)", zero_at(zeros)),
    }
}

/// The fused dequant's side of a gemm whose B fragments are unpacked in registers.
#[derive(Serialize)]
pub struct PackedBCtx {
    pub line: usize,
    pub text: String,
    pub why: String,
    /// `make_shape(...)` extents of B as (N, K).
    pub b_shape: String,
    pub coords: String,
    /// The packed words' 16-byte vector of k-blocks `k_block` and `k_block + 1`, row `n`.
    pub words: String,
    /// The scale of row `n` for k-block `k_block`.
    pub scale: String,
    pub scale_elem: String,
    /// dequant_int4x2's bias for the row: the constant zero point's, or one read per group.
    pub neg_bias: String,
    pub neg_bias_why: String,
    /// The words' order (`sequential` or `interleaved`), for the comments.
    pub order: &'static str,
}

#[derive(Serialize)]
pub struct AssignCtx {
    pub line: usize,
    pub text: String,
    pub code: String,
}

#[derive(Serialize)]
pub struct StoreItem {
    pub pad: String,
    pub line: usize,
    pub text: String,
    pub why: String,
    pub key: String,
    pub acc: String,
    pub acc_converted: String,
    /// Element `e` of the accumulator, converted to the tensor's type.
    pub value: String,
    pub elem: String,
    pub tiled_mma: String,
    pub view: String,
    pub view_decl: String,
    pub tile_shape: String,
    pub coord: String,
    /// `tid < n && ` when fewer threads than the block store the tile.
    pub guard: String,
}

struct Lower<'a> {
    c: &'a Compiled,
    conv: Conv<'a>,
    items: Vec<BodyItem>,
    errors: &'a mut Vec<Diagnostic>,
    /// Inside a pipelined loop: the variable naming the shared stage being read.
    stage: Option<&'static str>,
    /// Inside a pipelined loop whose gemm keeps its last batch in flight.
    in_flight: bool,
    /// Some statement lowered so far may have used shared memory (conservative: anything but
    /// clearing or filling a fragment).
    shared_used: bool,
    /// How many loops enclose the statement being lowered.
    loops: usize,
}

pub fn build(c: &Compiled, errors: &mut Vec<Diagnostic>) -> Vec<BodyItem> {
    let mut l = Lower { c, conv: Conv { spec: &c.spec, info: &c.info, hip: false, fp8_in_software: false }, items: Vec::new(), errors, stage: None, in_flight: false, shared_used: false, loops: 0 };
    l.block(&c.spec.body, 1);
    l.items
}

fn pad(depth: usize) -> String {
    "  ".repeat(depth)
}

/// Inside `parallel` over an MMA fragment, element (i, j) of any fragment sharing the
/// layout is register `e` of that fragment.
struct FragmentEnv<'a> {
    c: &'a Compiled,
    vars: &'a [Ident],
}

impl Env for FragmentEnv<'_> {
    fn buffer_element(&self, buffer: usize, idx: &[Expr]) -> Option<String> {
        let plain = idx.len() == self.vars.len() && idx.iter().zip(self.vars).all(|(e, v)| matches!(&e.kind, ExprKind::Name(n) if *n == v.name));
        let b = &self.c.spec.buffers[buffer];
        if !plain || b.scope.0 != Scope::Fragment {
            return None;
        }
        // 16-bit floats compute in f32; integers stay integers (`f32(...)` converts them).
        Some(if matches!(b.dtype.0, DType::BF16 | DType::F16) { format!("static_cast<float>({}(e))", b.name.name) } else { format!("{}(e)", b.name.name) })
    }
}

/// Inside `parallel` over an accumulator viewed as (row, col): element (i, j) of a 2-D
/// fragment is `x_rc(r, c)`, and row statistic `m[i]` is `m(r)`. Over row statistics
/// alone (`parallel(i)`), `m[i]` is `m(r)`.
struct RowEnv<'a> {
    c: &'a Compiled,
    vars: &'a [Ident],
}

impl Env for RowEnv<'_> {
    fn buffer_element(&self, buffer: usize, idx: &[Expr]) -> Option<String> {
        let is = |x: &Expr, v: &Ident| matches!(&x.kind, ExprKind::Name(n) if *n == v.name);
        let b = &self.c.spec.buffers[buffer];
        if b.scope.0 != Scope::Fragment {
            return None;
        }
        let at = if idx.len() == 2 && self.vars.len() == 2 && is(&idx[0], &self.vars[0]) && is(&idx[1], &self.vars[1]) {
            format!("{}_rc(r, c)", b.name.name)
        } else if idx.len() == 1 && is(&idx[0], &self.vars[0]) {
            format!("{}(r)", b.name.name)
        } else {
            return None;
        };
        Some(if matches!(b.dtype.0, DType::BF16 | DType::F16) { format!("static_cast<float>({at})") } else { at })
    }
}

/// Buffer reads in `e` that `env` cannot spell (a shared buffer, or a fragment at indices
/// other threads own): each is an error, never a silent value.
fn unreadable(c: &Compiled, e: &Expr, env: &dyn Env, out: &mut Vec<Diagnostic>) {
    e.visit(&mut |x| {
        if let ExprKind::Index(name, idx) = &x.kind && let Some(Symbol::Buffer(b)) = c.info.symbols.get(&name.name) && env.buffer_element(*b, idx).is_none() {
            let buf = &c.spec.buffers[*b];
            out.push(Diagnostic::error(x.span, format!(
                "the {} backend cannot read {} buffer `{}` at these indices inside this parallel block",
                c.plan.target, buf.scope.0.name(), name.name))
                .hint("read fragments that share the block's layout at the block's own indices (row statistics at the row index); copy other data into such a fragment first"));
        }
        true
    });
}

/// An accumulator element `x` of type `from` converted to `to` (element type `elem`): floats
/// to integers toward zero, saturating (`float_to_i8`, `float_to_i32`, as the spec converts;
/// a plain cast is undefined outside the range), anything else by `static_cast`.
pub(super) fn converted_element(x: &str, from: DType, to: DType, elem: &str) -> String {
    let wide = if from == DType::F32 { x.to_string() } else { format!("static_cast<float>({x})") };
    from.is_float().then(|| crate::back::conv::float_to_int(to, &wide)).flatten().unwrap_or_else(|| format!("static_cast<{elem}>({x})"))
}

/// One assignment of a parallel block, writing through `at` (the target element's C++).
pub(super) fn assign_code(conv: &Conv<'_>, c: &Compiled, st: &Stmt, env: &dyn Env, at: &dyn Fn(&str) -> String, errors: &mut Vec<Diagnostic>) -> Option<AssignCtx> {
    let StmtKind::Assign { target, op, value, .. } = &st.kind else { return None };
    unreadable(c, value, env, errors);
    let v = conv.expr(value, env);
    let tb = match c.info.symbols.get(&target.name) {
        Some(Symbol::Buffer(b)) => *b,
        _ => return None,
    };
    let dtype = c.spec.buffers[tb].dtype.0;
    let t = at(&target.name);
    let rhs = if dtype == DType::F32 { v.clone() } else { format!("static_cast<{}>({v})", element_alias(&target.name)) };
    let code = if dtype == DType::F32 || *op == AssignOp::Set {
        format!("{t} {} {rhs};", op.symbol())
    } else {
        // Narrow accumulators: compute in f32, round once.
        format!("{t} = static_cast<{}>(static_cast<float>({t}) {} {v});", element_alias(&target.name), &op.symbol()[..1])
    };
    Some(AssignCtx { line: c.line(st.span), text: c.file.snippet(st.span).to_string(), code })
}

impl Lower<'_> {
    fn text(&self, s: &Stmt) -> String {
        self.c.file.snippet(s.span).to_string()
    }

    fn unsupported(&mut self, s: &Stmt, what: &str) {
        self.errors.push(Diagnostic::error(s.span, format!("the {} backend does not lower {what} yet", self.c.plan.target))
            .hint("see the README's list of supported statements per target"));
    }

    fn block(&mut self, stmts: &[Stmt], depth: usize) {
        for s in stmts {
            self.stmt(s, depth);
        }
    }

    /// Whether a statement after the pipelined loop `id` may use shared memory before a
    /// barrier of its own. The loop's copies issued before it are waited for inside it, so
    /// when it runs no tile, only such a statement needs the barrier after the loop.
    /// Conservative: element-wise blocks over registers pass, and a store of an accumulator
    /// (staged through shared memory behind a barrier) ends the search; anything else, or
    /// the end of a nested block, needs the barrier.
    fn shared_used_after(&self, id: StmtId) -> bool {
        let Some((block, at, top)) = crate::ast::locate(&self.c.spec.body, id) else { return true };
        let rest = &block[at + 1..];
        for t in rest {
            match &t.kind {
                StmtKind::Copy { .. } => return self.c.plan.copies.get(&t.id).map(|c| c.kind) != Some(CopyKind::AccumulatorToGlobal),
                StmtKind::Parallel { body, .. } if !self.names_shared(body) => {}
                _ if self.uses_shared(t) => return true,
                _ => {}
            }
        }
        !top
    }

    /// Whether statements name a shared buffer anywhere.
    fn names_shared(&self, stmts: &[Stmt]) -> bool {
        let shared = |n: &str| matches!(self.c.info.symbols.get(n), Some(Symbol::Buffer(b)) if self.c.spec.buffers[*b].scope.0 == Scope::Shared);
        let mut found = false;
        walk_stmts(stmts, &mut |s| {
            let exprs: Vec<&Expr> = match &s.kind {
                StmtKind::Assign { target, indices, value, .. } => {
                    found |= shared(&target.name);
                    indices.iter().chain([value]).collect()
                }
                StmtKind::Parallel { .. } => vec![],
                _ => {
                    found = true;
                    vec![]
                }
            };
            for e in exprs {
                e.visit(&mut |x| {
                    found |= matches!(&x.kind, ExprKind::Name(n) | ExprKind::Index(Ident { name: n, .. }, _) if shared(n));
                    !found
                });
            }
        });
        found
    }

    /// Whether lowering `s` may have used shared memory: anything but clearing or filling a
    /// fragment counts.
    fn uses_shared(&self, s: &Stmt) -> bool {
        match &s.kind {
            StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => !matches!(self.c.info.symbols.get(&buf.name),
                Some(Symbol::Buffer(b)) if self.c.spec.buffers[*b].scope.0 == Scope::Fragment),
            _ => true,
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        let line = self.c.line(s.span);
        let text = self.text(s);
        let shared_used_before = self.shared_used;
        self.shared_used |= self.uses_shared(s);
        match &s.kind {
            StmtKind::Clear { buf } => self.items.push(BodyItem::Clear { pad: pad(depth), line, text, target: self.fragment_or_shared(buf) }),
            StmtKind::Fill { buf, value } => {
                let v = self.conv.expr(value, &PlainEnv);
                self.items.push(BodyItem::Fill { pad: pad(depth), line, text, target: self.fragment_or_shared(buf), value: v });
            }
            StmtKind::Loop { kind: LoopKind::Pipelined, .. } => {
                self.loops += 1;
                self.pipelined(s, depth);
                self.loops -= 1;
            }
            StmtKind::Loop { kind, var, count, body, .. } => {
                let n = self.conv.expr(count, &PlainEnv);
                let unroll = if *kind == LoopKind::Unroll { "CUTE_UNROLL\n".to_string() + &pad(depth) } else { String::new() };
                self.items.push(BodyItem::Open { pad: pad(depth), line, text, header: format!("{unroll}for (int {v} = 0; {v} < {n}; ++{v})", v = var.name) });
                self.loops += 1;
                self.block(body, depth + 1);
                self.loops -= 1;
                self.items.push(BodyItem::Close { pad: pad(depth) });
            }
            StmtKind::If { cond, then_body, else_body } => {
                let cnd = self.conv.expr(cond, &PlainEnv);
                self.items.push(BodyItem::Open { pad: pad(depth), line, text, header: format!("if ({cnd})") });
                self.block(then_body, depth + 1);
                if !else_body.is_empty() {
                    self.items.push(BodyItem::Else { pad: pad(depth) });
                    self.block(else_body, depth + 1);
                }
                self.items.push(BodyItem::Close { pad: pad(depth) });
            }
            StmtKind::Parallel { vars, body } => self.parallel(s, vars, body, depth),
            StmtKind::Copy { .. } => match self.c.plan.copies.get(&s.id).map(|c| c.kind) {
                Some(CopyKind::GlobalToShared) => {
                    if let Some(producer) = self.producer(s.id, None) {
                        // The pipeline that follows may take over the wait (layout::pipeline).
                        let deferred = self.c.plan.pipelines.values().any(|p| p.covers.contains(&s.id));
                        let sync = shared_used_before || self.loops > 0;
                        self.items.push(BodyItem::CopyToShared { pad: pad(depth), line, text, producer, deferred, sync });
                    }
                }
                Some(CopyKind::AccumulatorToGlobal) => self.store(s, depth),
                Some(CopyKind::AccumulatorToShared) => self.acc_to_shared(s, depth),
                None => {}
            },
            StmtKind::Gemm { .. } => {
                if let Some(step) = self.gemm_step(s, self.stage) {
                    self.items.push(BodyItem::Gemm { pad: pad(depth), line, text, step, in_flight: self.in_flight });
                }
            }
            StmtKind::Assign { .. } => self.unsupported(s, "assignments outside parallel blocks"),
            StmtKind::Reduce { op, src, dst, clear, .. } => self.reduce(s, *op, src, dst, *clear, depth),
            StmtKind::Dequant { src, dst, scales, zero, .. } => {
                let Some(plan) = self.c.plan.dequants.get(&s.id) else { return };
                if let Some(g) = plan.fused_into {
                    let gl = self.c.spec.stmt(g).map(|g| self.c.line(g.span)).unwrap_or(0);
                    self.items.push(BodyItem::Note { pad: pad(depth), line, text, note: format!("fused into the gemm at spec {gl}, which unpacks `{}` in registers", dst.name) });
                    return;
                }
                let staged = |name: &str| staged(self.c, name);
                if self.stage.is_none() && let Some(b) = [src, scales].into_iter().chain(zero.tile()).find(|b| staged(&b.name)) {
                    // Which stage holds the last tile depends on the trip count.
                    self.errors.push(Diagnostic::error(b.span, format!("`{}` is filled inside a pipelined loop, so this statement outside it cannot tell which stage to read", b.name))
                        .hint("move the dequant into the loop that fills it"));
                    return;
                }
                let at = |name: &str, idx: &str| shared_at(self.c, name, idx, self.stage);
                // The word a thread takes in round i: when whole rows fit in one round, its
                // column is fixed and its row steps by a constant.
                let threads = self.c.spec.threads.0;
                let wpr = plan.words_per_row;
                let row_col = if let Some(w) = plan.per_round {
                    let tpr = threads / 8;
                    let rot = if w > 1 { format!(" + {tpr} * (i % {w})") } else { String::new() };
                    format!("int const r = tid / {tpr} + 8 * (i / {w}), wc = tid % {tpr}{rot};  // row, word in the row")
                } else if threads % wpr == 0 {
                    format!("int const r = i * {} + tid / {wpr}, wc = tid % {wpr};  // row, word in the row", threads / wpr)
                } else {
                    format!("int const r = (i * kThreads + tid) / {wpr}, wc = (i * kThreads + tid) % {wpr};  // row, word in the row")
                };
                let scale_col = if plan.group == plan.words_per_row * 8 { "0".to_string() } else { format!("wc / {}", plan.group / 8) };
                let scale_elem = element_alias(&scales.name);
                let mut load = vec![
                    format!("packed[i] = static_cast<uint32_t>({});", at(&src.name, "r, wc")),
                    format!("scale[i] = {};", at(&scales.name, &format!("r, {scale_col}{}", odd_rows_shift(self.c, &scales.name, "r")))),
                ];
                if let Some(zeros) = zero.tile() {
                    load.push(format!("zero[i] = {};", at(&zeros.name, &format!("r, {scale_col}{}", odd_rows_shift(self.c, &zeros.name, "r")))));
                }
                let neg_bias = neg_bias_expr(zero, &scale_elem, |_| "zero[i]".into());
                let store = vec![format!("*reinterpret_cast<uint4*>(&{}) = dequant_int4x8(packed[i], scale[i], {neg_bias});", at(&dst.name, "r, wc * 8"))];
                // The last round may have fewer words than threads.
                let guard = |lines: Vec<String>| if plan.guarded {
                    std::iter::once(format!("if (r * {wpr} + wc < {}) {{", plan.words))
                        .chain(lines.into_iter().map(|l| format!("  {l}")))
                        .chain(std::iter::once("}".to_string())).collect()
                } else {
                    lines
                };
                self.items.push(BodyItem::Dequant {
                    pad: pad(depth),
                    line,
                    text,
                    why: plan.why.clone(),
                    dst: dst.name.clone(),
                    per_thread: plan.per_thread,
                    row_col,
                    zeros: zero.tile().is_some(),
                    scale_elem,
                    load: guard(load),
                    store: guard(store),
                });
            }
        }
    }

    fn fragment_or_shared(&self, buf: &Ident) -> String {
        match self.c.info.symbols.get(&buf.name) {
            Some(Symbol::Buffer(b)) if self.c.spec.buffers[*b].scope.0 == Scope::Shared => format!("s{}", buf.name),
            _ => buf.name.clone(),
        }
    }

    fn reduce(&mut self, s: &Stmt, op: ReduceOp, src: &Ident, dst: &Ident, clear: bool, depth: usize) {
        let (init, fold, shuffle, combine) = match op {
            ReduceOp::Max => ("-INFINITY", "v = fmaxf(v, {x});", "v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, {lane}));", "fmaxf({old}, v)"),
            ReduceOp::Sum => ("0.0f", "v += {x};", "v += __shfl_xor_sync(0xffffffffu, v, {lane});", "{old} + v"),
        };
        let view = format!("{}_rc", src.name);
        // Reductions run in f32; narrower fragments convert on the way in and out.
        let dtype_of = |n: &str| match self.c.info.symbols.get(n) {
            Some(Symbol::Buffer(b)) => self.c.spec.buffers[*b].dtype.0,
            _ => DType::F32,
        };
        let widen = |x: String, d: DType| if d == DType::F32 { x } else { format!("static_cast<float>({x})") };
        let (src_dtype, dst_dtype) = (dtype_of(&src.name), dtype_of(&dst.name));
        let old = widen(format!("{}(r)", dst.name), dst_dtype);
        let element = format!("{view}(r, c)");
        let narrow = |x: String| if dst_dtype == DType::F32 { x } else { format!("static_cast<{}>({x})", element_alias(&dst.name)) };
        let why = format!(
            "each thread folds the {} values of each row it holds, then the four lanes of its quad (which hold the rest of those rows) combine their partials with xor-shuffles over lanes 1 and 2{}",
            self.c.file.snippet(src.span),
            if clear { String::new() } else { format!("; the result is combined with `{}`'s previous value (clear=false)", dst.name) });
        self.items.push(BodyItem::Reduce {
            pad: pad(depth),
            line: self.c.line(s.span),
            text: self.text(s),
            why,
            view: view.clone(),
            src: src.name.clone(),
            dst: dst.name.clone(),
            init: init.into(),
            fold: fold.replace("{x}", &widen(element, src_dtype)),
            shuffles: ["1", "2"].iter().map(|l| shuffle.replace("{lane}", l)).collect(),
            combine: narrow(if clear { "v".into() } else { combine.replace("{old}", &old) }),
        });
    }

    fn parallel(&mut self, s: &Stmt, vars: &[Ident], body: &[Stmt], depth: usize) {
        let c = self.c;
        let Some(&domain) = c.info.parallel_domains.get(&s.id) else { return };
        let frag = c.spec.buffers[domain].name.name.clone();
        let gemm = match c.plan.fragments.get(&domain) {
            Some(FragmentLayout::MmaAccumulator { gemm }) => *gemm,
            Some(FragmentLayout::RowStats { .. }) => {
                let mut used = vec![false; vars.len()];
                let env = RowEnv { c, vars };
                let mut assigns = Vec::new();
                for st in body {
                    if let StmtKind::Assign { value, .. } = &st.kind {
                        mark_used(value, vars, &mut used, &c.info);
                    }
                    assigns.extend(assign_code(&self.conv, c, st, &env, &|t| format!("{t}(r)"), self.errors));
                }
                if used.iter().any(|u| *u) {
                    self.unsupported(s, "row indices as values in a parallel block over row statistics");
                    return;
                }
                self.items.push(BodyItem::ParallelStats { pad: pad(depth), line: c.line(s.span), text: self.text(s), frag, assigns });
                return;
            }
            _ => {
                self.unsupported(s, "parallel blocks over shared buffers or gemm-less fragments");
                return;
            }
        };
        let sfx = mma_suffix(c, gemm);
        let mut used = vec![false; vars.len()];
        for st in body {
            if let StmtKind::Assign { value, .. } = &st.kind {
                mark_used(value, vars, &mut used, &c.info);
            }
        }
        // Row statistics read here make it a (row, col) loop; otherwise one flat loop.
        let mut row_stats = false;
        let mut fragments: Vec<String> = Vec::new();
        for st in body {
            if let StmtKind::Assign { target, value, .. } = &st.kind {
                let mut names = vec![target.name.clone()];
                buffer_reads(value, &mut names);
                for n in names {
                    if let Some(Symbol::Buffer(b)) = c.info.symbols.get(&n) {
                        match c.plan.fragments.get(b) {
                            Some(FragmentLayout::RowStats { .. }) => row_stats = true,
                            Some(FragmentLayout::MmaAccumulator { .. }) if !fragments.contains(&n) => fragments.push(n),
                            _ => {}
                        }
                    }
                }
            }
        }
        let shape = static_extents(c, domain, &[0, 1]).join(", ");
        let thr_mma = format!("thr_mma{sfx}");
        if !row_stats {
            let env = FragmentEnv { c, vars };
            let mut assigns = Vec::new();
            for st in body {
                assigns.extend(assign_code(&self.conv, c, st, &env, &|t| format!("{t}(e)"), self.errors));
            }
            let var_decls = vars.iter().enumerate().filter(|(i, _)| used[*i])
                .map(|(i, v)| format!("int const {} = get<{i}>(tCc{frag}(e));", v.name)).collect();
            self.items.push(BodyItem::Parallel {
                pad: pad(depth),
                line: c.line(s.span),
                text: self.text(s),
                thr_mma,
                frag: frag.clone(),
                coords: format!("tCc{frag}"),
                shape,
                var_decls,
                assigns,
            });
            return;
        }
        let env = RowEnv { c, vars };
        let mut assigns = Vec::new();
        for st in body {
            assigns.extend(assign_code(&self.conv, c, st, &env, &|t| format!("{t}_rc(r, c)"), self.errors));
        }
        let views = fragments.iter().map(|n| format!("Tensor {n}_rc = make_tensor({n}.data(), acc_rows_cols({n}.layout()));")).collect();
        let mut coords = Vec::new();
        let mut var_decls = Vec::new();
        if used.iter().any(|u| *u) {
            coords.push(format!("Tensor tCc{frag} = {thr_mma}.partition_C(make_identity_tensor(make_shape({shape})));  // -> (row, col)"));
            coords.push(format!("Tensor tCc{frag}_rc = make_tensor(tCc{frag}.data(), acc_rows_cols(tCc{frag}.layout()));"));
            var_decls = vars.iter().enumerate().filter(|(i, _)| used[*i])
                .map(|(i, v)| format!("int const {} = get<{i}>(tCc{frag}_rc(r, c));", v.name)).collect();
        }
        let unit_scales: Vec<String> = c.plan.unit_scale_skips.get(&s.id).map_or_else(Vec::new, |v| v.iter().map(|b| c.spec.buffers[*b].name.name.clone()).collect());
        let unit_scales_text = unit_scales.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(" and ");
        let body_pad = pad(depth + usize::from(!unit_scales.is_empty()));
        self.items.push(BodyItem::ParallelRows { pad: pad(depth), body_pad, line: c.line(s.span), text: self.text(s), frag, views, coords, var_decls, assigns, unit_scales, unit_scales_text });
    }

    fn acc_to_shared(&mut self, s: &Stmt, depth: usize) {
        let c = self.c;
        let Some(cp) = c.plan.copies.get(&s.id) else { return };
        let Some(FragmentLayout::MmaAccumulator { gemm }) = c.plan.fragments.get(&cp.buffer) else { return };
        let Some(dst) = cp.shared_dst else { return };
        let sfx = mma_suffix(c, *gemm);
        let acc = c.spec.buffers[cp.buffer].name.name.clone();
        let d = c.spec.buffers[dst].name.name.clone();
        // The destination in the accumulator's (row, col) order.
        let swapped = c.plan.shared.get(&dst).is_some_and(|l| l.modes_swapped());
        self.items.push(BodyItem::AccToShared {
            pad: pad(depth),
            line: c.line(s.span),
            text: self.text(s),
            why: cp.why.clone(),
            converted: format!("{acc}_{d}"),
            value: converted_element(&format!("{acc}(e)"), c.spec.buffers[cp.buffer].dtype.0, c.spec.buffers[dst].dtype.0, &element_alias(&d)),
            acc,
            elem: element_alias(&d),
            atom: cp.atom.clone(),
            tiled_mma: format!("tiled_mma{sfx}"),
            copy: format!("r2s_copy_{d}"),
            thr: format!("r2s_thr_{d}"),
            smem: format!("s{d}{}", if swapped { "_t" } else { "" }),
        });
    }

    fn store(&mut self, s: &Stmt, depth: usize) {
        let c = self.c;
        let Some(cp) = c.plan.copies.get(&s.id) else { return };
        let Some(FragmentLayout::MmaAccumulator { gemm }) = c.plan.fragments.get(&cp.buffer) else { return };
        let sfx = mma_suffix(c, *gemm);
        let Some(t) = cp.tensor.map(|t| &c.spec.tensors[t]) else { return };
        let acc = c.spec.buffers[cp.buffer].name.name.clone();
        let coords: Vec<String> = cp.tile_coords.iter().map(|e| self.conv.expr(e, &PlainEnv)).collect();
        let (view, view_decl) = match self.sliced(cp) {
            Some(slice) => (format!("m{}_tile", t.name.name), slice),
            None => (format!("m{}", t.name.name), String::new()),
        };
        self.items.push(BodyItem::Store(Box::new(StoreItem {
            pad: pad(depth),
            line: c.line(s.span),
            text: self.text(s),
            why: cp.why.clone(),
            key: t.name.name.clone(),
            acc: acc.clone(),
            acc_converted: format!("{acc}_{}", t.name.name),
            value: converted_element(&format!("{acc}(e)"), c.spec.buffers[cp.buffer].dtype.0, t.dtype.0, &element_alias(&t.name.name)),
            elem: element_alias(&t.name.name),
            tiled_mma: format!("tiled_mma{sfx}"),
            view,
            view_decl,
            tile_shape: static_extents(c, cp.buffer, &[0, 1]).join(", "),
            coord: coords.join(", "),
            guard: if cp.active_threads() < c.spec.threads.0 { format!("tid < {} && ", cp.active_threads()) } else { String::new() },
        })));
    }
}


/// Whether shared buffer `name` has a stage mode (it is filled inside a pipelined loop).
fn staged(c: &Compiled, name: &str) -> bool {
    match c.info.symbols.get(name) {
        Some(Symbol::Buffer(b)) => c.plan.shared.get(b).is_some_and(|l| l.staged),
        _ => false,
    }
}

/// ` + (kOddRows ? (row & 1) : 0)` for a buffer whose rows are one element later when the
/// tensor's row started mid-word (filled by a copy with `CopyPlan::odd_rows`; a tile's first
/// row is even, so a row of the tile is odd in the tensor if it is odd in the tile), else
/// nothing.
fn odd_rows_shift(c: &Compiled, name: &str, row: &str) -> String {
    match c.info.symbols.get(name) {
        Some(Symbol::Buffer(b)) if c.plan.shared.get(b).is_some_and(|l| l.odd_rows) => format!(" + (kOddRows ? ({row} & 1) : 0)"),
        _ => String::new(),
    }
}

/// Element `idx` of shared buffer `name`: a tile filled in the pipeline is read at the stage
/// just landed (`stage`, inside the loop).
fn shared_at(c: &Compiled, name: &str, idx: &str, stage: Option<&str>) -> String {
    match (staged(c, name), stage) {
        (true, Some(st)) => format!("s{name}({idx}, {st})"),
        _ => format!("s{name}({idx})"),
    }
}

/// Names of the buffers and tensors an expression reads.
fn buffer_reads(e: &Expr, out: &mut Vec<String>) {
    e.visit(&mut |x| {
        if let ExprKind::Index(name, _) = &x.kind {
            out.push(name.name.clone());
        }
        true
    });
}

pub(super) fn mark_used(e: &Expr, vars: &[Ident], used: &mut [bool], info: &crate::check::Info) {
    e.visit(&mut |x| match &x.kind {
        ExprKind::Name(n) => {
            if let Some(i) = vars.iter().position(|v| v.name == *n) {
                used[i] = true;
            }
            true
        }
        ExprKind::Index(name, idx) => {
            // Plain reads of fragments at (i, j), and of row statistics at [i], need no
            // coordinates; any other index does.
            let buffer = matches!(info.symbols.get(&name.name), Some(Symbol::Buffer(_)));
            let is = |x: &Expr, v: &Ident| matches!(&x.kind, ExprKind::Name(n) if *n == v.name);
            let plain = idx.len() == vars.len() && idx.iter().zip(vars).all(|(x, v)| is(x, v));
            let row = idx.len() == 1 && vars.len() == 2 && is(&idx[0], &vars[0]);
            !((plain || row) && buffer)
        }
        _ => true,
    });
}
