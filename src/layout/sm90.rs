//! sm90a planning: a spec whose body is a plain GEMM main loop with an element-wise
//! epilogue lowers to an explicit CUTLASS 3.x collective (TMA + WGMMA, warp-specialised,
//! persistent) with the epilogue as an epilogue visitor tree (EVT).
//!
//! Requires: a checked spec. Guarantees: a [`CollectivePlan`] whose every choice is explicit
//! (schedules, stage count, tile and cluster shapes), or errors naming the statement that
//! keeps the spec off this path.

use super::Infer;
use crate::ast::*;
use crate::check::{ConstValue, Symbol};
use crate::diag::{Diagnostic, Span};

/// A node of the epilogue visitor tree, computed in f32.
#[derive(Clone, Debug, PartialEq)]
pub enum EvtNode {
    /// The accumulator (`Sm90AccFetch`).
    Acc,
    /// One value per output column from a vector tensor (`Sm90RowBroadcast`).
    RowBroadcast {
        /// Tensor index.
        tensor: usize,
    },
    /// One value per output row from a vector tensor (`Sm90ColBroadcast`).
    ColBroadcast {
        /// Tensor index.
        tensor: usize,
    },
    /// A compile-time scalar (`Sm90ScalarBroadcast`), as a C++ float literal.
    Scalar {
        /// The literal.
        value: String,
    },
    /// An element-wise operation over the children's values (`Sm90Compute<functor>`).
    Compute {
        /// Which operation.
        op: EpilogueOp,
        /// Operands, in order.
        children: Vec<EvtNode>,
    },
}

/// The element-wise operations an epilogue tree is built from; each backend spells them
/// (a CUTLASS functor, a C++ operator in the CK CDE functor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpilogueOp {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b
    Div,
    /// max(a, b)
    Max,
    /// min(a, b)
    Min,
    /// -a
    Neg,
    /// GELU, exact (erf) form
    Gelu,
    /// SiLU: x · sigmoid(x)
    Silu,
    /// logistic sigmoid
    Sigmoid,
    /// the value itself, converted to the output type
    Identity,
}

impl EpilogueOp {
    /// The CUTLASS functor template that computes it.
    pub fn cutlass_functor(self) -> &'static str {
        match self {
            EpilogueOp::Add => "cutlass::plus",
            EpilogueOp::Sub => "cutlass::minus",
            EpilogueOp::Mul => "cutlass::multiplies",
            EpilogueOp::Div => "cutlass::divides",
            EpilogueOp::Max => "cutlass::maximum",
            EpilogueOp::Min => "cutlass::minimum",
            EpilogueOp::Neg => "cutlass::negate",
            EpilogueOp::Gelu => "cutlass::epilogue::thread::GELU",
            EpilogueOp::Silu => "cutlass::epilogue::thread::SiLu",
            EpilogueOp::Sigmoid => "cutlass::epilogue::thread::Sigmoid",
            EpilogueOp::Identity => "cutlass::epilogue::thread::Identity",
        }
    }

    /// The name in comments and `explain` (the functor without `cutlass::`).
    pub fn name(self) -> &'static str {
        self.cutlass_functor().trim_start_matches("cutlass::")
    }
}

/// Whether a library epilogue stores an integer output exactly: only the i32 accumulator stored
/// as is (any epilogue computes in f32 and rounds, where the spec converts toward zero).
fn stores_accumulator_as_is(out: DType, acc: DType, tree: &EvtNode) -> bool {
    out == DType::I32 && acc == DType::I32 && *tree == EvtNode::Acc
}

/// The schedule a vendor library's device GEMM runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmSchedule {
    /// CUTLASS 3.x: the mainloop kernel schedule and the epilogue schedule.
    Cutlass {
        /// e.g. `cutlass::gemm::KernelTmaWarpSpecializedCooperative`.
        kernel: &'static str,
        /// e.g. `cutlass::epilogue::TmaWarpSpecializedCooperative`.
        epilogue: &'static str,
        /// The epilogue's subtile (M, N), as CUTLASS's builder would pick it for the schedule.
        epilogue_tile: (i64, i64),
    },
    /// composable_kernel: the block-GEMM pipeline version and scheduler.
    Ck {
        /// e.g. `ck::BlockGemmPipelineVersion::v3`.
        pipeline: &'static str,
        /// e.g. `ck::BlockGemmPipelineScheduler::Intrawave`.
        scheduler: &'static str,
    },
}

/// How a GEMM-shaped spec maps onto a vendor library's device GEMM: a CUTLASS 3.x
/// collective (sm90a) or a composable_kernel device operation (AMD targets).
#[derive(Clone, Debug, PartialEq)]
pub struct CollectivePlan {
    /// CTA tile (M, N, K).
    pub tile: (i64, i64, i64),
    /// Thread-block cluster (M, N).
    pub cluster: (i64, i64),
    /// CTAs per swizzle band of the persistent tile scheduler (1: its raster order as is).
    pub swizzle: i64,
    /// sm90a: the part of the tile one consumer warpgroup's WGMMAs compute (cooperative: half
    /// the rows; ping-pong: all of it).
    pub consumer_tile: (i64, i64),
    /// sm90a: accumulator registers per consumer thread, FP8's second (promoted) set included.
    pub accumulator_registers: i64,
    /// Shared-memory pipeline stages of the mainloop.
    pub stages: i64,
    /// The library's schedule.
    pub schedule: GemmSchedule,
    /// Tensor indices of A, B and D (the output).
    pub a: usize,
    /// B operand tensor.
    pub b: usize,
    /// Output tensor.
    pub d: usize,
    /// CUTLASS layouts of A (M×K), B (K×N) and D (M×N): `RowMajor` or `ColumnMajor`.
    pub layouts: (&'static str, &'static str, &'static str),
    /// Accumulator dtype.
    pub accumulator: DType,
    /// The epilogue, from the `parallel` blocks between the main loop and the store.
    pub epilogue: EvtNode,
    /// What the epilogue computes in: f32, or i32 when the i32 accumulator is stored as is.
    pub epilogue_compute: DType,
    /// Estimated shared memory: mainloop stages plus the epilogue's buffers.
    pub smem_bytes: u64,
    /// A leading batch dimension of A and D (and of B, unless B is shared by every batch).
    pub batch: Option<BatchPlan>,
    /// Why.
    pub why: String,
}

/// How a GEMM over 3-D tensors maps onto the collective.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchPlan {
    /// The grid variable that steps the leading dimension.
    pub var: String,
    /// The leading dimension's extent, as the spec names it.
    pub extent: String,
    /// Which operands are batched, and how the collective runs the batches.
    pub form: BatchForm,
}

