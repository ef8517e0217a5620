//! The template context of sm90a's wide-tile 4-bit-weight GEMM ([`DequantWgmmaPlan`]): the
//! spec's names, the plan's atoms and budgets, and the comments tying them to spec lines.

use super::common::{block_indices_ctx, constants_ctx, element_alias, elements_ctx, gencode, grid_ctx, kernel_signature, BlockIndexCtx, ConstantCtx, ElementCtx, PlainEnv};
use super::context::DEQUANT_INT4X2;
use super::dequant_gemm::ZeroPointsCtx;
use crate::back::conv::Conv;
use crate::back::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use crate::layout::{DequantWgmmaPlan, DequantZero, WGMMA_PRODUCER_THREADS};
use crate::Compiled;
use serde::Serialize;

/// A barrier over the consumer threads (the producer warpgroup leaves early).
const CONSUMER_SYNC: &str = helper!("consumer_sync.cuh");

#[derive(Serialize)]
pub struct Context {
    #[serde(flatten)]
    pub header: HeaderCtx,
    #[serde(flatten)]
    pub launcher_ctx: LauncherCtx,
    pub target_banner: String,
    pub gencode: String,
    pub threads: i64,
    pub warpgroups: i64,
    pub producer_threads: i64,
    pub producer_regs: i64,
    pub consumer_regs: i64,
    pub helpers: Vec<String>,
    pub constants: Vec<ConstantCtx>,
    pub elements: Vec<ElementCtx>,
    pub block_indices: Vec<BlockIndexCtx>,
    pub kernel_params: Vec<String>,
    pub kernel_args: Vec<String>,
    pub grid: Vec<String>,
    pub grid_limits: Vec<String>,
    pub doc_launch: String,
    pub doc_invalid: String,
    pub doc_errors: String,
    pub why: String,
    /// The warpgroup MMA atom and the shared layouts' GMMA atoms.
    pub mma_op: String,
    /// The half-height instantiation's atom, if the launcher may run it.
    pub half_op: Option<String>,
    /// `x`, `y` or `z`: the grid dimension stepping A's row tiles.
    pub m_grid_dim: String,
    /// The launcher's parameter names, passed on to `launch`.
    pub launch_args: Vec<String>,
    pub a_atom: String,
    pub w_atom: String,
    /// The swizzle width of `w_atom`, in bytes.
    pub w_swizzle_bytes: i64,
    pub group: i64,
    /// The constant zero point; `None` with `zeros` (then `zp`).
    pub zero: Option<i64>,
    pub zp: Option<ZeroPointsCtx>,
    /// Tensor names, their element aliases and row strides (A's is `k_ext`).
    pub a: String,
    pub wq: String,
    pub sc: String,
    pub c: String,
    pub a_elem: String,
    pub wq_elem: String,
    pub sc_elem: String,
    pub c_elem: String,
    pub wq_ld: String,
    pub sc_ld: String,
    pub c_ld: String,
    /// The GEMM's extents as the spec names them: A's rows, the weight rows, A's columns.
    pub m_ext: String,
    pub n_ext: String,
    pub k_ext: String,
    /// Buffer names, element aliases and spec lines.
    pub a_s: String,
    pub wq_s: String,
    pub s_s: String,
    pub w_s: String,
    pub acc: String,
    pub a_s_elem: String,
    pub wq_s_elem: String,
    pub w_s_elem: String,
    pub a_s_line: usize,
    pub wq_s_line: usize,
    pub s_s_line: usize,
    pub w_s_line: usize,
    pub acc_line: usize,
    /// Tile extents as the spec names them.
    pub m_rows: String,
    pub n_rows: String,
    pub k_cols: String,
    pub w_cols: String,
    pub s_cols: String,
    pub stages: String,
    /// The block indices of the tiles (C's row tile, weight tile) and the weight tile's origin.
    pub m_index: String,
    pub n_index: String,
    pub n0: String,
    pub num_tiles: String,
    /// C's elements per 16-byte store.
    pub c_vector: i64,
    /// Spec lines and statement texts for the comments.
    pub gemm_line: usize,
    pub dequant_line: usize,
    pub pipeline_line: usize,
    pub pipeline_text: String,
    pub store_line: usize,
    pub store_text: String,
    pub copy_a_line: usize,
    pub copy_w_line: usize,
    pub copy_s_line: usize,
    pub copy_a_text: String,
    pub copy_w_text: String,
    pub copy_s_text: String,
}

