//! AMD: attention programs, recognised and mapped onto composable_kernel's fused attention
//! device operation (`DeviceBatchedGemmSoftmaxGemmPermute_Xdl_CShuffle`).
//!
//! Requires: a checked spec. Guarantees: an [`AttentionPlan`] only for a program that has
//! attention's structure (four [batch, seq, heads, dim] tensors of one 16-bit type, a
//! constant head dim of 64 or 128, Q·Kᵀ into a score fragment, reduce_max and reduce_sum
//! over it, exp2 of the scores times a constant, P·V into the output fragment) *and*
//! computes softmax attention: the CPU interpreter runs the spec on a small ragged probe
//! (two batches, two heads, 70 positions) and its output must match softmax(Q·Kᵀ·scale)·V,
//! causal or not, computed here in f64. The probe decides the mask; the structure decides
//! the roles and the scale. Anything else is reported as not recognised, with the reason.

use crate::ast::{BinOp, DType, Dim, Expr, ExprKind, Operand, ReduceOp, Scope, Spec, StmtKind};
use crate::check::{ConstValue, Info, Symbol};
use crate::interp::npy::Array;
use std::collections::BTreeMap;

/// A spec recognised as softmax attention.
#[derive(Clone, Debug)]
pub struct AttentionPlan {
    /// Tensor indices of Q, K, V and O.
    pub q: usize,
    /// Keys.
    pub k: usize,
    /// Values.
    pub v: usize,
    /// Output.
    pub o: usize,
    /// The batch, sequence and heads sizes (runtime) and the head dim (a constant's name or
    /// a literal), as the spec writes them, in tensor order [batch, seq, heads, dim].
    pub dims: [String; 4],
    /// The head dim's value.
    pub head_dim: i64,
    /// Element type of all four tensors.
    pub dtype: DType,
    /// Query i attends to keys j ≤ i only.
    pub causal: bool,
    /// The spec constant that scales the scores inside exp2 (log2(e)/√D).
    pub scale_log2: ScaleConstant,
    /// Where the two gemms are.
    pub lines: AttentionLines,
    /// The probe's relative error against f64 softmax attention.
    pub probe_error: f64,
}

/// A float spec constant.
#[derive(Clone, Debug)]
pub struct ScaleConstant {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: f64,
    /// Its spelling in the spec, kept for byte-identical output.
    pub spelling: String,
}

/// Where the recognised gemms are in the spec.
#[derive(Clone, Debug)]
pub struct AttentionLines {
    /// Q·Kᵀ.
    pub scores: crate::diag::Span,
    /// P·V.
    pub output: crate::diag::Span,
}

/// The probe's (batch, seq, heads): ragged against every tile size a spec may use, two of
/// each grid index.
pub const PROBE: (usize, usize, usize) = (2, 70, 2);
/// Element operations the probe may take (about a second of interpretation).
const PROBE_BUDGET: u64 = 200_000_000;