/// The forms of a batched GEMM the collective takes. The output is always 3-D, with packed
/// row-major batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchForm {
    /// A and B are 3-D: the batches are the collective's batch mode (L), with packed batch
    /// strides (torch.bmm).
    Batched,
    /// A is 2-D, one matrix for every batch of B: the batch mode with A's batch stride a
    /// static zero.
    SharedA,
    /// B is 2-D, one matrix for every batch of A: A's and the output's packed batches fold
    /// into M, one (extent·M)×N GEMM (a linear layer over batched activations).
    FoldedIntoM,
    /// B is 2-D, but the epilogue reads a vector that repeats or changes from batch to batch
    /// along the output's rows, which the folded rows cannot index: the batch mode with B's
    /// batch stride a static zero.
    SharedB,
}

impl BatchForm {
    /// Whether the batches are the collective's batch mode L (not folded into M).
    pub fn is_batch_mode(self) -> bool {
        self != BatchForm::FoldedIntoM
    }
}

/// What the epilogue's tensor reads may name: the accumulator's `parallel` variables, the
/// output tile's grid variables and extents, and the batch (variable, extent), if any.
#[derive(Clone, Copy)]
struct EvtScope<'s> {
    vars: &'s [Ident],
    tiles: (&'s str, &'s str),
    ext: (i64, i64),
    batch: Option<(&'s str, &'s str)>,
}

pub(super) struct Shape<'a> {
    acc: usize,
    gemm: &'a Stmt,
    pipeline: &'a Stmt,
    epilogue: Vec<&'a Stmt>,
    store: &'a Stmt,
}

/// A 2-D epilogue vector holds one vector per batch (`[batch, N]` or `[batch, M]`); the
/// planner admits 2-D vectors only in that form.
pub fn is_per_batch_vector(tensor: &Tensor) -> bool {
    tensor.shape.len() == 2
}

impl<'a> Infer<'a> {
    /// The accumulator itself, or a fragment of its shape (an epilogue may compute into it).
    fn is_acc_tile(&self, buf: usize, acc: usize) -> bool {
        buf == acc || (self.spec.buffers[buf].scope.0 == Scope::Fragment && self.shape(buf) == self.shape(acc))
    }

    /// Whether every vector the epilogue broadcasts is as long as the output dimension it is
    /// read along (`bias: [N]` at the columns of an [M, N] output). The library epilogues read
    /// a whole row or column of it with no bounds check, where the spec reads zeros past a
    /// shorter vector's end; otherwise the library path refuses, with the reason.
    fn broadcasts_span_the_output(&mut self, tree: &EvtNode, out: usize) -> bool {
        let dims: Vec<String> = self.spec.tensors[out].shape.iter().map(|d| d.text()).collect();
        let mut short = None;
        collect_broadcasts(tree, &mut |t, row| {
            let want = &dims[dims.len() - if row { 1 } else { 2 }];
            let have = self.spec.tensors[t].shape.last().map(|d| d.text()).unwrap_or_default();
            if short.is_none() && have != *want {
                short = Some((t, have, want.clone(), row));
            }
        });
        let Some((t, have, want, row)) = short else { return true };
        let name = self.spec.tensors[t].name.name.clone();
        let along = if row { "column" } else { "row" };
        self.off_path(self.spec.tensors[t].name.span, &format!(
            "the epilogue reads `{name}` at every output {along}, but its extent {have} is not the output's {want}: the library reads past a shorter vector's end, where the spec reads zeros (declare it [{want}])"));
        false
    }

    fn off_path(&mut self, span: Span, why: &str) {
        let (lib, hint) = if self.target.is_amd() {
            ("composable_kernel device GEMMs", "fused programs have no CK lowering yet: this spec renders for sm80 and sm90a")
        } else {
            ("CUTLASS collectives", "GEMM-shaped specs the collective refuses take tilegen's CuTe-level lowering when it can run them; its reasons are listed too")
        };
        self.err(Diagnostic::error(span, format!("the {} target lowers GEMM-shaped specs (clear, a pipelined copy/copy/gemm loop, element-wise epilogue, store) to {lib}; {why}", self.target))
            .with_cause(why)
            .hint(hint));
    }

