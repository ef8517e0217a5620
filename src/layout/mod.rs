//! Layout inference and pipeline planning.
//!
//! Requires: a checked spec ([`crate::check::Info`]) and a [`Target`].
//! Guarantees: a [`Plan`] that fixes, for every buffer, statement and loop, what the
//! backend must emit — or errors, with spans, for what the target cannot do.
//!
//! Inference runs at three levels, as in TileLang, and each level only fills in what the
//! ones before it left open:
//! 1. strict — `gemm` fixes its MMA atom, warp arrangement and accumulator layout;
//! 2. common — `parallel` blocks and copies propagate fragment layouts to the fragments
//!    they touch with the same indices, and copies fix shared majorness (the contiguous
//!    dimension follows the global tensor so that cp.async moves 16-byte vectors);
//! 3. free — what is left gets a default (fragments striped over threads, shared buffers
//!    row-major), then swizzles, copy atoms and vector widths follow from the majorness.
//!
//! Pipeline planning comes last: it needs the copies' plans to know which statements
//! produce the pipelined shared buffers.

pub mod attention;
pub mod mfma;
mod copy;
mod dequant_gemm;
mod dequant_wgmma;
mod fragments;
mod mma;
mod pipeline;
mod raster;
pub mod rows;
mod sm90;
mod overlap;
mod tma;
mod wgmma;

use crate::ast::*;
use crate::check::Info;
use crate::diag::Diagnostic;
use crate::target::Target;
use std::collections::BTreeMap;

pub use copy::{CopyPlan, CopyKind, ThreadLayout};
pub use dequant_gemm::{DequantGemmPlan, DequantGemmTma, DequantZero, PaddedLayout, PRODUCER_THREADS, SCALE_SLACK};
pub use dequant_wgmma::{DequantWgmmaPlan, WGMMA_PRODUCER_THREADS};
pub use mfma::{ck_mfma, ck_output_vector};
pub use mma::{MmaPlan, Wgmma};
pub use overlap::{MmaOverlap, OverlapRefusal};
pub use pipeline::{PipelineMode, PipelinePlan};
pub use fragments::UNIT_SCALE_MIN_VALUES;
pub use raster::{RasterPlan, RASTER_GROUP};
pub use tma::{MbarrierRole, Mbarriers, TmaLoad, WarpSpecialization};
pub use sm90::{collect_broadcasts, is_per_batch_vector, BatchForm, BatchPlan, CollectivePlan, EpilogueOp, EvtNode, GemmSchedule};

/// A CuTe `Swizzle<bits, base, shift>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swizzle {
    /// Number of bits XOR-ed (0: no swizzle).
    pub bits: u32,
    /// log2 of the elements in one 16-byte unit.
    pub base: u32,
    /// Distance in bits between the XOR source and target.
    pub shift: u32,
}

/// How a shared buffer is laid out.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedLayout {
    /// Spec dimensions in CuTe order: (MN, K) for gemm operands, otherwise (0, 1).
    pub cute_dims: Vec<usize>,
    /// Extents in CuTe order.
    pub cute_shape: Vec<i64>,
    /// The spec dimension that is contiguous in shared memory.
    pub contiguous_dim: usize,
    /// Whether the contiguous dimension is the gemm K dimension (`None` if not an operand).
    pub k_major: Option<bool>,
    /// The swizzle applied to the layout atom.
    pub swizzle: Swizzle,
    /// Atom extents in CuTe order, and whether the atom's first mode is the contiguous one.
    pub atom_shape: (i64, i64),
    /// True when the atom's first CuTe mode is contiguous (MN-major operands).
    pub atom_first_contiguous: bool,
    /// Number of pipeline stages held (1 if not pipelined).
    pub stages: i64,
    /// Whether the layout has a stage mode: the buffer is filled inside a `pipelined` loop
    /// (even a one-stage one).
    pub staged: bool,
    /// Total bytes, all stages (the odd-rows instantiation's, the larger, where it has one).
    pub bytes: u64,
    /// Filled by a copy that takes rows of any length ([`CopyPlan::odd_rows`]): the kernel's
    /// odd-rows instantiation makes each row of this buffer two elements wider.
    pub odd_rows: bool,
    /// Never materialised: a `dequant_int4` fused into the gemm that reads this buffer
    /// writes that gemm's operand registers directly (no bytes, no layout in the output).
    pub registers_only: bool,
    /// sm90a WGMMA path: the CuTe GMMA layout atom the tile is built from
    /// (`GMMA::Layout_K_SW128_Atom` or `GMMA::Layout_MN_SW128_Atom`), so that warpgroup MMAs
    /// can read it through shared-memory descriptors.
    pub gmma_atom: Option<&'static str>,
    /// Why inference chose this, clause by clause (see [`SharedLayout::why`]), so that a
    /// later step rewrites the clause its decision changes: the role in the program,
    /// ...
    pub why_role: String,
    /// ... the contiguous dimension (and what fills the tile that way), ...
    pub why_contiguous: String,
    /// ... and the swizzle and atom (empty when there is nothing to say).
    pub why_swizzle: String,
}

impl SharedLayout {
    /// Why inference chose this layout: the clauses joined.
    pub fn why(&self) -> String {
        [&self.why_role, &self.why_contiguous, &self.why_swizzle].iter()
            .filter(|c| !c.is_empty()).map(|c| c.as_str()).collect::<Vec<_>>().join("; ")
    }

    /// Whether the layout's CuTe modes are the spec dims swapped (a gemm operand stored
    /// (MN, K) with MN as spec dim 1): code that indexes it in spec order goes through a
    /// view with the modes swapped.
    pub fn modes_swapped(&self) -> bool {
        self.cute_dims == [1, 0]
    }
}

/// How a fragment is distributed over the block's threads.
#[derive(Clone, Debug, PartialEq)]
pub enum FragmentLayout {
    /// The accumulator layout of the TiledMma of gemm statement `gemm`.
    MmaAccumulator {
        /// The gemm that fixed it.
        gemm: StmtId,
    },
    /// One value per row of the accumulator of gemm `gemm` (row statistics, produced by
    /// `reduce_*(acc, x, dim=1)`): each thread holds the rows its accumulator elements
    /// sit in, and the four threads of an MMA quad that share a row hold the same value.
    RowStats {
        /// The gemm whose accumulator rows these are.
        gemm: StmtId,
    },
    /// Element `e` (row-major linear index) is owned by thread `e % threads`.
    Striped {
        /// Elements each thread holds.
        per_thread: i64,
    },
}

