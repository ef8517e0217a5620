//! sm90a, warp-specialised: the last gemm of a pipelined loop overlapped with the next
//! tile's work (software pipelining of the loop body, as FlashAttention-3 does).
//!
//! A loop whose body is `clear(S); gemm(.., .., S); <work on S>; gemm(P, X_s, O)` with P
//! computed from S in registers waits for each warpgroup MMA batch before its result is
//! used, so the tensor cores idle while the CUDA cores run the work between the gemms
//! (attention's softmax). Reordered, tile t's first gemm and tile t-1's second gemm are
//! issued together; the work on tile t's S runs while tile t-1's second gemm is in flight;
//! only the statements that touch O (the rescale of attention's output), and the
//! assignments that write P, wait for it. Either the body has that shape and every moved
//! statement keeps its meaning, or nothing changes and `Plan::overlap_reason` says why.

use super::{Infer, PipelinePlan};
use crate::ast::*;
use std::collections::BTreeSet;

/// The reordered loop.
#[derive(Clone, Debug, PartialEq)]
pub struct MmaOverlap {
    /// The pipelined loop.
    pub pipeline: StmtId,
    /// `clear(S)` before the first gemm: the first k-block's MMA zeroes the accumulator instead.
    pub clear: StmtId,
    /// The first gemm, issued at the top of each tile.
    pub first: StmtId,
    /// The second gemm, issued one tile later, after the next tile's first gemm.
    pub deferred: StmtId,
    /// Statements between the gemms that run while the previous tile's second gemm is in
    /// flight, in body order.
    pub during: Vec<StmtId>,
    /// Statements that touch the second gemm's accumulator: after its wait, in body order.
    pub after: Vec<StmtId>,
    /// Assignments (inside `parallel` blocks of `during`) that write the second gemm's
    /// register operand: after the wait too, since the MMA in flight reads those registers.
    pub moved: Vec<StmtId>,
    /// Whether the statements after the wait read the loop variable.
    pub after_reads_var: bool,
}

/// Why a loop is not overlapped: the statement it is about (if any) and the reason.
pub type OverlapRefusal = (Option<StmtId>, String);

/// Buffers (and other names) a statement reads and writes, nested statements included.
#[derive(Default)]
struct Effects {
    reads: BTreeSet<String>,
    writes: BTreeSet<String>,
    /// A gemm, copy, dequant or loop inside: work the reordering does not move.
    other: bool,
}

fn expr_reads(e: &Expr, out: &mut BTreeSet<String>) {
    out.extend(e.names_read().into_iter().map(|(name, _)| name.to_string()));
}

fn effects(s: &Stmt, fx: &mut Effects) {
    match &s.kind {
        StmtKind::Reduce { src, dst, clear, .. } => {
            fx.reads.insert(src.name.clone());
            if !clear {
                fx.reads.insert(dst.name.clone());
            }
            fx.writes.insert(dst.name.clone());
        }
        StmtKind::Clear { buf } => {
            fx.writes.insert(buf.name.clone());
        }
        StmtKind::Fill { buf, value } => {
            expr_reads(value, &mut fx.reads);
            fx.writes.insert(buf.name.clone());
        }
        StmtKind::Assign { target, indices, op, value } => {
            indices.iter().for_each(|i| expr_reads(i, &mut fx.reads));
            expr_reads(value, &mut fx.reads);
            if *op != AssignOp::Set {
                fx.reads.insert(target.name.clone());
            }
            fx.writes.insert(target.name.clone());
        }
        StmtKind::Parallel { body, .. } => body.iter().for_each(|b| effects(b, fx)),
        StmtKind::If { cond, then_body, else_body } => {
            expr_reads(cond, &mut fx.reads);
            then_body.iter().chain(else_body).for_each(|b| effects(b, fx));
        }
        StmtKind::Gemm { .. } | StmtKind::Copy { .. } | StmtKind::Dequant { .. } | StmtKind::Loop { .. } => fx.other = true,
    }
}

fn effects_of(s: &Stmt) -> Effects {
    let mut fx = Effects::default();
    effects(s, &mut fx);
    fx
}

