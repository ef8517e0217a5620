//! The template context of the thin-tile 4-bit-weight GEMM ([`DequantGemmPlan`]): the spec's
//! names, the plan's numbers and layouts, and the comments tying them to spec lines.

use super::common::{block_indices_ctx, constants_ctx, element_alias, elements_ctx, grid_ctx, kernel_signature, swizzle_text, BlockIndexCtx, ConstantCtx, ElementCtx, PlainEnv};
use super::context::dequant_int4x2_helpers;
use crate::back::conv::Conv;
use crate::back::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use crate::ast::StmtId;
use crate::layout::{DequantGemmPlan, DequantZero, PaddedLayout};
use crate::Compiled;
use serde::Serialize;

/// 16- and 2-byte loads from shared memory at 32-bit shared addresses.
const LD_SHARED: &str = helper!("ld_shared_cp_async.cuh");
/// sm_80 mbarriers: the pipeline's full and empty stages.
const MBARRIER: &str = helper!("mbarrier_sm80.cuh");
/// A barrier over the consumer threads (the producer warp leaves early).
const CONSUMER_SYNC: &str = helper!("consumer_sync.cuh");
/// Programmatic dependent launch: wait for the kernel before, let the next one launch (sm_90).
const GRID_DEPENDENCY: &str = helper!("grid_dependency.cuh");
/// A bulk L2 prefetch (sm_90): the cp.async flavour's first weight tiles, before its wait.
const PREFETCH_L2: &str = helper!("prefetch_l2.cuh");
/// The loaded code's PTX version, asked once per device (the cp.async flavour's launcher).
const LOADED_PTX_VERSION: &str = helper!("loaded_ptx_version.cuh");
/// What the launcher's header says of programmatic dependent launch (both flavours).
const DOC_PDL: &str = "with programmatic dependent launch: the kernel may start while the one before it in `stream` finishes, and waits for it before it reads or writes global memory (it may first prefetch its first weight tiles into L2, a hint that cannot show it stale data)";
/// A scale's 16 bits as a float, for scaling each step's f32 sums (`scale_per_step`).
const HALF_BITS_TO_FLOAT: &str = helper!("half_bits_to_float.cuh");

/// The spec's names and the plan's choices that both dequant GEMM templates (the thin-tile
/// flavours and sm90a's wide tiles) read: the kernel's signature and grid, the operands'
/// names, types, extents and row strides, and the spec lines and texts the comments quote.
#[derive(Serialize)]
pub struct OperandsCtx {
    #[serde(flatten)]
    pub header: HeaderCtx,
    #[serde(flatten)]
    pub launcher_ctx: LauncherCtx,
    pub threads: i64,
    pub constants: Vec<ConstantCtx>,
    pub elements: Vec<ElementCtx>,
    pub block_indices: Vec<BlockIndexCtx>,
    pub kernel_params: Vec<String>,
    pub kernel_args: Vec<String>,
    pub grid: Vec<String>,
    pub grid_limits: Vec<String>,
    /// Why the lowering, for the comments.
    pub why: String,
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
    /// Spare slots per row of the scales' shared tile (rows that start mid-word).
    pub scale_slack: i64,
    pub stages: String,
    /// The weight tile's origin (C's columns) and the main loop's trip count.
    pub n0: String,
    pub num_tiles: String,
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
    pub a_s_line: usize,
    pub wq_s_line: usize,
    pub s_s_line: usize,
    pub acc_line: usize,
}

/// The plan's statements and operands [`operands_ctx`] reads (both dequant GEMM plans have them).
pub(super) struct PlanRefs<'p> {
    /// Tensor indices: A, Wq, scales, C.
    pub tensors: [usize; 4],
    /// Buffer indices: A_s, Wq_s, S_s, W_s, acc.
    pub buffers: [usize; 5],
    /// The pipelined loop, its gemm, its dequant and the store.
    pub stmts: [StmtId; 4],
    /// The copies of A's, the words' and the scales' tiles.
    pub copies: [StmtId; 3],
    pub stages: i64,
    pub group: i64,
    pub zero: &'p DequantZero,
    pub why: &'p str,
}

