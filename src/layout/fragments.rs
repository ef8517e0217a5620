//! Fragment layouts beyond the gemms' accumulators (levels 2 and 3 of inference): row
//! statistics from reductions, propagation through `parallel` blocks (and the conflicts it
//! finds), register-sourced gemm operands, and the striped default for what is left.
//!
//! Requires: the strict level (gemm accumulators fixed). Guarantees: every fragment has a
//! layout, or an error names the two uses that disagree.

use std::collections::btree_map::Entry;
use super::*;

/// Accumulator values per thread from which skipping a unit row scale pays. Measured on the
/// H200 with the sm80 attention kernels (B4 S4096 / B2 S8192, same process as
/// FlashAttention-2): 128 values (head dim 128) ran 2-4% faster with the skip, 64 values
/// (head dim 64) 7% slower (notes/PERF.md, session 12).
pub const UNIT_SCALE_MIN_VALUES: i64 = 128;

impl<'a> Infer<'a> {
    pub(super) fn row_stats(&mut self) {
        for s in self.statements() {
            let StmtKind::Reduce { op, src, dst, dim, .. } = &s.kind else { continue };
            let (Some(is), Some(id)) = (self.buffer_index(&src.name), self.buffer_index(&dst.name)) else { continue };
            let Some(FragmentLayout::MmaAccumulator { gemm }) = self.plan.fragments.get(&is).cloned() else {
                if !self.failed_buffers.contains(&is) {
                    self.err(Diagnostic::error(src.span, format!(
                        "`{}` reduces `{}`, which is not a gemm accumulator: the {} target reduces rows of MMA accumulators (the values of a row sit in one quad of threads)",
                        op.keyword(), src.name, self.target))
                        .hint("reduce the gemm's accumulator itself, before copying or converting it"));
                }
                self.failed_buffers.insert(id);
                continue;
            };
            if dim.0 != 1 {
                self.err(Diagnostic::error(dim.1, format!("the {} target reduces accumulators along dim 1 (row statistics) only", self.target))
                    .hint("transpose the gemm (swap its operands and transpose flags) so that the reduced dimension is the columns"));
                self.failed_buffers.insert(id);
                continue;
            }
            let layout = FragmentLayout::RowStats { gemm };
            match self.plan.fragments.get(&id) {
                None => {
                    self.plan.fragments.insert(id, layout);
                    self.fixed_at.insert(id, dst.span);
                }
                Some(FragmentLayout::RowStats { gemm: g }) if self.same_rows(*g, gemm) => {}
                Some(_) => {
                    let first = self.fixed_at.get(&id).copied().unwrap_or(dst.span);
                    self.err(Diagnostic::error(dst.span, format!(
                        "layout conflict: `{}` holds the row statistics of `{}` here, but its layout was fixed by another use", dst.name, src.name))
                        .label(first, "its layout was fixed here")
                        .hint("use one statistics fragment per accumulator layout, or stage through a shared buffer with `copy`"));
                }
            }
        }
    }

    /// The layout a fragment read (or written) at `idx` inside a parallel block over a
    /// domain with layout `domain` must have, if the read is one the target lowers.
    fn implied_layout(&self, domain: &FragmentLayout, idx_plain: bool, row_only: bool) -> Option<FragmentLayout> {
        match domain {
            FragmentLayout::MmaAccumulator { gemm } if row_only => Some(FragmentLayout::RowStats { gemm: *gemm }),
            l if idx_plain => Some(l.clone()),
            _ => None,
        }
    }

    fn compatible(&self, want: &FragmentLayout, have: &FragmentLayout) -> bool {
        match (want, have) {
            (FragmentLayout::RowStats { gemm: a }, FragmentLayout::RowStats { gemm: b }) => self.same_rows(*a, *b),
            (FragmentLayout::MmaAccumulator { gemm: a }, FragmentLayout::MmaAccumulator { gemm: b }) => {
                a == b || (self.same_rows(*a, *b) && self.plan.mmas[a].mnk.1 == self.plan.mmas[b].mnk.1)
            }
            (x, y) => x == y,
        }
    }