impl Infer<'_> {
    /// Overlaps the first pipelined loop that fits; records why not otherwise.
    pub(super) fn plan_overlap(&mut self) {
        if self.plan.warp_specialization.is_none() {
            return;
        }
        let mut refusal = None;
        for s in &self.spec.body {
            let StmtKind::Loop { kind: LoopKind::Pipelined, var, body, .. } = &s.kind else { continue };
            let Some(p) = self.plan.pipelines.get(&s.id) else { continue };
            match self.overlap_fit(s.id, &var.name, body, p) {
                Ok(o) => {
                    let pl = self.plan.pipelines.get_mut(&s.id).expect("planned pipeline");
                    // overlap_fit asks for 3 stages or more: one tile at least loads ahead.
                    let ahead = if pl.stages == 3 { "one k-tile loads".to_string() } else { format!("{} k-tiles load", pl.stages - 2) };
                    pl.why.push_str(&format!("; software-pipelined: each tile's second gemm is issued after the next tile's first and runs during that tile's work between the gemms, so each stage is released one tile later: of the {} stages, one holds the previous tile for its second gemm, one the current tile, and {ahead} ahead", pl.stages));
                    self.plan.overlap = Some(o);
                    return;
                }
                Err(why) => refusal = refusal.or(Some(why)),
            }
        }
        self.plan.overlap_reason = refusal;
    }

    fn overlap_fit(&self, pipeline: StmtId, var: &str, body: &[Stmt], p: &PipelinePlan) -> Result<MmaOverlap, OverlapRefusal> {
        let at = |s: &Stmt, why: String| (Some(s.id), why);
        let cons: Vec<&Stmt> = body.iter().filter(|b| p.consumers.contains(&b.id)).collect();
        let gemms: Vec<usize> = (0..cons.len()).filter(|&i| matches!(cons[i].kind, StmtKind::Gemm { .. })).collect();
        if let Some(s) = cons.iter().find(|s| !matches!(s.kind, StmtKind::Gemm { .. }) && effects_of(s).other) {
            return Err(at(s, "a gemm, copy or loop nested in the loop body stays in place, so the loop's gemms are not reordered around it".into()));
        }
        let [i1, i2] = gemms[..] else {
            return Err((Some(pipeline), format!("the loop body has {} gemm{}; overlapping needs two, the second reading a register operand computed from the first", gemms.len(), if gemms.len() == 1 { "" } else { "s" })));
        };
        let (g1, g2) = (cons[i1], cons[i2]);
        if i2 + 1 != cons.len() {
            return Err(at(cons[i2 + 1], "statements after the second gemm would have to wait for it; overlapping needs it last in the loop body".into()));
        }
        let (Some(m1), Some(m2)) = (self.plan.mmas.get(&g1.id), self.plan.mmas.get(&g2.id)) else {
            return Err((Some(pipeline), "the gemms were not planned".into()));
        };
        if m1.wgmma.is_none() || m2.wgmma.is_none() {
            return Err((Some(pipeline), "the gemms are not warpgroup MMAs".into()));
        }
        if !m2.a_in_registers || m1.a_in_registers {
            return Err(at(g2, "the second gemm's A operand is not a register fragment computed between the gemms".into()));
        }
        if p.stages < 3 {
            return Err((Some(pipeline), format!(
                "{} stages: the previous tile's stage stays in use through this tile's work between the gemms, so overlapping needs 3 or more (with 2 the producer could load no tile ahead)",
                p.stages)));
        }
        let name = |b: usize| self.spec.buffers[b].name.name.clone();
        let (s_acc, p_frag, o_acc) = (name(m1.c), name(m2.a), name(m2.c));
        let clear = match cons[..i1] {
            [c] if matches!(&c.kind, StmtKind::Clear { buf } if buf.name == s_acc) => c,
            _ => return Err(at(g1, format!("only `clear({s_acc})` may come before the first gemm in the loop body: it becomes the first MMA's zeroing of the accumulator"))),
        };
        // Sort the statements between the gemms.
        let mid = &cons[i1 + 1..i2];
        let (mut during, mut after, mut moved) = (Vec::new(), Vec::new(), Vec::new());
        // (statement index in `mid`, assignment index in its block or usize::MAX, reads)
        let mut late: Vec<(usize, usize, BTreeSet<String>)> = Vec::new();
        for (k, s) in mid.iter().enumerate() {
            let fx = effects_of(s);
            let block: Option<&Vec<Stmt>> = match &s.kind {
                StmtKind::Parallel { body, .. } if body.iter().all(|b| matches!(b.kind, StmtKind::Assign { .. })) => Some(body),
                _ => None,
            };
            let target = |b: &Stmt| match &b.kind { StmtKind::Assign { target, .. } => target.name.clone(), _ => String::new() };
            if fx.reads.contains(&o_acc) || fx.writes.contains(&o_acc) {
                match block {
                    Some(b) if b.iter().all(|a| target(a) == o_acc) && !fx.reads.contains(&p_frag) => {
                        after.push(s.id);
                        late.push((k, usize::MAX, fx.reads));
                    }
                    _ => return Err(at(s, format!("this statement uses `{o_acc}` with other work; only `parallel` blocks that just scale `{o_acc}` can wait for the second gemm"))),
                }
            } else if fx.writes.contains(&p_frag) {
                let Some(b) = block else {
                    return Err(at(s, format!("`{p_frag}` is written here outside a `parallel` block of assignments")));
                };
                for (j, a) in b.iter().enumerate() {
                    let afx = effects_of(a);
                    if target(a) == p_frag {
                        moved.push(a.id);
                        late.push((k, j, afx.reads));
                    } else if afx.reads.contains(&p_frag) {
                        return Err(at(a, format!("reads `{p_frag}`, which the previous tile's second gemm reads while this runs")));
                    }
                }
                during.push(s.id);
            } else if fx.reads.contains(&p_frag) {
                return Err(at(s, format!("reads `{p_frag}`, which the previous tile's second gemm reads while this runs")));
            } else {
                during.push(s.id);
            }
        }
        let after_reads_var = late.iter().any(|(_, _, reads)| reads.contains(var));
        // Moving a statement later keeps its meaning if nothing between its place and the
        // end writes what it reads.
        for (k, j, reads) in &late {
            let mut later_writes = BTreeSet::new();
            if let StmtKind::Parallel { body, .. } = &mid[*k].kind && *j != usize::MAX {
                body[j + 1..].iter().for_each(|a| later_writes.extend(effects_of(a).writes));
            }
            mid[k + 1..].iter().filter(|s| during.contains(&s.id)).for_each(|s| later_writes.extend(effects_of(s).writes));
            if let Some(clash) = reads.intersection(&later_writes).next() {
                return Err(at(mid[*k], format!("waiting for the second gemm would move this after a statement that writes `{clash}`, which it reads")));
            }
        }
        Ok(MmaOverlap {
            pipeline,
            clear: clear.id,
            first: g1.id,
            deferred: g2.id,
            during,
            after,
            moved,
            after_reads_var,
        })
    }
}