/// The context for a spec planned with `p`.
pub fn build(c: &Compiled, p: &DequantWgmmaPlan) -> Context {
    let (spec, info) = (&c.spec, &c.info);
    let conv = Conv { spec, info, hip: false };
    let [ta, tw, ts, tc] = p.tensors;
    let [a_s, wq_s, s_s, w_s, acc] = p.buffers;
    let tname = |t: usize| spec.tensors[t].name.name.clone();
    let bname = |b: usize| spec.buffers[b].name.name.clone();
    let extent = |b: usize, d: usize| {
        let e = conv.expr(&spec.buffers[b].shape[d], &PlainEnv);
        if e.contains(' ') && !e.starts_with('(') { format!("({e})") } else { e }
    };
    let stmt = |id| spec.stmt(id);
    let line = |id| stmt(id).map_or(0, |s| c.line(s.span));
    let text = |id| stmt(id).map_or(String::new(), |s| c.file.snippet(s.span).to_string());
    let origin = |id, d: usize| match stmt(id).map(|s| &s.kind) {
        Some(crate::ast::StmtKind::Copy { src, .. }) => src.origin.as_ref().and_then(|o| o.get(d)).map_or("0".into(), |e| conv.expr(e, &PlainEnv)),
        _ => "0".into(),
    };
    let (count, stages) = match stmt(p.pipeline).map(|s| &s.kind) {
        Some(crate::ast::StmtKind::Loop { count, stages, .. }) => (conv.expr(count, &PlainEnv), stages.as_ref().map_or(p.stages.to_string(), |e| c.file.snippet(e.span).to_string())),
        _ => (String::new(), p.stages.to_string()),
    };
    let ld = |t: usize| spec.tensors[t].shape[1].text();
    let (grid, grid_limits, grid_doc) = grid_ctx(c);
    let (kernel_params, kernel_args) = kernel_signature(c);
    let threads = spec.threads.0;
    Context {
        header: header(c),
        launcher_ctx: launcher(c),
        target_banner: "Target sm90a: the wide-tile 4-bit-weight GEMM (a TMA producer warpgroup filling mbarrier stages, weights unpacked into the warpgroup MMAs' register A operand).".into(),
        gencode: gencode(c.plan.target),
        threads,
        warpgroups: p.warpgroups,
        producer_threads: WGMMA_PRODUCER_THREADS,
        producer_regs: p.regs.0,
        consumer_regs: p.regs.1,
        helpers: vec![DEQUANT_INT4X2.into(), CONSUMER_SYNC.into()],
        constants: constants_ctx(c),
        elements: elements_ctx(c),
        block_indices: block_indices_ctx(c),
        kernel_params,
        kernel_args,
        grid,
        grid_limits,
        doc_launch: format!("grid ({}){}, {} threads (the spec's {threads} and a TMA producer warpgroup), {} bytes of dynamic shared memory",
            grid_doc.join(", "),
            if p.half_op.is_some() { format!(", or with twice the blocks along {}'s rows (tiles of half the rows) when that grid would occupy at most half the device's SMs", spec.tensors[ta].name.name) } else { String::new() },
            threads + WGMMA_PRODUCER_THREADS, c.plan.smem.total),
        doc_invalid: "the grid exceeds CUDA's limits".into(),
        doc_errors: if p.half_op.is_some() { "cudaGetDevice, cudaDeviceGetAttribute, cudaFuncSetAttribute or the launch" } else { "cudaFuncSetAttribute or the launch" }.into(),
        why: p.why.clone(),
        mma_op: p.op.clone(),
        half_op: p.half_op.clone(),
        m_grid_dim: ["x", "y", "z"][p.m_grid_dim.unwrap_or(0)].into(),
        launch_args: spec.tensors.iter().map(|t| t.name.name.clone()).chain(info.runtime_dims.iter().cloned()).collect(),
        a_atom: p.a_atom.into(),
        w_atom: p.w_atom.into(),
        w_swizzle_bytes: if p.w_atom.contains("SW128") { 128 } else { 64 },
        group: p.group,
        zero: if let DequantZero::Constant(z) = p.zero { Some(z) } else { None },
        zp: match p.zero {
            DequantZero::PerGroup { copy, tensor, buffer } => Some(ZeroPointsCtx {
                tensor: tname(tensor),
                ld: ld(tensor),
                elem: element_alias(&tname(tensor)),
                tile: bname(buffer),
                tile_line: c.line(spec.buffers[buffer].span),
                copy_text: text(copy),
            }),
            DequantZero::Constant(_) => None,
        },
        a: tname(ta),
        wq: tname(tw),
        sc: tname(ts),
        c: tname(tc),
        a_elem: element_alias(&tname(ta)),
        wq_elem: element_alias(&tname(tw)),
        sc_elem: element_alias(&tname(ts)),
        c_elem: element_alias(&tname(tc)),
        wq_ld: ld(tw),
        sc_ld: ld(ts),
        c_ld: ld(tc),
        m_ext: spec.tensors[ta].shape[0].text(),
        n_ext: spec.tensors[tw].shape[0].text(),
        k_ext: spec.tensors[ta].shape[1].text(),
        a_s: bname(a_s),
        wq_s: bname(wq_s),
        s_s: bname(s_s),
        w_s: bname(w_s),
        acc: bname(acc),
        a_s_elem: element_alias(&bname(a_s)),
        wq_s_elem: element_alias(&bname(wq_s)),
        w_s_elem: element_alias(&bname(w_s)),
        a_s_line: c.line(spec.buffers[a_s].span),
        wq_s_line: c.line(spec.buffers[wq_s].span),
        s_s_line: c.line(spec.buffers[s_s].span),
        w_s_line: c.line(spec.buffers[w_s].span),
        acc_line: c.line(spec.buffers[acc].span),
        m_rows: extent(a_s, 0),
        n_rows: extent(wq_s, 0),
        k_cols: extent(a_s, 1),
        w_cols: extent(wq_s, 1),
        s_cols: extent(s_s, 1),
        stages,
        m_index: p.tile_index[0].clone(),
        n_index: p.tile_index[1].clone(),
        n0: origin(p.copies[1], 0),
        num_tiles: count,
        c_vector: p.c_vector,
        gemm_line: line(p.gemm),
        dequant_line: line(p.dequant),
        pipeline_line: line(p.pipeline),
        pipeline_text: text(p.pipeline),
        store_line: line(p.store),
        store_text: text(p.store),
        copy_a_line: line(p.copies[0]),
        copy_w_line: line(p.copies[1]),
        copy_s_line: line(p.copies[2]),
        copy_a_text: text(p.copies[0]),
        copy_w_text: text(p.copies[1]),
        copy_s_text: text(p.copies[2]),
    }
}