/// The shared context for a plan's statements and operands.
pub(super) fn operands_ctx(c: &Compiled, p: PlanRefs) -> OperandsCtx {
    let spec = &c.spec;
    let st = SpecText::new(c);
    let [ta, tw, ts, tc] = p.tensors;
    let [a_s, wq_s, s_s, _w_s, acc] = p.buffers;
    let [pipeline, gemm, dequant, store] = p.stmts;
    let (count, stages) = st.pipeline(pipeline, p.stages);
    let (grid, grid_limits, _) = grid_ctx(c);
    let (kernel_params, kernel_args) = kernel_signature(c);
    let buffer_line = |b: usize| c.line(spec.buffers[b].span);
    OperandsCtx {
        header: header(c),
        launcher_ctx: launcher(c),
        threads: spec.threads.0,
        constants: constants_ctx(c),
        elements: elements_ctx(c),
        block_indices: block_indices_ctx(c),
        kernel_params,
        kernel_args,
        grid,
        grid_limits,
        why: p.why.to_string(),
        group: p.group,
        zero: if let DequantZero::Constant(z) = p.zero { Some(*z) } else { None },
        zp: st.zero_points(p.zero),
        a: st.tensor(ta),
        wq: st.tensor(tw),
        sc: st.tensor(ts),
        c: st.tensor(tc),
        m_ext: spec.tensors[ta].shape[0].text(),
        n_ext: spec.tensors[tw].shape[0].text(),
        k_ext: spec.tensors[ta].shape[1].text(),
        wq_ld: st.ld(tw),
        sc_ld: st.ld(ts),
        c_ld: st.ld(tc),
        a_elem: element_alias(&st.tensor(ta)),
        wq_elem: element_alias(&st.tensor(tw)),
        sc_elem: element_alias(&st.tensor(ts)),
        c_elem: element_alias(&st.tensor(tc)),
        a_s_elem: element_alias(&st.buffer(a_s)),
        wq_s_elem: element_alias(&st.buffer(wq_s)),
        s_s_elem: element_alias(&st.buffer(s_s)),
        a_s: st.buffer(a_s),
        wq_s: st.buffer(wq_s),
        s_s: st.buffer(s_s),
        acc: st.buffer(acc),
        m_rows: st.extent(a_s, 0),
        k_cols: st.extent(a_s, 1),
        n_rows: st.extent(wq_s, 0),
        w_cols: st.extent(wq_s, 1),
        s_cols: st.extent(s_s, 1),
        scale_slack: crate::layout::SCALE_SLACK,
        stages,
        n0: st.origin(p.copies[1], 0),
        num_tiles: count,
        gemm_line: st.line(gemm),
        dequant_line: st.line(dequant),
        pipeline_line: st.line(pipeline),
        pipeline_text: st.text(pipeline),
        store_line: st.line(store),
        store_text: st.text(store),
        copy_a_line: st.line(p.copies[0]),
        copy_w_line: st.line(p.copies[1]),
        copy_s_line: st.line(p.copies[2]),
        copy_a_text: st.text(p.copies[0]),
        copy_w_text: st.text(p.copies[1]),
        copy_s_text: st.text(p.copies[2]),
        a_s_line: buffer_line(a_s),
        wq_s_line: buffer_line(wq_s),
        s_s_line: buffer_line(s_s),
        acc_line: buffer_line(acc),
    }
}