/// How a `dequant_int4` statement runs: each thread unpacks whole 32-bit words, eight
/// values each, and stores them as one 16-byte vector.
#[derive(Clone, Debug, PartialEq)]
pub struct DequantPlan {
    /// Packed words in the tile.
    pub words: i64,
    /// Packed words per row.
    pub words_per_row: i64,
    /// Values per scale.
    pub group: i64,
    /// Words each thread unpacks (rounded up).
    pub per_thread: i64,
    /// Eight-row rounds: each round covers 8 whole rows (a swizzle atom's height), each
    /// thread `per_round` words of one row, so a thread's row stays the same modulo 8 and
    /// its addresses differ by constants. `None`: rounds of consecutive words.
    pub per_round: Option<i64>,
    /// Whether the last round has fewer words than threads (guarded).
    pub guarded: bool,
    /// The gemm this unpacking is fused into: the only reader of the destination, a gemm
    /// with B = the destination, which then takes its B fragments straight from the packed
    /// words (each thread unpacks the pair of each word that holds its fragment's two
    /// values) and the destination is never written to shared memory.
    pub fused_into: Option<StmtId>,
    /// Why.
    pub why: String,
}

/// A runtime alignment requirement the launcher must check.
#[derive(Clone, Debug, PartialEq)]
pub struct Alignment {
    /// Tensor index.
    pub tensor: usize,
    /// Elements per vector: the base pointer must be a multiple, and with `whole_rows` the
    /// contiguous extent too.
    pub vector_elems: i64,
    /// Whether every row (the leading dimension) must be whole vectors. Copies that take care
    /// of rows starting mid-vector themselves need only the base aligned.
    pub whole_rows: bool,
    /// Why.
    pub why: String,
}

impl Alignment {
    /// The dimension of `t` whose extent `whole_rows` asks to be whole vectors: the contiguous
    /// one.
    pub fn contiguous_dim(t: &Tensor) -> usize {
        if t.shape.len() == 2 && t.order.0 == Order::ColMajor { 0 } else { t.shape.len() - 1 }
    }

    /// Only the base pointer aligned to `vector_elems` elements: rows may have any length.
    pub fn base_only(tensor: usize, vector_elems: i64, why: String) -> Self {
        Alignment { tensor, vector_elems, whole_rows: false, why }
    }
}

/// Shared-memory accounting.
#[derive(Clone, Debug, PartialEq)]
pub struct SmemUse {
    /// Bytes of all shared buffers with their stages.
    pub buffers: u64,
    /// Bytes of the largest epilogue staging tile.
    pub staging: u64,
    /// Whether the staging tiles reuse the buffers' space: only when every staged store
    /// runs after the loops, once the buffers are dead. A store inside a loop gets space
    /// of its own, since later iterations still need the buffers (and tiles in flight).
    pub staging_reuses_buffers: bool,
    /// Bytes of the mbarriers TMA loads complete on (after the buffers, padded to their
    /// 128-byte alignment), 0 without TMA.
    pub barriers: u64,
    /// What the kernel requests: the larger of buffers and staging, or their sum, plus
    /// the barriers.
    pub total: u64,
    /// The target's limit.
    pub budget: u64,
}

/// Everything inference decided.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The target planned for.
    pub target: Target,
    /// Per gemm statement.
    pub mmas: BTreeMap<StmtId, MmaPlan>,
    /// Per shared buffer index.
    pub shared: BTreeMap<usize, SharedLayout>,
    /// Per fragment buffer index.
    pub fragments: BTreeMap<usize, FragmentLayout>,
    /// Per copy statement.
    pub copies: BTreeMap<StmtId, CopyPlan>,
    /// Per pipelined loop.
    pub pipelines: BTreeMap<StmtId, PipelinePlan>,
    /// Per `dequant_int4` statement.
    pub dequants: BTreeMap<StmtId, DequantPlan>,
    /// Runtime alignment the launcher checks, one entry per tensor at most.
    pub alignment: Vec<Alignment>,
    /// Shared memory use.
    pub smem: SmemUse,
    /// Estimated registers per thread (accumulators, operand fragments, addressing).
    pub regs_per_thread: u64,
    /// sm90a: the CUTLASS collective a GEMM-shaped spec lowers to.
    pub collective: Option<CollectivePlan>,
    /// AMD: the attention program composable_kernel's fused attention operation runs.
    pub attention: Option<attention::AttentionPlan>,
    /// sm90a, fused programs: why the gemms stay on mma.sync (`None`: they are warpgroup
    /// MMAs, see `MmaPlan::wgmma`, or the target is not sm90a).
    pub mma_sync_reason: Option<String>,
    /// sm90a WGMMA path: why the global → shared copies stay cp.async (`None`: they are TMA
    /// loads, see `CopyPlan::tma`, or the program is not on the WGMMA path).
    pub cp_async_reason: Option<String>,
    /// sm90a TMA path: the producer warpgroup, if any.
    pub warp_specialization: Option<WarpSpecialization>,
    /// sm90a TMA path: why there is no producer warpgroup.
    pub ws_reason: Option<String>,
    /// sm90a, warp-specialised: a pipelined loop whose second gemm overlaps the next tile.
    pub overlap: Option<MmaOverlap>,
    /// sm90a, warp-specialised: why no loop is overlapped.
    pub overlap_reason: Option<OverlapRefusal>,
    /// sm90a TMA path: the mbarriers the loads complete on (and stages are released on).
    pub mbarriers: Vec<Mbarriers>,
    /// A thin-tile 4-bit-weight GEMM: its own lowering, with the weights as the MMA's A
    /// operand (see [`DequantGemmPlan`]); the general tables above stay empty.
    pub dequant_gemm: Option<DequantGemmPlan>,
    /// A program with a `dequant_int4` that does not take that lowering: why not.
    pub dequant_gemm_reason: Option<String>,
    /// sm90a: a GEMM-shaped spec that a CUTLASS collective cannot take, and so takes the
    /// CuTe-level lowering: why the collective refused it.
    pub collective_reason: Option<String>,
    /// sm90a's wide-tile dequant GEMM (warpgroup MMAs, the unpacked weights in registers), if
    /// the body has its shape.
    pub dequant_wgmma: Option<DequantWgmmaPlan>,
    /// AMD: the tile lowering on MFMAs, for fused programs that are neither GEMM-shaped
    /// nor softmax attention.
    pub tile: Option<mfma::TilePlan>,
    /// NVIDIA CuTe lowerings: the blocks take a GEMM's output tiles in groups of rows.
    pub raster: Option<RasterPlan>,
    /// Why the blocks keep the hardware's order (`None`: see `raster`, or a lowering that
    /// does not plan it).
    pub raster_reason: Option<String>,
    /// mma.sync path: parallel blocks (in loops) that only scale accumulators by row
    /// statistics, which a warp skips when every statistic it holds is 1; the statistics.
    pub unit_scale_skips: BTreeMap<StmtId, Vec<usize>>,
    /// A program without gemms, lowered row-wise (see [`rows::RowsPlan`]); the general
    /// tables above stay empty.
    pub rows: Option<rows::RowsPlan>,
}

