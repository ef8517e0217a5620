//! The template context of the thin-tile 4-bit-weight GEMM ([`DequantGemmPlan`]): the spec's
//! names, the plan's numbers and layouts, and the comments tying them to spec lines.

use super::common::{block_indices_ctx, constants_ctx, element_alias, elements_ctx, gencode, grid_ctx, kernel_signature, swizzle_text, BlockIndexCtx, ConstantCtx, ElementCtx, PlainEnv};
use super::context::DEQUANT_INT4X2;
use crate::back::conv::Conv;
use crate::back::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use crate::layout::{DequantGemmPlan, DequantZero, PaddedLayout};
use crate::Compiled;
use serde::Serialize;

/// 16- and 2-byte loads from shared memory at 32-bit shared addresses.
const LD_SHARED: &str = helper!("ld_shared_cp_async.cuh");
/// sm_80 mbarriers: the pipeline's full and empty stages.
const MBARRIER: &str = helper!("mbarrier_sm80.cuh");
/// A barrier over the consumer threads (the producer warp leaves early).
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
    pub why_a: String,
    pub why_w: String,
    pub mma_atom: String,
    pub row_groups: i64,
    pub k_split: i64,
    pub m_tiles: i64,
    pub small_m: bool,
    pub group: i64,
    /// The constant zero point; `None` with `zeros` (then `zp`).
    pub zero: Option<i64>,
    /// The per-group zero points (`zeros=`), if any.
    pub zp: Option<ZeroPointsCtx>,
    /// Tensor names: A, Wq, scales, C.
    pub a: String,
    pub wq: String,
    pub sc: String,
    pub c: String,
    /// The GEMM's extents as the spec names them: A's rows, the weight rows, A's columns.
    pub m_ext: String,
    pub n_ext: String,
    pub k_ext: String,
    /// Row strides (leading dimensions) of Wq, scales and C (A's is `k_ext`).
    pub wq_ld: String,
    pub sc_ld: String,
    pub c_ld: String,
    /// Element type aliases of the tensors and buffers above.
    pub a_elem: String,
    pub wq_elem: String,
    pub sc_elem: String,
    pub c_elem: String,
    pub a_s_elem: String,
    pub wq_s_elem: String,
    pub s_s_elem: String,
    /// Buffer names.
    pub a_s: String,
    pub wq_s: String,
    pub s_s: String,
    pub acc: String,
    /// Tile extents as the spec names them (`block_M`, `(block_K / 8)`, ...).
    pub m_rows: String,
    pub k_cols: String,
    pub n_rows: String,
    pub w_cols: String,
    pub s_cols: String,
    pub stages: String,
    /// k-tiles a thread's copies run ahead of its MMAs (the plan's `prefetch`).
    pub prefetch: i64,
    /// Shared layouts: padding, `Swizzle<..>` arguments and the swizzle's period (elements).
    pub a_pad: i64,
    pub a_swizzle: String,
    pub a_period: i64,
    pub w_pad: i64,
    pub w_swizzle: String,
    pub w_period: i64,
    /// The tile origins of the block: rows of A (and C), weight rows (C's columns).
    pub m0: String,
    pub n0: String,
    pub num_tiles: String,
    /// sm90a's TMA flavour (see `DequantGemmTma`), read only by its template (which `render`
    /// picks when this is set).
    pub tma: Option<TmaCtx>,
    /// Alignment of the stage buffers (the 128-byte swizzle's 1024-byte period with TMA).
    pub smem_align: i64,
    /// Spec lines and statement texts for the comments.
    pub gemm_line: usize,
    pub dequant_line: usize,
    pub pipeline_line: usize,
    pub pipeline_text: String,
    pub store_line: usize,
    pub store_text: String,
    pub copy_a_line: usize,
    pub copy_w_line: usize,
    pub copy_lines: String,
    pub copy_a_text: String,
    pub copy_w_text: String,
    pub copy_s_text: String,
    pub a_s_line: usize,
    pub wq_s_line: usize,
    pub s_s_line: usize,
    pub acc_line: usize,
}