/// Recognises softmax attention, or says why the spec is not it.
pub fn recognize(spec: &Spec, info: &Info) -> Result<AttentionPlan, String> {
    // Four 4-D tensors of one shape and one 16-bit type; one output.
    if spec.tensors.len() != 4 || spec.tensors.iter().filter(|t| t.output).count() != 1 {
        return Err("attention has three input tensors (Q, K, V) and one output".into());
    }
    let dims: Vec<String> = spec.tensors[0].shape.iter().map(Dim::text).collect();
    let dtype = spec.tensors[0].dtype.0;
    if let Some(t) = spec.tensors.iter().find(|t| t.shape.len() != 4) {
        return Err(format!("attention's tensors are 4-D, [batch, seq, heads, dim]; `{}` has {} dimension(s)", t.name.name, t.shape.len()));
    }
    if let Some(t) = spec.tensors.iter().find(|t| t.shape.iter().map(Dim::text).collect::<Vec<_>>() != dims || t.dtype.0 != dtype) {
        return Err(format!("attention's Q, K, V and O share one shape and element type; `{}` differs from `{}`", t.name.name, spec.tensors[0].name.name));
    }
    if !matches!(dtype, DType::BF16 | DType::F16) {
        return Err(format!("composable_kernel's fused attention takes bf16 or f16 tensors, not {dtype}"));
    }
    let head_dim = match &spec.tensors[0].shape[3] {
        Dim::Fixed(v, _) => *v,
        _ => info.const_int(&dims[3]).ok_or("the head dim (the tensors' last dimension) must be a constant")?,
    };
    if head_dim != 64 && head_dim != 128 {
        return Err(format!("the head dim is {head_dim}; the fused attention instances cover 64 and 128"));
    }
    if dims[..3].iter().any(|d| !info.runtime_dims.contains(d)) {
        return Err("batch, sequence and heads must be runtime sizes".into());
    }
    // Two gemms: scores = Q_s·K_sᵀ, then O_f += P·V_s.
    let mut gemms = Vec::new();
    let mut copies: Vec<(&Operand, &Operand)> = Vec::new();
    let mut reduces = Vec::new();
    spec.walk(&mut |s| match &s.kind {
        StmtKind::Gemm { .. } => gemms.push(s),
        StmtKind::Copy { src, dst } => copies.push((src, dst)),
        StmtKind::Reduce { op, src, .. } => reduces.push((*op, src.name.clone())),
        _ => {}
    });
    let [g1, g2] = gemms[..] else {
        return Err(format!("attention has two gemms (Q·Kᵀ and P·V); this spec has {}", gemms.len()));
    };
    let (StmtKind::Gemm { a: qa, b: kb, c: scores, transpose_a: false, transpose_b: true }, StmtKind::Gemm { a: p, b: vb, c: out, transpose_a: false, transpose_b: false }) = (&g1.kind, &g2.kind) else {
        return Err("attention's first gemm is Q·Kᵀ (transpose_b=true) and its second P·V (no transposes)".into());
    };
    let scope = |name: &str| spec.buffers.iter().find(|b| b.name.name == name).map(|b| b.scope.0);
    if scope(&scores.name) != Some(Scope::Fragment) || scope(&p.name) != Some(Scope::Fragment) || scope(&out.name) != Some(Scope::Fragment) {
        return Err("attention keeps the scores, the probabilities and the output in fragments".into());
    }
    // Which tensor fills each gemm operand, and where the output fragment goes.
    let tensor_index = |name: &str| spec.tensors.iter().position(|t| t.name.name == name);
    let filled_from = |buf: &str| copies.iter().find(|(_, d)| d.name.name == buf && d.origin.is_none()).and_then(|(s, _)| tensor_index(&s.name.name));
    let (Some(q), Some(k), Some(v)) = (filled_from(&qa.name), filled_from(&kb.name), filled_from(&vb.name)) else {
        return Err("attention's gemm operands Q, K and V are tiles copied from the input tensors".into());
    };
    let o = copies.iter().find(|(s, _)| s.name.name == out.name && s.origin.is_none()).and_then(|(_, d)| tensor_index(&d.name.name))
        .ok_or("attention stores its output fragment into the output tensor")?;
    let mut roles = [q, k, v, o];
    roles.sort_unstable();
    if roles != [0, 1, 2, 3] || !spec.tensors[o].output {
        return Err("Q, K, V and O must be four different tensors, O the output".into());
    }
    // Online softmax: a running max and sum over the scores, exp2 of scaled scores.
    let reduced = |op: ReduceOp| reduces.iter().any(|(o, s)| *o == op && *s == scores.name);
    if !reduced(ReduceOp::Max) || !reduced(ReduceOp::Sum) {
        return Err(format!("attention's softmax reduces the scores `{}` with reduce_max and reduce_sum", scores.name));
    }
    let scale_log2 = exp2_scale(spec, info, &scores.name).ok_or_else(|| format!("attention's softmax takes exp2 of the scores `{}` times a float constant (log2(e)/√D)", scores.name))?;
    let mut plan = AttentionPlan {
        q, k, v, o,
        dims: [dims[0].clone(), dims[1].clone(), dims[2].clone(), dims[3].clone()],
        head_dim,
        dtype,
        causal: false,
        scale_log2,
        lines: AttentionLines { scores: g1.span, output: g2.span },
        probe_error: 0.0,
    };
    probe(spec, info, &mut plan)?;
    Ok(plan)
}

/// The float constant `c` of an `exp2(... scores[i, j] * c ...)` in the body.
fn exp2_scale(spec: &Spec, info: &Info, scores: &str) -> Option<ScaleConstant> {
    let mut found = None;
    let constant = |e: &Expr| match &e.kind {
        ExprKind::Name(n) => match info.symbols.get(n) {
            Some(Symbol::Constant(ConstValue::Float(v, lit))) => Some(ScaleConstant { name: n.clone(), value: *v, spelling: lit.clone() }),
            _ => None,
        },
        _ => None,
    };
    let is_scores = |e: &Expr| matches!(&e.kind, ExprKind::Index(b, _) if b.name == scores);
    spec.walk(&mut |s| {
        let StmtKind::Assign { value, .. } = &s.kind else { return };
        value.visit(&mut |e| {
            if let ExprKind::Call(f, args) = &e.kind && f.name == "exp2" {
                for a in args {
                    a.value.visit(&mut |x| {
                        if let ExprKind::Binary(BinOp::Mul, l, r) = &x.kind {
                            let hit = if is_scores(l) { constant(r) } else if is_scores(r) { constant(l) } else { None };
                            if found.is_none() {
                                found = hit;
                            }
                        }
                        true
                    });
                }
            }
            true
        });
    });
    found
}

