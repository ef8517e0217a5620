//! sm90a's wide-tile 4-bit-weight GEMM: the dequant GEMM body of the thin-tile lowering
//! ([`super::DequantGemmPlan`]) on tiles of 64 or more rows of A (prefill shapes), lowered to
//! warpgroup MMAs with the unpacked weights as their register A operand.
//!
//! Requires: the operands of a checked dequant GEMM body ([`Infer::dequant_gemm_operands`])
//! on sm90a.
//! Guarantees: a [`DequantWgmmaPlan`] when the tiles divide the way the kernel needs, or the
//! reason they do not (then the general lowering runs: the weights unpacked into `W_s`, read
//! by warpgroup MMAs from shared memory).
//!
//! Why: in the general lowering every thread unpacks its share of the tile into `W_s`, the block
//! meets at a barrier, and the MMAs read it back through the async proxy; each weight crosses
//! shared memory three times as 16 bits. Here C is computed transposed, Cᵀ = W · Aᵀ: the
//! weights are the MMA's M side (64 weight rows per consumer warpgroup) and A's rows its N side
//! (the whole token tile, up to 256). A warpgroup MMA takes its A operand from registers, so
//! each thread unpacks exactly the fragment it owns, from the packed words TMA put in shared
//! memory, and `W_s` never exists. A producer warpgroup issues the TMA loads of A's and the
//! packed words' tiles into mbarrier stages; the consumers read their scales (2-byte values
//! that fit neither a TMA box nor a cp.async) from global memory, a k-tile ahead.
//!
//! Few tiles (a prefill of a few hundred rows fills one or two row tiles per weight tile) leave
//! most SMs idle. The launcher then halves the row tiles where the last one is at most half
//! used, and splits k between the two blocks of a cluster: each runs half the k-tiles, the
//! second writes its f32 accumulators into the first's free stages through distributed shared
//! memory, between two cluster barriers, and the first adds them and stores C. No workspace and
//! no second kernel are needed.

use super::dequant_gemm::{shared_bytes, Operands};
use super::Infer;
use crate::ast::*;
use crate::target::Target;

/// Threads in the producer warpgroup (`setmaxnreg` reallocates registers per warpgroup).
pub const WGMMA_PRODUCER_THREADS: i64 = 128;
/// Registers a producer thread keeps (`setmaxnreg.dec`).
const PRODUCER_REGS: i64 = 40;
/// Registers a consumer thread gets (`setmaxnreg.inc`).
const CONSUMER_REGS: i64 = 232;

/// What the wide-tile dequant GEMM lowering does; see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct DequantWgmmaPlan {
    /// The pipelined loop.
    pub pipeline: StmtId,
    /// Its gemm.
    pub gemm: StmtId,
    /// Its dequant.
    pub dequant: StmtId,
    /// `copy(acc, C[...])` after it.
    pub store: StmtId,
    /// The copies of A's, the packed words' and the scales' tiles.
    pub copies: [StmtId; 3],
    /// Tensor indices: A, Wq, scales, C.
    pub tensors: [usize; 4],
    /// Buffer indices: A_s, Wq_s, S_s, W_s, acc.
    pub buffers: [usize; 5],
    /// block_M (A's rows: the MMA's N), block_N (weight rows: the MMA's M), block_K.
    pub block: (i64, i64, i64),
    /// Shared stages.
    pub stages: i64,
    /// Values per scale.
    pub group: i64,
    /// dequant_int4's zero point; per-group zero points are read beside the scales.
    pub zero: super::DequantZero,
    /// The block indices of the tile origins: A's (and C's) row tile, the weight tile.
    pub tile_index: [String; 2],
    /// Consumer warpgroups: the spec's threads, 64 weight rows each.
    pub warpgroups: i64,
    /// The warpgroup MMA atom, `SM90_64x<block_M>x16_F32<T><T>_RS<...>`.
    pub op: String,
    /// With a tile of 128 or more rows of A: the atom of the instantiation with half as many
    /// rows per block, which the launcher runs when the spec's tiles would occupy at most half
    /// the GPU's SMs (a prefill of a few hundred rows), so that twice the blocks share the work.
    pub half_op: Option<String>,
    /// The grid dimension (0, 1, 2: x, y, z) whose block index steps A's row tiles.
    pub m_grid_dim: Option<usize>,
    /// `Ok(bytes of the f32 tile the halves exchange)` when the launcher may split k between the
    /// two blocks of a cluster (along the grid's z, which the spec leaves free); else why not.
    pub split_k: Result<u64, String>,
    /// GMMA layout atom of A_s (the MMA's B operand, K-major).
    pub a_atom: &'static str,
    /// The swizzle atom of Wq_s's rows (a GMMA atom over 32-bit words: TMA writes the packed
    /// rows with that swizzle, and the consumers' 16-byte reads stay whole).
    pub w_atom: &'static str,
    /// That swizzle's width in bytes (128 or 64: the packed rows' width, bk / 2, allows).
    pub w_swizzle_bytes: i64,
    /// Shared bytes of one stage of A_s and of Wq_s.
    pub stage_bytes: [u64; 2],
    /// C's elements per 16-byte store.
    pub c_vector: i64,
    /// The padded row pitch (elements) of the tile that transposes Cᵀ in shared memory before
    /// the stores.
    pub c_pitch: i64,
    /// Bytes of that tile (it reuses the stages' space).
    pub epilogue_bytes: u64,
    /// `setmaxnreg` budgets: producer, consumer.
    pub regs: (i64, i64),
    /// Why this lowering, for the file header and `explain`.
    pub why: String,
}

