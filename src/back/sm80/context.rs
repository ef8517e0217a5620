//! Builds the flat template context for sm80: every name chosen, every C++ spelling made.

use super::body::{self, BodyItem};
use super::common::*;
use super::tma::{tma_barriers, tma_contexts, TmaCtx};
use crate::ast::*;
use crate::back::conv::cpp_type;
use crate::back::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use crate::diag::Diagnostic;
use crate::layout::{CopyKind, FragmentLayout, Swizzle};
use crate::Compiled;
use crate::back::conv::upper_first;
use serde::Serialize;

#[derive(Serialize)]
pub struct Context {
    #[serde(flatten)]
    pub header: HeaderCtx,
    pub threads: i64,
    /// sm90a: the gemms are warpgroup MMAs reading shared memory through descriptors.
    pub wgmma: bool,
    /// sm90a: global → shared copies are TMA loads completing on mbarriers.
    pub tma: bool,
    /// TMA loads: their host-side construction and kernel parameter types.
    pub tma_loads: Vec<TmaCtx>,
    /// The mbarriers in shared memory (after the buffers), and their initialisation.
    pub barriers: Vec<LineCtx>,
    pub barrier_inits: Vec<String>,
    /// sm90a: a producer warpgroup issues the TMA loads (`kProducerThreads` more threads,
    /// `setmaxnreg` targets for both roles), and the consumers' barriers are `sync`.
    pub ws: bool,
    pub ws_why: String,
    pub producer_regs: i64,
    pub consumer_regs: i64,
    /// The C++ of a barrier over the threads that run the spec's statements.
    pub sync: String,
    pub target_banner: String,
    pub helpers: Vec<String>,
    /// The kernel, its shared storage and the layouts of the buffers that copies with
    /// [`crate::layout::CopyPlan::odd_rows`] fill are templates over `kOddRows`, which the
    /// launcher picks by this condition.
    pub odd_rows: Option<OddRowsCtx>,
    /// `SharedStorage`, or `SharedStorage<kOddRows>` in the kernel of an odd-rows program.
    pub storage: String,
    /// What the launcher launches and with how many bytes of shared memory: the kernel and
    /// `kSmemBytes`, or the instantiation (`kernel`, `smem_bytes`) an odd-rows program picks.
    pub launch_kernel: String,
    pub launch_smem: String,
    pub constants: Vec<ConstantCtx>,
    pub elements: Vec<ElementCtx>,
    pub smem_layouts: Vec<SmemLayoutCtx>,
    pub mmas: Vec<MmaCtx>,
    /// Register fragments that are not a gemm's accumulator (declared after them).
    pub fragments: Vec<LineCtx>,
    pub g2s_copies: Vec<G2sCtx>,
    pub stores: Vec<StoreCtx>,
    pub pipeline_storage: Vec<MemberCtx>,
    pub staging_storage: Vec<MemberCtx>,
    /// The staging tiles share the buffers' space (every store runs after the loops).
    pub staging_union: bool,
    pub kernel_params: Vec<String>,
    pub kernel_args: Vec<String>,
    pub block_indices: Vec<BlockIndexCtx>,
    /// Grouped rasterization, which decodes two of the block indices (the others stay in
    /// `block_indices`).
    pub raster: Option<RasterCtx>,
    pub global_tensors: Vec<LineCtx>,
    pub shared_tensors: Vec<LineCtx>,
    pub body: Vec<BodyItem>,
    #[serde(flatten)]
    pub launcher_ctx: LauncherCtx,
    pub grid: Vec<String>,
    pub grid_limits: Vec<String>,
    pub doc_launch: String,
    pub doc_invalid: String,
    pub doc_errors: String,
}

#[derive(Serialize)]
pub struct OddRowsCtx {
    /// The launcher's test for the odd-rows instantiation, e.g. `(K / 128) % 2 != 0`.
    pub cond: String,
    pub why: String,
}

#[derive(Serialize)]
pub struct SmemLayoutCtx {
    pub name: String,
    /// A template over `kOddRows` whose rows are two elements wider in that instantiation.
    pub odd_rows: bool,
    pub buffer: String,
    pub line: usize,
    pub why: String,
    pub swizzle: String,
    pub atom_shape: String,
    pub atom_stride: String,
    pub tile_shape: String,
    pub modes: String,
    /// sm90a WGMMA path: the GMMA atom type the tile is built from (empty: the swizzle and
    /// atom above).
    pub gmma_atom: String,
    /// The atom's extents as text, e.g. `8x64`.
    pub atom_extent: String,
    /// A staged tile that TMA loads write: the extents of one stage (empty otherwise), for
    /// the `...Tile` layout the tensor map's boxes are built from.
    pub tma_tile: String,
}

