//! Pipeline planning: which statements of a `pipelined` loop produce its shared stages and
//! which consume them, and how the target overlaps the two.

use super::{CopyKind, Infer};
use crate::ast::*;
use crate::diag::Diagnostic;

/// How a pipelined loop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineMode {
    /// cp.async multistage: `stages - 1` tiles in flight while one is consumed.
    Multistage,
    /// One stage: load, wait, compute, in turn.
    Synchronous,
}

/// The plan of one `pipelined` loop.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelinePlan {
    /// Shared-memory stages.
    pub stages: i64,
    /// How it overlaps.
    pub mode: PipelineMode,
    /// Copies global → shared issued ahead of use.
    pub producers: Vec<StmtId>,
    /// Statements run on the current stage, in order.
    pub consumers: Vec<StmtId>,
    /// For each producer, which tile coordinate (spec dim) is the loop variable.
    pub k_dims: Vec<usize>,
    /// Global → shared copies just before the loop (with only register work between)
    /// whose wait this loop takes over: cp.async groups complete in order, so its first
    /// wait covers them too, and their loads overlap its prologue's. The loop then waits
    /// for everything when it ends, in case it ran no tile. With TMA loads the loop waits
    /// on their mbarriers right after its prologue instead.
    pub covers: Vec<StmtId>,
    /// Warp-specialised TMA loop whose only consumer is one warpgroup MMA on shared operands:
    /// each k-tile's MMAs stay in flight while the consumers wait for the next tile (one
    /// committed batch outstanding), and a stage is released once the MMAs after it are
    /// waited for.
    pub mma_in_flight: bool,
    /// Why.
    pub why: String,
}

