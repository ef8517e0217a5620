//! sm90a: global → shared copies of fused programs as TMA loads.
//!
//! Runs after the WGMMA step, and only where it lowered every gemm: the shared tiles are
//! then built from CuTe's GMMA atoms (128-byte swizzle), which the TMA unit writes directly.
//! One thread issues a tile's loads; they complete on an mbarrier that expects the tile's
//! bytes, and the other threads wait on it. Rows and columns past the tensor arrive as
//! zeros (the tensor map knows its extents), so ragged edges need no predicates. Either
//! every global → shared copy becomes TMA loads or none does, and `Plan::cp_async_reason`
//! says why.

use super::{CopyKind, Infer};
use crate::ast::*;

/// A global → shared copy issued as TMA loads.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaLoad {
    /// The tensor's dims in the order its tensor map lists them: the tile's dims in CuTe
    /// order, then the dims the copy fixes (which the kernel indexes with block indices).
    pub tensor_modes: Vec<usize>,
    /// One TMA box in elements: (contiguous extent, the other extent).
    pub box_shape: (i64, i64),
    /// Boxes per tile (the 128-byte swizzle caps a box's contiguous extent at 128 bytes).
    pub boxes: i64,
    /// Bytes one tile brings (the mbarrier's transaction count).
    pub bytes: i64,
}

/// The mbarriers TMA loads complete on, in shared memory after the buffers (`Plan::mbarriers`):
/// the one list the budget counts and the kernel declares and initialises.
#[derive(Clone, Debug, PartialEq)]
pub struct Mbarriers {
    /// The pipelined loop whose stages they belong to, or the TMA copy outside pipelines.
    pub owner: StmtId,
    /// What they signal.
    pub role: MbarrierRole,
    /// One per stage of the loop, or 1 for a copy.
    pub count: i64,
}

/// What a set of mbarriers signals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MbarrierRole {
    /// A stage's tiles (or a single copy's tile) have landed: the issuing thread arrives and
    /// the TMA unit completes the transaction bytes.
    Full,
    /// Warp-specialised: every consumer thread is done with a stage, so the producer may
    /// refill it.
    Empty,
}

/// Warp specialisation: a producer warpgroup issues the TMA loads while the spec's threads
/// (two or more consumer warpgroups) compute; registers move from the producer to them.
#[derive(Clone, Debug, PartialEq)]
pub struct WarpSpecialization {
    /// Threads of the producer warpgroup (launched after the consumers).
    pub producer_threads: i64,
    /// `setmaxnreg` target of the producer, which gives registers up.
    pub producer_regs: i64,
    /// `setmaxnreg` target of the consumers, which take them.
    pub consumer_regs: i64,
    /// Why.
    pub why: String,
}

/// Registers of an SM (and the most one block can hold).
const SM_REGISTERS: i64 = 65536;
/// The producer warpgroup's registers per thread after `setmaxnreg.dec`.
const PRODUCER_REGS: i64 = 40;

/// Most elements a TMA box spans along one dimension.
const MAX_BOX: i64 = 256;