/// The thin-tile templates' context: [`OperandsCtx`] and the plan's own numbers.
#[derive(Serialize)]
pub struct Context {
    #[serde(flatten)]
    pub operands: OperandsCtx,
    /// The shared memory the plan counts (odd-rows instantiation), asserted against sizeof.
    pub smem_total: u64,
    pub target_banner: String,
    pub helpers: Vec<String>,
    /// Standard headers the helpers need besides `<cstdint>` (`<atomic>` for [`LOADED_PTX_VERSION`]).
    pub std_headers: Vec<&'static str>,
    pub doc_launch: String,
    pub doc_invalid: String,
    pub doc_errors: String,
    pub why_a: String,
    pub why_w: String,
    pub mma_atom: String,
    pub row_groups: i64,
    pub k_split: i64,
    pub m_tiles: i64,
    pub small_m: bool,
    /// k-tiles a thread's copies run ahead of its MMAs (the plan's `prefetch`).
    pub prefetch: i64,
    /// Shared layouts: padding, `Swizzle<..>` arguments and the swizzle's period (elements).
    pub a_pad: i64,
    pub a_swizzle: String,
    pub a_period: i64,
    pub w_pad: i64,
    pub w_swizzle: String,
    pub w_period: i64,
    /// The tile origin of the block's rows of A (and C).
    pub m0: String,
    /// sm90a's TMA flavour (see `DequantGemmTma`), read only by its template (which `render`
    /// picks when this is set).
    pub tma: Option<TmaCtx>,
    /// The plan's `scale_per_step()`: the scales multiply each step's f32 sums.
    pub scale_per_step: bool,
    /// The unpacking each pair of weights calls (`dequant_int4x2_exact` when the scales wait for
    /// the step's sums, else `dequant_int4x2`), its arguments after the word and the pair
    /// index for weight rows w_row and w_row + 8, and the sums its MMAs add into (`step`, or
    /// `accum` directly).
    pub unpack: String,
    pub unpack_args: [String; 2],
    pub mma_sums: String,
    /// The packed words' order (`sequential` or `interleaved`), for the comments.
    pub order: &'static str,
    /// Alignment of the stage buffers (the 128-byte swizzle's 1024-byte period with TMA).
    pub smem_align: i64,
    /// The copies' spec lines, sorted, for the producer's comment.
    pub copy_lines: String,
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

/// What both dequant GEMM contexts (this one and the wide-tile one) quote from the spec: names,
/// tile extents as written, spec lines and statement texts.
pub(super) struct SpecText<'c> {
    c: &'c Compiled,
    conv: Conv<'c>,
}

impl<'c> SpecText<'c> {
    pub(super) fn new(c: &'c Compiled) -> Self {
        SpecText { c, conv: Conv { spec: &c.spec, info: &c.info, hip: false, fp8_in_software: false } }
    }

    /// Tensor `t`'s name.
    pub(super) fn tensor(&self, t: usize) -> String {
        self.c.spec.tensors[t].name.name.clone()
    }

    /// Buffer `b`'s name.
    pub(super) fn buffer(&self, b: usize) -> String {
        self.c.spec.buffers[b].name.name.clone()
    }

    /// Dimension `d` of buffer `b` as the spec wrote it, parenthesised where it is an expression.
    pub(super) fn extent(&self, b: usize, d: usize) -> String {
        let e = self.conv.expr(&self.c.spec.buffers[b].shape[d], &PlainEnv);
        if e.contains(' ') && !e.starts_with('(') { format!("({e})") } else { e }
    }

    /// Tensor `t`'s row stride (its second dimension) as written.
    pub(super) fn ld(&self, t: usize) -> String {
        self.c.spec.tensors[t].shape[1].text()
    }

    /// The spec line of statement `id`.
    pub(super) fn line(&self, id: StmtId) -> usize {
        self.c.spec.stmt(id).map_or(0, |s| self.c.line(s.span))
    }

    /// The text of statement `id`.
    pub(super) fn text(&self, id: StmtId) -> String {
        self.c.spec.stmt(id).map_or(String::new(), |s| self.c.file.snippet(s.span).to_string())
    }