impl Infer<'_> {
    pub(super) fn pipelines(&mut self) {
        for s in self.statements() {
            let StmtKind::Loop { kind: LoopKind::Pipelined, var, body, .. } = &s.kind else { continue };
            let stages = self.info.stages.get(&s.id).copied().unwrap_or(1);
            let mut producers = Vec::new();
            let mut consumers = Vec::new();
            let mut k_dims = Vec::new();
            for st in body {
                if self.failed_stmts.contains(&st.id) {
                    continue;
                }
                match (&st.kind, self.plan.copies.get(&st.id)) {
                    (StmtKind::Copy { .. }, Some(c)) if c.kind == CopyKind::GlobalToShared => {
                        let uses: Vec<usize> = c.tile_coords.iter().enumerate()
                            .filter(|(_, e)| e.mentions(&var.name)).map(|(d, _)| d).collect();
                        let exact: Vec<usize> = c.tile_coords.iter().enumerate()
                            .filter(|(_, e)| matches!(&e.kind, ExprKind::Name(n) if *n == var.name)).map(|(d, _)| d).collect();
                        if uses.len() != 1 || exact.len() != 1 {
                            self.err(Diagnostic::error(st.span, format!(
                                "a pipelined copy must step through exactly one tile coordinate with the loop variable `{}`", var.name))
                                .hint(format!("write that origin as `{}*<tile extent>` and keep the others independent of `{}`", var.name, var.name)));
                            continue;
                        }
                        producers.push(st.id);
                        k_dims.push(exact[0]);
                    }
                    // Copies out of registers (per-tile results, running state) run with the
                    // computation, on the tile just landed.
                    (StmtKind::Copy { .. }, Some(c)) if matches!(c.kind, CopyKind::AccumulatorToGlobal | CopyKind::AccumulatorToShared) => consumers.push(st.id),
                    (StmtKind::Copy { .. } | StmtKind::Loop { kind: LoopKind::Pipelined, .. }, _) => self.err(Diagnostic::error(st.span, format!(
                        "the {} target pipelines global → shared copies and computes on them (and copies accumulators out); this statement cannot go inside `pipelined`", self.target))
                        .hint("move it before or after the pipelined loop")),
                    _ if contains_copy(st) => self.err(Diagnostic::error(st.span, "copies inside a pipelined loop go at its top level, where the pipeline issues them ahead of use")
                        .hint("move the copy out of this block")),
                    _ => consumers.push(st.id),
                }
            }
            if let Some(first_consumer) = body.iter().position(|st| consumers.contains(&st.id)) && let Some(late) = body.iter().skip(first_consumer).find(|st| producers.contains(&st.id)) {
                self.err(Diagnostic::error(late.span, "in a pipelined loop, copies into shared memory come before the statements that use them")
                    .hint("move this copy above the first gemm"));
            }
            // Shared buffers read by consumers must be produced in this loop, or filled
            // once before it (loop-invariant tiles such as attention's Q).
            let mut filled_outside: Vec<usize> = self.plan.copies.iter()
                .filter(|(id, cp)| cp.kind == CopyKind::GlobalToShared && !body.iter().any(|st| st.id == **id))
                .map(|(_, cp)| cp.buffer).collect();
            // Buffers written from registers (a running state) are kept up to date by the
            // program itself, inside the loop or before it.
            filled_outside.extend(self.plan.copies.values().filter_map(|cp| cp.shared_dst));
            for c in &consumers {
                if let Some(m) = self.plan.mmas.get(c) {
                    for buf in [m.a, m.b] {
                        if self.spec.buffers[buf].scope.0 != Scope::Shared || filled_outside.contains(&buf) {
                            continue;
                        }
                        let produced = producers.iter().any(|p| self.plan.copies.get(p).is_some_and(|cp| cp.buffer == buf))
                            || consumers.iter().any(|u| matches!(self.spec.stmt(*u).map(|x| &x.kind), Some(StmtKind::Dequant { dst, .. }) if dst.name == self.spec.buffers[buf].name.name));
                        let failed = body.iter().any(|st| self.failed_stmts.contains(&st.id)
                            && matches!(&st.kind, StmtKind::Copy { dst, .. } if dst.name.name == self.spec.buffers[buf].name.name));
                        if !produced && !failed {
                            let b = &self.spec.buffers[buf];
                            self.err(Diagnostic::error(b.name.span, format!("`{}` is read by a gemm in a pipelined loop but no copy in that loop fills it", b.name.name))
                                .label(s.span, "the pipelined loop")
                                .hint("copy its tile from global memory inside the loop"));
                        }
                    }
                }
            }
            let mode = if stages >= 2 { PipelineMode::Multistage } else { PipelineMode::Synchronous };
            let tma = producers.iter().any(|id| self.plan.copies.get(id).is_some_and(|c| c.tma.is_some()));
            let ws = tma && self.plan.warp_specialization.is_some();
            let mma_in_flight = ws && mode == PipelineMode::Multistage && consumers.len() == 1
                && self.plan.mmas.get(&consumers[0]).is_some_and(|m| m.wgmma.is_some() && !m.a_in_registers);
            let why = match mode {
                PipelineMode::Multistage if ws => format!(
                    "TMA multistage, warp-specialised: {} in flight in {stages} shared stages while the current one feeds the MMAs; the producer warpgroup refills a stage once every consumer thread has released it (its \"empty\" mbarrier), and the consumers wait on the stage's \"full\" mbarrier before reading it; the warpgroup MMAs read the current stage through descriptors{}",
                    if stages == 2 { "the next k-tile".to_string() } else { format!("{} k-tiles", stages - 1) },
                    if mma_in_flight { "; the loop's only work is that gemm, so each k-tile's MMAs stay in flight while the consumers wait for the next tile (one committed batch outstanding), and a stage is released once the MMAs after it have been waited for" } else { "" }),
                PipelineMode::Multistage if tma => format!(
                    "TMA multistage: {} in flight in {stages} shared stages while the current one feeds the MMAs; one thread issues each tile's TMA loads into the stage the block finished with (after a block barrier), and every thread waits on the stage's mbarrier before reading it; the warpgroup MMAs read the current stage through descriptors",
                    if stages == 2 { "the next k-tile".to_string() } else { format!("{} k-tiles", stages - 1) }),
                PipelineMode::Multistage => format!(
                    "cp.async multistage: {} in flight in {stages} shared stages while the current one feeds the MMAs; {}",
                    if stages == 2 { "the next k-tile".to_string() } else { format!("{} k-tiles", stages - 1) },
                    if self.plan.mmas.values().any(|m| m.wgmma.is_some()) {
                        "the warpgroup MMAs read the current stage through descriptors"
                    } else {
                        "ldmatrix loads of k-block b+1 overlap the MMAs of b"
                    }),
                PipelineMode::Synchronous if tma => "one stage: each k-tile's TMA loads are issued, waited for (on the stage's mbarrier) and consumed in turn (no overlap)".into(),
                PipelineMode::Synchronous => "one stage: each k-tile is loaded, waited for and consumed in turn (no overlap)".into(),
            };
            self.plan.pipelines.insert(s.id, PipelinePlan { stages, mode, producers, consumers, k_dims, covers: Vec::new(), mma_in_flight, why });
        }
        self.deferred_waits(&self.spec.body);
    }

    /// Fills `PipelinePlan::covers`: a global → shared copy outside any pipelined loop,
    /// followed by nothing but register clears and fills and then a multistage pipelined
    /// loop, leaves its wait to that loop.
    fn deferred_waits(&mut self, stmts: &[Stmt]) {
        for (k, s) in stmts.iter().enumerate() {
            match &s.kind {
                StmtKind::Copy { .. } if self.plan.copies.get(&s.id).is_some_and(|c| c.kind == CopyKind::GlobalToShared) => {
                    for next in &stmts[k + 1..] {
                        match &next.kind {
                            StmtKind::Clear { buf } | StmtKind::Fill { buf, .. }
                                if self.buffer_index(&buf.name).is_some_and(|b| self.spec.buffers[b].scope.0 == Scope::Fragment) => continue,
                            StmtKind::Loop { kind: LoopKind::Pipelined, .. } => {
                                if let Some(p) = self.plan.pipelines.get_mut(&next.id).filter(|p| p.mode == PipelineMode::Multistage) {
                                    p.covers.push(s.id);
                                }
                                break;
                            }
                            _ => break,
                        }
                    }
                }
                // Copies inside a pipelined loop are its producers.
                StmtKind::Loop { kind: LoopKind::Pipelined, .. } => {}
                StmtKind::Loop { body, .. } | StmtKind::Parallel { body, .. } => self.deferred_waits(body),
                StmtKind::If { then_body, else_body, .. } => {
                    self.deferred_waits(then_body);
                    self.deferred_waits(else_body);
                }
                _ => {}
            }
        }
    }
}

fn contains_copy(s: &Stmt) -> bool {
    match &s.kind {
        StmtKind::Copy { .. } => true,
        StmtKind::Loop { body, .. } | StmtKind::Parallel { body, .. } => body.iter().any(contains_copy),
        StmtKind::If { then_body, else_body, .. } => then_body.iter().chain(else_body).any(contains_copy),
        _ => false,
    }
}