/// Threads per block of the sm90a CUTLASS collectives: one producer and two consumer
/// warpgroups, whichever kernel schedule.
pub const COLLECTIVE_THREADS: i64 = 384;
/// Threads per block of the composable_kernel instances the AMD targets map onto.
pub const CK_THREADS: i64 = 256;

impl Plan {
    /// The producer warp or warpgroup a warp-specialised plan launches beside the spec's
    /// threads (thread count and what it is), if any: the fused programs' and the 4-bit-weight
    /// lowerings' TMA producers.
    pub fn producer(&self) -> Option<(i64, &'static str)> {
        self.warp_specialization.as_ref().map(|w| (w.producer_threads, "warpgroup"))
            .or_else(|| self.dequant_wgmma.as_ref().map(|_| (WGMMA_PRODUCER_THREADS, "warpgroup")))
            .or_else(|| self.dequant_gemm.as_ref().and_then(|p| p.tma.as_ref()).map(|_| (PRODUCER_THREADS, "warp")))
    }
}

pub(crate) struct Infer<'a> {
    pub spec: &'a Spec,
    pub info: &'a Info,
    pub target: Target,
    pub plan: Plan,
    pub errors: Vec<Diagnostic>,
    /// Where each fragment's layout was fixed, for conflict messages.
    pub fixed_at: BTreeMap<usize, crate::diag::Span>,
    /// Statements and buffers whose planning already failed with an error: later steps
    /// stay quiet about them instead of reporting consequences of the same mistake.
    pub failed_stmts: std::collections::BTreeSet<StmtId>,
    /// See `failed_stmts`.
    pub failed_buffers: std::collections::BTreeSet<usize>,
    /// `dequant_int4` statements fused into the gemm that is their only reader (see
    /// `DequantPlan::fused_into`), decided before shared layouts so that those can leave
    /// the unpacked tile out and swizzle the packed one for the gemm's reads.
    pub fused: BTreeMap<StmtId, StmtId>,
    /// Whether `dequant_int4` statements may be fused into their gemm (`fused`); off for
    /// sm90a's warpgroup-MMA trial, which needs the unpacked tile in shared memory.
    pub fuse_dequants: bool,
}

/// The plan's alignment requirements that a tensor's fixed extent can never meet: its
/// contiguous extent (a number or a constant) is not a whole number of the vectors that move it,
/// so the launcher would refuse every call. One error each, at the tensor.
fn fixed_extents_never_aligned(spec: &Spec, info: &Info, plan: &Plan) -> Vec<Diagnostic> {
    plan.alignment.iter().filter(|a| a.whole_rows).filter_map(|a| {
        let t = &spec.tensors[a.tensor];
        let n = info.fixed_extent(&t.shape[Alignment::contiguous_dim(t)])?;
        (n % a.vector_elems != 0).then(|| Diagnostic::error(t.span, format!(
            "`{}`'s contiguous extent {n} is not a multiple of {} elements, so the generated launcher would refuse every call: {}",
            t.name.name, a.vector_elems, a.why)).hint(format!("pad the extent to a multiple of {}", a.vector_elems)))
    }).collect()
}

/// Runs inference and planning for `target`.
pub fn infer(spec: &Spec, info: &Info, target: Target) -> Result<Plan, Vec<Diagnostic>> {
    let plan = plan_for(spec, info, target)?;
    if let Some(d) = threads_override_unused(spec, &plan) {
        return Err(vec![d]);
    }
    let never_aligned = fixed_extents_never_aligned(spec, info, &plan);
    if never_aligned.is_empty() { Ok(plan) } else { Err(never_aligned) }
}