impl Infer<'_> {
    pub(super) fn plan_tma(&mut self) {
        if !self.plan.mmas.values().any(|m| m.wgmma.is_some()) {
            return;
        }
        match self.tma_fit() {
            Ok(loads) => {
                for (id, load) in loads {
                    let cp = self.plan.copies.get_mut(&id).expect("planned copy");
                    let tensor = &self.spec.tensors[cp.tensor.expect("global → shared")].name.name;
                    cp.why = format!(
                        "TMA: one thread issues {} load{} of {}x{} elements (the contiguous extent first, 128-byte swizzle) from `{tensor}`'s tensor map, completing on an mbarrier that expects the tile's {} bytes; rows and columns past the tensor arrive as zeros",
                        load.boxes, if load.boxes == 1 { "" } else { "s" }, load.box_shape.0, load.box_shape.1, load.bytes);
                    let (buffer, tensor_index) = (cp.buffer, cp.tensor);
                    // The launcher's alignment check stays (16-byte vectors along rows): TMA
                    // needs 16-byte aligned base addresses and strides.
                    for a in self.plan.alignment.iter_mut().filter(|a| Some(a.tensor) == tensor_index) {
                        a.why = format!("TMA needs the base address and row strides of `{}` 16-byte aligned", self.spec.tensors[a.tensor].name.name);
                    }
                    cp.tma = Some(load);
                    // The shared layout's contiguous dim was chosen for cp.async's vectors; it
                    // is the same one TMA boxes need (their first extent runs along it).
                    if let Some(l) = self.plan.shared.get_mut(&buffer) {
                        l.why_contiguous = format!("{} contiguous to match `{tensor}` so TMA boxes run along it", super::copy::dim_label(&self.spec.buffers[buffer].shape, l.contiguous_dim));
                    }
                }
            }
            Err(why) => {
                self.plan.cp_async_reason = Some(why);
                return;
            }
        }
        match self.warp_specialization_fit() {
            Ok(ws) => self.plan.warp_specialization = Some(ws),
            Err(why) => self.plan.ws_reason = Some(why),
        }
    }

    /// A producer warpgroup for the TMA loads, or why not.
    fn warp_specialization_fit(&self) -> Result<WarpSpecialization, String> {
        let threads = self.spec.threads.0;
        if threads < 256 {
            return Err(format!("{threads} threads are one warpgroup, and two such blocks share an SM, overlapping each other's work; a producer warpgroup would leave registers for one"));
        }
        // The producer runs the loads in program order by itself: copies and pipelines at
        // the top level of the body, where both roles see the same control flow.
        let top: Vec<StmtId> = self.spec.body.iter().map(|s| s.id).collect();
        let tma: Vec<(&StmtId, &super::CopyPlan)> = self.plan.copies.iter().filter(|(_, c)| c.tma.is_some()).collect();
        for (id, cp) in &tma {
            let name = &self.spec.buffers[cp.buffer].name.name;
            let in_top_pipeline = self.spec.body.iter()
                .any(|s| matches!(&s.kind, StmtKind::Loop { kind: LoopKind::Pipelined, body, .. } if body.iter().any(|b| b.id == **id)));
            if !top.contains(id) && !in_top_pipeline {
                return Err(format!("the copy into `{name}` is nested in a block, where a producer warpgroup would need the consumers' control flow"));
            }
            // The producer runs ahead of the consumers: a tile it fills once must not be
            // filled again while they may still read it.
            if top.contains(id) && tma.iter().filter(|(_, c)| c.buffer == cp.buffer).count() > 1 {
                return Err(format!("`{name}` is filled by more than one copy outside pipelines, which a producer running ahead of the consumers could overwrite while they read it"));
            }
        }
        if threads + 128 > 1024 {
            return Err(format!("{threads} threads leave no room for a producer warpgroup in a 1024-thread block"));
        }
        let consumer_regs = ((SM_REGISTERS - 128 * PRODUCER_REGS) / threads / 8 * 8).min(240);
        Ok(WarpSpecialization {
            producer_threads: 128,
            producer_regs: PRODUCER_REGS,
            consumer_regs,
            why: format!(
                "a producer warpgroup (threads {threads}..{}) issues every TMA load, one thread of it, waiting on each stage's \"empty\" mbarrier before refilling it; the {} consumer warpgroups only compute, waiting on \"full\" barriers and releasing stages, so no block-wide barrier ties them together; setmaxnreg moves registers: {PRODUCER_REGS} per producer thread, {consumer_regs} per consumer thread",
                threads + 127, threads / 128),
        })
    }

    /// The mbarriers of the TMA loads: per stage of each pipeline of TMA loads a "full" one
    /// (and, warp-specialised, an "empty" one), then one per TMA copy outside pipelines.
    pub(super) fn plan_mbarriers(&mut self) {
        let ws = self.plan.warp_specialization.is_some();
        let tma = |id: &StmtId| self.plan.copies.get(id).is_some_and(|c| c.tma.is_some());
        let mut out = Vec::new();
        let mut pipelined = Vec::new();
        for (&id, p) in &self.plan.pipelines {
            if !p.producers.iter().any(tma) {
                continue;
            }
            pipelined.extend(p.producers.iter().copied());
            let count = p.stages.max(1);
            out.push(Mbarriers { owner: id, role: MbarrierRole::Full, count });
            if ws {
                out.push(Mbarriers { owner: id, role: MbarrierRole::Empty, count });
            }
        }
        for id in self.plan.copies.keys().filter(|id| tma(id) && !pipelined.contains(id)) {
            out.push(Mbarriers { owner: *id, role: MbarrierRole::Full, count: 1 });
        }
        self.plan.mbarriers = out;
    }

    /// Every global → shared copy as TMA loads, or why not.
    fn tma_fit(&self) -> Result<Vec<(StmtId, TmaLoad)>, String> {
        let spec = self.spec;
        let in_loops = self.statements_in_loops();
        let pipelined = self.pipelined_statements();
        let mut loads = Vec::new();
        for (&id, cp) in self.plan.copies.iter().filter(|(_, c)| c.kind == CopyKind::GlobalToShared) {
            let buf = &spec.buffers[cp.buffer];
            let Some(t) = cp.tensor.map(|t| &spec.tensors[t]) else { continue };
            let what = format!("copy({}, {})", t.name.name, buf.name.name);
            // A copy outside pipelined loops completes on a barrier used once: phase 0.
            if in_loops.contains(&id) && !pipelined.contains(&id) {
                return Err(format!("{what} runs in a loop that is not `pipelined`, which TMA loads (one mbarrier phase per copy) do not cover"));
            }
            let Some(l) = self.plan.shared.get(&cp.buffer) else { continue };
            if l.gmma_atom.is_none() {
                return Err(format!("`{}` is not a warpgroup MMA operand, so it has no GMMA layout for TMA to write", buf.name.name));
            }
            if t.order.0 != Order::RowMajor && t.shape.len() == 2 {
                return Err(format!("`{}` is column-major; TMA loads are lowered for row-major tensors only", t.name.name));
            }
            // The tile's dims in the tensor: the dims the copy does not fix, in order.
            let free: Vec<usize> = (0..t.shape.len()).filter(|d| !cp.fixed.iter().any(|(f, _)| f == d)).collect();
            if free.len() != 2 || cp.cute_dims.len() != 2 {
                return Err(format!("{what} is not a 2-D tile of `{}`", t.name.name));
            }
            let mut modes: Vec<usize> = cp.cute_dims.iter().map(|d| free[*d]).collect();
            modes.extend(cp.fixed.iter().map(|(d, _)| *d));
            // The tensor's last dim is its contiguous one: the tile must run along it in the
            // same order as the shared atom does (GMMA atoms keep 64 contiguous elements).
            let contiguous_mode = cp.cute_dims.iter().position(|d| free[*d] == t.shape.len() - 1);
            let atom_contiguous_mode = if l.atom_first_contiguous { 0 } else { 1 };
            if contiguous_mode != Some(atom_contiguous_mode) {
                return Err(format!("{what}: `{}`'s contiguous dim is not the tile's contiguous dim in shared memory", t.name.name));
            }
            let (inner, outer) = (cp.cute_shape[atom_contiguous_mode], cp.cute_shape[1 - atom_contiguous_mode]);
            let elem = buf.dtype.0.bytes() as i64;
            let box_inner = (128 / elem).min(inner);
            if outer > MAX_BOX || inner % box_inner != 0 {
                return Err(format!("{what}: a {inner}x{outer} tile does not split into TMA boxes of at most {MAX_BOX} rows"));
            }
            loads.push((id, TmaLoad {
                tensor_modes: modes,
                box_shape: (box_inner, outer),
                boxes: inner / box_inner,
                bytes: inner * outer * elem,
            }));
        }
        Ok(loads)
    }

    /// Statements at the top level of some `pipelined` loop's body.
    fn pipelined_statements(&self) -> std::collections::BTreeSet<StmtId> {
        let mut out = std::collections::BTreeSet::new();
        self.spec.walk(&mut |s| {
            if let StmtKind::Loop { kind: LoopKind::Pipelined, body, .. } = &s.kind {
                out.extend(body.iter().map(|b| b.id));
            }
        });
        out
    }
}