    /// Coordinate `d` of the source origin of copy `id`, as C++.
    pub(super) fn origin(&self, id: StmtId, d: usize) -> String {
        match self.c.spec.stmt(id).map(|s| &s.kind) {
            Some(crate::ast::StmtKind::Copy { src, .. }) => src.origin.as_ref().and_then(|o| o.get(d)).map_or("0".into(), |e| self.conv.expr(e, &PlainEnv)),
            _ => "0".into(),
        }
    }

    /// The per-group zero points' context, with `zeros=`.
    pub(super) fn zero_points(&self, zero: &DequantZero) -> Option<ZeroPointsCtx> {
        let DequantZero::PerGroup { copy, tensor, buffer } = *zero else { return None };
        Some(ZeroPointsCtx {
            tensor: self.tensor(tensor),
            ld: self.ld(tensor),
            elem: element_alias(&self.tensor(tensor)),
            tile: self.buffer(buffer),
            tile_line: self.c.line(self.c.spec.buffers[buffer].span),
            copy_text: self.text(copy),
        })
    }

    /// The pipelined loop `id`'s trip count as C++ and its stage count as written (`stages`,
    /// the planned count, where the spec wrote none).
    pub(super) fn pipeline(&self, id: StmtId, stages: i64) -> (String, String) {
        match self.c.spec.stmt(id).map(|s| &s.kind) {
            Some(crate::ast::StmtKind::Loop { count, stages: st, .. }) => (self.conv.expr(count, &PlainEnv), st.as_ref().map_or(stages.to_string(), |e| self.c.file.snippet(e.span).to_string())),
            _ => (String::new(), stages.to_string()),
        }
    }
}

/// A layout's `Swizzle<..>` arguments and the swizzle's period in elements (the offsets it
/// leaves alone when added).
fn swizzle_args(l: PaddedLayout) -> (String, i64) {
    let s = l.swizzle;
    (swizzle_text(s), if s.bits == 0 { 1 } else { 1i64 << (s.base + s.shift + s.bits) })
}