/// The TMA flavour's numbers: its producer warp, spans and tensor maps.
#[derive(Serialize)]
pub struct TmaCtx {
    pub producer_threads: i64,
    /// k values per span.
    pub span: i64,
    /// Scale pairs each producer lane copies per tile.
    pub scale_copies: i64,
    /// `__launch_bounds__`' blocks per SM.
    pub min_blocks: i64,
    /// A's tensor map data type (`CU_TENSOR_MAP_DATA_TYPE_...`).
    pub a_type: String,
    /// Rows of A in the instantiation the launcher runs for `m_ext` rows (a C++ expression).
    pub tile_rows: String,
}

/// The zero points' tensor and tile, copied and read beside the scales.
#[derive(Serialize)]
pub struct ZeroPointsCtx {
    /// The global tensor, its row stride and its element alias.
    pub tensor: String,
    pub ld: String,
    pub elem: String,
    /// The shared tile and its spec line.
    pub tile: String,
    pub tile_line: usize,
    /// The copy's statement text.
    pub copy_text: String,
}

/// A layout's `Swizzle<..>` arguments and the swizzle's period in elements (the offsets it
/// leaves alone when added).
fn swizzle_args(l: PaddedLayout) -> (String, i64) {
    let s = l.swizzle;
    (swizzle_text(s), if s.bits == 0 { 1 } else { 1i64 << (s.base + s.shift + s.bits) })
}

