//! The thin-tile 4-bit-weight GEMM: a pipelined `dequant_int4` + `gemm` main loop whose M
//! tile is 8 or 16 rows (decode and small-batch shapes), lowered with the weights as the
//! MMA's A operand.
//!
//! Requires: a checked spec for a CuTe target (sm80, or sm90a off the collective path).
//! Guarantees: a [`DequantGemmPlan`] when the body has exactly the shape below and every
//! tile divides the way the lowering needs, or the reason it does not (then the general
//! lowering runs, with the dequant fused into mma.sync's B fragments).
//!
//! The shape: `clear(acc)`; `pipelined(k, n, stages):` copying a tile of A, of the packed
//! words, of the scales (and of the zero points, with `zeros=`) at `k * <tile extent>`, then
//! `dequant_int4(Wq_s, W_s, scales=S_s)` and `gemm(A_s, W_s, acc, transpose_b=true)`; then
//! `copy(acc, C[...])`.
//!
//! Why another lowering: with 16 rows of A, the general one (A the MMA's A operand, 4-bit
//! weights unpacked into B fragments) spends most of its instructions moving and unpacking
//! bytes (each thread's B fragment holds one pair of values of each packed word). Here C is
//! computed transposed, Cᵀ = W · Aᵀ: the unpacked weights are the A operand (16 weight rows per MMA)
//! and A's rows the B operand (8 per MMA, so M = 1 wastes 7 of 8 columns instead of 15 of
//! 16). The k order inside the MMAs is permuted, identically for both operands, so that
//! each thread owns whole words: per 128-deep k step thread t (lane % 4) takes k + 32t ..
//! k + 32t + 31 of its two weight rows (four words, one 16-byte load each), and the matching
//! 16-byte loads of A's rows are already the MMA's B registers. Warps split the tile's
//! weight rows into 16-row groups and each group's k steps among themselves; their partial
//! sums meet in shared memory before the store.

use super::{Infer, Swizzle};
use crate::ast::*;
use crate::diag::Diagnostic;

/// A shared tile laid out row-major with `pad` extra elements per row and an XOR swizzle
/// over the offsets (`composition(Swizzle<..>, (rows, cols + pad):(cols + pad, 1))`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaddedLayout {
    /// Extra elements per row.
    pub pad: i64,
    /// The swizzle.
    pub swizzle: Swizzle,
}

/// What the thin-tile dequant GEMM lowering does; see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct DequantGemmPlan {
    /// The pipelined loop, its gemm, its dequant and the store after it.
    pub pipeline: StmtId,
    /// The gemm.
    pub gemm: StmtId,
    /// The `dequant_int4`.
    pub dequant: StmtId,
    /// `copy(acc, C[...])`.
    pub store: StmtId,
    /// The copies of A's, the packed words' and the scales' tiles.
    pub copies: [StmtId; 3],
    /// Tensor indices: A, Wq, scales, C.
    pub tensors: [usize; 4],
    /// Buffer indices: A_s, Wq_s, S_s, W_s, acc.
    pub buffers: [usize; 5],
    /// block_M, block_N, block_K.
    pub block: (i64, i64, i64),
    /// Shared stages.
    pub stages: i64,
    /// How many k-tiles ahead a thread issues copies: the stage it refills was read
    /// `stages - prefetch` tiles before (two, when there are more than two stages), so warps
    /// need not meet at every tile.
    pub prefetch: i64,
    /// 8-row tiles of A per block: block_M / 8 (the MMA's N is 8).
    pub m_tiles: i64,
    /// With two m-tiles, the launcher runs a one-tile instantiation when M <= 8 (a single
    /// row tile: half the MMAs and none of the zero rows' copies).
    pub small_m: bool,
    /// Warps along the tile's weight rows, 16 rows (one MMA's M) each.
    pub row_groups: i64,
    /// Warps in each row group, splitting every k-tile's 128-deep steps.
    pub k_split: i64,
    /// 128-deep steps per k-tile.
    pub k_steps: i64,
    /// Values per scale.
    pub group: i64,
    /// dequant_int4's zero point.
    pub zero: DequantZero,
    /// A_s's layout: conflict-free for the cp.async writes and the 16-byte reads below.
    pub a_layout: PaddedLayout,
    /// Wq_s's layout, likewise.
    pub w_layout: PaddedLayout,
    /// 16-byte chunks of A's tile each thread copies (full tile; half with one m-tile).
    pub a_chunks: i64,
    /// 16-byte chunks of the packed tile each thread copies.
    pub w_chunks: i64,
    /// Threads that copy 4 bytes of scales each in the odd-rows instantiation: a pair of each
    /// tile row's scales plus one per row (with an odd number of scales per weight row, every
    /// other row starts mid-word, and its aligned copies start one scale early and take one
    /// more; see [`SCALE_SLACK`]). The even instantiation copies the pairs alone.
    pub scale_pairs: i64,
    /// Shared bytes of one stage of A_s, Wq_s, S_s and the zero points' tile (0 without); the
    /// scales' rows counted as the odd-rows instantiation has them.
    pub stage_bytes: [u64; 4],
    /// Bytes of the partial sums the k-split warps exchange after the loop (they reuse the
    /// pipeline's space).
    pub partial_bytes: u64,
    /// Why this lowering, for the file header and `explain`.
    pub why: String,
    /// On sm90a: one producer warp loads the stages with TMA (see [`DequantGemmTma`]);
    /// otherwise every thread issues cp.async copies.
    pub tma: Option<DequantGemmTma>,
    /// Why each shared layout.
    pub why_a: String,
    /// See `why_a`.
    pub why_w: String,
}