/// [`infer`]'s lowerings, each returning its plan.
fn plan_for(spec: &Spec, info: &Info, target: Target) -> Result<Plan, Vec<Diagnostic>> {
    let mut cx = Infer::new(spec, info, target);
    if let Some(d) = fp8_refused(spec, target) {
        return Err(vec![d]);
    }
    // A program without gemms (softmax, a norm) loads rows into registers, computes on them and
    // reduces along them: the row-wise lowering, on every target.
    if rows::is_candidate(spec) {
        // (Only sm90a entries carry these settings: `apply_target` refuses them elsewhere.)
        let ignored = collective_settings_ignored(spec);
        if !ignored.is_empty() {
            return Err(ignored);
        }
        let p = rows::plan(spec, info, target)?;
        cx.adopt_rows(p);
        return Ok(cx.plan);
    }
    if target.is_amd() {
        // AMD: GEMM-shaped specs map onto composable_kernel device operations, softmax
        // attention onto CK's fused attention.
        let tile = |cx: &mut Infer, why: String| match mfma::plan(spec, info, target, why) {
            Ok(p) => {
                cx.plan.smem = SmemUse { buffers: p.lds_total, total: p.lds_total, budget: target.smem_budget(), ..cx.plan.smem.clone() };
                cx.plan.alignment = p.alignment.iter().map(|(t, v, why)| Alignment { tensor: *t, whole_rows: true, vector_elems: *v, why: why.clone() }).collect();
                cx.plan.tile = Some(p);
                Ok(())
            }
            Err(errors) => Err(errors),
        };
        if let Some(shape) = cx.gemm_shape() {
            cx.plan_collective(shape);
            // A GEMM-shaped spec the CK instance cannot take (an epilogue CK's element-wise
            // operators cannot spell, say) takes the tile lowering when that can run it.
            if !cx.errors.is_empty() {
                let why = format!("GEMM-shaped, but composable_kernel's device GEMM cannot take it: {}", cx.errors.iter().map(Diagnostic::cause_or_message).collect::<Vec<_>>().join("; "));
                match tile(&mut cx, why) {
                    Ok(()) => {
                        cx.errors.clear();
                        cx.plan.collective = None;
                    }
                    // Neither lowering takes it: say so first, then why for both.
                    Err(errors) => {
                        let ck = std::mem::take(&mut cx.errors);
                        cx.err(Diagnostic::error(spec.kernel.span, format!(
                            "the {target} target has no lowering for this GEMM: composable_kernel's device GEMM cannot take it ({}), and neither can tilegen's tile lowering on MFMAs, which takes the GEMMs CK refuses ({})",
                            reasons(ck.len()), reasons(errors.len())))
                            .hint(format!("the reasons follow; the spec renders for {target} once either lowering's reasons are gone"))
                            .unsupported_on_target());
                        cx.errors.extend(attributed("CK device GEMM", ck));
                        cx.errors.extend(attributed("tile lowering", errors));
                    }
                }
            }
        } else {
            match attention::recognize(spec, info) {
                Ok(a) => cx.plan_attention(a),
                // Other fused programs (dequant GEMMs, linear attention, ...): tilegen's own
                // tile-level code on MFMAs.
                Err(why) => {
                    let why = format!("neither GEMM-shaped (a composable_kernel device GEMM) nor softmax attention (CK's fused attention: {why})");
                    if let Err(errors) = tile(&mut cx, why.clone()) {
                        cx.err(Diagnostic::error(spec.kernel.span, format!(
                            "the {target} target has no lowering for this fused program: it is {why}, and tilegen's tile lowering on MFMAs cannot take it"))
                            .hint(format!("{} from the tile lowering follow{}; this spec renders for sm80 and sm90a, and `tilegen gen` skips it for AMD targets",
                                reasons(errors.len()), if errors.len() == 1 { "s" } else { "" }))
                            .unsupported_on_target());
                        cx.errors.extend(errors);
                    }
                }
            }
        }
        return if cx.errors.is_empty() { Ok(cx.plan) } else { Err(cx.errors) };
    }
    if target == Target::Sm90a && let Some(shape) = cx.gemm_shape() {
        // Hopper: GEMM-shaped specs map onto a CUTLASS collective, which owns its layouts.
        cx.plan_collective(shape);
        if cx.errors.is_empty() {
            return Ok(cx.plan);
        }
        // A spec the collective cannot take (its grid, a 3-D operand, an epilogue EVT cannot
        // spell, ...) runs tilegen's own CuTe-level lowering, as fused programs do, when that
        // takes it and its accumulators fit in a thread's registers; one with f8e4m3 tensors
        // has no other lowering.
        if fp8_declared(spec).is_some() {
            let mut errors = vec![Diagnostic::error(spec.kernel.span, format!("the sm90a target multiplies f8e4m3 operands only in a CUTLASS collective, which cannot take this spec ({})", reasons(cx.errors.len())))
                .hint("the reasons follow; tilegen's CuTe-level lowering has no f8e4m3 operands")];
            errors.append(&mut cx.errors);
            return Err(errors);
        }
        let collective = std::mem::take(&mut cx.errors);
        let mut general = Infer::new(spec, info, target);
        general.plan_general();
        general.errors.extend(collective_settings_ignored(spec));
        let acc_regs = general.accumulator_registers();
        if general.errors.is_empty() && acc_regs <= MAX_ACCUMULATOR_REGS {
            // The causes, without the preface that says what the collective lowering takes.
            general.plan.collective_reason = Some(collective.iter().map(Diagnostic::cause_or_message).collect::<Vec<_>>().join("; "));
            return Ok(general.plan);
        }
        let mut refusals = std::mem::take(&mut general.errors);
        if acc_regs > MAX_ACCUMULATOR_REGS {
            let threads = spec.threads.0;
            refusals.push(Diagnostic::error(spec.threads.1, format!(
                "the accumulators need {acc_regs} registers per thread with {threads} threads, over the {MAX_ACCUMULATOR_REGS} this lowering allows (a thread holds at most 255)"))
                .hint("use more threads or a smaller output tile for sm90a"));
        }
        cx.err(Diagnostic::error(spec.kernel.span, format!(
            "the sm90a target has no lowering for this GEMM: a CUTLASS collective cannot take it ({}), and neither can tilegen's CuTe-level lowering, which takes the GEMMs the collective refuses ({})",
            reasons(collective.len()), reasons(refusals.len())))
            .hint("the reasons follow; the spec renders for sm90a once either lowering's reasons are gone"));
        cx.errors.extend(attributed("CUTLASS collective", collective));
        cx.errors.extend(attributed("CuTe-level lowering", refusals));
        return Err(cx.errors);
    }
    let ignored = collective_settings_ignored(spec);
    if !ignored.is_empty() {
        return Err(ignored);
    }
    // A dequant GEMM has lowerings of its own, with the weights as the MMA's A operand: thin
    // tiles (decode shapes) on mma.sync, each thread unpacking whole packed words; on sm90a,
    // tiles of 64 or more rows of A on warpgroup MMAs, each thread unpacking its register
    // fragment. Other programs with a dequant take the general lowering below, and `explain`
    // says why.
    let has_dequant = cx.statements().iter().any(|s| matches!(s.kind, StmtKind::Dequant { .. }));
    if has_dequant {
        match cx.dequant_gemm_shape().and_then(|shape| cx.dequant_gemm_operands(&shape)).and_then(|op| cx.plan_dequant_lowering(op)) {
            Ok(dequant_gemm::DequantLowering::Thin(p)) => {
                cx.adopt_dequant_gemm(p);
                return if cx.errors.is_empty() { Ok(cx.plan) } else { Err(cx.errors) };
            }
            Ok(dequant_gemm::DequantLowering::Wide(p)) => {
                cx.adopt_dequant_wgmma(p);
                return if cx.errors.is_empty() { Ok(cx.plan) } else { Err(cx.errors) };
            }
            Err(why) => cx.plan.dequant_gemm_reason = Some(why),
        }
    }
    // sm90a: a dequant GEMM whose weights can be unpacked into a shared tile that warpgroup
    // MMAs read takes that route; otherwise (and on sm80) the dequant is fused into mma.sync's
    // B fragments where it can be, which needs no shared tile and no barrier.
    if target == Target::Sm90a && has_dequant {
        let mut trial = Infer::new(spec, info, target);
        trial.fuse_dequants = false;
        trial.plan.dequant_gemm_reason = cx.plan.dequant_gemm_reason.clone();
        trial.plan_general();
        let wgmma = !trial.plan.mmas.is_empty() && trial.plan.mmas.values().all(|m| m.wgmma.is_some());
        if trial.errors.is_empty() && wgmma && cx.errors.is_empty() {
            return Ok(trial.plan);
        }
        cx.plan_general();
        // A fused dequant keeps every gemm on mma.sync (wgmma_fit refuses it): say why the
        // unfused plan did not take warpgroup MMAs instead.
        if !cx.fused.is_empty() {
            let why = match (trial.errors.first(), trial.plan.mma_sync_reason) {
                (Some(d), _) => d.message.clone(),
                (None, Some(why)) => why,
                (None, None) => "no reason recorded".into(),
            };
            cx.plan.mma_sync_reason = Some(format!(
                "its dequant_int4 is fused into mma.sync's B fragments: with the weights unpacked into a shared tile instead (which warpgroup MMAs can read), {why}"));
        }
    } else {
        cx.plan_general();
    }
    if cx.errors.is_empty() { Ok(cx.plan) } else { Err(cx.errors) }
}