#[derive(Serialize)]
pub struct MmaCtx {
    pub name: String,
    /// The earlier MMA type this one equals (mma.sync: atom, warps and tile; WGMMA: operation
    /// and warpgroups): the type is then an alias of it, with `same_as_note` saying so. Empty
    /// otherwise.
    pub same_as: String,
    pub same_as_note: String,
    pub line: usize,
    pub why: String,
    pub atom: String,
    /// sm90a: the warpgroup MMA operation (empty: mma.sync with `atom`).
    pub wgmma_op: String,
    /// sm90a: warpgroups stacked along M.
    pub warpgroups: i64,
    /// Whether A's and B's shared tiles have a stage mode (WGMMA partitions all stages).
    pub stage_a: bool,
    pub stage_b: bool,
    pub warps_m: i64,
    pub warps_n: i64,
    pub tile_m: i64,
    pub tile_n: i64,
    /// The MMA's K step as a CuTe integer: `_16`, or `Int<32>` for 8-bit operands.
    pub tile_k: String,
    pub s2r_a: String,
    pub s2r_b: String,
    pub s2r_a_atom: String,
    pub s2r_b_atom: String,
    pub s2r_a_why: String,
    pub s2r_b_why: String,
    pub elem_a: String,
    pub elem_b: String,
    // Kernel-side names.
    pub tiled_mma: String,
    pub thr_mma: String,
    pub frag_a: String,
    pub frag_b: String,
    pub s2r_thr_a: String,
    pub s2r_thr_b: String,
    pub s2r_copy_a: String,
    pub s2r_copy_b: String,
    pub src_a: String,
    pub src_b: String,
    pub dst_a: String,
    pub dst_b: String,
    pub smem_a: String,
    pub smem_b: String,
    pub stensor_a: String,
    pub stensor_b: String,
    pub k_blocks: i64,
    pub accumulators: Vec<LineCtx>,
    /// A is a register fragment: `frag_a_decl` views it as the MMA's A operand.
    pub a_in_registers: bool,
    /// A is loaded from shared memory by this gemm's own copies (not a register fragment, and
    /// not an earlier gemm's registers: `a_reuse_note` says whose).
    pub loads_a: bool,
    pub a_reuse_note: String,
    pub frag_a_decl: String,
    pub a_name: String,
    /// B is unpacked in registers by a fused dequant: `frag_b_decl` declares its fragment.
    pub b_in_registers: bool,
    pub frag_b_decl: String,
}

#[derive(Serialize)]
pub struct G2sCtx {
    pub name: String,
    pub line: usize,
    pub why: String,
    pub atom: String,
    pub elem: String,
    pub thr_shape: String,
    pub thr_stride: String,
    pub val_shape: String,
}

/// A store of an accumulator through a shared staging tile: the statement, and the staging
/// tile and copies it declares (named after the tensor, `key`).
#[derive(Serialize)]
pub struct StoreCtx {
    pub key: String,
    pub line: usize,
    pub why: String,
    #[serde(flatten)]
    pub staging: StagingCtx,
}

/// The staging tile of a [`StoreCtx`] and its copy types: two stores into one tensor may share
/// them only when they are equal.
#[derive(Serialize, PartialEq)]
pub struct StagingCtx {
    pub elem: String,
    pub r2s_atom: String,
    pub smem_layout: String,
    pub swizzle: String,
    pub atom_shape: String,
    pub atom_stride: String,
    pub tile_shape: String,
    pub s2g_atom: String,
    pub thr_shape: String,
    pub thr_stride: String,
    pub val_shape: String,
}

#[derive(Serialize)]
pub struct MemberCtx {
    pub elem: String,
    pub layout: String,
    pub member: String,
}

#[derive(Serialize)]
pub struct LineCtx {
    pub code: String,
    pub comment: String,
}

/// Unpacks one word of eight 4-bit values into 16-bit floats (dequant_int4), pair by pair.
const DEQUANT_INT4X8: &str = helper!("dequant_int4x8.cuh");

/// Finds a pair of neighbouring 4-bit values in a word packed in sequential order...
const INT4X2_PAIR: &str = helper!("int4x2_pair.cuh");
/// ... or in interleaved order.
const INT4X2_PAIR_INTERLEAVED: &str = helper!("int4x2_pair_interleaved.cuh");
/// Unpacks one pair of 4-bit values into a pair of 16-bit floats, value - zero exactly, and the
/// unpacking's bias for a zero point (fused dequant_int4).
const DEQUANT_INT4X2_EXACT: &str = helper!("dequant_int4x2_exact.cuh");
/// The same pair times its scale, rounded once; it calls the exact one.
const DEQUANT_INT4X2: &str = helper!("dequant_int4x2.cuh");

/// The pair unpacking's helpers, in the order they must appear: the one that finds a pair in a
/// word packed in `order`, the exact one, then (`scaled`) the one that scales each pair, which
/// calls it.
pub(super) fn dequant_int4x2_helpers(order: NibbleOrder, scaled: bool) -> impl Iterator<Item = String> {
    let pair = match order {
        NibbleOrder::Sequential => INT4X2_PAIR,
        NibbleOrder::Interleaved => INT4X2_PAIR_INTERLEAVED,
    };
    [pair, DEQUANT_INT4X2_EXACT].into_iter().chain(scaled.then_some(DEQUANT_INT4X2)).map(String::from)
}
/// cp.async of the first 0, 2 or 4 bytes of an aligned word: 16-bit rows that start or end
/// mid-word.
pub(super) const CP_ASYNC_4_BYTES: &str = helper!("cp_async_4_bytes.cuh");
/// The odd-rows instantiation's copy of a tile of 16-bit rows that may start mid-word
/// (`CopyPlan::odd_rows`), after [`CP_ASYNC_4_BYTES`], which it calls.
const CP_ASYNC_ROWS_FROM_WORDS: &str = helper!("cp_async_rows_from_words.cuh");