impl DequantGemmPlan {
    /// Whether the scales multiply each 128-deep step's f32 sums once per weight row, after its
    /// MMAs, rather than every unpacked pair before them. That needs every MMA's k's in one
    /// group, which holds when a quad's threads own consecutive 32-value chunks of each step
    /// (the cp.async flavour). The TMA flavour's quads own chunks 64 apart across a 256-deep
    /// span, so an MMA there spans two groups of 128 and its weights are scaled before it.
    pub fn scale_per_step(&self) -> bool {
        self.tma.is_none()
    }
}

/// Slots each row of the scales' (and zero points') shared tile has beyond the tile's columns
/// in the odd-rows instantiation. cp.async moves at least 4 bytes, from a 4-byte aligned
/// address. With an odd number of 16-bit scales per weight row (K / 128 odd: K = 896, 1152,
/// ...), every other row starts 2 bytes into a word: its copies start one scale early, take one
/// more word, and its scales sit one slot later in the row. Rows that start on a word leave the
/// two slots unused. The launcher runs this instantiation only for such K.
pub const SCALE_SLACK: i64 = 2;

/// k values per span of the TMA flavour: one 128-byte line (the 128-byte swizzle's width) of
/// packed words. The reads' thread order (2t + h) is written for it.
const TMA_SPAN: i64 = 256;

/// The sm90a flavour of the lowering: a producer warp beside the spec's threads, one lane of
/// which issues TMA loads of A's and the packed words' tiles (the others copy the scales with
/// cp.async), completing on each stage's full mbarrier; the spec's threads only wait, unpack
/// and multiply. TMA writes rows of 128 bytes with the 128-byte swizzle, so the tiles are kept
/// as 256-deep k spans: A_s as [span][row][256 values], Wq_s as [span][row][32 words], and
/// thread t of a quad reads 32-value chunk 2t + h of each span (h: which of the span's two
/// 128-deep steps), which keeps its reads free of bank conflicts (checked by the planner).
#[derive(Clone, Debug, PartialEq)]
pub struct DequantGemmTma {
    /// k values per span: one 128-byte line of packed words, four of a 16-bit A.
    pub span: i64,
    /// Spans per k-tile.
    pub spans: i64,
    /// Scale pairs (4 bytes) each producer lane copies per tile.
    pub scale_copies: i64,
    /// Blocks per SM the kernel's `__launch_bounds__` asks for: what shared memory allows, at
    /// most what leaves each thread 96 registers.
    pub min_blocks: i64,
}

/// The thin-tile lowering's zero point.
#[derive(Clone, Debug, PartialEq)]
pub enum DequantZero {
    /// One for every weight (`zero=`).
    Constant(i64),
    /// One per group of each row (`zeros=`), copied beside the scales, shaped and typed like
    /// them.
    PerGroup {
        /// The copy filling the tile.
        copy: StmtId,
        /// The global tensor.
        tensor: usize,
        /// The shared tile.
        buffer: usize,
    },
}

/// Threads in the sm90a flavour's producer warp.
pub const PRODUCER_THREADS: i64 = 32;

/// The statements of the shape, found by [`Infer::dequant_gemm_shape`].
pub(super) struct Shape<'a> {
    pipeline: &'a Stmt,
    /// Three, or four with `zeros=`.
    copies: Vec<&'a Stmt>,
    dequant: &'a Stmt,
    gemm: &'a Stmt,
    store: &'a Stmt,
}

/// The operands of a dequant GEMM body ([`Infer::dequant_gemm_operands`]), which the thin-tile
/// lowering and sm90a's wide-tile one ([`super::DequantWgmmaPlan`]) plan from.
pub(super) struct Operands {
    pub(super) pipeline: StmtId,
    pub(super) gemm: StmtId,
    pub(super) dequant: StmtId,
    pub(super) store: StmtId,
    /// The copies of A's, the packed words' and the scales' tiles.
    pub(super) copies: [StmtId; 3],
    /// Tensor indices: A, Wq, scales, C.
    pub(super) tensors: [usize; 4],
    /// Buffer indices: A_s, Wq_s, S_s, W_s, acc.
    pub(super) buffers: [usize; 5],
    /// The zero points' tile, with `zeros=`.
    pub(super) z_s: Option<usize>,
    /// block_M, block_N, block_K.
    pub(super) block: (i64, i64, i64),
    /// Scales per weight row and k-tile.
    pub(super) scale_cols: i64,
    /// Values per scale.
    pub(super) group: i64,
    pub(super) zero: DequantZero,
    /// The 16-bit type of A, the weights and the scales.
    pub(super) half: DType,
    /// Shared stages of the pipelined loop.
    pub(super) stages: i64,
    /// The block indices of the tile origins: A's (and C's) row tile, the weight (C's column)
    /// tile.
    pub(super) tile_index: [String; 2],
}