/// Runs the spec in the interpreter on a small probe and compares with softmax attention,
/// non-causal and causal; sets `plan.causal` to the one it matches.
fn probe(spec: &Spec, info: &Info, plan: &mut AttentionPlan) -> Result<(), String> {
    let (b, s, h) = PROBE;
    let d = plan.head_dim as usize;
    let n = b * s * h * d;
    // Deterministic values in [-2, 2), rounded to the tensors' type.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        crate::interp::round_to(plan.dtype, (state >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0)
    };
    let mut tensors = BTreeMap::new();
    for &t in &[plan.q, plan.k, plan.v] {
        let data: Vec<f64> = (0..n).map(|_| next()).collect();
        tensors.insert(spec.tensors[t].name.name.clone(), Array { shape: vec![b, s, h, d], dtype: plan.dtype, data });
    }
    let sizes = crate::interp::infer_sizes(spec, info, &tensors, &BTreeMap::new()).map_err(|e| format!("the attention probe could not run: {e}"))?;
    // The bundled specs need ~2e7 operations; a spec that needs far more is not attention as
    // the fused operation computes it (or loops without end), and must not stall inference.
    crate::interp::run_within(spec, info, &|_| 0, &sizes, &mut tensors, Some(PROBE_BUDGET)).map_err(|e| format!("the attention probe could not run: {e}"))?;
    let got = &tensors[&spec.tensors[plan.o].name.name].data;
    let [q, k, v] = [plan.q, plan.k, plan.v].map(|t| &tensors[&spec.tensors[t].name.name].data);
    let at = |bi: usize, si: usize, hi: usize| ((bi * s + si) * h + hi) * d;
    let scale = plan.scale_log2.value * std::f64::consts::LN_2;
    let mut errors = [0.0f64; 2];
    let mut norm = [0.0f64; 2];
    for (ci, causal) in [false, true].into_iter().enumerate() {
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..s {
                    let keys = if causal { i + 1 } else { s };
                    let scores: Vec<f64> = (0..keys).map(|j| (0..d).map(|x| q[at(bi, i, hi) + x] * k[at(bi, j, hi) + x]).sum::<f64>() * scale).collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let p: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = p.iter().sum();
                    for x in 0..d {
                        let want = (0..keys).map(|j| p[j] * v[at(bi, j, hi) + x]).sum::<f64>() / sum;
                        let have = got[at(bi, i, hi) + x];
                        errors[ci] += (have - want).powi(2);
                        norm[ci] += want * want;
                    }
                }
            }
        }
    }
    let rel = [0, 1].map(|c| if errors[c].is_nan() { f64::INFINITY } else { (errors[c] / norm[c]).sqrt() });
    // bf16 probabilities and outputs leave ~4e-3; a wrong mask, scale or role is far off.
    const BOUND: f64 = 2e-2;
    let best = if rel[1] < rel[0] { 1 } else { 0 };
    if rel[best] > BOUND {
        return Err(format!(
            "on a probe (B = {b}, S = {s}, H = {h}) its output is not softmax attention with scale {} · ln 2: relative error {:.1e} against the non-causal form, {:.1e} against the causal one (bound {BOUND:.0e})",
            plan.scale_log2.name, rel[0], rel[1]));
    }
    plan.causal = best == 1;
    plan.probe_error = rel[best];
    Ok(())
}

impl super::Infer<'_> {
    /// Records a recognised attention program: the launcher checks 16-byte vectors along the
    /// head dim of every tensor (the instances move 8 elements per access).
    pub(super) fn plan_attention(&mut self, a: AttentionPlan) {
        for (t, role) in [(a.q, "queries"), (a.k, "keys"), (a.v, "values"), (a.o, "the output")] {
            self.plan.alignment.push(super::Alignment {
                tensor: t,
                vector_elems: 8,
                whole_rows: true,
                why: format!("the attention instance moves {role} in 16-byte vectors along the head dim"),
            });
        }
        self.plan.alignment.sort_by_key(|x| x.tensor);
        self.plan.attention = Some(a);
    }
}