impl<'a> Infer<'a> {
    fn new(spec: &'a Spec, info: &'a Info, target: Target) -> Self {
        Infer {
            spec,
            info,
            target,
            plan: Plan {
                target,
                mmas: BTreeMap::new(),
                shared: BTreeMap::new(),
                fragments: BTreeMap::new(),
                copies: BTreeMap::new(),
                pipelines: BTreeMap::new(),
                dequants: BTreeMap::new(),
                alignment: Vec::new(),
                smem: SmemUse { buffers: 0, staging: 0, staging_reuses_buffers: true, barriers: 0, total: 0, budget: target.smem_budget() },
                regs_per_thread: 0,
                collective: None,
                attention: None,
                mma_sync_reason: None,
                cp_async_reason: None,
                warp_specialization: None,
                ws_reason: None,
                overlap: None,
                overlap_reason: None,
                mbarriers: Vec::new(),
                dequant_gemm: None,
                dequant_gemm_reason: None,
                collective_reason: None,
                dequant_wgmma: None,
                tile: None,
                raster: None,
                raster_reason: None,
                unit_scale_skips: BTreeMap::new(),
                rows: None,
            },
            errors: Vec::new(),
            fixed_at: BTreeMap::new(),
            failed_stmts: Default::default(),
            failed_buffers: Default::default(),
            fused: BTreeMap::new(),
            fuse_dequants: true,
        }
    }

    /// Takes a row-wise plan: the launcher's alignment checks (whole vectors of every tensor
    /// copied) and the shared scratch of cross-warp reductions.
    fn adopt_rows(&mut self, p: rows::RowsPlan) {
        for cp in p.copies.iter().filter(|cp| !cp.row_values) {
            let bytes = p.vector * self.spec.tensors[cp.tensor].dtype.0.bytes() as i64;
            self.require_alignment(cp.tensor, p.vector, format!("the row tile moves {}-byte vectors of `{}`", bytes, self.spec.tensors[cp.tensor].name.name));
        }
        let mut vectors: Vec<usize> = p.column_vectors.iter().copied().chain(p.chunk_vectors.iter().map(|cv| cv.tensor)).collect();
        vectors.sort();
        vectors.dedup();
        for t in vectors {
            let bytes = p.vector * self.spec.tensors[t].dtype.0.bytes() as i64;
            self.require_alignment(t, p.vector, format!("parallel blocks read `{}` in {bytes}-byte vectors along the row tile's columns", self.spec.tensors[t].name.name));
        }
        let scratch = p.scratch_bytes(self.spec.threads.0);
        self.plan.smem = SmemUse { buffers: scratch, total: scratch, ..self.plan.smem.clone() };
        self.plan.regs_per_thread = p.registers as u64;
        self.plan.rows = Some(p);
    }

    /// The general CuTe lowering's planning steps, in dependency order; errors go to
    /// `self.errors`.
    fn plan_general(&mut self) {
        let target = self.target;
        // Programs that take neither a library collective nor the thin-tile lowering lower to
        // CuTe with cp.async multistage pipelines; the gemms are mma.sync with ldmatrix on sm80,
        // and on sm90a warpgroup MMAs (WGMMA) where every gemm fits them.
        // Strict: gemms fix MMA atoms and accumulator layouts.
        self.strict_gemms();
        // Reductions of accumulators along their rows give row-statistics fragments.
        self.row_stats();
        // Common: parallel blocks propagate fragment layouts; copies fix shared majorness.
        self.common_parallel();
        // Register-sourced gemm operands need the layout common propagation gave them.
        self.register_operands();
        // A dequant whose tile only one gemm reads unpacks into that gemm's registers.
        self.dequant_fusions();
        // Free: defaults for fragments nothing constrained.
        self.free_fragments();
        // Shared layouts need the gemm roles (strict) and the copies' tensors (common).
        self.shared_layouts();
        // 8-bit gemm operands: K-major only (needs the shared layouts).
        self.int8_operands_k_major();
        // Unpacking needs the destination's shared layout (16-byte runs along its rows).
        self.dequants();
        // Copy atoms need shared and fragment layouts.
        self.copy_plans();
        // sm90a: gemms become warpgroup MMAs when every one of them fits (shared tiles keep
        // their rows, swizzle and bytes); needs the gemms, fragments and shared layouts.
        if target == Target::Sm90a && self.errors.is_empty() {
            self.plan_wgmma();
            // Copies into GMMA-laid-out tiles become TMA loads (all of them or none).
            self.plan_tma();
        }
        // Pipelines need the copy plans to tell producers from consumers.
        self.pipelines();
        // sm90a, warp-specialised: a loop's second gemm overlapped with the next tile's work;
        // needs the pipelines' consumers and the warpgroup MMAs.
        if target == Target::Sm90a && self.errors.is_empty() {
            self.plan_overlap();
        }
        // mma.sync gemms reading a shared A tile an earlier gemm already loaded take its
        // registers: needs the warpgroup MMA decision and the fused dequants.
        self.shared_operand_reuse();
        // Row-statistic scales a warp may skip: needs the fragment layouts and, on sm90a, the
        // warpgroup MMA decision (their accumulators are left alone).
        self.unit_scale_skips();
        // Block order: needs the copy plans (which grid index each operand's tiles step along).
        self.rasterization();
        // Budgets need everything above.
        self.budgets();
    }
}