/// The context for a spec planned with `p`.
pub fn build(c: &Compiled, p: &DequantGemmPlan) -> Context {
    let (spec, info) = (&c.spec, &c.info);
    let conv = Conv { spec, info, hip: false };
    let [ta, tw, ts, tc] = p.tensors;
    let [a_s, wq_s, s_s, _w_s, acc] = p.buffers;
    let tname = |t: usize| spec.tensors[t].name.name.clone();
    let bname = |b: usize| spec.buffers[b].name.name.clone();
    // Extents as the spec wrote them, parenthesised where they are expressions.
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
    let (a_swizzle, a_period) = swizzle_args(p.a_layout);
    let (w_swizzle, w_period) = swizzle_args(p.w_layout);
    let (grid, grid_limits, grid_doc) = grid_ctx(c);
    let (kernel_params, kernel_args) = kernel_signature(c);
    let half = spec.buffers[a_s].dtype.0;
    let zeros = match p.zero {
        DequantZero::PerGroup { copy, tensor, buffer } => Some((tensor, buffer, copy)),
        DequantZero::Constant(_) => None,
    };
    let target = c.plan.target;
    let mut launcher_ctx = launcher(c);
    if let Some(tma) = &p.tma {
        // TMA loads whole spans of A and the packed words (their tensor maps' outer mode).
        let (k, span) = (spec.tensors[ta].shape[1].text(), tma.span);
        launcher_ctx.size_checks.push(format!("{k} % {span} != 0"));
        launcher_ctx.doc_sizes.push_str(&format!("; {k} a multiple of {span} (TMA loads {span}-deep spans)"));
    }
    Context {
        header: header(c),
        launcher_ctx,
        target_banner: match target {
            crate::target::Target::Sm90a if p.tma.is_some() => "Target sm90a: the thin-tile 4-bit-weight GEMM (a TMA producer warp filling mbarrier stages, weights unpacked into mma.sync's A operand).".into(),
            crate::target::Target::Sm90a => "Target sm90a: the thin-tile 4-bit-weight GEMM (cp.async multistage on mbarriers, weights unpacked into mma.sync's A operand), built for sm_90a.".into(),
            _ => "Target sm80: the thin-tile 4-bit-weight GEMM (cp.async multistage on mbarriers, weights unpacked into mma.sync's A operand; runs on sm_80 and later).".into(),
        },
        gencode: gencode(target),
        threads: spec.threads.0,
        helpers: if p.tma.is_some() { vec![DEQUANT_INT4X2.into(), LD_SHARED.into(), MBARRIER.into(), CONSUMER_SYNC.into()] } else { vec![DEQUANT_INT4X2.into(), LD_SHARED.into(), MBARRIER.into()] },
        constants: constants_ctx(c),
        elements: elements_ctx(c),
        block_indices: block_indices_ctx(c),
        kernel_params,
        kernel_args,
        grid,
        grid_limits,
        doc_launch: match &p.tma {
            Some(_) => format!("grid ({}), {} threads (the spec's {} and a TMA producer warp), {} bytes of dynamic shared memory",
                grid_doc.join(", "), spec.threads.0 + crate::layout::PRODUCER_THREADS, spec.threads.0, c.plan.smem.total),
            None => format!("grid ({}), {} threads, {} bytes of dynamic shared memory (the limit is raised when over 48 KB)",
                grid_doc.join(", "), spec.threads.0, c.plan.smem.total),
        },
        doc_invalid: if p.tma.is_some() { "the grid exceeds CUDA's limits, or a tensor map cannot describe the tensors".into() } else { "the grid exceeds CUDA's limits".into() },
        doc_errors: "cudaFuncSetAttribute or the launch".into(),
        why: p.why.clone(),
        why_a: p.why_a.clone(),
        why_w: p.why_w.clone(),
        mma_atom: if half == crate::ast::DType::F16 { "SM80_16x8x16_F32F16F16F32_TN" } else { "SM80_16x8x16_F32BF16BF16F32_TN" }.into(),
        row_groups: p.row_groups,
        k_split: p.k_split,
        m_tiles: p.m_tiles,
        small_m: p.small_m,
        group: p.group,
        zero: if let DequantZero::Constant(z) = p.zero { Some(z) } else { None },
        zp: zeros.map(|(t, b, id)| ZeroPointsCtx {
            tensor: tname(t),
            ld: ld(t),
            elem: element_alias(&tname(t)),
            tile: bname(b),
            tile_line: c.line(spec.buffers[b].span),
            copy_text: text(id),
        }),
        a: tname(ta),
        wq: tname(tw),
        sc: tname(ts),
        c: tname(tc),
        m_ext: spec.tensors[ta].shape[0].text(),
        n_ext: spec.tensors[tw].shape[0].text(),
        k_ext: spec.tensors[ta].shape[1].text(),
        wq_ld: ld(tw),
        sc_ld: ld(ts),
        c_ld: ld(tc),
        a_elem: element_alias(&tname(ta)),
        wq_elem: element_alias(&tname(tw)),
        sc_elem: element_alias(&tname(ts)),
        c_elem: element_alias(&tname(tc)),
        a_s_elem: element_alias(&bname(a_s)),
        wq_s_elem: element_alias(&bname(wq_s)),
        s_s_elem: element_alias(&bname(s_s)),
        a_s: bname(a_s),
        wq_s: bname(wq_s),
        s_s: bname(s_s),
        acc: bname(acc),
        m_rows: extent(a_s, 0),
        k_cols: extent(a_s, 1),
        n_rows: extent(wq_s, 0),
        w_cols: extent(wq_s, 1),
        s_cols: extent(s_s, 1),
        stages,
        prefetch: p.prefetch,
        a_pad: p.a_layout.pad,
        a_swizzle,
        a_period,
        w_pad: p.w_layout.pad,
        w_swizzle,
        w_period,
        m0: origin(p.copies[0], 0),
        n0: origin(p.copies[1], 0),
        num_tiles: count,
        tma: p.tma.as_ref().map(|t| TmaCtx {
            producer_threads: crate::layout::PRODUCER_THREADS,
            span: t.span,
            scale_copies: t.scale_copies,
            min_blocks: t.min_blocks,
            a_type: if half == crate::ast::DType::F16 { "CU_TENSOR_MAP_DATA_TYPE_FLOAT16" } else { "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16" }.into(),
            tile_rows: if p.small_m { format!("decode ? 8 : {}", 8 * p.m_tiles) } else { (8 * p.m_tiles).to_string() },
        }),
        smem_align: if p.tma.is_some() { 1024 } else { 128 },
        gemm_line: line(p.gemm),
        dequant_line: line(p.dequant),
        pipeline_line: line(p.pipeline),
        pipeline_text: text(p.pipeline),
        store_line: line(p.store),
        store_text: text(p.store),
        copy_a_line: line(p.copies[0]),
        copy_w_line: line(p.copies[1]),
        copy_lines: {
            let mut l: Vec<usize> = p.copies.iter().copied().chain(zeros.map(|(_, _, id)| id)).map(line).collect();
            l.sort();
            l.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
        },
        copy_a_text: text(p.copies[0]),
        copy_w_text: text(p.copies[1]),
        copy_s_text: text(p.copies[2]),
        a_s_line: c.line(spec.buffers[a_s].span),
        wq_s_line: c.line(spec.buffers[wq_s].span),
        s_s_line: c.line(spec.buffers[s_s].span),
        acc_line: c.line(spec.buffers[acc].span),
    }
}