impl<'a> Infer<'a> {
    /// Plans the wide-tile lowering; `Err` says why it does not apply.
    pub(super) fn plan_dequant_wgmma(&self, op: Operands) -> Result<DequantWgmmaPlan, String> {
        debug_assert_eq!(self.target, Target::Sm90a);
        let spec = self.spec;
        let (bm, bn, bk) = op.block;
        let threads = spec.threads.0;
        if threads % 128 != 0 {
            return Err(format!("its {threads} threads are not whole warpgroups"));
        }
        let warpgroups = threads / 128;
        // The register file (64K) holds the producer's 40 registers and 232 for each consumer
        // thread of at most two warpgroups, as `setmaxnreg` hands them over.
        if warpgroups > 2 {
            return Err(format!("its {threads} threads are {warpgroups} consumer warpgroups; it takes one or two (the register file holds {CONSUMER_REGS} registers per consumer thread for two, beside the producer's {PRODUCER_REGS})"));
        }
        if bn != 64 * warpgroups {
            return Err(format!("its {bn}-row weight tile is not 64 rows (the warpgroup MMA's M) for each of its {warpgroups} consumer warpgroup(s)"));
        }
        if bm % 64 != 0 || bm > 256 {
            return Err(format!("its {bm}-row tile of A is the warpgroup MMA's N, which this lowering takes as 64, 128, 192 or 256"));
        }
        if bk % 128 != 0 {
            return Err(format!("its k tile of {bk} is not a multiple of 128 (64-byte rows of packed words, the narrowest TMA row it loads)"));
        }
        if op.group % 16 != 0 {
            return Err(format!("its groups of {} values are not whole k16 MMA steps", op.group));
        }
        if op.stages < 2 {
            return Err("it needs two or more stages".into());
        }
        let [_, _, _, tc] = op.tensors;
        let c_bytes = spec.tensors[tc].dtype.0.bytes() as i64;
        let c_vector = 16 / c_bytes;
        let c_pitch = bn + c_vector;
        let half_bytes = op.half.bytes();
        let stage_bytes = [bm as u64 * bk as u64 * half_bytes, bn as u64 * bk as u64 / 2];
        let t = if op.half == DType::F16 { "F16F16" } else { "BF16BF16" };
        // The launch grid's dimension that steps A's row tiles (the launcher doubles it for the
        // half-height instantiation).
        let m_grid_dim = spec.grid.iter().position(|g| g.var.name == op.tile_index[0]);
        // Splitting k needs the grid's z free for the cluster's two blocks. The f32 accumulators
        // the second block hands over (bm x bn x 4 bytes) fit where the stages were: two stages
        // of A alone hold bm x 2bk x 2 bytes, and bk >= 128, bn <= 128.
        let partial_bytes = (bm * bn * 4) as u64;
        debug_assert!(partial_bytes <= op.stages as u64 * stage_bytes[0]);
        let split_k = if spec.grid.len() > 2 {
            Err("the spec's grid uses z, which the cluster of two blocks splitting k would take".to_string())
        } else {
            Ok(partial_bytes)
        };
        let (w_atom, w_swizzle_bytes) = if bk % 256 == 0 { ("GMMA::Layout_K_SW128_Atom", 128) } else { ("GMMA::Layout_K_SW64_Atom", 64) };
        let why = format!(
            "a {bm}-row tile of A on sm90a: C is computed transposed (Cᵀ = W · Aᵀ) on 64x{bm}x16 warpgroup MMAs, {warpgroups} consumer warpgroup(s) of 64 weight rows; \
             the MMA's A operand comes from registers, so each thread unpacks the fragment it owns (pair t, values 2t and 2t + 1, of each packed word of its two weight rows, t = lane % 4: the k pairs 2t, 2t + 1 and 2t + 8, 2t + 9 of every k16 step) \
             and `W_s` is never stored; A's tile is the B operand, read from shared memory through descriptors; a producer warpgroup loads A's and the packed words' tiles with TMA");
        Ok(DequantWgmmaPlan {
            pipeline: op.pipeline,
            gemm: op.gemm,
            dequant: op.dequant,
            store: op.store,
            copies: op.copies,
            tensors: op.tensors,
            buffers: op.buffers,
            block: op.block,
            stages: op.stages,
            group: op.group,
            zero: op.zero,
            tile_index: op.tile_index,
            warpgroups,
            op: format!("SM90_64x{bm}x16_F32{t}_RS<GMMA::Major::K, GMMA::Major::K>"),
            half_op: (bm >= 128 && m_grid_dim.is_some()).then(|| format!("SM90_64x{}x16_F32{t}_RS<GMMA::Major::K, GMMA::Major::K>", bm / 2)),
            m_grid_dim,
            split_k,
            a_atom: "GMMA::Layout_K_SW128_Atom",
            w_atom,
            w_swizzle_bytes,
            stage_bytes,
            c_vector,
            c_pitch,
            epilogue_bytes: (bm * c_pitch * c_bytes) as u64,
            regs: (PRODUCER_REGS, CONSUMER_REGS),
            why,
        })
    }