/// The most accumulator registers per thread the CuTe-level lowering of a GEMM-shaped spec
/// on sm90a takes: CUTLASS's widest warpgroup tile, 64x256 in f32, holds 128.
const MAX_ACCUMULATOR_REGS: u64 = 128;

/// The first f8e4m3 in the spec's tensors and buffers, by its dtype's span.
fn fp8_declared(spec: &Spec) -> Option<crate::diag::Span> {
    spec.tensors.iter().map(|t| t.dtype).chain(spec.buffers.iter().map(|b| b.dtype)).find(|d| d.0 == DType::F8E4M3).map(|d| d.1)
}

/// f8e4m3 tensors are taken by the row-wise lowering on the NVIDIA targets (loads, and stores
/// rounded to nearest even, saturating) and, as GEMM operands, by sm90a's CUTLASS collective.
/// Anything else is refused: a row-wise fragment of that type (at the fragment), other sm80
/// programs, and the AMD targets (at the first declaration of the dtype), whose gfx942 fp8 is
/// the FNUZ variant (another bias and range) and gfx90a has none.
fn fp8_refused(spec: &Spec, target: Target) -> Option<Diagnostic> {
    let span = fp8_declared(spec)?;
    let why = if target.is_amd() {
        format!("the {target} target has no f8e4m3 (OCP E4M3) support: {}", if target == Target::Gfx942 { "its fp8 is the FNUZ variant, with another bias and range" } else { "it has no fp8 type" })
    } else if !rows::is_candidate(spec) && target == Target::Sm80 {
        format!("the {target} target takes f8e4m3 tensors in row-wise programs (programs without gemms) only: mma.sync in sm_80 code has no fp8 (sm90a's CUTLASS collective multiplies f8e4m3 operands)")
    } else if !rows::is_candidate(spec) {
        // sm90a: GEMMs over f8e4m3 operands take the CUTLASS collective (checked there).
        return None;
    } else if let Some(b) = spec.buffers.iter().find(|b| b.dtype.0 == DType::F8E4M3) {
        return Some(Diagnostic::error(b.dtype.1, format!("the row-wise lowering computes in f32, bf16 or f16; fragment `{}` is f8e4m3", b.name.name))
            .hint("declare it f32: copies convert to and from f8e4m3 tensors (rounded to nearest even, saturating at ±448)"));
    } else {
        return None;
    };
    Some(Diagnostic::error(span, why).hint("convert to or from bf16 in a row-wise program (a quantization kernel) around this one").unsupported_on_target())
}

/// A spec's `cluster`, `schedule` or `swizzle` on a program that does not take a CUTLASS
/// collective, the only lowering that launches the spec's cluster shape, runs a kernel schedule
/// and has a persistent tile scheduler.
fn collective_settings_ignored(spec: &Spec) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    if let Some((d, span)) = &spec.cluster {
        errors.push(Diagnostic::error(*span, format!("cluster {d:?} is taken only by the CUTLASS collective of a GEMM-shaped spec; this spec takes tilegen's CuTe-level lowering, which chooses its own clusters"))
            .hint("remove `cluster` from this target's entry"));
    }
    if let Some((n, span)) = spec.swizzle {
        errors.push(Diagnostic::error(span, format!("swizzle {n} is taken only by the CUTLASS collective of a GEMM-shaped spec; this spec takes tilegen's CuTe-level lowering, which orders its blocks itself"))
            .hint("remove `swizzle` from this target's entry"));
    }
    if let Some((s, span)) = spec.schedule {
        errors.push(Diagnostic::error(span, format!("schedule `{}` is taken only by the CUTLASS collective of a GEMM-shaped spec; this spec takes tilegen's CuTe-level lowering, which plans its own warp roles", s.name()))
            .hint("remove `schedule` from this target's entry"));
    }
    errors
}

/// A `threads:` setting in the target's `targets:` entry that the chosen lowering does not
/// use: the CUTLASS collective and composable_kernel's instances fix their own thread counts.
/// (The spec-wide `threads` is the other lowerings' and needs no error.)
fn threads_override_unused(spec: &Spec, plan: &Plan) -> Option<Diagnostic> {
    let target = plan.target;
    let (n, span) = spec.targets.iter().find(|o| o.target.name == target.name())?.threads?;
    let by = if target.is_amd() && (plan.collective.is_some() || plan.attention.is_some()) {
        format!("the composable_kernel instance this spec maps onto sets its own ({CK_THREADS})")
    } else if target == Target::Sm90a && plan.collective.is_some() {
        format!("the CUTLASS collective this spec maps onto sets them by its kernel schedule ({COLLECTIVE_THREADS})")
    } else {
        return None;
    };
    Some(Diagnostic::error(span, format!("`threads: {n}` for {target} is not used: {by}"))
        .hint("remove `threads` from this target's entry (`tilegen explain` shows the lowering)"))
}

/// "one reason" or "N reasons", for diagnostics that announce the ones after them.
fn reasons(n: usize) -> String {
    if n == 1 { "one reason".to_string() } else { format!("{n} reasons") }
}

/// A refusal's reasons, each prefixed with the lowering that gave it: where two lowerings
/// refuse a spec, the reasons print in source order, interleaved.
fn attributed(lowering: &str, reasons: Vec<Diagnostic>) -> impl Iterator<Item = Diagnostic> + '_ {
    reasons.into_iter().map(move |mut d| {
        d.message = format!("{lowering}: {}", d.message);
        d
    })
}

impl<'a> Infer<'a> {
    pub fn err(&mut self, d: Diagnostic) {
        self.errors.push(d);
    }

