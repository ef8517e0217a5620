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
//! Pipeline planning comes last: it needs the copies' plans to know which statements
//! produce the pipelined shared buffers.

mod copy;
mod mma;
mod pipeline;
mod sm90;

use crate::ast::*;
use crate::check::Info;
use crate::diag::Diagnostic;
use crate::target::Target;
use std::collections::BTreeMap;

pub use copy::{CopyPlan, CopyKind, ThreadLayout};
pub use mma::MmaPlan;
pub use pipeline::{PipelineMode, PipelinePlan};
pub use sm90::{collect_broadcasts, CollectivePlan, EvtNode};

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
    /// Total bytes, all stages.
    pub bytes: u64,
    /// Why inference chose this.
    pub why: String,
}

/// How a fragment is distributed over the block's threads.
#[derive(Clone, Debug, PartialEq)]
pub enum FragmentLayout {
    /// The accumulator layout of the TiledMma of gemm statement `gemm`.
    MmaAccumulator {
        /// The gemm that fixed it.
        gemm: StmtId,
    },
    /// Element `e` (row-major linear index) is owned by thread `e % threads`.
    Striped {
        /// Elements each thread holds.
        per_thread: i64,
    },
}

/// A runtime alignment requirement the launcher must check.
#[derive(Clone, Debug, PartialEq)]
pub struct Alignment {
    /// Tensor index.
    pub tensor: usize,
    /// Elements per vector: the contiguous extent and the base pointer must be multiples.
    pub vector_elems: i64,
    /// Why.
    pub why: String,
}

/// Shared-memory accounting.
#[derive(Clone, Debug, PartialEq)]
pub struct SmemUse {
    /// Bytes of all shared buffers with their stages.
    pub buffers: u64,
    /// Bytes of the largest epilogue staging tile (reuses the buffers' space).
    pub staging: u64,
    /// What the kernel requests: the larger of the two.
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
    /// Runtime alignment the launcher checks, one entry per tensor at most.
    pub alignment: Vec<Alignment>,
    /// Shared memory use.
    pub smem: SmemUse,
    /// Estimated registers per thread (accumulators, operand fragments, addressing).
    pub regs_per_thread: u64,
    /// sm90a: the CUTLASS collective a GEMM-shaped spec lowers to.
    pub collective: Option<CollectivePlan>,
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
}

/// Runs inference and planning for `target`.
pub fn infer(spec: &Spec, info: &Info, target: Target) -> Result<Plan, Vec<Diagnostic>> {
    let mut cx = Infer {
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
            alignment: Vec::new(),
            smem: SmemUse { buffers: 0, staging: 0, total: 0, budget: target.smem_budget() },
            regs_per_thread: 0,
            collective: None,
        },
        errors: Vec::new(),
        fixed_at: BTreeMap::new(),
        failed_stmts: Default::default(),
        failed_buffers: Default::default(),
    };
    if target == Target::Sm90a {
        // Hopper: GEMM-shaped specs map onto a CUTLASS collective, which owns its layouts.
        cx.plan_collective();
        return if cx.errors.is_empty() { Ok(cx.plan) } else { Err(cx.errors) };
    }
    // Strict: gemms fix MMA atoms and accumulator layouts.
    cx.strict_gemms();
    // Common: parallel blocks propagate fragment layouts; copies fix shared majorness.
    cx.common_parallel();
    // Free: defaults for fragments nothing constrained.
    cx.free_fragments();
    // Shared layouts need the gemm roles (strict) and the copies' tensors (common).
    cx.shared_layouts();
    // Copy atoms need shared and fragment layouts.
    cx.copy_plans();
    // Pipelines need the copy plans to tell producers from consumers.
    cx.pipelines();
    // Budgets need everything above.
    cx.budgets();
    if cx.errors.is_empty() { Ok(cx.plan) } else { Err(cx.errors) }
}