    /// Records the plan: shared memory (checked against the budget), alignment and registers.
    pub(super) fn adopt_dequant_wgmma(&mut self, p: DequantWgmmaPlan) {
        // The stages start on the 128-byte swizzle's 1024-byte period, as the thin tiles' TMA ones do.
        // With k split, the second block's accumulators land where the stages were.
        let [a, w] = p.stage_bytes;
        let staging = p.split_k.as_ref().map_or(p.epilogue_bytes, |partial| p.epilogue_bytes.max(*partial));
        let total = shared_bytes(&[a, w, 0, 0], p.stages, staging, true);
        self.record_dequant_smem(p.pipeline, p.stages, p.stage_bytes.iter().sum(), staging, total);
        let [ta, tw, _, tc] = p.tensors;
        let name = |t: usize| self.spec.tensors[t].name.name.clone();
        let half = 16 / self.spec.tensors[ta].dtype.0.bytes() as i64;
        self.plan.alignment = vec![
            super::Alignment { tensor: ta, whole_rows: true, vector_elems: half, why: format!("TMA reads 16-byte aligned rows of `{}`", name(ta)) },
            super::Alignment { tensor: tw, whole_rows: true, vector_elems: 4, why: format!("TMA reads 16-byte aligned rows of `{}`", name(tw)) },
            super::Alignment { tensor: tc, whole_rows: true, vector_elems: p.c_vector, why: format!("the epilogue stores 16-byte vectors of `{}`", name(tc)) },
        ];
        self.plan.regs_per_thread = p.regs.1 as u64;
        self.plan.dequant_wgmma = Some(p);
    }
}