    /// The body's GEMM shape, if it has the one the library path lowers (no diagnostics:
    /// a body without it takes another lowering, or gets that lowering's errors).
    pub(super) fn gemm_shape(&mut self) -> Option<Shape<'a>> {
        let before = self.errors.len();
        let shape = self.shape_of_body();
        self.errors.truncate(before);
        shape
    }

    fn shape_of_body(&mut self) -> Option<Shape<'a>> {
        let spec: &'a Spec = self.spec;
        let body = &spec.body;
        let Some(first) = body.first() else {
            self.off_path(self.spec.kernel.span, "this body is empty");
            return None;
        };
        let acc = match &first.kind {
            StmtKind::Clear { buf } => self.buffer_index(&buf.name),
            StmtKind::Fill { buf, value } if matches!(value.kind, ExprKind::Int(0)) || matches!(&value.kind, ExprKind::Float(v, _) if *v == 0.0) => self.buffer_index(&buf.name),
            _ => None,
        };
        let Some(acc) = acc else {
            self.off_path(first.span, "the body must start by clearing the accumulator");
            return None;
        };
        let Some(pipeline) = body.get(1).filter(|s| matches!(s.kind, StmtKind::Loop { kind: LoopKind::Pipelined, .. })) else {
            self.off_path(body.get(1).map_or(first.span, |s| s.span), "a pipelined main loop must follow");
            return None;
        };
        let StmtKind::Loop { body: inner, .. } = &pipeline.kind else { return None };
        let gemms: Vec<&Stmt> = inner.iter().filter(|s| matches!(s.kind, StmtKind::Gemm { .. })).collect();
        let copies = inner.iter().filter(|s| matches!(s.kind, StmtKind::Copy { .. })).count();
        if gemms.len() != 1 || copies != 2 || inner.len() != 3 {
            self.off_path(pipeline.span, "the main loop must hold exactly two copies and one gemm");
            return None;
        }
        let Some(store) = body.last().filter(|s| body.len() >= 3 && matches!(s.kind, StmtKind::Copy { .. })) else {
            self.off_path(body.last().map_or(first.span, |s| s.span), "the body must end by storing the accumulator");
            return None;
        };
        // The epilogue: element-wise blocks over the accumulator, or over another fragment of
        // its shape that they compute from it (and that the store then takes).
        let mut epilogue = Vec::new();
        for s in &body[2..body.len() - 1] {
            let over_acc_tile = self.info.parallel_domains.get(&s.id).is_some_and(|&d| self.is_acc_tile(d, acc));
            match &s.kind {
                StmtKind::Parallel { .. } if over_acc_tile => epilogue.push(s),
                _ => {
                    self.off_path(s.span, "between the main loop and the store only `parallel` blocks over the accumulator (or a fragment of its shape) may stand");
                    return None;
                }
            }
        }
        Some(Shape { acc, gemm: gemms[0], pipeline, epilogue, store })
    }

    /// Plans the library GEMM for a body of that shape; errors go to `self.errors`.
    pub(super) fn plan_collective(&mut self, shape: Shape<'a>) {
        let spec = self.spec;
        let StmtKind::Gemm { a, b, c, transpose_a, transpose_b } = &shape.gemm.kind else { return };
        let StmtKind::Loop { var, body: inner, .. } = &shape.pipeline.kind else { return };
        let (Some(ia), Some(ib), Some(ic)) = (self.buffer_index(&a.name), self.buffer_index(&b.name), self.buffer_index(&c.name)) else { return };
        if ic != shape.acc {
            self.off_path(shape.gemm.span, "the gemm must accumulate into the buffer that is cleared and stored");
            return;
        }
        // Which tensor fills each operand, and where.
        let source = |buf: usize| -> Option<(usize, Vec<Expr>, Span)> {
            inner.iter().find_map(|s| match &s.kind {
                StmtKind::Copy { src, dst } if self.buffer_index(&dst.name.name) == Some(buf) => {
                    self.tensor_index(&src.name.name).map(|t| (t, src.origin.clone().unwrap_or_default(), s.span))
                }
                _ => None,
            })
        };
        let (Some((ta_idx, a_origin, a_span)), Some((tb_idx, b_origin, b_span))) = (source(ia), source(ib)) else {
            self.off_path(shape.pipeline.span, "both gemm operands must be copied from global tensors inside the loop");
            return;
        };
        let StmtKind::Copy { src: store_src, dst: store_dst } = &shape.store.kind else { return };
        // The store takes the accumulator, or the fragment of its shape the epilogue computes.
        let stored = self.buffer_index(&store_src.name.name).filter(|&b| self.is_acc_tile(b, ic));
        let (Some(td), Some(stored)) = (self.tensor_index(&store_dst.name.name), stored) else {
            self.off_path(shape.store.span, "the last statement must copy the accumulator (or a fragment of its shape computed from it) to a global tensor");
            return;
        };
        // 3-D A, B and output with a shared leading batch dimension, each tile taken at the
        // same grid variable there: CUTLASS's batch mode (L); with a 2-D B shared by every
        // batch, the batches fold into M. CK's path takes 2-D only.
        let store_origin = store_dst.origin.clone().unwrap_or_default();
        let (batch, a_origin, b_origin, store_origin) = match self.batch_mode([ta_idx, tb_idx, td], [&a_origin, &b_origin, &store_origin]) {
            Ok(None) => (None, a_origin, b_origin, store_origin),
            Ok(Some(b)) => {
                // The tile origins without the batch index of the 3-D tensors.
                let tile_of = |o: Vec<Expr>, t: usize| if spec.tensors[t].shape.len() == 3 { o[1..].to_vec() } else { o };
                (Some(b), tile_of(a_origin, ta_idx), tile_of(b_origin, tb_idx), store_origin[1..].to_vec())
            }
            Err((span, why)) => {
                self.off_path(span, &why);
                return;
            }
        };
        let (sa, sc) = (self.shape(ia).to_vec(), self.shape(ic).to_vec());
        let (bm, bn) = (sc[0], sc[1]);
        let bk = if *transpose_a { sa[0] } else { sa[1] };
        // Tile coordinates: C at (cm, cn); A at (cm, k) or (k, cm); B at (k, cn) or (cn, k).
        let c_coords = self.coords(&store_origin, &[bm, bn]);
        let a_coords = self.coords(&a_origin, &if *transpose_a { [bk, bm] } else { [bm, bk] });
        let b_coords = self.coords(&b_origin, &if *transpose_b { [bn, bk] } else { [bk, bn] });
        let (Some(cc), Some(ac), Some(bc)) = (c_coords, a_coords, b_coords) else {
            self.off_path(shape.store.span, "tile origins must be tile-aligned (`<index>*<extent>`)");
            return;
        };
        let (a_m, a_k) = if *transpose_a { (&ac[1], &ac[0]) } else { (&ac[0], &ac[1]) };
        let (b_k, b_n) = if *transpose_b { (&bc[1], &bc[0]) } else { (&bc[0], &bc[1]) };
        let is = |e: &str, n: &str| e == n;
        if !(is(a_k, &var.name) && is(b_k, &var.name) && is(a_m, &cc[0]) && is(b_n, &cc[1])) {
            self.off_path(a_span.to(b_span), "A's tile must be (output row tile, k) and B's (k, output column tile), stepping k with the loop variable");
            return;
        }
        // The grid must be exactly the output tiles (of every batch), so that CUTLASS's
        // scheduler covers the same work.
        let lead = usize::from(batch.is_some());
        let grid_ok = spec.grid.len() == 2 + lead && [(&cc[0], bm, lead), (&cc[1], bn, lead + 1)].iter().all(|(v, ext, d)| {
            spec.grid.iter().any(|g| g.var.name == **v && self.is_ceildiv_of(&g.extent, td, *d, *ext))
        });
        if !grid_ok {
            let batch_too = if batch.is_some() { ", and the batch variable over the batch extent" } else { "" };
            self.off_path(spec.grid.first().map_or(spec.kernel.span, |g| g.var.span), &format!("the grid must be one block per output tile: `ceildiv(<rows>, block_M)` and `ceildiv(<cols>, block_N)`{batch_too}"));
            return;
        }
        let (da, db, dc) = (spec.tensors[ta_idx].dtype.0, spec.tensors[tb_idx].dtype.0, spec.buffers[ic].dtype.0);
        let int8 = (da, db, dc) == (DType::I8, DType::I8, DType::I32);
        let fp8 = (da, db, dc) == (DType::F8E4M3, DType::F8E4M3, DType::F32) && self.target == crate::target::Target::Sm90a;
        let eight_bit = int8 || fp8;
        if !eight_bit && !matches!((da, db, dc), (DType::BF16, DType::BF16, DType::F32) | (DType::F16, DType::F16, DType::F32) | (DType::F16, DType::F16, DType::F16)) {
            let (mma, hint) = if self.target.is_amd() {
                ("MFMA", "use bf16 or f16 operands with an f32 accumulator (or f16 with f16), or i8 operands with an i32 accumulator")
            } else {
                ("WGMMA", "use bf16 or f16 operands with an f32 accumulator (or f16 with f16), f8e4m3 with f32, or i8 operands with an i32 accumulator")
            };
            self.err(Diagnostic::error(shape.gemm.span, format!("the {} target has no {mma} for {da} × {db} accumulating in {dc}", self.target)).hint(hint));
            return;
        }
        let major = |t: usize, transposed: bool| {
            let order = spec.tensors[t].order.0;
            match (order == Order::RowMajor) ^ transposed {
                true => "RowMajor",
                false => "ColumnMajor",
            }
        };
        let layouts = (major(ta_idx, *transpose_a), major(tb_idx, *transpose_b), major(td, false));
        if self.target.is_amd() {
            self.plan_ck(ta_idx, tb_idx, td, layouts, dc, &shape, (ic, stored), (&cc[0], &cc[1]), (bm, bn));
            return;
        }
        // 8-bit WGMMA reads both operands K-major from shared memory.
        if eight_bit && (layouts.0 != "RowMajor" || layouts.1 != "ColumnMajor") {
            let (t, what) = if layouts.0 != "RowMajor" { (ta_idx, "A as [M, K] with K contiguous") } else { (tb_idx, "B as [N, K] with K contiguous (`transpose_b=true`, or [K, N] with `order: col_major`)") };
            self.off_path(spec.tensors[t].name.span, &format!("8-bit warpgroup MMAs read both operands K-major; store {what}"));
            return;
        }
        // Tile limits of the WGMMA kernels. Cooperative: two consumer warpgroups split M.
        // Ping-pong: each consumer warpgroup holds a whole tile. One WGMMA step is 32 bytes
        // deep: 16 elements of 16 bits, 32 of 8.
        let schedule = spec.schedule.map_or(KernelSchedule::Cooperative, |(s, _)| s);
        let k_step = if eight_bit { 32 } else { 16 };
        let m_fits = match schedule {
            KernelSchedule::Cooperative => bm % 128 == 0 && bm <= 256,
            KernelSchedule::Pingpong => bm % 64 == 0 && bm <= 128,
        };
        if !m_fits || bn % 16 != 0 || bn > 256 || bk % k_step != 0 || bk * da.bytes() as i64 > 256 {
            let span = self.spec.buffers[ic].shape_span;
            let k_hint = if eight_bit { "block_K 128 for 8-bit operands" } else { "block_K 64" };
            let m_hint = match schedule {
                KernelSchedule::Cooperative => "use block_M 128 or 256, block_N a multiple of 16 up to 256",
                KernelSchedule::Pingpong => "use block_M 64 or 128 (a warpgroup holds the whole tile) and block_N a multiple of 16 up to 256",
            };
            self.err(Diagnostic::error(span, format!("tile {bm}x{bn}x{bk} does not fit the sm90a {} WGMMA kernel", schedule.name()))
                .hint(format!("{m_hint}, {k_hint} (override per target under `targets: sm90a: constants:`)")));
            return;
        }
        // Accumulators per consumer thread: the cooperative kernel spreads a tile over two
        // warpgroups, the ping-pong one gives each a whole tile; CUTLASS's FP8 mainloop keeps a
        // second f32 set (the MMAs' partial sums, added in every 4 steps). Past 128 they spill
        // (ptxas: 900 bytes a thread at 128x256 cooperative FP8, which ran at 507 TFLOP/s on the
        // H200 against 1170 for 128x128).
        let sets = if fp8 { 2 } else { 1 };
        let consumer_tile = if schedule == KernelSchedule::Pingpong { (bm, bn) } else { (bm / 2, bn) };
        let per_thread = consumer_tile.0 * consumer_tile.1 / 128 * sets;
        if per_thread > 128 {
            let span = self.spec.buffers[ic].shape_span;
            let two = if fp8 { " (two sets: FP8 accumulation is promoted to a second f32 set)" } else { "" };
            self.err(Diagnostic::error(span, format!("the {bm}x{bn} tile needs {per_thread} accumulator registers per consumer thread{two} in the sm90a {} kernel, over the 128 it holds without spilling", schedule.name()))
                .hint(if fp8 { "for f8e4m3 operands use 128x128 tiles (cooperative) or 64x128 (pingpong)" } else { "use a tile of at most 128x256 (cooperative) or 128x128 (pingpong)" }));
            return;
        }
        let stages = self.info.stages.get(&shape.pipeline.id).copied().unwrap_or(1);
        if stages < 2 {
            self.err(Diagnostic::error(shape.pipeline.span, "the sm90a pipeline needs at least 2 stages (TMA loads run ahead of WGMMA)"));
            return;
        }
        let cluster = match &spec.cluster {
            Some((d, _)) => (d[0], d[1]),
            None => (1, 1),
        };
        let swizzle = spec.swizzle.map_or(1, |(n, _)| n);
        // TMA multicast: the CTAs of a cluster row share A's tile and each loads a share of its
        // rows; those of a cluster column share B's. Each share is whole 8-row swizzle atoms.
        if let Some((d, span)) = &spec.cluster && (d[0] * d[1] > 4 || bn % (8 * d[0]) != 0 || bm % (8 * d[1]) != 0) {
            self.err(Diagnostic::error(*span, format!("cluster {d:?} does not fit the {bm}x{bn} tile: at most 4 CTAs, and TMA multicast splits B's {bn} rows over the cluster's {} CTAs along M and A's {bm} rows over its {} along N, in whole 8-row pieces", d[0], d[1])));
            return;
        }
        let Some(tree) = self.epilogue_tree(&shape, (ic, stored, td), (&cc[0], &cc[1]), (bm, bn), batch.as_ref()) else { return };
        // An integer output: the spec converts by truncation and the EVT rounds from f32, so
        // only the i32 accumulator itself, stored as is (computed in i32), is exact.
        let dd = spec.tensors[td].dtype.0;
        let integer_store = stores_accumulator_as_is(dd, dc, &tree);
        if !dd.is_float() && !integer_store {
            self.off_path(spec.tensors[td].dtype.1, &format!("the output is {dd}: only an i32 accumulator stored as is converts exactly; the epilogue computes in f32 and rounds where the spec truncates"));
            return;
        }
        // Folded rows run over every batch: a vector along them must be [batch, M], packed.
        let mut unfoldable = None;
        collect_broadcasts(&tree, &mut |t, row| {
            if unfoldable.is_none() && is_per_batch_vector(&spec.tensors[t]) == row {
                unfoldable = Some(t);
            }
        });
        let batch = batch.map(|mut b| {
            if b.form == BatchForm::FoldedIntoM && unfoldable.is_some() {
                b.form = BatchForm::SharedB;
            }
            b
        });
        let bytes = |d: DType| d.bytes();
        let stage_bytes = (bm * bk) as u64 * bytes(da) + (bn * bk) as u64 * bytes(db);
        // The TMA epilogue stages 128x64 (or smaller) subtiles of D through shared memory, twice.
        let epi_bytes = 2 * (bm.min(128) * bn.min(64)) as u64 * bytes(spec.tensors[td].dtype.0) + 4 * bn as u64;
        let smem_bytes = stages as u64 * stage_bytes + epi_bytes + 1024;
        self.plan.smem = super::SmemUse { buffers: stages as u64 * stage_bytes, staging: epi_bytes, staging_reuses_buffers: false, barriers: 0, total: smem_bytes, budget: self.target.smem_budget() };
        if smem_bytes > self.target.smem_budget() {
            let span = match &shape.pipeline.kind {
                StmtKind::Loop { stages: Some(st), .. } => st.span,
                _ => shape.pipeline.span,
            };
            self.err(Diagnostic::error(span, format!(
                "shared memory over budget: {stages} stages of {stage_bytes} bytes plus {epi_bytes} bytes of epilogue need {smem_bytes} bytes but sm90a allows {} bytes per block",
                self.target.smem_budget())).hint("use fewer stages or a smaller tile for sm90a"));
            return;
        }
        for (t, why) in [(ta_idx, "TMA loads of A"), (tb_idx, "TMA loads of B"), (td, "TMA stores of the output")] {
            let v = 16 / spec.tensors[t].dtype.0.bytes() as i64;
            self.plan.alignment.retain(|x| x.tensor != t);
            self.plan.alignment.push(super::Alignment { tensor: t, whole_rows: true, vector_elems: v, why: format!("{why} need 16-byte aligned rows") });
        }
        // A vector along the columns is loaded in 16-byte pieces; one along the rows element by
        // element (a thread's accumulator rows are not adjacent), so it needs no alignment.
        collect_broadcasts(&tree, &mut |t, row| {
            let v = 16 / spec.tensors[t].dtype.0.bytes() as i64;
            if row && !self.plan.alignment.iter().any(|x| x.tensor == t) {
                self.plan.alignment.push(super::Alignment { tensor: t, whole_rows: true, vector_elems: v, why: "the epilogue loads the vector in 16-byte pieces".into() });
            }
        });
        self.plan.alignment.sort_by_key(|a| a.tensor);
        let batched = match &batch {
            None => String::new(),
            Some(b) => match b.form {
                BatchForm::FoldedIntoM => format!(", with A's and the output's `{}` batches folded into M (B is shared by every batch: one ({}·M)×N GEMM)", b.extent, b.extent),
                BatchForm::Batched => format!(", over the `{}` batches of its batch mode", b.extent),
                BatchForm::SharedA => format!(", over the `{}` batches of its batch mode, with one A for every batch (A's batch stride is 0)", b.extent),
                BatchForm::SharedB => {
                    let v = unfoldable.map_or_else(String::new, |t| format!("`{}` ", spec.tensors[t].name.name));
                    format!(", over the `{}` batches of its batch mode, with one B for every batch (B's batch stride is 0; the batches do not fold into M because the epilogue's vector {v}is not one value per folded row)", b.extent)
                }
            },
        };
        let kernel = match schedule {
            KernelSchedule::Cooperative => format!("cooperative warp-specialised kernel (one producer warpgroup issuing TMA, two consumer warpgroups each running WGMMA on {}x{bn} of the {bm}x{bn} tile)", bm / 2),
            KernelSchedule::Pingpong => format!("ping-pong warp-specialised kernel (`schedule: pingpong`: one producer warpgroup issuing TMA, two consumer warpgroups taking whole {bm}x{bn} tiles in turn, one's WGMMAs running while the other stores)"),
        };
        let why = format!(
            "{}: CUTLASS 3.x collective, {kernel}, {stages} TMA stages, persistent tile scheduler ({}){batched}; the epilogue is an EVT fused into the TMA store",
            gemm_body(&tree),
            if swizzle == 1 { "CUTLASS's heuristic raster order, no swizzle bands".to_string() } else { format!("CUTLASS's heuristic raster order in swizzle bands of {swizzle} CTAs") });
        self.plan.collective = Some(CollectivePlan {
            tile: (bm, bn, bk),
            cluster,
            swizzle,
            consumer_tile,
            accumulator_registers: per_thread,
            stages,
            // The epilogue subtiles CUTLASS's builder picks for these schedules (written out so
            // the output never changes meaning with its defaults).
            schedule: match schedule {
                KernelSchedule::Cooperative => GemmSchedule::Cutlass {
                    kernel: "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
                    epilogue: "cutlass::epilogue::TmaWarpSpecializedCooperative",
                    epilogue_tile: (bm.min(128), bn.min(32)),
                },
                KernelSchedule::Pingpong => GemmSchedule::Cutlass {
                    kernel: "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
                    epilogue: "cutlass::epilogue::TmaWarpSpecialized",
                    epilogue_tile: (bm.min(64), bn.min(32)),
                },
            },
            a: ta_idx,
            b: tb_idx,
            d: td,
            layouts,
            accumulator: dc,
            epilogue: tree,
            epilogue_compute: if integer_store { DType::I32 } else { DType::F32 },
            smem_bytes,
            batch,
            why,
        });
    }

    /// A GEMM over 3-D tensors maps onto the collective when the output is 3-D and so is A or
    /// B (or both), every 3-D tensor with the same leading dimension; a 2-D operand is shared
    /// by every batch. The 3-D tensors are row-major (packed: each batch follows the last),
    /// and each copy of one takes its tile at one grid variable there, whose extent is that
    /// batch extent. A 2-D B starts as [`BatchForm::FoldedIntoM`]; the epilogue may undo it.
    /// `Ok(None)`: 2-D tensors; `Err`: where and why the collective cannot take it.
    fn batch_mode(&self, tensors: [usize; 3], origins: [&[Expr]; 3]) -> Result<Option<BatchPlan>, (Span, String)> {
        let spec = self.spec;
        let ranks = tensors.map(|t| spec.tensors[t].shape.len());
        if ranks == [2, 2, 2] {
            return Ok(None);
        }
        let reject = |t: usize, why: &str| {
            let t = &spec.tensors[t];
            Err((t.name.span, format!("`{}` has {} dimensions, and the library's GEMM takes 2-D A, B and C{why}", t.name.name, t.shape.len())))
        };
        if self.target.is_amd() {
            return reject(tensors[ranks.iter().position(|&r| r != 2).unwrap_or(0)], " here (a batch dimension is not mapped onto its batch mode)");
        }
        let form = match ranks {
            [3, 3, 3] => BatchForm::Batched,
            [2, 3, 3] => BatchForm::SharedA,
            [3, 2, 3] => BatchForm::FoldedIntoM,
            _ => {
                let odd = match ranks {
                    [_, _, r] if r != 3 => 2,
                    [r, _, _] if r != 2 && r != 3 => 0,
                    [_, r, _] if r != 2 && r != 3 => 1,
                    _ => 2,  // a 3-D output from two 2-D operands
                };
                return reject(tensors[odd], ", or a 3-D output with 3-D A and B whose leading batch dimension they share, or one of them 2-D and shared by every batch");
            }
        };
        let batched: Vec<(usize, &[Expr])> = tensors.iter().zip(origins).filter(|(t, _)| spec.tensors[**t].shape.len() == 3).map(|(t, o)| (*t, o)).collect();
        let extent = spec.tensors[tensors[2]].shape[0].text();
        if let Some((t, _)) = batched.iter().find(|(t, _)| spec.tensors[*t].shape[0].text() != extent) {
            return reject(*t, ", or 3-D ones whose leading batch dimension they share");
        }
        if let Some((t, _)) = batched.iter().find(|(t, _)| spec.tensors[*t].order.0 != Order::RowMajor) {
            return Err((spec.tensors[*t].order.1, format!("`{}` is batched and column-major; the batch mode takes packed row-major batches", spec.tensors[*t].name.name)));
        }
        let var = |o: &[Expr]| match o.first().map(|e| &e.kind) {
            Some(ExprKind::Name(n)) => Some(n.clone()),
            _ => None,
        };
        let vars: Vec<Option<String>> = batched.iter().map(|(_, o)| var(o)).collect();
        let grid_var = spec.grid.iter().find(|g| Some(&g.var.name) == vars[0].as_ref() && matches!(&g.extent.kind, ExprKind::Name(n) if *n == extent));
        match grid_var {
            Some(g) if vars.iter().all(|v| v.as_deref() == Some(g.var.name.as_str())) => Ok(Some(BatchPlan { var: g.var.name.clone(), extent, form })),
            _ => {
                let span = batched.iter().find_map(|(_, o)| o.first()).map_or(spec.kernel.span, |e| e.span);
                Err((span, format!("a batched GEMM must take every tile at the same grid variable along the batch dimension, one whose extent is `{extent}`")))
            }
        }
    }

    /// The epilogue: the parallel blocks between the main loop and the store composed into
    /// one expression of the accumulator, stored to tensor `out`; `None` (with the reason
    /// reported) where a library epilogue cannot compute it, its broadcast vectors included
    /// ([`Self::broadcasts_span_the_output`]).
    fn epilogue_tree(&mut self, shape: &Shape<'a>, (ic, stored, out): (usize, usize, usize), cc: (&String, &String), tile: (i64, i64), batch: Option<&BatchPlan>) -> Option<EvtNode> {
        // Each buffer's value as a tree of the accumulator. The EVT computes in f32 and rounds
        // once, into the output, so a buffer it writes must hold f32, or be an f16 GEMM's f16
        // accumulator (there the EVT keeps f32 between statements where the spec rounds to f16:
        // a difference within f16's own rounding, as before this took other fragments).
        let mut trees: Vec<(usize, EvtNode)> = vec![(ic, EvtNode::Acc)];
        for p in &shape.epilogue {
            let StmtKind::Parallel { vars, body } = &p.kind else { continue };
            for st in body {
                let StmtKind::Assign { target, op, value, .. } = &st.kind else { continue };
                let tb = self.buffer_index(&target.name)?;
                let dtype = self.spec.buffers[tb].dtype.0;
                if !(dtype == DType::F32 || (tb == ic && dtype == DType::F16)) {
                    let why = if tb == ic {
                        format!("the epilogue computes in f32, but the accumulator `{}` is {dtype}: compute into an f32 fragment of its shape (`out[i, j] = f32({}[i, j]) * ...`) and store that", target.name, target.name)
                    } else {
                        format!("the epilogue computes in f32 and rounds once, at the store, but `{}` is {dtype}", target.name)
                    };
                    self.off_path(st.span, &why);
                    return None;
                }
                let scope = EvtScope { vars, tiles: (cc.0.as_str(), cc.1.as_str()), ext: tile, batch: batch.map(|b| (b.var.as_str(), b.extent.as_str())) };
                let v = self.evt(value, &trees, &scope)?;
                let current = trees.iter().find(|(b, _)| *b == tb).map(|(_, t)| t.clone());
                let tree = match (op, current) {
                    (AssignOp::Set, _) => v,
                    (_, None) => {
                        self.off_path(st.span, &format!("`{}` is updated before the epilogue writes it", target.name));
                        return None;
                    }
                    (AssignOp::Add, Some(c)) => EvtNode::Compute { op: EpilogueOp::Add, children: vec![c, v] },
                    (AssignOp::Sub, Some(c)) => EvtNode::Compute { op: EpilogueOp::Sub, children: vec![c, v] },
                    (AssignOp::Mul, Some(c)) => EvtNode::Compute { op: EpilogueOp::Mul, children: vec![c, v] },
                };
                trees.retain(|(b, _)| *b != tb);
                trees.push((tb, tree));
            }
        }
        match trees.into_iter().find(|(b, _)| *b == stored) {
            Some((_, tree)) => self.broadcasts_span_the_output(&tree, out).then_some(tree),
            None => {
                self.off_path(shape.store.span, &format!("the store takes `{}`, which the epilogue never writes", self.spec.buffers[stored].name.name));
                None
            }
        }
    }

    /// AMD: the GEMM maps onto a composable_kernel device operation with one of CK's
    /// published bf16/f16 "compute" instances (256 threads, 128x128x64 tiles, 32x32 MFMAs,
    /// 2x2 per wave, pipeline v3); the epilogue becomes its CDE element-wise operator.
    #[allow(clippy::too_many_arguments)]
    fn plan_ck(&mut self, a: usize, b: usize, d: usize, layouts: (&'static str, &'static str, &'static str), acc: DType, shape: &Shape<'a>, bufs: (usize, usize), cc: (&String, &String), tile: (i64, i64)) {
        if layouts.0 != "RowMajor" || layouts.2 != "RowMajor" {
            self.err(Diagnostic::error(self.spec.tensors[a].order.1, format!("the {} target lowers GEMMs with row-major A and output only", self.target))
                .hint("store A row-major (K contiguous) or transpose the problem").unsupported_on_target());
            return;
        }
        let int8 = acc == DType::I32;
        // CK's int8 instances read both operands K-major (16 bytes of K per vector).
        if int8 && layouts.1 != "ColumnMajor" {
            self.err(Diagnostic::error(self.spec.tensors[b].name.span, format!("the {} target's int8 GEMM reads B as [N, K] with K contiguous", self.target))
                .hint("store B as [N, K] and use `transpose_b=true` (or declare [K, N] with `order: col_major`)").unsupported_on_target());
            return;
        }
        // An integer output is exact only as the i32 accumulator stored as is: any epilogue
        // computes in f32, and CK's conversion rounds where the spec converts toward zero.
        let out = &self.spec.tensors[d];
        let refuse_integer_output = |this: &mut Self| {
            this.err(Diagnostic::error(out.dtype.1, format!("the {} target's composable_kernel GEMM writes floating-point outputs (or an i32 accumulator stored as is); `{}` is {}: its epilogue would round where the spec converts toward zero, saturating", this.target, out.name.name, out.dtype.0))
                .hint("store f32, bf16 or f16 and convert in a following kernel").unsupported_on_target());
        };
        let i32_store = out.dtype.0 == DType::I32 && int8;
        if !out.dtype.0.is_float() && !i32_store {
            refuse_integer_output(self);
            return;
        }
        let Some(tree) = self.epilogue_tree(shape, (bufs.0, bufs.1, d), cc, tile, None) else { return };
        let integer_store = stores_accumulator_as_is(out.dtype.0, acc, &tree);
        if !out.dtype.0.is_float() && !integer_store {
            refuse_integer_output(self);
            return;
        }
        // 128 bytes of K per tile: 64 elements of 16 bits, 128 of 8.
        let (bm, bn, bk) = if int8 { (128, 128, 128) } else { (128, 128, 64) };
        let bytes = self.spec.tensors[a].dtype.0.bytes();
        let lds = (bm * bk + bn * bk) as u64 * bytes;
        self.plan.smem = super::SmemUse { buffers: lds, staging: 0, staging_reuses_buffers: false, barriers: 0, total: lds, budget: self.target.smem_budget() };
        if lds > self.target.smem_budget() {
            self.err(Diagnostic::error(self.spec.kernel.span, format!(
                "LDS over budget: the {bm}x{bn}x{bk} tiles need {lds} bytes but {} allows {} bytes per workgroup", self.target, self.target.smem_budget())));
            return;
        }
        // A and B move in 16-byte vectors of their own type; the output in the instance's C
        // (plain) or CDE (multi-D) vectors.
        let plain = matches!(tree, EvtNode::Acc);
        let out_vector = super::ck_output_vector(out.dtype.0, plain);
        let out_why = if plain { "the output is written in CK's C-transfer vectors of 4 elements".to_string() } else { "the output is written in 16-byte vectors".to_string() };
        for (t, v, why) in [
            (a, 16 / self.spec.tensors[a].dtype.0.bytes() as i64, "A is read in 16-byte vectors along K".to_string()),
            (b, 16 / self.spec.tensors[b].dtype.0.bytes() as i64, "B is read in 16-byte vectors along its contiguous dimension".to_string()),
            (d, out_vector, out_why),
        ] {
            self.plan.alignment.retain(|x| x.tensor != t);
            self.plan.alignment.push(super::Alignment { tensor: t, whole_rows: true, vector_elems: v, why });
        }
        // Row-broadcast vectors (bias[N]) are read 16 bytes at a time along N by the CDE
        // transfer; column broadcasts element by element.
        let mut rows = Vec::new();
        collect_broadcasts(&tree, &mut |t, row| {
            if row && !rows.contains(&t) {
                rows.push(t);
            }
        });
        for t in rows {
            if !self.plan.alignment.iter().any(|x| x.tensor == t) {
                let v = 16 / self.spec.tensors[t].dtype.0.bytes() as i64;
                self.plan.alignment.push(super::Alignment { tensor: t, whole_rows: true, vector_elems: v, why: "the epilogue reads the vector in 16-byte pieces".into() });
            }
        }
        self.plan.alignment.sort_by_key(|x| x.tensor);
        let mfma = format!("{} MFMAs{}", super::ck_mfma(self.target, int8), if int8 { " (exact i32 accumulators)" } else { "" });
        let why = format!(
            "{}: composable_kernel {} with CK's published {} compute instance: 256 threads (4 waves), {bm}x{bn}x{bk} tiles, {mfma} 2x2 per wave, block-GEMM pipeline v3 (intrawave); the spec's tile constants are not used, this instance is tuned for CDNA; {lds} bytes of LDS",
            gemm_body(&tree),
            if matches!(tree, EvtNode::Acc) { "DeviceGemm_Xdl_CShuffleV3" } else { "DeviceGemmMultiD_Xdl_CShuffle_V3 (the epilogue as its CDE operator)" },
            self.spec.tensors[a].dtype.0);
        self.plan.collective = Some(CollectivePlan {
            tile: (bm, bn, bk),
            cluster: (1, 1),
            swizzle: 1,
            consumer_tile: (bm, bn),
            accumulator_registers: 0,
            stages: 1,
            schedule: GemmSchedule::Ck { pipeline: "ck::BlockGemmPipelineVersion::v3", scheduler: "ck::BlockGemmPipelineScheduler::Intrawave" },
            a,
            b,
            d,
            layouts,
            accumulator: acc,
            epilogue: tree,
            epilogue_compute: if integer_store { DType::I32 } else { DType::F32 },
            smem_bytes: lds,
            batch: None,
            why,
        });
    }

    /// `[<index> * <extent>, ...]` tile origins as the index names, if every one has that form.
    pub(super) fn coords(&self, origin: &[Expr], extents: &[i64]) -> Option<Vec<String>> {
        if origin.len() != extents.len() {
            return None;
        }
        origin.iter().zip(extents).map(|(e, ext)| match &e.kind {
            ExprKind::Binary(BinOp::Mul, x, y) => match (&x.kind, &y.kind) {
                (ExprKind::Name(n), _) if crate::check::eval_int(y, &self.info.symbols) == Some(*ext) => Some(n.clone()),
                (_, ExprKind::Name(n)) if crate::check::eval_int(x, &self.info.symbols) == Some(*ext) => Some(n.clone()),
                _ => None,
            },
            _ => None,
        }).collect()
    }

    fn is_ceildiv_of(&self, e: &Expr, tensor: usize, dim: usize, ext: i64) -> bool {
        let ExprKind::Call(f, args) = &e.kind else { return false };
        let Some(want) = self.spec.tensors[tensor].shape.get(dim).map(Dim::text) else { return false };
        f.name == "ceildiv" && args.len() == 2
            && matches!(&args[0].value.kind, ExprKind::Name(n) if *n == want)
            && crate::check::eval_int(&args[1].value, &self.info.symbols) == Some(ext)
    }

    /// Translates an element-wise expression into an EVT; `trees` holds the value of each
    /// buffer written so far (the accumulator's is `Acc`).
    fn evt(&mut self, e: &Expr, trees: &[(usize, EvtNode)], scope: &EvtScope) -> Option<EvtNode> {
        let EvtScope { vars, tiles, ext, batch } = *scope;
        let unsupported = |this: &mut Self, what: &str| {
            let form = if this.target.is_amd() { "a CK element-wise epilogue" } else { "a CUTLASS epilogue visitor tree" };
            this.err(Diagnostic::error(e.span, format!("the {} epilogue cannot express {what} as {form} yet", this.target))
                .hint("supported: + - * /, max, min, gelu, silu, sigmoid, float constants, the accumulator at [i, j], vectors indexed by the output row or column, and in a batched GEMM [batch, rows or columns] vectors indexed by the batch variable first"));
            None
        };
        // An integer subexpression of constants computes in integers (`seven / two` is 3, as the
        // sm80 code and the interpreter have it): its value becomes one float constant rather
        // than float operations on its operands.
        if !matches!(e.kind, ExprKind::Int(_) | ExprKind::Name(_)) && let Some(v) = crate::check::eval_int(e, &self.info.symbols) {
            return Some(EvtNode::Scalar { value: format!("{v}.0f") });
        }
        match &e.kind {
            ExprKind::Float(_, lit) => Some(EvtNode::Scalar { value: crate::back::conv::float_literal(lit) }),
            ExprKind::Int(v) => Some(EvtNode::Scalar { value: format!("{v}.0f") }),
            ExprKind::Name(n) => match self.info.symbols.get(n) {
                // Named constants keep their names: the generated file declares them.
                Some(Symbol::Constant(ConstValue::Float(..))) => Some(EvtNode::Scalar { value: n.clone() }),
                Some(Symbol::Constant(ConstValue::Int(_))) => Some(EvtNode::Scalar { value: format!("float({n})") }),
                _ => unsupported(self, &format!("`{n}`")),
            },
            ExprKind::Index(name, idx) => {
                if let Some(buf) = self.buffer_index(&name.name) {
                    let plain = idx.len() == vars.len() && idx.iter().zip(vars).all(|(x, v)| matches!(&x.kind, ExprKind::Name(n) if *n == v.name));
                    if !plain {
                        return unsupported(self, "a buffer read at other indices");
                    }
                    return match trees.iter().find(|(b, _)| *b == buf) {
                        Some((_, t)) => Some(t.clone()),
                        None => unsupported(self, &format!("a read of `{}`, which is not the accumulator or computed from it", name.name)),
                    };
                }
                let Some(t) = self.tensor_index(&name.name) else { return unsupported(self, "this read") };
                // A vector, or in a batched GEMM one vector per batch: [batch, rows or columns]
                // indexed by the batch variable first.
                let tensor = &self.spec.tensors[t];
                let per_batch = batch.is_some_and(|(var, extent)| {
                    tensor.shape.len() == 2 && tensor.shape[0].text() == extent && idx.len() == 2 && tensor.order.0 == Order::RowMajor
                        && matches!(&idx[0].kind, ExprKind::Name(n) if n == var)
                });
                if !(per_batch || (tensor.shape.len() == 1 && idx.len() == 1)) || vars.len() != 2 {
                    let what = if batch.is_some() { "a read of a tensor that is neither a vector nor one vector per batch" } else { "a read of a tensor that is not a vector" };
                    return unsupported(self, what);
                }
                let along_idx = &idx[idx.len() - 1];
                // `tile*extent + var` names the output row (var i) or column (var j).
                let along = |tile: &str, e_ext: i64, var: &str| match &along_idx.kind {
                    ExprKind::Binary(BinOp::Add, l, r) => {
                        let term = |x: &Expr| matches!(&x.kind, ExprKind::Binary(BinOp::Mul, a, b)
                            if (matches!(&a.kind, ExprKind::Name(n) if n == tile) && crate::check::eval_int(b, &self.info.symbols) == Some(e_ext))
                            || (matches!(&b.kind, ExprKind::Name(n) if n == tile) && crate::check::eval_int(a, &self.info.symbols) == Some(e_ext)));
                        let v = |x: &Expr| matches!(&x.kind, ExprKind::Name(n) if n == var);
                        (term(l) && v(r)) || (term(r) && v(l))
                    }
                    _ => false,
                };
                if along(tiles.1, ext.1, &vars[1].name) {
                    Some(EvtNode::RowBroadcast { tensor: t })
                } else if along(tiles.0, ext.0, &vars[0].name) {
                    Some(EvtNode::ColBroadcast { tensor: t })
                } else {
                    unsupported(self, "a vector read that is not at the output row or column")
                }
            }
            ExprKind::Binary(op, a, b) => {
                let eop = match op {
                    BinOp::Add => EpilogueOp::Add,
                    BinOp::Sub => EpilogueOp::Sub,
                    BinOp::Mul => EpilogueOp::Mul,
                    BinOp::Div => EpilogueOp::Div,
                    _ => return unsupported(self, &format!("`{}`", op.symbol())),
                };
                let l = self.evt(a, trees, scope)?;
                let r = self.evt(b, trees, scope)?;
                Some(EvtNode::Compute { op: eop, children: vec![l, r] })
            }
            ExprKind::Call(f, args) => match f.name.as_str() {
                "f32" => self.evt(&args[0].value, trees, scope),
                "max" | "min" => {
                    let l = self.evt(&args[0].value, trees, scope)?;
                    let r = self.evt(&args[1].value, trees, scope)?;
                    Some(EvtNode::Compute { op: if f.name == "max" { EpilogueOp::Max } else { EpilogueOp::Min }, children: vec![l, r] })
                }
                "gelu" | "silu" | "sigmoid" => {
                    let v = self.evt(&args[0].value, trees, scope)?;
                    let op = match f.name.as_str() {
                        "gelu" => EpilogueOp::Gelu,
                        "silu" => EpilogueOp::Silu,
                        _ => EpilogueOp::Sigmoid,
                    };
                    Some(EvtNode::Compute { op, children: vec![v] })
                }
                other => unsupported(self, &format!("`{other}`")),
            },
            ExprKind::Unary(UnOp::Neg, x) => {
                let v = self.evt(x, trees, scope)?;
                Some(EvtNode::Compute { op: EpilogueOp::Neg, children: vec![v] })
            }
            _ => unsupported(self, "this expression"),
        }
    }
}

/// Visits the tensors the tree broadcasts.
pub fn collect_broadcasts(n: &EvtNode, f: &mut impl FnMut(usize, bool)) {
    match n {
        EvtNode::RowBroadcast { tensor } => f(*tensor, true),
        EvtNode::ColBroadcast { tensor } => f(*tensor, false),
        EvtNode::Compute { children, .. } => children.iter().for_each(|c| collect_broadcasts(c, f)),
        _ => {}
    }
}

/// How a collective's reason names the spec's body: a GEMM alone, or with an epilogue.
fn gemm_body(tree: &EvtNode) -> &'static str {
    if matches!(tree, EvtNode::Acc) { "a plain GEMM body" } else { "a GEMM body with an element-wise epilogue" }
}