/// The (row, col) view of an SM80 m16n8 accumulator, for row statistics.
const ACC_ROWS_COLS: &str = helper!("acc_rows_cols.cuh");

/// The A-operand view of an accumulator, for register-sourced gemms.
const ACC_AS_OPERAND_A: &str = helper!("acc_as_operand_a.cuh");

/// The (row, col) view of an SM90 warpgroup MMA accumulator, for row statistics.
const ACC_ROWS_COLS_GMMA: &str = helper!("acc_rows_cols_gmma.cuh");

/// The register-A view of a warpgroup MMA accumulator, for register-sourced gemms.
const ACC_AS_OPERAND_A_GMMA: &str = helper!("acc_as_operand_a_gmma.cuh");

/// A barrier over the consumers only, for warp-specialised kernels.
const CONSUMER_SYNC: &str = helper!("consumer_sync.cuh");

/// The proxy fence between cp.async's shared-memory writes and WGMMA's reads.
const FENCE_VIEW_ASYNC_SHARED: &str = helper!("fence_view_async_shared.cuh");

/// A shared layout with its first two modes swapped, for transposed operand views.
const SWAP_MN: &str = helper!("swap_mn.cuh");

/// The suffix of gemm `gemm`'s TiledMma names (`tiled_mma1`, `thr_mma1`): its index among the
/// gemms, or nothing when there is one.
pub fn mma_suffix(c: &Compiled, gemm: StmtId) -> String {
    if c.plan.mmas.len() == 1 {
        String::new()
    } else {
        c.plan.mmas.keys().position(|k| *k == gemm).unwrap_or(0).to_string()
    }
}

/// The names of gemm `gemm`'s operand partitions of `buf`: the buffer's name, with the
/// gemm's index appended when several gemms read the buffer with partitions of their own (a
/// gemm taking an earlier gemm's A registers, `MmaPlan::a_from`, has none of A).
pub fn operand_key(c: &Compiled, gemm: StmtId, buf: usize) -> String {
    let name = &c.spec.buffers[buf].name.name;
    let readers = c.plan.mmas.values().filter(|m| (m.a == buf && m.a_from.is_none()) || m.b == buf).count();
    if readers > 1 {
        format!("{name}{}", c.plan.mmas.keys().position(|k| *k == gemm).unwrap_or(0))
    } else {
        name.clone()
    }
}


/// The register fragment gemm `gemm` multiplies as A: its own, or that of the gemm whose
/// registers it reuses (`MmaPlan::a_from`).
pub fn a_fragment(c: &Compiled, gemm: StmtId, m: &crate::layout::MmaPlan) -> String {
    format!("tCr{}", operand_key(c, m.a_from.unwrap_or(gemm), m.a))
}

/// Why a gemm whose A another gemm loaded has no copies of its own (`MmaPlan::a_from`), as a
/// sentence; empty for any other gemm.
pub fn a_reuse_note(c: &Compiled, m: &crate::layout::MmaPlan) -> String {
    let Some(source) = m.a_from else { return String::new() };
    let (a, line) = (&c.spec.buffers[m.a].name.name, c.spec.stmt(source).map_or(0, |s| c.line(s.span)));
    format!("A is `{a}` as spec {line}'s gemm loaded it into registers (the same MMA and view; nothing writes `{a}` in between): no second load.")
}

fn atom_text(shape: (i64, i64), first_contiguous: bool) -> (String, String) {
    let shape_s = format!("Int<{}>, Int<{}>", shape.0, shape.1);
    let stride_s = if first_contiguous { format!("_1, Int<{}>", shape.0) } else { format!("Int<{}>, _1", shape.1) };
    (shape_s, stride_s)
}

