//! Strict level: MMA atoms, warp arrangements and accumulator layouts for `gemm`.

use super::{FragmentLayout, Infer};
use crate::ast::*;
use crate::diag::Diagnostic;

/// What a gemm lowers to.
#[derive(Clone, Debug, PartialEq)]
pub struct MmaPlan {
    /// CuTe MMA operation, e.g. `SM80_16x8x16_F32BF16BF16F32_TN`.
    pub atom: String,
    /// Warps along M and N.
    pub warps: (i64, i64),
    /// The TiledMma permutation tile (M, N, K).
    pub tile: (i64, i64, i64),
    /// Buffer indices of A, B and C.
    pub a: usize,
    /// B operand buffer.
    pub b: usize,
    /// Accumulator buffer.
    pub c: usize,
    /// Spec dims of A as (M, K) and of B as (N, K).
    pub a_dims: (usize, usize),
    /// B's (N, K) spec dims.
    pub b_dims: (usize, usize),
    /// Tile extents (M, N, K).
    pub mnk: (i64, i64, i64),
    /// Number of 16-deep k-blocks per gemm call.
    pub k_blocks: i64,
    /// Registers per thread for A's fragment of one k-block.
    pub a_regs_per_kblock: u64,
    /// Registers per thread for B's fragment of one k-block.
    pub b_regs_per_kblock: u64,
    /// A is a fragment (another gemm's accumulator, converted) read from registers.
    pub a_in_registers: bool,
    /// A is the shared tile an earlier gemm of the same block loaded into registers in the
    /// same fragment layout, and nothing writes the tile in between: this gemm multiplies
    /// those registers instead of loading the tile again (`shared_operand_reuse`).
    pub a_from: Option<StmtId>,
    /// Why this arrangement.
    pub why: String,
    /// sm90a: the warpgroup MMA this gemm lowers to instead of mma.sync.
    pub wgmma: Option<Wgmma>,
}

/// A gemm lowered to warpgroup MMAs (sm90a `wgmma.mma_async`): each warpgroup of 128 threads
/// owns `M / warpgroups` rows and issues `m_steps` MMAs of 64xNx16 per k-block, reading shared
/// operands through GMMA descriptors.
#[derive(Clone, Debug, PartialEq)]
pub struct Wgmma {
    /// CuTe MMA operation, e.g. `SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>`.
    pub op: String,
    /// Majorness of A and B in shared memory (`K` or `MN`; A from registers: `K`).
    pub major: (&'static str, &'static str),
    /// Warpgroups (128 threads each) stacked along M.
    pub warpgroups: i64,
    /// 64-row MMA steps per warpgroup and k-block.
    pub m_steps: i64,
}

impl MmaPlan {
    /// Whether this gemm loads A from shared memory itself: not a register fragment, and not
    /// an earlier gemm's registers (`a_from`).
    pub fn loads_a(&self) -> bool {
        !self.a_in_registers && self.a_from.is_none()
    }

    /// Accumulator rows each thread holds: every warp owns 16-row slices of the tile (one
    /// per 16 x warps_M rows, on mma.sync and on warpgroup MMAs alike), two rows of each.
    pub fn rows_per_thread(&self) -> i64 {
        2 * self.mnk.0 / (16 * self.warps.0)
    }

    /// Whether this gemm reads its A (`a`) or B operand K-major from `layout`: the
    /// contiguous dim is this gemm's K dim. One tile can be K-major for one gemm and
    /// MN-major for another (K in Q·Kᵀ, then in Kᵀ·V).
    pub fn k_major(&self, a: bool, layout: &super::SharedLayout) -> bool {
        layout.contiguous_dim == if a { self.a_dims.1 } else { self.b_dims.1 }
    }

    /// Whether this gemm reads the operand through the layout's modes swapped.
    pub fn transposed_view(&self, a: bool, layout: &super::SharedLayout) -> bool {
        let (mn, k) = if a { self.a_dims } else { self.b_dims };
        layout.cute_dims == [k, mn]
    }
}