/// Which dequant GEMM lowering a body takes.
pub(super) enum DequantLowering {
    Thin(DequantGemmPlan),
    Wide(super::DequantWgmmaPlan),
}

/// 16-byte chunk accesses by one warp (lane order), as (row, first column) in elements.
type WarpAccess = Vec<(i64, i64)>;

/// Whether the chunks of `accesses` (one warp instruction each, 16 bytes per lane) hit
/// 8 different 16-byte bank groups in every quarter-warp phase, with `layout` over rows of
/// `cols` elements of `elem_bytes` bytes.
fn conflict_free(layout: PaddedLayout, cols: i64, elem_bytes: i64, accesses: &[WarpAccess]) -> bool {
    let s = layout.swizzle;
    let swizzle = |o: i64| {
        if s.bits == 0 {
            return o;
        }
        let mask = ((1i64 << s.bits) - 1) << (s.base + s.shift);
        o ^ ((o & mask) >> s.shift)
    };
    accesses.iter().all(|warp| {
        warp.chunks(8).all(|phase| {
            let mut groups = [false; 8];
            phase.iter().all(|&(r, c)| {
                let g = ((swizzle(r * (cols + layout.pad) + c) * elem_bytes / 16) % 8) as usize;
                !std::mem::replace(&mut groups[g], true)
            })
        })
    })
}

/// The first layout (least padding, then fewest swizzle bits, lowest base, shortest shift)
/// under which every access is conflict-free. The swizzle may start above the 16-byte unit
/// (it then moves whole 16-byte chunks), and CuTe needs its shift to be at least its bits.
fn pick_layout(rows: i64, cols: i64, elem_bytes: i64, accesses: &[WarpAccess]) -> Option<PaddedLayout> {
    let unit = (16 / elem_bytes).trailing_zeros();
    for pad_bytes in [0, 16, 32, 64] {
        let pad = pad_bytes / elem_bytes;
        let stage = rows * (cols + pad);
        for bits in 0..=3u32 {
            let (bases, shifts) = if bits == 0 { (unit..=unit, 0..=0) } else { (unit..=unit + 2, bits..=8) };
            for base in bases {
                for shift in shifts.clone() {
                    let l = PaddedLayout { pad, swizzle: Swizzle { bits, base, shift } };
                    // Stages are translates of the first: the stage stride must not carry into
                    // the bits the swizzle reads (it is then a bijection of each stage).
                    if bits > 0 && stage % (1i64 << (base + shift + bits)) != 0 {
                        continue;
                    }
                    if conflict_free(l, cols, elem_bytes, accesses) {
                        return Some(l);
                    }
                }
            }
        }
    }
    None
}

/// The kernel's shared storage in bytes: the stages (the partial sums reuse their space) and a
/// full and an empty mbarrier (8 bytes each) per stage, with the padding their alignment adds
/// (with TMA, the 128-byte swizzle's 1024-byte period).
pub(super) fn shared_bytes(stage_bytes: &[u64; 4], stages: i64, partial_bytes: u64, tma: bool) -> u64 {
    // As `sizeof(SharedStorage)` counts it: a union of the stage buffers (A_s and Wq_s are
    // arrays aligned to `big` bytes, the scales' and zero points' to 128, in that order) and the
    // partial sums, so aligned to `big`; after it the two mbarriers per stage; the struct's size
    // a multiple of its alignment. TMA's 128-byte swizzle needs `big` = 1024.
    let big = if tma { 1024 } else { 128 };
    let mut mainloop: u64 = 0;
    for (i, bytes) in stage_bytes.iter().enumerate() {
        let align = if i < 2 { big } else { 128 };
        mainloop = mainloop.next_multiple_of(align) + (stages as u64 * bytes).next_multiple_of(align);
    }
    let union = mainloop.max(partial_bytes).next_multiple_of(big);
    (union + 16 * stages as u64).next_multiple_of(big)
}

/// The cp.async writes of a `rows` x `cols` tile copied as 16-byte chunks, chunk `c` by
/// thread `c % threads`, row-major: each warp instruction writes 32 consecutive chunks.
fn copy_writes(rows: i64, cols: i64, elem_bytes: i64, threads: i64) -> Vec<WarpAccess> {
    let per_row = cols * elem_bytes / 16;
    let chunks = rows * per_row;
    let elems = 16 / elem_bytes;
    debug_assert!(threads % 32 == 0, "whole warps");
    (0..chunks).step_by(32).map(|first| (first..(first + 32).min(chunks)).map(|c| (c / per_row, c % per_row * elems)).collect()).collect()
}