impl<'a> Infer<'a> {
    pub fn err(&mut self, d: Diagnostic) {
        self.errors.push(d);
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

    fn common_parallel(&mut self) {
        for s in self.statements() {
            let StmtKind::Parallel { vars, body } = &s.kind else { continue };
            let Some(&domain) = self.info.parallel_domains.get(&s.id) else { continue };
            let scope = self.spec.buffers[domain].scope.0;
            if scope != Scope::Fragment {
                continue;
            }
            // Every fragment touched at the block's own indices shares the domain's layout.
            let mut touched: Vec<(usize, crate::diag::Span, bool)> = Vec::new();
            for st in body {
                if let StmtKind::Assign { target, value, .. } = &st.kind {
                    if let Some(b) = self.buffer_index(&target.name) {
                        touched.push((b, target.span, true));
                    }
                    collect_fragment_reads(self, value, vars, &mut touched);
                }
            }
            let layout = self.plan.fragments.get(&domain).cloned();
            for (b, span, plain) in touched {
                if self.spec.buffers[b].scope.0 != Scope::Fragment {
                    continue;
                }
                if !plain {
                    self.err(Diagnostic::error(span, format!(
                        "fragment `{}` is read at other indices than the block's own, which would need other threads' registers",
                        self.spec.buffers[b].name.name))
                        .label(s.span, "the parallel block")
                        .hint("stage it through a shared buffer with `copy`, then read the shared buffer"));
                    continue;
                }
                match (&layout, self.plan.fragments.get(&b)) {
                    (Some(l), None) => {
                        self.plan.fragments.insert(b, l.clone());
                        self.fixed_at.insert(b, span);
                    }
                    (Some(l), Some(other)) if l != other => {
                        let first = self.fixed_at.get(&b).copied().unwrap_or(span);
                        self.err(Diagnostic::error(span, format!(
                            "layout conflict: `{}` is used here with the layout of `{}`, but its layout was fixed elsewhere",
                            self.spec.buffers[b].name.name, self.spec.buffers[domain].name.name))
                            .label(first, "its layout was fixed here")
                            .hint("stage one of them through a shared buffer with `copy`"));
                    }
                    _ => {}
                }
            }
        }
    }

    fn free_fragments(&mut self) {
        let threads = self.spec.threads.0.max(1);
        for (i, b) in self.spec.buffers.iter().enumerate() {
            if b.scope.0 == Scope::Fragment && !self.plan.fragments.contains_key(&i) {
                let elems: i64 = self.shape(i).iter().product();
                self.plan.fragments.insert(i, FragmentLayout::Striped { per_thread: (elems + threads - 1) / threads });
            }
        }
    }

    fn budgets(&mut self) {
        let buffers: u64 = self.plan.shared.values().map(|l| l.bytes).sum();
        let staging = self.plan.copies.values().map(|c| c.staging_bytes).max().unwrap_or(0);
        let total = buffers.max(staging);
        self.plan.smem = SmemUse { buffers, staging, total, budget: self.target.smem_budget() };
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
            let per_thread = match l {
                FragmentLayout::MmaAccumulator { .. } => {
                    let elems: i64 = self.shape(*b).iter().product();
                    (elems / self.spec.threads.0.max(1)) as u64
                }
                FragmentLayout::Striped { per_thread } => *per_thread as u64,
            };
            regs += (per_thread * self.spec.buffers[*b].dtype.0.bytes()).div_ceil(4);
        }
        for m in self.plan.mmas.values() {
            regs += 2 * (m.a_regs_per_kblock + m.b_regs_per_kblock);
        }
        self.plan.regs_per_thread = regs;
    }
}

fn collect_fragment_reads(cx: &Infer<'_>, e: &Expr, vars: &[Ident], out: &mut Vec<(usize, crate::diag::Span, bool)>) {
    match &e.kind {
        ExprKind::Index(name, idx) => {
            if let Some(b) = cx.buffer_index(&name.name) {
                let plain = idx.len() == vars.len()
                    && idx.iter().zip(vars).all(|(x, v)| matches!(&x.kind, ExprKind::Name(n) if *n == v.name));
                out.push((b, name.span, plain));
            }
            for i in idx {
                collect_fragment_reads(cx, i, vars, out);
            }
        }
        ExprKind::Unary(_, x) => collect_fragment_reads(cx, x, vars, out),
        ExprKind::Binary(_, a, b) => {
            collect_fragment_reads(cx, a, vars, out);
            collect_fragment_reads(cx, b, vars, out);
        }
        ExprKind::Call(_, args) => {
            for a in args {
                collect_fragment_reads(cx, &a.value, vars, out);
            }
        }
        _ => {}
    }
}