pub fn build(c: &Compiled) -> Result<Context, Vec<Diagnostic>> {
    let spec = &c.spec;
    let info = &c.info;
    let plan = &c.plan;
    let mut errors = Vec::new();

    let constants = constants_ctx(c);
    let elements = elements_ctx(c);

    // Shared layouts and tensors.
    let mut smem_layouts = Vec::new();
    let mut pipeline_storage = Vec::new();
    let mut shared_tensors = Vec::new();
    for (&b, l) in plan.shared.iter().filter(|(_, l)| !l.registers_only) {
        let buf = &spec.buffers[b];
        if l.cute_dims.len() != 2 {
            errors.push(Diagnostic::error(buf.shape_span, format!("the {} backend lowers 2-D shared buffers only", plan.target)).hint("give the buffer two dimensions"));
            continue;
        }
        let name = format!("SmemLayout{}", upper_first(&buf.name.name));
        let (atom_shape, atom_stride) = atom_text(l.atom_shape, l.atom_first_contiguous);
        let mut tile = static_extents(c, b, &l.cute_dims);
        // The odd-rows instantiation's rows have two more elements (see CopyPlan::odd_rows).
        let layout_ref = if l.odd_rows { format!("{name}<kOddRows>") } else { name.clone() };
        if l.odd_rows && let Some(cols) = tile.get_mut(1) {
            *cols = format!("{} + (kOddRows ? 2 : 0)>{{}}", cols.trim_end_matches(">{}"));
        }
        let dim_names = mode_names(c, b, l);
        let mut modes = format!("({})", dim_names.join(", "));
        if l.staged {
            tile.push(format!("Int<{}>{{}}", stage_count_text(c, b)));
            modes = format!("({}, stage)", dim_names.join(", "));
        }
        smem_layouts.push(SmemLayoutCtx {
            name: name.clone(),
            odd_rows: l.odd_rows,
            buffer: buf.name.name.clone(),
            line: c.line(buf.span),
            why: l.why(),
            swizzle: swizzle_text(l.swizzle),
            atom_shape,
            atom_stride,
            tile_shape: tile.join(", "),
            modes: modes.clone(),
            gmma_atom: l.gmma_atom.map_or(String::new(), |a| format!("{a}<{}>", element_alias(&buf.name.name))),
            atom_extent: format!("{}x{}", l.atom_shape.0, l.atom_shape.1),
            tma_tile: if l.staged && plan.copies.values().any(|cp| cp.buffer == b && cp.tma.is_some()) {
                static_extents(c, b, &l.cute_dims).join(", ")
            } else {
                String::new()
            },
        });
        pipeline_storage.push(MemberCtx { elem: element_alias(&buf.name.name), layout: layout_ref.clone(), member: buf.name.name.clone() });
        let storage = "smem.mainloop";
        shared_tensors.push(LineCtx {
            code: format!("Tensor s{} = make_tensor(make_smem_ptr({storage}.{}.data()), {layout_ref}{{}});", buf.name.name, buf.name.name),
            comment: modes,
        });
    }

    // MMAs.
    let mut mmas = Vec::new();
    // Buffers read (or written) through a view with modes 0 and 1 swapped, and what for.
    let mut transposed_views = std::collections::BTreeMap::new();
    for (i, (&sid, m)) in plan.mmas.iter().enumerate() {
        let sfx = if plan.mmas.len() == 1 { String::new() } else { format!("{i}") };
        let (a, b) = (&spec.buffers[m.a], &spec.buffers[m.b]);
        let (Some(lb), la) = (plan.shared.get(&m.b), plan.shared.get(&m.a)) else { continue };
        let stmt_line = spec.stmt(sid).map(|s| c.line(s.span)).unwrap_or(0);
        // Each gemm reads an operand K-major or MN-major by where its own K dim lies: a tile
        // can be one gemm's K-major B and another's M-major A (Kᵀ·V after Q·Kᵀ).
        let a_k_major = la.is_none_or(|l| m.k_major(true, l));
        let b_k_major = m.k_major(false, lb);
        let (s2r_a_atom, s2r_a_why) = ldsm(a_k_major, "A");
        let (mut s2r_b_atom, mut s2r_b_why) = ldsm(b_k_major, "B");
        let (ka, kb) = (operand_key(c, sid, m.a), operand_key(c, sid, m.b));
        let view = |buf: usize, t: bool| format!("s{}{}", spec.buffers[buf].name.name, if t { "_t" } else { "" });
        let (ta, tb) = (la.is_some_and(|l| m.transposed_view(true, l)), m.transposed_view(false, lb));
        let (view_a, view_b) = (view(m.a, ta), view(m.b, tb));
        for (t, buf) in [(ta, m.a), (tb, m.b)] {
            if t {
                transposed_views.entry(buf).or_insert("as a transposed gemm operand");
            }
        }
        if m.tile.1 == 8 * m.warps.1 {
            // One 8-wide MMA column per warp: half the 8x8 tiles per k-block.
            if !b_k_major {
                let g = spec.stmt(sid).map_or(spec.kernel.span, |s| s.span);
                errors.push(Diagnostic::error(g, "warp tiles one MMA (8) wide need B K-major in shared memory, and this B is N-major")
                    .hint("store B as [N, K] and use transpose_b=true, or widen the tile to 16 columns per warp"));
            }
            (s2r_b_atom, s2r_b_why) = ("SM75_U32x2_LDSM_N".into(), "B is K-major in shared memory and each warp's tile is one MMA (8) wide: ldmatrix.x2 loads its two 8x8 tiles per k-block".into());
        }
        let acc = &spec.buffers[m.c];
        let acc_shape = static_extents(c, m.c, &[0, 1]);
        // An accumulator several gemms add into is declared by the one that fixed its layout.
        let owns = matches!(plan.fragments.get(&m.c), Some(FragmentLayout::MmaAccumulator { gemm }) if *gemm == sid);
        let accumulators = if !owns { Vec::new() } else { vec![LineCtx {
            code: format!("Tensor {} = partition_fragment_C(tiled_mma{sfx}, make_shape({}));", acc.name.name, acc_shape.join(", ")),
            comment: format!("fragment `{}` (spec {}): (MMA, MMA_M, MMA_N), {} registers", acc.name.name, c.line(acc.span), cpp_type(acc.dtype.0)),
        }] };
        // mma.sync partitions one stage (the ldmatrix copies pick the stage); WGMMA makes a
        // descriptor per stage, so it partitions the whole staged tile.
        let one_stage = |staged: bool, v: &str| if staged && m.wgmma.is_none() { format!("{v}(_, _, 0)") } else { v.to_string() };
        let sa = one_stage(la.is_some_and(|l| l.staged), &view_a);
        let frag_a_decl = if m.a_in_registers {
            format!("Tensor tCr{n} = make_tensor({n}.data(), acc_as_operand_a({n}.layout()));  // (MMA, MMA_M, MMA_K): `{n}`'s registers as the A operand", n = a.name.name)
        } else {
            String::new()
        };
        let sb = one_stage(lb.staged, &view_b);
        mmas.push(MmaCtx {
            name: format!("TiledMma{sfx}"),
            same_as: String::new(),
            same_as_note: String::new(),
            line: stmt_line,
            why: m.why.clone(),
            atom: m.atom.clone(),
            wgmma_op: m.wgmma.as_ref().map_or(String::new(), |w| w.op.clone()),
            warpgroups: m.wgmma.as_ref().map_or(0, |w| w.warpgroups),
            stage_a: la.is_some_and(|l| l.staged),
            stage_b: lb.staged,
            warps_m: m.warps.0,
            warps_n: m.warps.1,
            tile_m: m.tile.0,
            tile_n: m.tile.1,
            tile_k: if m.tile.2 == 16 { "_16".into() } else { format!("Int<{}>", m.tile.2) },
            s2r_a: format!("S2RCopyAtom{}", upper_first(&ka)),
            s2r_b: format!("S2RCopyAtom{}", upper_first(&kb)),
            s2r_a_atom,
            s2r_b_atom,
            s2r_a_why,
            s2r_b_why,
            elem_a: element_alias(&a.name.name),
            elem_b: element_alias(&b.name.name),
            tiled_mma: format!("tiled_mma{sfx}"),
            thr_mma: format!("thr_mma{sfx}"),
            frag_a: a_fragment(c, sid, m),
            frag_b: format!("tCr{kb}"),
            s2r_thr_a: format!("s2r_thr_{ka}"),
            s2r_thr_b: format!("s2r_thr_{kb}"),
            s2r_copy_a: format!("s2r_copy_{ka}"),
            s2r_copy_b: format!("s2r_copy_{kb}"),
            src_a: format!("tXs{ka}"),
            src_b: format!("tXs{kb}"),
            dst_a: format!("tXr{ka}"),
            dst_b: format!("tXr{kb}"),
            smem_a: sa,
            smem_b: sb,
            stensor_a: view_a,
            stensor_b: view_b,
            k_blocks: m.k_blocks,
            accumulators,
            a_in_registers: m.a_in_registers,
            loads_a: m.loads_a(),
            a_reuse_note: a_reuse_note(c, m),
            frag_a_decl,
            a_name: a.name.name.clone(),
            b_in_registers: lb.registers_only,
            frag_b_decl: if lb.registers_only {
                format!("Tensor tCr{kb} = make_tensor<{}>(shape(thr_mma{sfx}.partition_B(make_identity_tensor(make_shape({})))));  // (MMA, MMA_N, MMA_K): `{}`'s B fragments, unpacked in registers",
                    element_alias(&b.name.name), static_extents(c, m.b, &[m.b_dims.0, m.b_dims.1]).join(", "), b.name.name)
            } else {
                String::new()
            },
        });
    }
    // An MMA type equal to an earlier one is declared as an alias of it.
    for i in 1..mmas.len() {
        let key = |m: &MmaCtx| (m.atom.clone(), m.wgmma_op.clone(), m.warpgroups, m.warps_m, m.warps_n, m.tile_m, m.tile_n, m.tile_k.clone());
        if let Some(j) = (0..i).find(|&j| mmas[j].same_as.is_empty() && key(&mmas[j]) == key(&mmas[i])) {
            let what = if mmas[j].wgmma_op.is_empty() { "atom, warps and tile" } else { "operation and warpgroups" };
            mmas[i].same_as_note = format!("the same {what} as spec {}'s", mmas[j].line);
            mmas[i].same_as = mmas[j].name.clone();
        }
    }
    // Accumulators are written into shared buffers in their (row, col) order: a buffer laid
    // out as a gemm operand with its spec dims swapped is written through the swapped view.
    for b in plan.copies.values().filter_map(|cp| cp.shared_dst) {
        if plan.shared.get(&b).is_some_and(|l| l.modes_swapped()) {
            transposed_views.entry(b).or_insert("in the (row, col) order of the accumulator written into it");
        }
    }
    for (b, what) in &transposed_views {
        let (buf, l) = (&spec.buffers[*b], &plan.shared[b]);
        let names = mode_names(c, *b, l);
        shared_tensors.push(LineCtx {
            code: format!("Tensor s{n}_t = make_tensor(s{n}.data(), swap_mn(s{n}.layout()));", n = buf.name.name),
            comment: format!("({}, {}{}): `{}` with its modes swapped, {what}", names[1], names[0], if l.staged { ", stage" } else { "" }, buf.name.name),
        });
    }
    // Other fragments: converted copies of accumulators and row statistics. Fragments
    // that nothing placed are not lowered by this backend yet.
    let mut fragments = Vec::new();
    let is_acc = |b: usize| plan.mmas.values().any(|m| m.c == b);
    for (&b, l) in &plan.fragments {
        let buf = &spec.buffers[b];
        let n = &buf.name.name;
        match l {
            FragmentLayout::Striped { .. } => {
                errors.push(Diagnostic::error(buf.name.span, format!("fragment `{n}` is not a gemm accumulator, a value computed from one, or row statistics of one; the {} backend places only those", plan.target))
                    .hint("use it as a gemm accumulator, or hold the data in a shared buffer"));
            }
            FragmentLayout::MmaAccumulator { gemm } if !is_acc(b) => {
                let src = &spec.buffers[plan.mmas[gemm].c].name.name;
                fragments.push(LineCtx {
                    code: format!("Tensor {n} = make_fragment_like<{}>({src});", element_alias(n)),
                    comment: format!("fragment `{n}` (spec {}): laid out as `{src}`, {} registers", c.line(buf.span), cpp_type(buf.dtype.0)),
                });
            }
            FragmentLayout::MmaAccumulator { .. } => {}
            FragmentLayout::RowStats { gemm } => {
                let m = &plan.mmas[gemm];
                let rows = m.rows_per_thread();
                fragments.push(LineCtx {
                    code: format!("Tensor {n} = make_tensor<{}>(Shape<Int<{rows}>>{{}});", element_alias(n)),
                    comment: format!("fragment `{n}` (spec {}): one value per accumulator row this thread holds (2 per 16-row MMA tile)", c.line(buf.span)),
                });
            }
        }
    }

    // Copies.
    let mut g2s_copies = Vec::new();
    let mut stores = Vec::new();
    let mut staging_storage = Vec::new();
    for (&sid, cp) in &plan.copies {
        let line = spec.stmt(sid).map(|s| c.line(s.span)).unwrap_or(0);
        match cp.kind {
            CopyKind::GlobalToShared if cp.tma.is_some() => {}
            CopyKind::GlobalToShared => {
                let buf = &spec.buffers[cp.buffer];
                let (ts, tst) = thread_layout_text(cp.threads.shape, cp.threads.contiguous_first);
                let val = if cp.threads.contiguous_first { format!("Int<{}>, _1", cp.vector_elems) } else { format!("_1, Int<{}>", cp.vector_elems) };
                g2s_copies.push(G2sCtx {
                    name: format!("G2SCopy{}", upper_first(&buf.name.name)),
                    line,
                    why: cp.why.clone(),
                    atom: cp.atom.clone(),
                    elem: element_alias(&buf.name.name),
                    thr_shape: ts,
                    thr_stride: tst,
                    val_shape: val,
                });
            }
            CopyKind::AccumulatorToShared => {}
            CopyKind::AccumulatorToGlobal => {
                let Some(t) = cp.tensor.map(|t| &spec.tensors[t]) else { continue };
                let key = t.name.name.clone();
                let (swz, atom) = cp.staging_swizzle.unwrap_or((Swizzle { bits: 0, base: 3, shift: 3 }, (8, 8)));
                let contiguous_first = cp.threads.contiguous_first;
                let (atom_shape, atom_stride) = atom_text(atom, contiguous_first);
                let (ts, tst) = thread_layout_text(cp.threads.shape, contiguous_first);
                let val = if contiguous_first { format!("Int<{}>, _1", cp.vector_elems) } else { format!("_1, Int<{}>", cp.vector_elems) };
                let pair_bits = 2 * t.dtype.0.bytes() * 8;
                let layout = format!("SmemLayout{}", upper_first(&key));
                let staging = StagingCtx {
                    elem: element_alias(&key),
                    r2s_atom: format!("UniversalCopy<uint{pair_bits}_t>"),
                    smem_layout: layout.clone(),
                    swizzle: swizzle_text(swz),
                    atom_shape,
                    atom_stride,
                    tile_shape: static_extents(c, cp.buffer, &[0, 1]).join(", "),
                    s2g_atom: cp.atom.clone(),
                    thr_shape: ts,
                    thr_stride: tst,
                    val_shape: val,
                };
                let store = StoreCtx { key: key.clone(), line, why: cp.why.clone(), staging };
                // Stores into one tensor share its staging tile and copy types (named after the
                // tensor) when they lay it out alike; otherwise the names would clash.
                if let Some(first) = stores.iter().find(|s: &&StoreCtx| s.key == key) {
                    if first.staging != store.staging {
                        let at = spec.stmt(sid).map_or(spec.kernel.span, |s| s.span);
                        errors.push(Diagnostic::error(at, format!("this store into `{key}` stages its tile unlike the store at spec {}, and the {} backend gives a tensor one staging tile", first.line, plan.target))
                            .hint("store both from accumulators of one shape and element type, or into different tensors"));
                    }
                    continue;
                }
                stores.push(store);
                staging_storage.push(MemberCtx { elem: element_alias(&key), layout, member: key });
            }
        }
    }

    // Kernel parameters and global tensors.
    let (mut kernel_params, mut kernel_args) = kernel_signature(c);
    let mut global_tensors = Vec::new();
    let mut tensor_codes = std::collections::BTreeMap::new();
    for (ti, t) in spec.tensors.iter().enumerate() {
        let n = &t.name.name;
        let dims: Vec<String> = t.shape.iter().map(Dim::text).collect();
        // Constant extents are static in the shape (and cannot bind to make_shape's
        // references in device code anyway).
        let static_dims: Vec<String> = t.shape.iter().zip(&dims).map(|(d, n)| match d {
            Dim::Fixed(v, _) => format!("Int<{v}>{{}}"),
            Dim::Named(i) if info.const_int(&i.name).is_some() => format!("Int<{n}>{{}}"),
            Dim::Div(..) => match d.eval(|n| info.const_int(n)) {
                Some(v) => format!("Int<{v}>{{}}"),
                None => n.clone(),
            },
            Dim::Named(_) => n.clone(),
        }).collect();
        let order = if t.shape.len() == 2 { if t.order.0 == Order::RowMajor { ", row-major" } else { ", column-major" } } else { "" };
        let (shape, stride) = match (dims.len(), t.order.0) {
            (1, _) => (static_dims[0].clone(), "_1{}".to_string()),
            (2, Order::RowMajor) => (format!("{}, {}", static_dims[0], static_dims[1]), format!("int64_t({}), _1{{}}", dims[1])),
            (2, Order::ColMajor) => (format!("{}, {}", static_dims[0], static_dims[1]), format!("_1{{}}, int64_t({})", dims[0])),
            _ => {
                let mut strides = vec!["_1{}".to_string()];
                let mut acc = String::new();
                for d in dims.iter().rev().take(dims.len() - 1) {
                    acc = if acc.is_empty() { format!("int64_t({d})") } else { format!("{acc} * {d}") };
                    strides.insert(0, acc.clone());
                }
                (static_dims.join(", "), strides.join(", "))
            }
        };
        if plan.copies.values().any(|cp| cp.tensor == Some(ti)) {
            let line = LineCtx {
                code: format!("Tensor m{n} = make_tensor(make_gmem_ptr({n}), make_shape({shape}), make_stride({stride}));"),
                comment: format!("{n} [{}]{order}", dims.join(", ")),
            };
            tensor_codes.insert(ti, (line.code.clone(), dims.clone()));
            global_tensors.push(line);
        }
    }
    let tma_loads = tma_contexts(c, &tensor_codes);
    for t in &tma_loads {
        kernel_params.push(format!("CUTE_GRID_CONSTANT {} const {}", t.name, t.var));
        kernel_args.push(t.var.clone());
    }
    let (barriers, barrier_inits) = tma_barriers(c, &tma_loads);
    let raster = raster_ctx(c);
    // The rasterized indices are decoded from the block's place in the grid; the rest (a
    // batch index on z) stay as they are.
    let mut block_indices = block_indices_ctx(c);
    if let Some(r) = &raster {
        block_indices.retain(|b| b.name != r.group_var && b.name != r.walk_var);
    }
    let (grid, grid_limits, grid_doc) = grid_ctx(c);
    // Copies whose rows may start mid-word (the planner gives every such copy rows of the same
    // length): the launcher picks the instantiation by that length's parity.
    let odd_tensor = plan.copies.values().find(|cp| cp.odd_rows).and_then(|cp| cp.tensor).map(|t| &spec.tensors[t]);
    let doc_launch = format!(
        "grid ({}), {} threads, {}{} bytes of dynamic shared memory ({}the limit is raised when over 48 KB)",
        grid_doc.join(", "),
        match &plan.warp_specialization {
            Some(w) => format!("{} (the spec's {} and a producer warpgroup of {})", spec.threads.0 + w.producer_threads, spec.threads.0, w.producer_threads),
            None => spec.threads.0.to_string(),
        },
        if odd_tensor.is_some() { "up to " } else { "" },
        plan.smem.total,
        odd_tensor.map_or(String::new(), |t| format!("less with an even number of `{}` per row; ", t.name.name)));

    let body = body::build(c, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    // Helpers called by name (float_to_i8, gelu_erf, ...) are added when rendering.
    let mut helpers: Vec<String> = Vec::new();
    let wgmma = plan.mmas.values().any(|m| m.wgmma.is_some());
    if plan.fragments.values().any(|f| matches!(f, FragmentLayout::RowStats { .. })) {
        helpers.push(if wgmma { ACC_ROWS_COLS_GMMA } else { ACC_ROWS_COLS }.into());
    }
    if plan.mmas.values().any(|m| m.a_in_registers) {
        helpers.push(if wgmma { ACC_AS_OPERAND_A_GMMA } else { ACC_AS_OPERAND_A }.into());
    }
    // The proxy fence publishes generic-proxy writes (cp.async, zero fills, accumulator
    // stores, unpacked weights) to warpgroup MMAs; TMA loads need none.
    let generic_writes = plan.copies.values().any(|cp| cp.kind == CopyKind::AccumulatorToShared || (cp.kind == CopyKind::GlobalToShared && cp.tma.is_none()))
        || plan.dequants.values().any(|d| d.fused_into.is_none());
    if wgmma && generic_writes {
        helpers.push(FENCE_VIEW_ASYNC_SHARED.into());
    }
    // dequant_int4x8 is four calls of dequant_int4x2, which comes first.
    if !plan.dequants.is_empty() {
        helpers.extend(dequant_int4x2_helpers(c.spec.nibble_order(), true));
    }
    if plan.dequants.values().any(|d| d.fused_into.is_none()) {
        helpers.push(DEQUANT_INT4X8.into());
    }
    if !transposed_views.is_empty() {
        helpers.push(SWAP_MN.into());
    }
    let ws = plan.warp_specialization.as_ref();
    if ws.is_some() {
        helpers.push(CONSUMER_SYNC.into());
    }
    let odd_rows = odd_tensor.map(|t| OddRowsCtx {
        cond: format!("{} % 2 != 0", t.shape[1].text()),
        why: format!("every other row of `{}` starts 2 bytes into a word", t.name.name),
    });
    if odd_rows.is_some() {
        helpers.push(CP_ASYNC_4_BYTES.into());
        helpers.push(CP_ASYNC_ROWS_FROM_WORDS.into());
    }
    Ok(Context {
        helpers,
        storage: if odd_rows.is_some() { "SharedStorage<kOddRows>".into() } else { "SharedStorage".into() },
        launch_kernel: if odd_rows.is_some() { "kernel".into() } else { format!("{}_kernel", spec.kernel.name) },
        launch_smem: if odd_rows.is_some() { "smem_bytes".into() } else { "kSmemBytes".into() },
        odd_rows,
        header: header(c),
        threads: spec.threads.0,
        wgmma,
        tma: !tma_loads.is_empty(),
        ws: ws.is_some(),
        ws_why: ws.map_or(String::new(), |w| w.why.clone()),
        producer_regs: ws.map_or(0, |w| w.producer_regs),
        consumer_regs: ws.map_or(0, |w| w.consumer_regs),
        sync: if ws.is_some() { "consumer_sync()".into() } else { "__syncthreads()".into() },
        tma_loads,
        barriers,
        barrier_inits,
        target_banner: match plan.target {
            crate::target::Target::Sm80 => "Target sm80: cp.async multistage pipeline, ldmatrix, mma.sync (runs on sm_80 and later).".into(),
            crate::target::Target::Gfx942 | crate::target::Target::Gfx90a => String::new(),
            crate::target::Target::Sm90a if wgmma && plan.warp_specialization.is_some() => "Target sm90a, WGMMA path, warp-specialised: a producer warpgroup issues TMA loads completing on mbarriers, the consumer warpgroups run every gemm as warpgroup MMAs (wgmma.mma_async) reading shared memory through descriptors.".into(),
            crate::target::Target::Sm90a if wgmma && plan.cp_async_reason.is_none() => format!("Target sm90a, WGMMA path: TMA loads completing on mbarriers (one thread issues them, every thread computes: no producer warpgroup, since {}), every gemm a warpgroup MMA (wgmma.mma_async) reading shared memory through descriptors.",
                plan.ws_reason.as_deref().unwrap_or("no reason recorded")),
            crate::target::Target::Sm90a if wgmma => format!("Target sm90a, WGMMA path: cp.async multistage pipeline (not TMA: {}), every gemm a warpgroup MMA (wgmma.mma_async) reading shared memory through descriptors.",
                plan.cp_async_reason.as_deref().unwrap_or("no reason recorded")),
            crate::target::Target::Sm90a => format!("Target sm90a, mma.sync path: its gemms do not fit warpgroup MMAs ({}), so it gets the sm80 lowering (cp.async, ldmatrix, mma.sync) built for sm_90a.",
                plan.mma_sync_reason.as_deref().unwrap_or("no reason recorded")),
        }
        .to_string() + &match &plan.collective_reason {
            Some(why) => format!(" This spec is GEMM-shaped, but a CUTLASS collective cannot take it: {why}."),
            None => String::new(),
        },
        constants,
        elements,
        smem_layouts,
        mmas,
        fragments,
        g2s_copies,
        stores,
        pipeline_storage,
        staging_storage,
        staging_union: plan.smem.staging_reuses_buffers,
        kernel_params,
        kernel_args,
        block_indices,
        raster,
        global_tensors,
        shared_tensors,
        body,
        launcher_ctx: launcher(c),
        grid,
        grid_limits,
        doc_launch,
        doc_invalid: "the grid exceeds CUDA's limits".into(),
        doc_errors: "cudaFuncSetAttribute or the launch".into(),
    })
}

fn ldsm(k_major: bool, which: &str) -> (String, String) {
    if k_major {
        ("SM75_U32x4_LDSM_N".into(), format!("{which} is K-major in shared memory: ldmatrix.x4 loads four 8x8 tiles per instruction"))
    } else {
        ("SM75_U16x8_LDSM_T".into(), format!("{which} is MN-major in shared memory: ldmatrix.x4.trans transposes the 8x8 tiles on the way to registers"))
    }
}

fn thread_layout_text(shape: (i64, i64), contiguous_first: bool) -> (String, String) {
    let s = format!("Int<{}>, Int<{}>", shape.0, shape.1);
    let st = if contiguous_first { format!("_1, Int<{}>", shape.0) } else { format!("Int<{}>, _1", shape.1) };
    (s, st)
}

fn mode_names(c: &Compiled, b: usize, l: &crate::layout::SharedLayout) -> Vec<String> {
    let buf = &c.spec.buffers[b];
    l.cute_dims.iter().map(|d| c.file.snippet(buf.shape[*d].span).to_string()).collect()
}

fn stage_count_text(c: &Compiled, b: usize) -> String {
    // The pipelined loop that fills `b` wrote its stage count as an expression: print it.
    let name = &c.spec.buffers[b].name.name;
    let fills = |body: &[Stmt]| body.iter().any(|x| matches!(&x.kind, StmtKind::Copy { dst, .. } if dst.name.name == *name));
    c.spec.pipelined_stages(fills).map(|st| c.file.snippet(st.span).to_string()).unwrap_or_else(|| c.plan.shared[&b].stages.to_string())
}