impl Infer<'_> {
    /// 8-bit MMA operands must be K-major in shared memory: ldmatrix transposes 16-bit
    /// elements only. Needs the gemms and the shared layouts.
    pub(super) fn int8_operands_k_major(&mut self) {
        let mut errs = Vec::new();
        for (id, m) in &self.plan.mmas {
            if !m.atom.contains("S8S8") {
                continue;
            }
            for (is_a, buf) in [(true, m.a), (false, m.b)] {
                if let Some(l) = self.plan.shared.get(&buf) && !m.k_major(is_a, l) {
                    let span = self.spec.stmt(*id).map_or(self.spec.buffers[buf].span, |s| s.span);
                    let fix = if is_a { "A as [M, K] with K contiguous" } else { "B as [N, K] with K contiguous (`transpose_b=true`, or [K, N] with `order: col_major`)" };
                    errs.push(Diagnostic::error(span, format!("8-bit MMA operands are read K-major (ldmatrix cannot transpose 8-bit elements), but `{}` is MN-major in shared memory", self.spec.buffers[buf].name.name))
                        .hint(format!("store {fix}")));
                }
            }
        }
        for e in errs {
            self.err(e);
        }
    }

    pub(super) fn strict_gemms(&mut self) {
        let mut reduce_sources = std::collections::BTreeSet::new();
        for s in self.statements() {
            if let StmtKind::Reduce { src, .. } = &s.kind && let Some(b) = self.buffer_index(&src.name) {
                reduce_sources.insert(b);
            }
        }
        let (register_accs, register_rows) = self.register_operand_sources();
        for s in self.statements() {
            let StmtKind::Gemm { a, b, c, transpose_a, transpose_b } = &s.kind else { continue };
            let (Some(ia), Some(ib), Some(ic)) = (self.buffer_index(&a.name), self.buffer_index(&b.name), self.buffer_index(&c.name)) else { continue };
            let (da, dc) = (self.spec.buffers[ia].dtype.0, self.spec.buffers[ic].dtype.0);
            // The MMA's K: 32 bytes of each operand row per step.
            let (atom, mma_k) = match (da, dc) {
                (DType::BF16, DType::F32) => ("SM80_16x8x16_F32BF16BF16F32_TN", 16),
                (DType::F16, DType::F32) => ("SM80_16x8x16_F32F16F16F32_TN", 16),
                (DType::F16, DType::F16) => ("SM80_16x8x16_F16F16F16F16_TN", 16),
                (DType::I8, DType::I32) => ("SM80_16x8x32_S32S8S8S32_TN", 32),
                _ => {
                    self.err(Diagnostic::error(s.span, format!("the {} target has no MMA for {da} operands accumulating in {dc}", self.target))
                        .hint("use bf16 or f16 operands (f32 accumulator), f16 operands with an f16 accumulator, or i8 operands with an i32 accumulator"));
                    self.failed_buffers.insert(ic);
                    continue;
                }
            };
            let a_in_registers = self.spec.buffers[ia].scope.0 == Scope::Fragment;
            if a_in_registers && *transpose_a {
                self.err(Diagnostic::error(a.span, format!("a register A operand (`{}`) cannot be transposed", a.name))
                    .hint("drop transpose_a: the fragment is already [M, K]"));
            }
            if self.spec.buffers[ib].scope.0 != Scope::Shared {
                self.err(Diagnostic::error(b.span, format!("the {} target reads gemm's B operand from shared memory; `{}` is a fragment", self.target, b.name))
                    .hint("copy the operand into a shared buffer first"));
            }
            // Row statistics and register-sourced operands need every row of the
            // accumulator inside one warp (a quad of lanes): no warps along N.
            let reduced = reduce_sources.contains(&ic);
            let feeds_registers = register_rows.contains(&ic);
            let rows_in_warp = reduced || a_in_registers || feeds_registers;
            let (sa, sb) = (self.shape(ia).to_vec(), self.shape(ib).to_vec());
            if sa.len() != 2 || sb.len() != 2 {
                continue;
            }
            let a_dims = if *transpose_a { (1, 0) } else { (0, 1) };
            let b_dims = if *transpose_b { (0, 1) } else { (1, 0) };
            let (m, k, n) = (sa[a_dims.0], sa[a_dims.1], sb[b_dims.0]);
            let warps = self.spec.threads.0 / 32;
            let mut best: Option<((i64, i64), f64)> = None;
            let mut wm = 1;
            while wm <= warps {
                if warps % wm == 0 && (!rows_in_warp || wm == warps) {
                    let wn = warps / wm;
                    if m % (16 * wm) == 0 && n % (16 * wn) == 0 {
                        // Square warp tiles reuse each loaded fragment the most.
                        let score = (((m / wm) as f64) / ((n / wn) as f64)).log2().abs();
                        if best.is_none_or(|(_, s)| score < s - 1e-9) {
                            best = Some(((wm, wn), score));
                        }
                    }
                }
                wm *= 2;
            }
            // Narrow tiles: warps one 8-wide MMA column each (B then loads with ldmatrix.x2).
            let narrow = best.is_none() && !rows_in_warp && n % (8 * warps) == 0 && m % 16 == 0 && n / warps == 8;
            if narrow {
                best = Some(((1, warps), 0.0));
            }
            if k % mma_k != 0 {
                self.err(Diagnostic::error(s.span, format!("gemm K tile {k} is not a multiple of the MMA's K ({mma_k})"))
                    .label(self.spec.buffers[ia].shape_span, format!("`{}`'s shape", a.name))
                    .hint(format!("use a K tile of {}, {} or {}", mma_k, 2 * mma_k, 4 * mma_k)));
                self.failed_buffers.insert(ic);
                continue;
            }
            let Some(((wm, wn), _)) = best else {
                self.err(Diagnostic::error(s.span, format!(
                    "the gemm tile {m}x{n} cannot be split over {warps} warps: with the 16x8x16 MMA, M must be a multiple of 16·warps_M and N of 16·warps_N for some warps_M·warps_N = {warps}"))
                    .label(self.spec.threads.1, format!("{} threads = {warps} warps", self.spec.threads.0))
                    .hint("use tiles that are multiples of 32 (64 for 8 warps), or change `threads`"));
                self.failed_buffers.insert(ic);
                continue;
            };
            let why = if narrow {
                format!("{warps} warps as 1x{warps}: each warp owns a {m}x8 accumulator column, one MMA wide (the tile is too narrow for 16-wide warp tiles)")
            } else if rows_in_warp {
                format!(
                    "{} warps as {wm}x{wn}: each warp owns whole {}-wide rows of the accumulator, because {}",
                    warps, n,
                    if reduced {
                        "its rows are reduced (row statistics stay inside a quad of lanes)"
                    } else if a_in_registers {
                        "A comes from registers, laid out as the producing gemm's rows"
                    } else if register_accs.contains(&ic) {
                        "it shares an accumulator with a gemm whose A comes from registers"
                    } else {
                        "its values become a register A operand, which must hold whole rows"
                    })
            } else {
                format!(
                    "{} warps as {wm}x{wn}: each warp owns a {}x{} accumulator tile, the squarest split of {m}x{n} (best operand reuse)",
                    warps, m / wm, n / wn)
            };
            let plan = MmaPlan {
                atom: atom.to_string(),
                warps: (wm, wn),
                tile: (16 * wm, if narrow { 8 * wn } else { 16 * wn }, mma_k),
                a: ia,
                b: ib,
                c: ic,
                a_dims,
                b_dims,
                mnk: (m, n, k),
                k_blocks: k / mma_k,
                a_in_registers,
                a_from: None,
                a_regs_per_kblock: ((m / wm / 16) * 4) as u64,
                b_regs_per_kblock: ((n / wn / 8) * 2) as u64,
                why,
                wgmma: None,
            };
            let layout = FragmentLayout::MmaAccumulator { gemm: s.id };
            match self.plan.fragments.get(&ic) {
                None => {
                    self.plan.fragments.insert(ic, layout);
                    self.fixed_at.insert(ic, c.span);
                }
                Some(FragmentLayout::MmaAccumulator { gemm }) => {
                    let other = &self.plan.mmas[gemm];
                    if other.warps != plan.warps || other.atom != plan.atom || other.mnk.0 != m || other.mnk.1 != n {
                        let first = self.fixed_at[&ic];
                        self.err(Diagnostic::error(c.span, format!("layout conflict: `{}` accumulates two gemms with different MMA layouts", c.name))
                            .label(first, "first gemm fixed its layout here")
                            .hint("use one accumulator per gemm and combine them with a `parallel` block"));
                    }
                }
                Some(FragmentLayout::Striped { .. } | FragmentLayout::RowStats { .. }) => {}
            }
            self.plan.mmas.insert(s.id, plan);
        }
    }

    /// Gemms that read the same shared A tile as an earlier gemm of their block, through the
    /// same MMA (atom, warps, tile) and view, with nothing between them writing the tile, take
    /// the earlier gemm's A registers (`MmaPlan::a_from`): mma.sync only (warpgroup MMAs read
    /// shared operands through descriptors), and not where a dequant is fused into either
    /// (its loop loads A k-block pair by pair).
    pub(super) fn shared_operand_reuse(&mut self) {
        let ids: Vec<StmtId> = self.plan.mmas.keys().copied().collect();
        let fused = |g: StmtId| self.plan.dequants.values().any(|d| d.fused_into == Some(g));
        for (n, &later) in ids.iter().enumerate() {
            let l = &self.plan.mmas[&later];
            if l.wgmma.is_some() || l.a_in_registers || fused(later) {
                continue;
            }
            let source = ids[..n].iter().copied().find(|&earlier| {
                let e = &self.plan.mmas[&earlier];
                e.wgmma.is_none() && !e.a_in_registers && e.a_from.is_none() && !fused(earlier)
                    && (e.a, e.a_dims, &e.atom, e.warps, e.tile, e.mnk.0, e.mnk.2) == (l.a, l.a_dims, &l.atom, l.warps, l.tile, l.mnk.0, l.mnk.2)
                    && untouched_between(&self.spec.body, earlier, later, &self.spec.buffers[e.a].name.name)
            });
            if let Some(earlier) = source && let Some(m) = self.plan.mmas.get_mut(&later) {
                m.a_from = Some(earlier);
            }
        }
    }

    /// The accumulators of gemms whose A is a fragment, and every fragment whose rows must
    /// stay inside one warp because registers carry it into a register-sourced A operand:
    /// those accumulators, the operand fragments themselves and the fragments a `parallel`
    /// block computes them from (`P_f[i, j] = f(A_f[i, j])`), transitively.
    fn register_operand_sources(&self) -> (std::collections::BTreeSet<usize>, std::collections::BTreeSet<usize>) {
        let mut accs = std::collections::BTreeSet::new();
        let mut out = std::collections::BTreeSet::new();
        let stmts = self.statements();
        for s in &stmts {
            if let StmtKind::Gemm { a, c, .. } = &s.kind && let (Some(ia), Some(ic)) = (self.buffer_index(&a.name), self.buffer_index(&c.name)) && self.spec.buffers[ia].scope.0 == Scope::Fragment {
                accs.insert(ic);
                out.insert(ia);
                out.insert(ic);
            }
        }
        // Each pass adds the sources of fragments already in the set; stops when none is new.
        loop {
            let before = out.len();
            for s in &stmts {
                let StmtKind::Parallel { body, .. } = &s.kind else { continue };
                for st in body {
                    let StmtKind::Assign { target, value, .. } = &st.kind else { continue };
                    if !self.buffer_index(&target.name).is_some_and(|t| out.contains(&t)) {
                        continue;
                    }
                    value.visit(&mut |x| {
                        if let ExprKind::Index(name, idx) = &x.kind && let Some(b) = self.buffer_index(&name.name) && idx.len() == 2 && self.spec.buffers[b].scope.0 == Scope::Fragment {
                            out.insert(b);
                        }
                        true
                    });
                }
            }
            if out.len() == before {
                return (accs, out);
            }
        }
    }
}