    pub(super) fn common_parallel(&mut self) {
        // Propagate to a fixpoint: a block's layout comes from whichever fragment it touches
        // already has one (`m_prev[i] = m[i]` takes `m`'s), then spreads to the others.
        // Each pass fixes at least one fragment or stops, so this ends.
        let blocks: Vec<&'a Stmt> = self.statements().into_iter().filter(|s| matches!(s.kind, StmtKind::Parallel { .. })).collect();
        while self.propagate(&blocks, false) {}
        self.propagate(&blocks, true);
    }

    /// One propagation pass over the parallel blocks; with `report`, reports conflicts and
    /// reads the target cannot lower instead of fixing layouts. Returns whether a layout
    /// was fixed.
    fn propagate(&mut self, blocks: &[&'a Stmt], report: bool) -> bool {
        let mut changed = false;
        for s in blocks {
            let StmtKind::Parallel { vars, body } = &s.kind else { continue };
            let Some(&domain) = self.info.parallel_domains.get(&s.id) else { continue };
            if self.spec.buffers[domain].scope.0 != Scope::Fragment {
                continue;
            }
            let mut touched: Vec<Touch> = Vec::new();
            for st in body {
                if let StmtKind::Assign { target, value, .. } = &st.kind {
                    if let Some(b) = self.buffer_index(&target.name) {
                        touched.push(Touch { buffer: b, span: target.span, plain: true, row_only: false });
                    }
                    collect_fragment_reads(self, value, vars, &mut touched);
                }
            }
            touched.retain(|t| self.spec.buffers[t.buffer].scope.0 == Scope::Fragment);
            // The block's layout: the domain's, or one a fragment touched at the block's own
            // indices already has.
            let layout = self.plan.fragments.get(&domain).cloned().or_else(|| {
                touched.iter().find_map(|t| match (self.plan.fragments.get(&t.buffer), t.plain) {
                    (Some(l @ (FragmentLayout::MmaAccumulator { .. } | FragmentLayout::RowStats { .. })), true) => Some(l.clone()),
                    _ => None,
                })
            });
            let Some(layout) = layout else { continue };
            if let Entry::Vacant(e) = self.plan.fragments.entry(domain) {
                e.insert(layout.clone());
                changed = true;
            }
            for t in touched {
                let want = self.implied_layout(&layout, t.plain, t.row_only);
                let name = self.spec.buffers[t.buffer].name.name.clone();
                match (want, self.plan.fragments.get(&t.buffer).cloned()) {
                    (None, _) if report => {
                        let what = if matches!(layout, FragmentLayout::MmaAccumulator { .. }) && self.shape(t.buffer).len() == 1 {
                            format!("fragment `{name}` is read at another index than the block's row index `{}`; only row statistics (`{name}[{}]`) sit in the threads that own the row", vars[0].name, vars[0].name)
                        } else {
                            format!("fragment `{name}` is read at other indices than the block's own, which would need other threads' registers")
                        };
                        self.err(Diagnostic::error(t.span, what)
                            .label(s.span, "the parallel block")
                            .hint("stage it through a shared buffer with `copy`, then read the shared buffer"));
                    }
                    (Some(w), None) if !report => {
                        self.plan.fragments.insert(t.buffer, w);
                        self.fixed_at.insert(t.buffer, t.span);
                        changed = true;
                    }
                    (Some(w), Some(have)) if report && !self.compatible(&w, &have) => {
                        let first = self.fixed_at.get(&t.buffer).copied().unwrap_or(t.span);
                        self.err(Diagnostic::error(t.span, format!(
                            "layout conflict: `{name}` is used here with the layout of `{}`, but its layout was fixed elsewhere",
                            self.spec.buffers[domain].name.name))
                            .label(first, "its layout was fixed here")
                            .hint("stage one of them through a shared buffer with `copy`"));
                    }
                    _ => {}
                }
            }
        }
        changed
    }

    /// A gemm whose A operand is a fragment reads it from registers: the fragment must hold
    /// another gemm's accumulator layout over the same rows (the m16n8 accumulators of two
    /// neighbouring n-blocks are exactly one m16k16 A operand), e.g. P·V after Q·Kᵀ.
    pub(super) fn register_operands(&mut self) {
        let ids: Vec<StmtId> = self.plan.mmas.iter().filter(|(_, m)| m.a_in_registers).map(|(id, _)| *id).collect();
        for id in ids {
            let Some(s) = self.spec.stmt(id) else { continue };
            let StmtKind::Gemm { a, .. } = &s.kind else { continue };
            let m = self.plan.mmas[&id].clone();
            let ok = match self.plan.fragments.get(&m.a) {
                Some(FragmentLayout::MmaAccumulator { gemm }) => {
                    let p = &self.plan.mmas[gemm];
                    p.warps == m.warps && m.warps.1 == 1 && p.mnk.0 == m.mnk.0 && p.mnk.1 == m.mnk.2
                }
                _ => false,
            };
            if !ok && !self.failed_buffers.contains(&m.a) {
                let mut d = Diagnostic::error(a.span, format!(
                    "layout conflict: gemm reads `{}` from registers as its A operand, but `{}` does not hold a gemm accumulator's layout over the same rows",
                    a.name, a.name));
                if let Some(first) = self.fixed_at.get(&m.a) {
                    d = d.label(*first, "its layout was fixed here");
                }
                self.err(d.hint(format!("compute `{}` element-wise from an accumulator of a gemm with the same M tile (`{}[i, j] = acc[i, j]`), or copy it into a shared buffer", a.name, a.name)));
            }
        }
    }

    pub(super) fn free_fragments(&mut self) {
        let threads = self.spec.threads.0.max(1);
        for (i, b) in self.spec.buffers.iter().enumerate() {
            if b.scope.0 == Scope::Fragment && !self.plan.fragments.contains_key(&i) {
                let elems: i64 = self.shape(i).iter().product();
                self.plan.fragments.insert(i, FragmentLayout::Striped { per_thread: (elems + threads - 1) / threads });
            }
        }
    }

    /// Parallel blocks inside loops that only scale accumulators by row statistics
    /// (`O[i, j] *= alpha[i]`) on the mma.sync path: a warp skips the block when every
    /// statistic it holds is exactly 1, which changes nothing (x · 1 = x for every float)
    /// and saves the multiplies of online-softmax rescales once the row maxima settle.
    /// Warpgroup MMA accumulators are left alone: a conditional write of one inside the
    /// loop can make ptxas serialise the warpgroup MMAs. So are fragments of fewer than
    /// [`UNIT_SCALE_MIN_VALUES`] values per thread, where the check and the branch cost
    /// more than the multiplies they save.
    pub(super) fn unit_scale_skips(&mut self) {
        let in_loops = self.statements_in_loops();
        let mut out = BTreeMap::new();
        for s in self.statements() {
            let StmtKind::Parallel { vars, body } = &s.kind else { continue };
            if !in_loops.contains(&s.id) || body.is_empty() {
                continue;
            }
            let Some(&domain) = self.info.parallel_domains.get(&s.id) else { continue };
            let Some(FragmentLayout::MmaAccumulator { gemm }) = self.plan.fragments.get(&domain) else { continue };
            if self.plan.mmas.get(gemm).is_none_or(|m| m.wgmma.is_some()) {
                continue;
            }
            let per_thread = self.shape(domain).iter().product::<i64>() / self.spec.threads.0.max(1);
            if per_thread < UNIT_SCALE_MIN_VALUES {
                continue;
            }
            let mut scales: Vec<usize> = Vec::new();
            let all = body.iter().all(|st| {
                let StmtKind::Assign { target, indices, op: AssignOp::Mul, value } = &st.kind else { return false };
                let plain = indices.len() == vars.len() && indices.iter().zip(vars).all(|(e, v)| matches!(&e.kind, ExprKind::Name(n) if *n == v.name));
                let on_domain = self.buffer_index(&target.name).is_some_and(|t| matches!(self.plan.fragments.get(&t), Some(FragmentLayout::MmaAccumulator { .. })));
                let ExprKind::Index(stat, idx) = &value.kind else { return false };
                let row = idx.len() == 1 && matches!(&idx[0].kind, ExprKind::Name(n) if *n == vars[0].name);
                let Some(b) = self.buffer_index(&stat.name).filter(|b| matches!(self.plan.fragments.get(b), Some(FragmentLayout::RowStats { .. }))) else { return false };
                if !scales.contains(&b) {
                    scales.push(b);
                }
                plain && on_domain && row
            });
            if all {
                out.insert(s.id, scales);
            }
        }
        self.plan.unit_scale_skips = out;
    }
}
