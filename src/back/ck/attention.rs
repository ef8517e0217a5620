//! composable_kernel's fused attention for a spec recognised as softmax attention
//! ([`AttentionPlan`]): one `DeviceBatchedGemmSoftmaxGemmPermute_Xdl_CShuffle` instance with
//! every template argument named, and the NVIDIA targets' launcher contract on `hipStream_t`.

use super::element;
use crate::back::ElementCtx;
use crate::back::conv::upper_first;
use crate::back::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use crate::layout::attention::AttentionPlan;
use crate::Compiled;
use serde::Serialize;

pub(super) const TEMPLATE: &str = include_str!("../../../templates/ck/attention.hip.tera");

#[derive(Serialize)]
pub(super) struct Context {
    #[serde(flatten)]
    header: HeaderCtx,
    why: String,
    scores_line: usize,
    output_line: usize,
    elements: Vec<ElementCtx>,
    elem_q: String,
    elem_k: String,
    elem_v: String,
    elem_o: String,
    ptr_q: String,
    ptr_k: String,
    ptr_v: String,
    ptr_o: String,
    b: String,
    s: String,
    h: String,
    /// The head dim's name in the generated code (the spec's constant, or `kHeadDim`).
    d: String,
    /// The element type of the widest of Q, K, V and O (whose bytes the size check counts).
    widest: String,
    head_dim: i64,
    scale_name: String,
    scale_literal: String,
    scale_line: usize,
    gemm1_xdl: i64,
    /// Template-argument lines whose code varies in length, padded so their comments align.
    type_lines: Vec<String>,
    cshuffle_line: String,
    v_cluster_line: String,
    gemm1_line: String,
    mask_line: String,
    mask_comment: String,
    #[serde(flatten)]
    launcher_ctx: LauncherCtx,
    doc_launch: String,
    doc_invalid: String,
    doc_errors: String,
    /// When the launcher returns the runtime's "unknown" error (text for the header).
    doc_unknown: String,
}

/// One template argument line: the code, then its comment at the column the others use.
fn argument_line(code: &str, comment: &str) -> String {
    format!("{code:<30}  // {comment}")
}

pub(super) fn context(c: &Compiled, a: &AttentionPlan) -> Context {
    let spec = &c.spec;
    let name = |t: usize| spec.tensors[t].name.name.clone();
    let alias = |t: usize| format!("Element{}", upper_first(&spec.tensors[t].name.name));
    let elements = [a.q, a.k, a.v, a.o].iter().map(|&t| ElementCtx {
        alias: alias(t),
        cpp_type: element(spec.tensors[t].dtype.0).to_string(),
        of: format!("tensor `{}`", name(t)),
    }).collect();
    // The head dim by the spec's constant name, or `kHeadDim` when the spec writes a literal.
    let head_dim_name = if a.dims[3].parse::<i64>().is_ok() { "kHeadDim".to_string() } else { a.dims[3].clone() };
    let scale_line = spec.constants.iter().find(|k| k.name.name == a.scale_log2.name).map_or(0, |k| c.line(k.name.span));
    let (mask_line, mask_comment) = if a.causal {
        (argument_line("MaskingSpecialization::MaskOutUpperTriangle,", "causal: the scores of keys after the query are masked out"),
         format!("The spec's causal mask (query i attends to keys j <= i, as the probe confirmed) is CK's MaskOutUpperTriangle, aligned at the top-left corner: queries and keys have the same length {}.", a.dims[1]))
    } else {
        (argument_line("MaskingSpecialization::MaskDisabled,", "not causal: every query attends to every key"),
         "No mask: every query attends to every key (as the probe confirmed).".to_string())
    };
    let why = format!(
        "softmax attention{} (recognised: Q·Kᵀ, online softmax in exp2 form, P·V; the CPU interpreter's run of the spec on a ragged probe matched f64 softmax attention to {:.1e}): composable_kernel's fused attention DeviceBatchedGemmSoftmaxGemmPermute_Xdl_CShuffle, 256 threads (4 waves), 128 queries x 128 keys per step, head dim {} in one tile, 32x32x8 MFMAs; the spec's tiles, stages and thread count are not used, this instance is tuned for CDNA",
        if a.causal { ", causal" } else { "" }, a.probe_error, a.head_dim);
    Context {
        header: header(c),
        why,
        scores_line: c.line(a.lines.scores),
        output_line: c.line(a.lines.output),
        elements,
        elem_q: alias(a.q),
        elem_k: alias(a.k),
        elem_v: alias(a.v),
        elem_o: alias(a.o),
        ptr_q: name(a.q),
        ptr_k: name(a.k),
        ptr_v: name(a.v),
        ptr_o: name(a.o),
        b: a.dims[0].clone(),
        s: a.dims[1].clone(),
        h: a.dims[2].clone(),
        d: head_dim_name,
        widest: [a.q, a.k, a.v, a.o].into_iter().max_by_key(|t| c.spec.tensors[*t].dtype.0.bytes()).map(alias).unwrap_or_default(),
        head_dim: a.head_dim,
        scale_name: a.scale_log2.name.clone(),
        scale_literal: crate::back::conv::float_literal(&a.scale_log2.spelling),
        scale_line,
        gemm1_xdl: a.head_dim / 32,
        type_lines: vec![
            argument_line(&format!("{}, {},", alias(a.q), alias(a.k)), "ADataType (Q), BDataType (K)"),
            argument_line(&format!("{}, {},", alias(a.v), alias(a.o)), "B1DataType (V), CDataType (O)"),
        ],
        cshuffle_line: argument_line(&format!("{},", alias(a.o)), "CShuffleDataType: the output tile is shuffled through LDS in its own type"),
        v_cluster_line: argument_line(
            &format!("{}, Seq<0, 2, 1>, Seq<0, 2, 1>,", if a.head_dim == 128 { "Seq<8, 32, 1>" } else { "Seq<16, 16, 1>" }),
            "V: thread cluster K0_N_K1, arrange order, source access order"),
        gemm1_line: argument_line(&format!("{}, 32,", a.head_dim), "Gemm1NPerBlock (head dim of O), Gemm1KPerBlock (keys, P·V)"),
        mask_line,
        mask_comment,
        launcher_ctx: launcher(c),
        doc_launch: "one composable_kernel fused attention (DeviceBatchedGemmSoftmaxGemmPermute_Xdl_CShuffle) on `stream` (grid and workgroup size chosen by CK)".into(),
        doc_invalid: format!("a tensor spans 2^31 bytes or more ({} * {} * {} * {} elements), or CK's IsSupportedArgument rejects the sizes", a.dims[0], a.dims[1], a.dims[2], a.dims[3]),
        // CK checks the launch itself and throws, and the launcher cannot recover the code.
        doc_errors: String::new(),
        doc_unknown: "the launch fails (composable_kernel reports that by throwing, without the HIP error code)".into(),
    }
}