    fn dequants(&mut self) {
        for s in self.statements() {
            let StmtKind::Dequant { src, dst, scales, zero, .. } = &s.kind else { continue };
            let zero_text = match zero {
                ZeroPoint::Constant(z, _) => format!("zero point {z}"),
                ZeroPoint::PerGroup(z) => format!("one zero point per group from `{}`", z.name),
            };
            let (Some(is), Some(id), Some(ic)) = (self.buffer_index(&src.name), self.buffer_index(&dst.name), self.buffer_index(&scales.name)) else { continue };
            let (rows, cols) = (self.shape(id)[0], self.shape(id)[1]);
            let groups = self.shape(ic)[1];
            let Some(layout) = self.plan.shared.get(&id) else { continue };
            // Eight 2-byte values are one 16-byte store only if they are contiguous: along
            // dim 1, inside one 16-byte chunk of the swizzle atom.
            if layout.contiguous_dim != 1 || layout.swizzle.base < 3 {
                let operand = if layout.k_major.is_some() { ", because the gemm reading it wants K contiguous" } else { "" };
                self.err(Diagnostic::error(dst.span, format!("`dequant_int4` writes eight values of a row as one vector, but `{}` is laid out with dim {} contiguous{operand}", dst.name, layout.contiguous_dim))
                    .hint("pack along the gemm's K dimension and make it the tile's last: e.g. W_s [block_N, block_K] with `gemm(A_s, W_s, acc, transpose_b=true)`"));
                continue;
            }
            if self.plan.shared.get(&is).is_some_and(|l| l.contiguous_dim != 1) {
                self.err(Diagnostic::error(src.span, format!("`{}` must have its words contiguous along dim 1", src.name)));
                continue;
            }
            let threads = self.spec.threads.0;
            let words = rows * cols / 8;
            let per_thread = (words + threads - 1) / threads;
            let wpr = cols / 8;
            let per_round = (rows % 8 == 0 && (8 * wpr) % threads == 0 && threads % 8 == 0 && wpr % (threads / 8) == 0)
                .then_some(8 * wpr / threads);
            let why = format!(
                "{threads} threads each unpack {per_thread} 32-bit word{} of {} per tile, eight values per word into one 16-byte store; {}; one scale per {} values, {zero_text}",
                if per_thread == 1 { "" } else { "s" }, src.name,
                if per_round.is_some() {
                    "rounds of eight whole rows keep each thread on one row modulo 8 (the swizzle's period), so its addresses differ by constants; neighbouring threads take neighbouring words"
                } else {
                    "consecutive threads take consecutive words of a row, so the word loads are conflict-free"
                },
                cols / groups);
            let guarded = per_round.is_none() && words % threads != 0;
            let fused_into = self.fused.get(&s.id).copied();
            let why = match fused_into {
                Some(_) => {
                    format!(
                        "fused into the gemm that reads `{}`, its only use: each thread unpacks its B fragments straight from the packed words (the values at k = 2t, 2t+1 of a k-block are pair t of the block's first word, k = 2t+8, 2t+9 pair t of its second; one 16-byte load covers two k-blocks), times one scale per {} values, {zero_text}; `{}` is never written and no barrier separates the unpacking from the MMAs",
                        dst.name, cols / groups, dst.name)
                }
                None => why,
            };
            self.plan.dequants.insert(s.id, DequantPlan { words, words_per_row: wpr, group: cols / groups, per_thread, per_round, guarded, fused_into, why });
        }
    }

    /// Fills `fused`: each `dequant_int4` with a gemm it can be fused into.
    fn dequant_fusions(&mut self) {
        if !self.fuse_dequants {
            return;
        }
        for s in self.statements() {
            let StmtKind::Dequant { dst, scales, .. } = &s.kind else { continue };
            let (Some(id), Some(ic)) = (self.buffer_index(&dst.name), self.buffer_index(&scales.name)) else { continue };
            let (cols, groups) = (self.shape(id).get(1).copied(), self.shape(ic).get(1).copied());
            let (Some(cols), Some(groups)) = (cols, groups) else { continue };
            if let Some(g) = self.fusable_gemm(s, id, cols / groups.max(1)) {
                self.fused.insert(s.id, g);
            }
        }
    }

    /// The gemm a `dequant_int4` into `dst` can be fused into: its only reader, in the same
    /// loop body, reading `dst` as a B operand with K along dim 1 (where the dequant writes
    /// its rows; another layout is an error of its own) over an even number of 16-deep
    /// k-blocks, with A from shared memory and one scale for each pair of k-blocks (one
    /// 16-byte load of packed words covers a pair).
    fn fusable_gemm(&self, dq: &Stmt, dst: usize, group: i64) -> Option<StmtId> {
        let name = &self.spec.buffers[dst].name.name;
        let mut readers = Vec::new();
        for s in self.statements() {
            let reads = match &s.kind {
                StmtKind::Gemm { a, b, c, .. } => [a, b, c].iter().any(|x| x.name == *name),
                StmtKind::Copy { src, dst: d } => src.name.name == *name || d.name.name == *name,
                StmtKind::Dequant { dst: d, .. } => s.id != dq.id && d.name == *name,
                StmtKind::Parallel { body, .. } => body.iter().any(|st| match &st.kind {
                    StmtKind::Assign { target, value, .. } => target.name == *name || value.mentions(name),
                    _ => false,
                }),
                StmtKind::Reduce { src, dst: d, .. } => src.name == *name || d.name == *name,
                StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => buf.name == *name,
                _ => false,
            };
            if reads {
                readers.push(s);
            }
        }
        let [g] = readers.as_slice() else { return None };
        let m = self.plan.mmas.get(&g.id)?;
        let siblings = |body: &[Stmt]| body.iter().any(|x| x.id == dq.id) && body.iter().any(|x| x.id == g.id);
        let mut same_body = siblings(&self.spec.body);
        self.spec.walk(&mut |s| {
            if let StmtKind::Loop { body, .. } = &s.kind {
                same_body |= siblings(body);
            }
        });
        (m.b == dst && !m.a_in_registers && m.b_dims.1 == 1 && m.k_blocks % 2 == 0 && group % 32 == 0 && same_body).then_some(g.id)
    }

    pub fn shape(&self, buffer: usize) -> &[i64] {
        &self.info.buffer_shapes[buffer]
    }