impl<'a> Infer<'a> {
    /// The body's statements if it has the thin-tile dequant GEMM's shape, else why not.
    pub(super) fn dequant_gemm_shape(&self) -> Result<Shape<'a>, String> {
        let spec: &'a Spec = self.spec;
        let body = &spec.body;
        let [clear, pipeline, store] = body.as_slice() else {
            return Err("the body is not `clear(acc)`, one pipelined loop and the store".into());
        };
        let (StmtKind::Clear { .. }, StmtKind::Loop { kind: LoopKind::Pipelined, body: inner, .. }, StmtKind::Copy { .. }) = (&clear.kind, &pipeline.kind, &store.kind) else {
            return Err("the body is not `clear(acc)`, one pipelined loop and the store".into());
        };
        let copies: Vec<&'a Stmt> = inner.iter().filter(|s| matches!(s.kind, StmtKind::Copy { .. })).collect();
        let dequant = inner.iter().find(|s| matches!(s.kind, StmtKind::Dequant { .. }));
        let gemm = inner.iter().find(|s| matches!(s.kind, StmtKind::Gemm { .. }));
        let zeros = dequant.is_some_and(|d| matches!(&d.kind, StmtKind::Dequant { zero: ZeroPoint::PerGroup(_), .. }));
        let want = if zeros { 4 } else { 3 };
        let (Some(dequant), Some(gemm)) = (dequant, gemm) else {
            return Err("the main loop has no dequant_int4 and gemm".into());
        };
        if copies.len() != want || inner.len() != want + 2 {
            return Err(format!("the main loop is not {} copies, one dequant_int4 and one gemm", if zeros { "four" } else { "three" }));
        }
        Ok(Shape { pipeline, copies, dequant, gemm, store })
    }

    /// The operands of a body of that shape, checked for what every dequant GEMM lowering
    /// needs (types, row-major 2-D tensors, tiles that agree, origins stepping k with the loop);
    /// `Err` says why not.
    pub(super) fn dequant_gemm_operands(&self, shape: &Shape<'a>) -> Result<Operands, String> {
        let spec = self.spec;
        let StmtKind::Loop { var, .. } = &shape.pipeline.kind else { return Err("no loop".into()) };
        let StmtKind::Dequant { src, dst, scales, zero, .. } = &shape.dequant.kind else { return Err("no dequant".into()) };
        let StmtKind::Gemm { a, b, c, transpose_a, transpose_b } = &shape.gemm.kind else { return Err("no gemm".into()) };
        let buf = |i: &Ident| self.buffer_index(&i.name);
        let (Some(wq_s), Some(w_s), Some(s_s), Some(a_s), Some(acc)) = (buf(src), buf(dst), buf(scales), buf(a), buf(c)) else {
            return Err("unknown buffers".into());
        };
        // The zero points' tile, if any: filled and read like the scales'.
        let z_s = zero.tile().map(|z| buf(z).ok_or("unknown buffers")).transpose()?;
        if buf(b) != Some(w_s) || *transpose_a || !*transpose_b {
            return Err("the gemm must be `gemm(A_s, W_s, acc, transpose_b=true)` with W_s the dequant's destination".into());
        }
        let StmtKind::Copy { src: st_src, dst: st_dst } = &shape.store.kind else { return Err("no store".into()) };
        let StmtKind::Clear { buf: cleared } = &spec.body[0].kind else { return Err("no clear".into()) };
        if buf(cleared) != Some(acc) || self.buffer_index(&st_src.name.name) != Some(acc) {
            return Err("the accumulator must be cleared before the loop and stored after it".into());
        }
        let Some(tc) = self.tensor_index(&st_dst.name.name) else { return Err("the store must write a global tensor".into()) };
        // Which tensor fills each shared tile, and at which origin.
        let mut filled: [Option<(&Stmt, usize, Vec<Expr>)>; 4] = [None, None, None, None];
        for &s in &shape.copies {
            let StmtKind::Copy { src, dst } = &s.kind else { continue };
            let (Some(t), Some(b)) = (self.tensor_index(&src.name.name), self.buffer_index(&dst.name.name)) else {
                return Err("every copy in the loop must fill a shared tile from a global tensor".into());
            };
            let slot = [Some(a_s), Some(wq_s), Some(s_s), z_s].iter().position(|x| *x == Some(b)).ok_or("the loop copies a tile no gemm or dequant reads")?;
            if src.tile_dims.is_some() {
                return Err("the copies must be plain 2-D tiles".into());
            }
            filled[slot] = Some((s, t, src.origin.clone().unwrap_or_default()));
        }
        let [Some((ca, ta, oa)), Some((cw, tw, ow)), Some((cs, ts, os)), fz] = filled else {
            return Err("the loop must copy A_s, the packed words and the scales".into());
        };
        let shape_of = |b: usize| self.shape(b).to_vec();
        let (sa, sw, ss, sacc) = (shape_of(a_s), shape_of(wq_s), shape_of(s_s), shape_of(acc));
        if [&sa, &sw, &ss, &sacc].iter().any(|s| s.len() != 2) {
            return Err("every tile must be 2-D".into());
        }
        let (bm, bk, bn) = (sa[0], sa[1], sw[0]);
        let group = if ss[1] > 0 { bk / ss[1] } else { 0 };
        // Tile origins `<index> * <extent>`: rows of A and C at one index, rows of the packed
        // words, of the scales and C's columns at another, k tiles at the loop variable.
        let coords = |o: &[Expr], ext: [i64; 2]| self.coords(o, &ext);
        let (Some(ka), Some(kw), Some(ks), Some(kc)) = (coords(&oa, [bm, bk]), coords(&ow, [bn, bk / 8]), coords(&os, [bn, ss[1]]), coords(st_dst.origin.as_deref().unwrap_or(&[]), [bm, bn])) else {
            return Err("tile origins must be `<index> * <tile extent>`".into());
        };
        if !(ka[1] == var.name && kw[1] == var.name && ks[1] == var.name && ka[0] == kc[0] && kw[0] == kc[1] && ks[0] == kc[1]) || ka[0] == var.name || kw[0] == var.name {
            return Err("A's tile must be (C's row tile, k) and the packed words' and scales' (C's column tile, k), stepping k with the loop variable".into());
        }
        let zero = match (zero, z_s, fz) {
            (ZeroPoint::Constant(v, _), _, _) => DequantZero::Constant(*v),
            (ZeroPoint::PerGroup(_), Some(buffer), Some((cz, tensor, oz))) => {
                // Filled like the scales: the same tile origin in a tensor of the same shape and type.
                let (tz, tsc) = (&spec.tensors[tensor], &spec.tensors[ts]);
                let texts = |t: &Tensor| t.shape.iter().map(|d| d.text()).collect::<Vec<_>>();
                if coords(&oz, [bn, ss[1]]) != Some(ks.clone()) || texts(tz) != texts(tsc) || tz.dtype.0 != tsc.dtype.0 || tz.order.0 != tsc.order.0 {
                    return Err("the zero points' tensor and copy must match the scales' (shape, type, tile origin)".into());
                }
                DequantZero::PerGroup { copy: cz.id, tensor, buffer }
            }
            _ => return Err("the loop must copy the zero points' tile".into()),
        };
        let dt = |t: usize| spec.tensors[t].dtype.0;
        let db = |b: usize| spec.buffers[b].dtype.0;
        let half = db(a_s);
        if !matches!(half, DType::BF16 | DType::F16) || dt(ta) != half || db(w_s) != half || db(s_s) != half || dt(ts) != half || db(acc) != DType::F32 || !dt(tc).is_float() || dt(tw) != DType::I32 {
            return Err("the lowering takes bf16 (or f16) activations, weights and scales, i32 packed words and an f32 accumulator".into());
        }
        if [ta, tw, ts, tc].iter().any(|t| spec.tensors[*t].order.0 != Order::RowMajor || spec.tensors[*t].shape.len() != 2) {
            return Err("A, the packed words, the scales and C must be 2-D row-major tensors".into());
        }
        if sacc != [bm, bn] || sw[1] * 8 != bk || self.shape(w_s) != [bn, bk] || ss[0] != bn {
            return Err("the tiles do not agree (A_s [block_M, block_K], Wq_s [block_N, block_K/8], S_s [block_N, block_K/group], acc [block_M, block_N])".into());
        }
        let stages = self.info.stages.get(&shape.pipeline.id).copied().unwrap_or(1);
        Ok(Operands {
            pipeline: shape.pipeline.id,
            gemm: shape.gemm.id,
            dequant: shape.dequant.id,
            store: shape.store.id,
            copies: [ca.id, cw.id, cs.id],
            tensors: [ta, tw, ts, tc],
            buffers: [a_s, wq_s, s_s, w_s, acc],
            z_s,
            block: (bm, bn, bk),
            scale_cols: ss[1],
            group,
            zero,
            half,
            stages,
            tile_index: [ka[0].clone(), kw[0].clone()],
        })
    }

    /// The lowering for a dequant GEMM body: on sm90a, tiles of 64 or more rows of A take the
    /// wide-tile lowering on warpgroup MMAs ([`super::DequantWgmmaPlan`]); otherwise the
    /// thin-tile one. `Err` says why neither applies.
    pub(super) fn plan_dequant_lowering(&self, op: Operands) -> Result<DequantLowering, String> {
        if self.target == crate::target::Target::Sm90a && op.block.0 >= 64 {
            return self.plan_dequant_wgmma(op).map(DequantLowering::Wide)
                .map_err(|why| format!("the wide-tile lowering (warpgroup MMAs, the unpacked weights as their register A operand) does not apply: {why}"));
        }
        self.plan_dequant_gemm(op).map(DequantLowering::Thin)
    }

    /// Plans the thin-tile lowering for a body of that shape; `Err` says why it does not apply
    /// (the general lowering then runs).
    pub(super) fn plan_dequant_gemm(&self, op: Operands) -> Result<DequantGemmPlan, String> {
        let spec = self.spec;
        let Operands { pipeline, gemm, dequant, store, copies: [ca, cw, cs], tensors: [ta, tw, ts, tc], buffers: [a_s, wq_s, s_s, w_s, acc], z_s, block: (bm, bn, bk), scale_cols, group, zero, half, stages, .. } = op;
        let ss = [bn, scale_cols];
        if bm != 8 && bm != 16 {
            return Err(format!("its M tile is {bm} rows; this lowering takes 8 or 16 (the MMA's N, once or twice)"));
        }
        if bk % 128 != 0 || group % 128 != 0 || ss[1] % 2 != 0 {
            return Err(format!("it needs k tiles of 128-deep steps and groups of a multiple of 128 values, two or more per k tile (k tile {bk}, group {group})"));
        }
        let threads = spec.threads.0;
        if threads < 32 {
            return Err("it needs whole warps".into());
        }
        let warps = threads / 32;
        let row_groups = bn / 16;
        let k_steps = bk / 128;
        if bn % 16 != 0 || row_groups == 0 || warps % row_groups != 0 || k_steps % (warps / row_groups) != 0 {
            return Err(format!("{warps} warps cannot split a {bn}-row weight tile into 16-row groups with an equal share of its {k_steps} 128-deep k steps each"));
        }
        let k_split = warps / row_groups;
        if stages < 2 {
            return Err("it needs two or more stages".into());
        }
        let (a_chunks, w_chunks, scale_pairs) = (bm * bk / 8 / threads, bn * bk / 32 / threads, bn * (ss[1] / 2 + 1));
        if (bm * bk / 8) % threads != 0 || (8 * bk / 8) % threads != 0 || (bn * bk / 32) % threads != 0 || a_chunks == 0 || w_chunks == 0 || scale_pairs > threads {
            return Err(format!("its tiles do not split into whole 16-byte chunks per thread over {threads} threads"));
        }
        // The reads: per 128-deep step, lanes (g, t) = (lane / 4, lane % 4) read 16 bytes at
        // column step*128 + 32t + 8i of A's row mt*8 + g (B operand), and word 16*step + 4t
        // of weight rows 16*group + g and + 8 (A operand).
        let lanes = || (0..32i64).map(|l| (l / 4, l % 4));
        let mut a_reads = Vec::new();
        for mt in 0..bm / 8 {
            for step in 0..k_steps {
                for i in 0..4 {
                    a_reads.push(lanes().map(|(g, t)| (mt * 8 + g, step * 128 + 32 * t + 8 * i)).collect());
                }
            }
        }
        let mut w_reads = Vec::new();
        for rg in 0..row_groups {
            for step in 0..k_steps {
                for h in [0, 8] {
                    w_reads.push(lanes().map(|(g, t)| (16 * rg + h + g, 16 * step + 4 * t)).collect());
                }
            }
        }
        let half_bytes = half.bytes() as i64;
        let mut a_access = copy_writes(bm, bk, half_bytes, threads);
        a_access.extend(a_reads);
        let mut w_access = copy_writes(bn, bk / 8, 4, threads);
        w_access.extend(w_reads);
        let (Some(a_layout), Some(w_layout)) = (pick_layout(bm, bk, half_bytes, &a_access), pick_layout(bn, bk / 8, 4, &w_access)) else {
            return Err("no padded, swizzled layout keeps its shared tiles free of bank conflicts".into());
        };
        // sm90a: TMA's 128-byte swizzle over 256-deep spans, with the reads described at
        // `DequantGemmTma` (thread t takes chunk 2t + h of each span's rows).
        let tma_layouts = if self.target == crate::target::Target::Sm90a && bk % TMA_SPAN == 0 && bn <= 256 {
            let swizzle_128b = |base| PaddedLayout { pad: 0, swizzle: Swizzle { bits: 3, base, shift: 3 } };
            let (a_tma, w_tma) = (swizzle_128b((16 / half_bytes).trailing_zeros()), swizzle_128b(2));
            let mut a_reads: Vec<WarpAccess> = Vec::new();
            let mut w_reads: Vec<WarpAccess> = Vec::new();
            for step in 0..k_steps {
                let h = step % 2;
                for mt in 0..bm / 8 {
                    for i in 0..4 {
                        a_reads.push(lanes().map(|(g, t)| (mt * 8 + g, 64 * t + 32 * h + 8 * i)).collect());
                    }
                }
                for rg in 0..row_groups {
                    for r in [0, 8] {
                        w_reads.push(lanes().map(|(g, t)| (16 * rg + r + g, 8 * t + 4 * h)).collect());
                    }
                }
            }
            (conflict_free(a_tma, TMA_SPAN, half_bytes, &a_reads) && conflict_free(w_tma, TMA_SPAN / 8, 4, &w_reads)).then_some((a_tma, w_tma))
        } else {
            None
        };
        let (a_layout, w_layout) = tma_layouts.unwrap_or((a_layout, w_layout));
        let stage_bytes = [
            (bm * (bk + a_layout.pad) * half_bytes) as u64,
            (bn * (bk / 8 + w_layout.pad) * 4) as u64,
            (bn * (ss[1] + SCALE_SLACK) * half_bytes) as u64,
            if z_s.is_some() { (bn * (ss[1] + SCALE_SLACK) * half_bytes) as u64 } else { 0 },
        ];
        let partial_bytes = (k_split * bm * (bn + 4) * 4) as u64;
        let layout_why = |l: PaddedLayout, what: &str| {
            let pad = if l.pad > 0 { format!("rows padded by {} elements and ", l.pad) } else { String::new() };
            format!("{pad}Swizzle<{},{},{}>: the first layout under which the cp.async writes and {what} hit eight different 16-byte bank groups in every quarter-warp (checked by tilegen)",
                l.swizzle.bits, l.swizzle.base, l.swizzle.shift)
        };
        let tma = tma_layouts.map(|_| {
            // Blocks per SM: what shared memory allows (each block also has 1 KB reserved),
            // at most what leaves each thread 96 registers.
            let smem = shared_bytes(&stage_bytes, stages, partial_bytes, true);
            let by_smem = (self.target.smem_per_sm() / (smem + 1024)) as i64;
            let by_regs = 65_536 / ((threads + PRODUCER_THREADS) * 96);
            let min_blocks = by_smem.min(by_regs).clamp(1, 8);
            DequantGemmTma { span: TMA_SPAN, spans: bk / TMA_SPAN, scale_copies: (scale_pairs + PRODUCER_THREADS - 1) / PRODUCER_THREADS, min_blocks }
        });
        let owns = if tma.is_some() {
            format!("k + 64t + 32h .. + 31 of each {TMA_SPAN}-deep span (h: the span's first or second 128-deep step)")
        } else {
            "k + 32t .. k + 32t + 31 of each 128-deep step".to_string()
        };
        let why = format!(
            "{} {bm}-row tile: C is computed transposed (Cᵀ = W · Aᵀ) on m16n8k16 MMAs, the unpacked weights as the A operand (16 weight rows per MMA) and A's rows as the B operand ({} of 8 per MMA{}); \
             the k order inside the MMAs is permuted alike for both operands, so that thread t of a quad owns {owns}: four whole packed words of each of its two weight rows (one 16-byte load), unpacked pair by pair into the A registers, \
             and one 16-byte load of each of its A rows, which is already the B registers; {warps} warps as {row_groups} group(s) of 16 weight rows x {k_split} share(s) of each k-tile's {k_steps} step(s), their partial sums added in shared memory before the store",
            if bm == 8 { "an" } else { "a" }, bm.min(8), if bm == 16 { ", twice; when M <= 8 the launcher runs an instantiation with one 8-row tile" } else { "" });
        let tma_why = |what: &str| format!("{TMA_SPAN}-deep spans of 128-byte rows with the 128-byte swizzle (TMA's SWIZZLE_128B): the layout TMA writes, under which {what} hit eight different 16-byte bank groups in every quarter-warp (checked by tilegen)");
        Ok(DequantGemmPlan {
            pipeline,
            gemm,
            dequant,
            store,
            copies: [ca, cw, cs],
            tensors: [ta, tw, ts, tc],
            buffers: [a_s, wq_s, s_s, w_s, acc],
            block: (bm, bn, bk),
            stages,
            prefetch: if stages > 2 { stages - 2 } else { 1 },
            m_tiles: bm / 8,
            small_m: bm == 16,
            row_groups,
            k_split,
            k_steps,
            group,
            zero,
            a_layout,
            w_layout,
            a_chunks,
            w_chunks,
            scale_pairs,
            stage_bytes,
            partial_bytes,
            why,
            why_a: if tma.is_some() { tma_why("the 16-byte reads of A's rows (the B operand)") } else { layout_why(a_layout, "the 16-byte reads of A's rows (the B operand)") },
            why_w: if tma.is_some() { tma_why("the 16-byte reads of each thread's four words") } else { layout_why(w_layout, "the 16-byte reads of each thread's four words") },
            tma,
        })
    }

    /// Records the shared memory of a dequant GEMM lowering (`stages` of `stage_bytes`, and
    /// `staging` bytes reusing them, `total` in all with the mbarriers), with an error at the
    /// pipelined loop's stage count when it is over the target's budget.
    pub(super) fn record_dequant_smem(&mut self, pipeline: StmtId, stages: i64, stage_bytes: u64, staging: u64, total: u64) {
        let budget = self.target.smem_budget();
        self.plan.smem = super::SmemUse { buffers: stages as u64 * stage_bytes, staging, staging_reuses_buffers: true, barriers: 16 * stages as u64, total, budget };
        if total > budget {
            let span = match self.spec.stmt(pipeline).map(|s| &s.kind) {
                Some(StmtKind::Loop { stages: Some(st), .. }) => st.span,
                _ => self.spec.kernel.span,
            };
            self.err(Diagnostic::error(span, format!(
                "shared memory over budget: {stages} stages of {stage_bytes} bytes need {total} bytes but {} allows {budget} bytes per block", self.target))
                .hint("use fewer stages or a smaller k tile"));
        }
    }

    /// Records the plan: shared memory, alignment and register estimates, with the budget
    /// checked as for every program.
    pub(super) fn adopt_dequant_gemm(&mut self, p: DequantGemmPlan) {
        let total = shared_bytes(&p.stage_bytes, p.stages, p.partial_bytes, p.tma.is_some());
        self.record_dequant_smem(p.pipeline, p.stages, p.stage_bytes.iter().sum(), p.partial_bytes, total);
        let [ta, tw, ts, _] = p.tensors;
        let name = |t: usize| self.spec.tensors[t].name.name.clone();
        let half = 16 / self.spec.tensors[ta].dtype.0.bytes() as i64;
        let mover = if p.tma.is_some() { "TMA reads 16-byte aligned rows" } else { "cp.async moves 16-byte vectors" };
        self.plan.alignment = vec![
            super::Alignment { tensor: ta, whole_rows: true, vector_elems: half, why: format!("{mover} of `{}`", name(ta)) },
            super::Alignment { tensor: tw, whole_rows: true, vector_elems: 4, why: format!("{mover} of `{}`", name(tw)) },
            super::Alignment::base_only(ts, 2, format!("cp.async moves `{}` 4 bytes at a time from 4-byte aligned addresses; rows of any length", name(ts))),
        ];
        if let DequantZero::PerGroup { tensor, .. } = p.zero {
            self.plan.alignment.push(super::Alignment::base_only(tensor, 2, format!("cp.async moves `{}` 4 bytes at a time from 4-byte aligned addresses; rows of any length", name(tensor))));
        }
        // Accumulators (2 chains per m-tile), a stage's words and scales, the unpacked pairs,
        // A's 16-byte loads and the copies' pointers.
        self.plan.regs_per_thread = (8 * p.m_tiles + 8 + 2 + 8 + 4 * p.m_tiles + 2 * (p.a_chunks + p.w_chunks + 1) + 8 * p.m_tiles + 24) as u64;
        if self.target == crate::target::Target::Sm90a {
            self.plan.mma_sync_reason = Some("its dequant_int4 unpacks the weights into mma.sync's A registers (the thin-tile lowering below); a warpgroup MMA needs 64 rows per warpgroup".into());
        }
        self.plan.dequant_gemm = Some(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_searched_for_conflict_free_accesses() {
        // A [16, 512] bf16 read as the lowering reads it: no swizzle alone separates the
        // lanes of a quarter-warp (threads t and t + 2 sit 128 bytes apart, rows 0 and 1
        // one row apart), padding each row by 32 bytes plus Swizzle<1,3,3> does.
        let lanes = |mt: i64, i: i64| -> WarpAccess { (0..32).map(|l| (mt * 8 + l / 4, 32 * (l % 4) + 8 * i)).collect() };
        let mut acc = copy_writes(16, 512, 2, 256);
        acc.extend((0..4).map(|i| lanes(0, i)));
        let l = pick_layout(16, 512, 2, &acc).expect("a layout");
        assert_eq!((l.pad, l.swizzle), (16, Swizzle { bits: 1, base: 3, shift: 3 }));
        assert!(!conflict_free(PaddedLayout { pad: 0, swizzle: Swizzle { bits: 3, base: 3, shift: 3 } }, 512, 2, &acc));
        // The packed words [32, 64] i32, threads reading words 4t..4t+3 of rows g and g + 8.
        let reads: Vec<WarpAccess> = [0, 8].iter().map(|h| (0..32).map(|l| (h + l / 4, 4 * (l % 4))).collect()).collect();
        let mut acc = copy_writes(32, 64, 4, 256);
        acc.extend(reads);
        // Row g + 1 must move by half a 128-byte line: Swizzle<1,4,2> flips the chunk index's
        // bit 2 with the row's bit 0 (words: bit 4 by bit 6), no padding needed.
        let l = pick_layout(32, 64, 4, &acc).expect("a layout");
        assert_eq!((l.pad, l.swizzle), (0, Swizzle { bits: 1, base: 4, shift: 2 }), "{l:?}");
        assert!(conflict_free(l, 64, 4, &acc) && !conflict_free(PaddedLayout { pad: 0, swizzle: Swizzle { bits: 0, base: 2, shift: 0 } }, 64, 4, &acc));
    }

    #[test]
    fn tma_spans_read_without_conflicts() {
        // sm90a: TMA writes 256-deep spans as 128-byte lines under the 128-byte swizzle (XOR of
        // the 16-byte chunk index with the line index). Thread t reading chunk 2t + h of its
        // rows keeps a quarter-warp on eight bank groups; the sm80 order (k + 32t, chunks
        // 4t + i) would not: threads t and t + 2 meet.
        let sw = |base| PaddedLayout { pad: 0, swizzle: Swizzle { bits: 3, base, shift: 3 } };
        let a_reads = |k: &dyn Fn(i64, i64) -> i64| -> Vec<WarpAccess> { (0..4).map(|i| (0..32).map(|l| (l / 4, k(l % 4, i))).collect()).collect() };
        for h in [0, 1] {
            assert!(conflict_free(sw(3), 256, 2, &a_reads(&|t, i| 64 * t + 32 * h + 8 * i)), "A, half {h}");
            let w: Vec<WarpAccess> = [0, 8].iter().map(|r| (0..32).map(|l| (r + l / 4, 8 * (l % 4) + 4 * h)).collect()).collect();
            assert!(conflict_free(sw(2), 32, 4, &w), "Wq, half {h}");
        }
        assert!(!conflict_free(sw(3), 256, 2, &a_reads(&|t, i| 32 * t + 8 * i)));
    }
}