/// The context for a spec planned with `p`.
pub fn build(c: &Compiled, p: &DequantGemmPlan) -> Context {
    let spec = &c.spec;
    let st = SpecText::new(c);
    let half = spec.buffers[p.buffers[0]].dtype.0;
    let (a_swizzle, a_period) = swizzle_args(p.a_layout);
    let (w_swizzle, w_period) = swizzle_args(p.w_layout);
    let (_, _, grid_doc) = grid_ctx(c);
    let order = spec.nibble_order();
    let zeros = match p.zero {
        DequantZero::PerGroup { copy, .. } => Some(copy),
        DequantZero::Constant(_) => None,
    };
    let target = c.plan.target;
    let operands = operands_ctx(c, PlanRefs {
        tensors: p.tensors,
        buffers: p.buffers,
        stmts: [p.pipeline, p.gemm, p.dequant, p.store],
        copies: p.copies,
        stages: p.stages,
        group: p.group,
        zero: &p.zero,
        why: &p.why,
    });
    Context {
        operands,
        smem_total: c.plan.smem.total,
        target_banner: match target {
            crate::target::Target::Sm90a if p.tma.is_some() => "Target sm90a: the thin-tile 4-bit-weight GEMM (a TMA producer warp filling mbarrier stages, weights unpacked into mma.sync's A operand).".into(),
            crate::target::Target::Sm90a => "Target sm90a: the thin-tile 4-bit-weight GEMM (cp.async multistage on mbarriers, weights unpacked into mma.sync's A operand), built for sm_90a.".into(),
            _ => "Target sm80: the thin-tile 4-bit-weight GEMM (cp.async multistage on mbarriers, weights unpacked into mma.sync's A operand; runs on sm_80 and later).".into(),
        },
        helpers: {
            // The scaled unpacking only where pairs are scaled before their MMAs (the TMA flavour);
            // per-step scaling reads each scale as a float instead.
            let mut h: Vec<String> = dequant_int4x2_helpers(order, !p.scale_per_step()).collect();
            if p.scale_per_step() {
                h.push(HALF_BITS_TO_FLOAT.into());
            }
            h.extend([LD_SHARED.into(), super::context::CP_ASYNC_4_BYTES.into(), MBARRIER.into()]);
            if p.tma.is_some() {
                h.extend([CONSUMER_SYNC, GRID_DEPENDENCY].map(String::from));
            } else {
                h.extend([GRID_DEPENDENCY, PREFETCH_L2, LOADED_PTX_VERSION].map(String::from));
            }
            h
        },
        std_headers: if p.tma.is_some() { vec![] } else { vec!["atomic"] },
        // The plan counts the scales' rows as the odd-rows instantiation has them (the larger).
        doc_launch: match &p.tma {
            Some(_) => format!("grid ({}), {} threads (the spec's {} and a TMA producer warp), up to {} bytes of dynamic shared memory (less with an even number of scales per row; the limit is raised when over 48 KB), {DOC_PDL}",
                grid_doc.join(", "), spec.threads.0 + crate::layout::PRODUCER_THREADS, spec.threads.0, c.plan.smem.total),
            None => format!("grid ({}), {} threads, up to {} bytes of dynamic shared memory (less with an even number of scales per row; the limit is raised when over 48 KB); where the kernel's machine code was built from sm_90 or later PTX (as `tilegen build` builds sm_90 and later), {DOC_PDL}",
                grid_doc.join(", "), spec.threads.0, c.plan.smem.total),
        },
        doc_invalid: if p.tma.is_some() { "the grid exceeds CUDA's limits, or a tensor map cannot describe the tensors".into() } else { "the grid exceeds CUDA's limits".into() },
        doc_errors: if p.tma.is_some() { "cudaFuncSetAttribute or the launch" } else { "cudaGetDevice, cudaFuncGetAttributes (once per device), cudaFuncSetAttribute or the launch" }.into(),
        why_a: p.why_a.clone(),
        why_w: p.why_w.clone(),
        mma_atom: if half == crate::ast::DType::F16 { "SM80_16x8x16_F32F16F16F32_TN" } else { "SM80_16x8x16_F32BF16BF16F32_TN" }.into(),
        row_groups: p.row_groups,
        k_split: p.k_split,
        m_tiles: p.m_tiles,
        small_m: p.small_m,
        prefetch: p.prefetch,
        a_pad: p.a_layout.pad,
        a_swizzle,
        a_period,
        w_pad: p.w_layout.pad,
        w_swizzle,
        w_period,
        m0: st.origin(p.copies[0], 0),
        tma: p.tma.as_ref().map(|t| TmaCtx {
            producer_threads: crate::layout::PRODUCER_THREADS,
            span: t.span,
            scale_copies: t.scale_copies,
            min_blocks: t.min_blocks,
            a_type: if half == crate::ast::DType::F16 { "CU_TENSOR_MAP_DATA_TYPE_FLOAT16" } else { "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16" }.into(),
            tile_rows: if p.small_m { format!("decode ? 8 : {}", 8 * p.m_tiles) } else { (8 * p.m_tiles).to_string() },
        }),
        scale_per_step: p.scale_per_step(),
        unpack: if p.scale_per_step() { "dequant_int4x2_exact" } else { "dequant_int4x2" }.into(),
        unpack_args: ["lo", "hi"].map(|r| if p.scale_per_step() { format!("neg_bias_{r}") } else { format!("scale_{r}, neg_bias_{r}") }),
        mma_sums: if p.scale_per_step() { "step" } else { "accum" }.into(),
        order: order.name(),
        smem_align: if p.tma.is_some() { 1024 } else { 128 },
        copy_lines: {
            let mut l: Vec<usize> = p.copies.iter().copied().chain(zeros).map(|id| st.line(id)).collect();
            l.sort();
            l.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
        },
    }
}