    pub fn buffer_index(&self, name: &str) -> Option<usize> {
        match self.info.symbols.get(name) {
            Some(crate::check::Symbol::Buffer(b)) => Some(*b),
            _ => None,
        }
    }

    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        match self.info.symbols.get(name) {
            Some(crate::check::Symbol::Tensor(t)) => Some(*t),
            _ => None,
        }
    }

    /// Statements with their enclosing loops, in pre-order.
    pub fn statements(&self) -> Vec<&'a Stmt> {
        let mut out = Vec::new();
        let spec: &'a Spec = self.spec;
        spec.walk(&mut |s| out.push(s));
        out
    }

    /// Whether two fragment layouts put the same rows in the same threads: both come from
    /// gemms whose warps all split M (none along N) with the same M tile and atom.
    pub fn same_rows(&self, a: StmtId, b: StmtId) -> bool {
        match (self.plan.mmas.get(&a), self.plan.mmas.get(&b)) {
            (Some(x), Some(y)) => a == b || (x.warps == y.warps && x.warps.1 == 1 && x.mnk.0 == y.mnk.0),
            _ => false,
        }
    }

    /// Statements inside some loop's body.
    fn statements_in_loops(&self) -> std::collections::BTreeSet<StmtId> {
        fn go(stmts: &[Stmt], inside: bool, out: &mut std::collections::BTreeSet<StmtId>) {
            for s in stmts {
                if inside {
                    out.insert(s.id);
                }
                match &s.kind {
                    StmtKind::Loop { body, .. } => go(body, true, out),
                    StmtKind::Parallel { body, .. } => go(body, inside, out),
                    StmtKind::If { then_body, else_body, .. } => {
                        go(then_body, inside, out);
                        go(else_body, inside, out);
                    }
                    _ => {}
                }
            }
        }
        let mut out = std::collections::BTreeSet::new();
        go(&self.spec.body, false, &mut out);
        out
    }

    fn budgets(&mut self) {
        let buffers: u64 = self.plan.shared.values().map(|l| l.bytes).sum();
        let in_loops = self.statements_in_loops();
        let reuse = !self.plan.copies.iter().any(|(id, c)| c.staging_bytes > 0 && in_loops.contains(id));
        let staging = if reuse {
            self.plan.copies.values().map(|c| c.staging_bytes).max().unwrap_or(0)
        } else {
            self.plan.copies.values().map(|c| c.staging_bytes).sum()
        };
        // 8 bytes per mbarrier; the block of them is padded to the storage's 128-byte alignment.
        self.plan_mbarriers();
        let barriers = (8 * self.plan.mbarriers.iter().map(|m| m.count).sum::<i64>() as u64).div_ceil(128) * 128;
        let total = if reuse { buffers.max(staging) } else { buffers + staging } + barriers;
        self.plan.smem = SmemUse { buffers, staging, staging_reuses_buffers: reuse, barriers, total, budget: self.target.smem_budget() };
        if total > self.target.smem_budget() {
            let detail = self.plan.shared.iter()
                .map(|(b, l)| format!("`{}` {} B{}", self.spec.buffers[*b].name.name, l.bytes, if l.stages > 1 { format!(" ({} stages)", l.stages) } else { String::new() }))
                .collect::<Vec<_>>().join(", ");
            let span = self.statements().iter().find_map(|s| match &s.kind {
                StmtKind::Loop { stages: Some(st), .. } => Some(st.span),
                _ => None,
            }).or_else(|| self.spec.buffers.iter().find(|b| b.scope.0 == Scope::Shared).map(|b| b.span))
                .unwrap_or(self.spec.kernel.span);
            self.err(Diagnostic::error(span, format!(
                "shared memory over budget: the kernel needs {total} bytes but {} allows {} bytes per block",
                self.target, self.target.smem_budget()))
                .hint(format!("{detail}; use fewer stages or smaller tiles")));
        }
        let mut regs = 32u64;
        for (b, l) in &self.plan.fragments {
            regs += self.fragment_registers(*b, l);
        }
        // Two k-blocks of each operand in flight; an A fragment later gemms reuse stays whole
        // until the last of them (its two k-blocks counted with the gemm that loads it).
        let reused: std::collections::BTreeSet<StmtId> = self.plan.mmas.values().filter_map(|m| m.a_from).collect();
        for (id, m) in &self.plan.mmas {
            let a = match (m.a_in_registers, m.a_from) {
                (true, _) | (false, Some(_)) => 0,
                (false, None) if reused.contains(id) => m.k_blocks.max(2) as u64 * m.a_regs_per_kblock,
                (false, None) => 2 * m.a_regs_per_kblock,
            };
            regs += a + 2 * m.b_regs_per_kblock;
        }
        self.plan.regs_per_thread = regs;
    }

    /// The 32-bit registers each thread holds for fragment `b`, laid out as `l`.
    fn fragment_registers(&self, b: usize, l: &FragmentLayout) -> u64 {
        let per_thread = match l {
            FragmentLayout::MmaAccumulator { .. } => {
                let elems: i64 = self.shape(b).iter().product();
                (elems / self.spec.threads.0.max(1)) as u64
            }
            FragmentLayout::Striped { per_thread } => *per_thread as u64,
            FragmentLayout::RowStats { gemm } => self.plan.mmas[gemm].rows_per_thread() as u64,
        };
        (per_thread * self.spec.buffers[b].dtype.0.bytes()).div_ceil(4)
    }

    /// The 32-bit registers each thread holds for the MMA accumulators.
    fn accumulator_registers(&self) -> u64 {
        self.plan.fragments.iter().filter(|(_, l)| matches!(l, FragmentLayout::MmaAccumulator { .. })).map(|(b, l)| self.fragment_registers(*b, l)).sum()
    }
}

/// A fragment touched inside a parallel block.
pub(crate) struct Touch {
    buffer: usize,
    span: crate::diag::Span,
    /// Indexed by exactly the block's variables, in order.
    plain: bool,
    /// A 1-D fragment indexed by the block's first (row) variable only.
    row_only: bool,
}

fn collect_fragment_reads(cx: &Infer<'_>, e: &Expr, vars: &[Ident], out: &mut Vec<Touch>) {
    e.visit(&mut |x| {
        if let ExprKind::Index(name, idx) = &x.kind && let Some(b) = cx.buffer_index(&name.name) {
            let is_var = |x: &Expr, v: &Ident| matches!(&x.kind, ExprKind::Name(n) if *n == v.name);
            let plain = idx.len() == vars.len() && idx.iter().zip(vars).all(|(x, v)| is_var(x, v));
            let row_only = vars.len() == 2 && idx.len() == 1 && is_var(&idx[0], &vars[0]);
            out.push(Touch { buffer: b, span: name.span, plain, row_only });
        }
        true
    });
}
