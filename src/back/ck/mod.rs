//! The AMD backend: composable_kernel (CK) device operations on MFMA, built with hipcc.
//!
//! Requires: a GEMM-shaped spec planned for an AMD target (a [`CollectivePlan`] made by
//! `plan_ck`). Guarantees: a `.hip` translation unit with an explicit
//! `DeviceGemm_Xdl_CShuffleV3` (plain GEMMs) or `DeviceGemmMultiD_Xdl_CShuffle_V3` (fused
//! element-wise epilogues, as the CDE operator) instantiation, every template argument named
//! in a comment, and the same C launcher contract as the NVIDIA targets (`hipStream_t`).

use super::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use super::OutputFile;
use crate::ast::DType;
use crate::diag::Diagnostic;
use crate::layout::{CollectivePlan, EpilogueOp, EvtNode, GemmSchedule};
use crate::Compiled;
use crate::back::conv::upper_first;
use crate::back::ElementCtx;
use serde::Serialize;

mod attention;
mod tile;
pub(crate) use tile::RESERVED as RESERVED_TILE;

const KERNEL_TEMPLATE: &str = include_str!("../../../templates/ck/kernel.hip.tera");

#[derive(Serialize)]
struct Context {
    #[serde(flatten)]
    header: HeaderCtx,
    why: String,
    gemm_line: usize,
    epilogue_lines: String,
    elements: Vec<ElementCtx>,
    elem_a: String,
    elem_b: String,
    elem_e: String,
    multi_d: bool,
    /// The output's elements per C (plain) or CDE (multi-D) vector, as the launcher checks.
    e_vector: i64,
    layout_a: String,
    layout_b: String,
    ds: Vec<DCtx>,
    epilogue_expr: String,
    helpers: Vec<String>,
    constants: Vec<String>,
    /// The accumulator's element type, with a note, and what the C shuffle holds.
    acc_type: String,
    int8: bool,
    acc_note: String,
    cshuffle_note: String,
    /// The instance's tile (MPerBlock, NPerBlock, KPerBlock) and MFMA shape note.
    tile: String,
    mfma_note: String,
    /// "AK1, BK1," (padded) and the A and B block-transfer lines of the instance: 16 bytes of K per
    /// vector; B's follow its majorness.
    k1s: String,
    a_transfer: Vec<String>,
    b_transfer: Vec<String>,
    /// The block-GEMM pipeline version and scheduler of the plan.
    pipeline: String,
    scheduler: String,
    ptr_a: String,
    ptr_b: String,
    ptr_d: String,
    stride_a: String,
    stride_b: String,
    stride_d: String,
    problem: String,
    /// Whether a layout is column-major (declares the `Col` alias).
    uses_col: bool,
    /// Each tensor's bytes as a C++ expression, which must stay below 2^31 (CK's buffer
    /// addressing takes 32-bit byte offsets).
    byte_counts: Vec<String>,
    #[serde(flatten)]
    launcher_ctx: LauncherCtx,
    doc_launch: String,
    doc_invalid: String,
    doc_errors: String,
    /// When the launcher returns the runtime's "unknown" error (text for the header).
    doc_unknown: String,
}

/// One CK "D" tensor: a broadcast vector of the epilogue.
#[derive(Serialize)]
struct DCtx {
    name: String,
    element: String,
    layout: String,
    ptr: String,
    comment: String,
    vector: i64,
}

/// Which AMD lowering renders a planned spec, in the order [`render`] tries them.
pub enum Lowering<'a> {
    /// composable_kernel's fused attention.
    Attention(&'a crate::layout::attention::AttentionPlan),
    /// The row-wise lowering (shared with the CUDA targets).
    Rows(&'a crate::layout::rows::RowsPlan),
    /// tilegen's tile lowering on MFMAs.
    Tile(&'a crate::layout::mfma::TilePlan),
    /// A composable_kernel device GEMM.
    DeviceGemm(&'a crate::layout::CollectivePlan),
}

impl Lowering<'_> {
    /// A composable_kernel instance, which brings its own tiles, stages and thread count.
    pub fn is_ck_instance(&self) -> bool {
        matches!(self, Lowering::Attention(_) | Lowering::DeviceGemm(_))
    }
}

/// The lowering that renders `c`, or `None` where the plan has none.
pub fn lowering(c: &Compiled) -> Option<Lowering<'_>> {
    let p = &c.plan;
    p.attention.as_ref().map(Lowering::Attention)
        .or_else(|| p.rows.as_ref().map(Lowering::Rows))
        .or_else(|| p.tile.as_ref().map(Lowering::Tile))
        .or_else(|| p.collective.as_ref().map(Lowering::DeviceGemm))
}

/// Renders the `.hip` and `.h` for a spec planned for an AMD target.
pub fn render(c: &Compiled) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    let files = match lowering(c) {
        Some(Lowering::Attention(a)) => super::render_pair(c, attention::TEMPLATE, &attention::context(c, a))?,
        Some(Lowering::Rows(p)) => super::render_pair(c, crate::back::sm80::rows::TEMPLATE, &crate::back::sm80::rows::build(c, p)?)?,
        Some(Lowering::Tile(t)) => super::render_pair(c, tile::TEMPLATE, &tile::context(c, t)?)?,
        Some(Lowering::DeviceGemm(p)) => super::render_pair(c, KERNEL_TEMPLATE, &context(c, p))?,
        None => return Err(vec![Diagnostic::error(c.spec.kernel.span, format!("the {} target has no lowering for this spec", c.plan.target)).unsupported_on_target()]),
    };
    hip_names(files)
}

/// The rendered pair with the AMD source extension.
fn hip_names(mut files: Vec<OutputFile>) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    for f in &mut files {
        if let Some(stem) = f.name.strip_suffix(".cu") {
            f.name = format!("{stem}.hip");
        }
    }
    Ok(files)
}

pub(super) fn element(d: DType) -> &'static str {
    match d {
        DType::BF16 => "ck::bhalf_t",
        DType::F16 => "ck::half_t",
        DType::F32 => "float",
        DType::I8 => "int8_t",
        DType::I32 => "int32_t",
        // Not reached: the AMD targets refuse f8e4m3 (gfx942's fp8 is the FNUZ variant).
        DType::F8E4M3 => "ck::f8_t",
    }
}


/// The epilogue tree as an f32 C++ expression of `acc` and the D values `d0`, `d1`, ...
fn expr(n: &EvtNode, ds: &[usize], helpers: &mut Vec<String>) -> String {
    match n {
        EvtNode::Acc => "acc".into(),
        EvtNode::RowBroadcast { tensor } | EvtNode::ColBroadcast { tensor } => {
            format!("d{}", ds.iter().position(|t| t == tensor).unwrap_or(0))
        }
        EvtNode::Scalar { value } => value.clone(),
        EvtNode::Compute { op, children } => {
            let k: Vec<String> = children.iter().map(|c| expr(c, ds, helpers)).collect();
            let bin = |op: &str| format!("({} {op} {})", k[0], k.get(1).cloned().unwrap_or_default());
            let mut helper = |name: &str, def: &str| {
                if !helpers.iter().any(|h| h.contains(name)) {
                    helpers.push(def.to_string());
                }
            };
            match op {
                EpilogueOp::Add => bin("+"),
                EpilogueOp::Sub => bin("-"),
                EpilogueOp::Mul => bin("*"),
                EpilogueOp::Div => bin("/"),
                EpilogueOp::Max => format!("fmaxf({}, {})", k[0], k[1]),
                EpilogueOp::Min => format!("fminf({}, {})", k[0], k[1]),
                EpilogueOp::Neg => format!("(-{})", k[0]),
                EpilogueOp::Identity => k[0].clone(),
                EpilogueOp::Gelu => {
                    helper("gelu_erf", "// GELU, exact (erf) form: x/2 * (1 + erf(x/sqrt(2))).\n__host__ __device__ inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }");
                    format!("gelu_erf({})", k[0])
                }
                EpilogueOp::Silu => {
                    helper("silu", "// SiLU: x * sigmoid(x).\n__host__ __device__ inline float silu(float x) { return x / (1.0f + expf(-x)); }");
                    format!("silu({})", k[0])
                }
                EpilogueOp::Sigmoid => {
                    helper("sigmoid", "// Logistic sigmoid.\n__host__ __device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }");
                    format!("sigmoid({})", k[0])
                }
            }
        }
    }
}

fn context(c: &Compiled, p: &CollectivePlan) -> Context {
    let spec = &c.spec;
    let (ta, tb, td) = (&spec.tensors[p.a], &spec.tensors[p.b], &spec.tensors[p.d]);
    // The broadcast tensors in first-use order, and whether each is one value per column.
    let mut broadcast = Vec::new();
    let mut rows = std::collections::BTreeMap::new();
    crate::layout::collect_broadcasts(&p.epilogue, &mut |t, row| {
        if !broadcast.contains(&t) {
            broadcast.push(t);
            rows.insert(t, row);
        }
    });
    let ds: Vec<DCtx> = broadcast.iter().map(|t| {
        let tensor = &spec.tensors[*t];
        let row = rows.get(t).copied().unwrap_or(true);
        DCtx {
            name: tensor.name.name.clone(),
            element: format!("Element{}", upper_first(&tensor.name.name)),
            layout: if row { "Row".into() } else { "Col".into() },
            ptr: tensor.name.name.clone(),
            comment: if row {
                format!("`{}`: one value per output column; row-major with row stride 0 (broadcast down the rows)", tensor.name.name)
            } else {
                format!("`{}`: one value per output row; column-major with column stride 0 (broadcast along the columns)", tensor.name.name)
            },
            vector: if row { 16 / tensor.dtype.0.bytes() as i64 } else { 1 },
        }
    }).collect();
    let mut helpers = Vec::new();
    let epilogue_expr = expr(&p.epilogue, &broadcast, &mut helpers);
    // The spec constants the epilogue names.
    let words: std::collections::BTreeSet<&str> = epilogue_expr.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')).collect();
    let constants = spec.constants.iter().filter(|k| words.contains(k.name.name.as_str())).filter_map(|k| {
        match c.info.symbols.get(&k.name.name) {
            Some(crate::check::Symbol::Constant(crate::check::ConstValue::Float(_, lit))) => Some(format!("constexpr float {} = {};", k.name.name, crate::back::conv::float_literal(lit))),
            Some(crate::check::Symbol::Constant(crate::check::ConstValue::Int(v))) => Some(format!("constexpr float {} = {v}.0f;", k.name.name)),
            _ => None,
        }
    }).collect();
    let elem = |t: &crate::ast::Tensor| ElementCtx { alias: format!("Element{}", upper_first(&t.name.name)), cpp_type: element(t.dtype.0).to_string(), of: format!("tensor `{}`", t.name.name) };
    let mut elements = vec![elem(ta), elem(tb)];
    for t in &broadcast {
        elements.push(elem(&spec.tensors[*t]));
    }
    elements.push(elem(td));
    let dims = |t: &crate::ast::Tensor| -> Vec<String> { t.shape.iter().map(crate::ast::Dim::text).collect() };
    let (da, db, dd) = (dims(ta), dims(tb), dims(td));
    let b_k_contiguous = p.layouts.1 == "ColumnMajor";
    // A, B and the output each index with 32-bit offsets inside CK (IsSupportedArgument does
    // not check that): their element counts, where a runtime size enters them.
    let (mut element_counts, mut byte_counts): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for t in [ta, tb, td] {
        if t.shape.len() == 2 && t.shape.iter().any(|d| matches!(d, crate::ast::Dim::Named(n) | crate::ast::Dim::Div(n, _, _) if c.info.runtime_dims.contains(&n.name))) {
            element_counts.push(format!("{} * {}", t.shape[0].text(), t.shape[1].text()));
            byte_counts.push(format!("int64_t({}) * {} * int64_t(sizeof(Element{}))", t.shape[0].text(), t.shape[1].text(), upper_first(&t.name.name)));
        }
    }
    // 8-bit operands (int8, K-major both) move 16 elements per vector, 16-bit ones 8.
    let int8 = p.accumulator == DType::I32;
    let k1 = if int8 { 16 } else { 8 };
    let k_major_transfer = |op: &str| vec![
        format!("S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>,  // {op}: thread cluster K0_{}_K1, arrange order, source access order", if op == "A" { "M" } else { "N" }),
        format!("{:<32}// {op}: source vector dim (K), source / LDS vector widths, no extra LDS row", format!("2, {k1}, {k1}, false,")),
    ];
    let gemm_line = c.spec.body.iter().find_map(|s| match &s.kind {
        crate::ast::StmtKind::Loop { body, .. } => body.iter().find(|x| matches!(x.kind, crate::ast::StmtKind::Gemm { .. })).map(|g| c.line(g.span)),
        _ => None,
    }).unwrap_or(0);
    // The epilogue's assignments, as the sm90a collective cites them.
    let mut epilogue_lines = Vec::new();
    c.spec.walk(&mut |s| if matches!(s.kind, crate::ast::StmtKind::Assign { .. }) {
        epilogue_lines.push(c.line(s.span).to_string());
    });
    let epilogue_lines = epilogue_lines.join(", ");
    let uses_col = b_k_contiguous || ds.iter().any(|d| d.layout == "Col");
    Context {
        header: header(c),
        why: p.why.clone(),
        gemm_line,
        epilogue_lines,
        elem_a: format!("Element{}", upper_first(&ta.name.name)),
        elem_b: format!("Element{}", upper_first(&tb.name.name)),
        elem_e: format!("Element{}", upper_first(&td.name.name)),
        elements,
        multi_d: !matches!(p.epilogue, EvtNode::Acc),
        e_vector: crate::layout::ck_output_vector(td.dtype.0, matches!(p.epilogue, EvtNode::Acc)),
        layout_a: "Row".into(),
        layout_b: if b_k_contiguous { "Col".into() } else { "Row".into() },
        ds,
        epilogue_expr,
        helpers,
        constants,
        acc_type: if int8 { "int32_t".into() } else { "float".into() },
        int8,
        acc_note: if int8 { "i8 MFMAs accumulate in i32, exactly".into() } else { "MFMA accumulates in f32".into() },
        cshuffle_note: if int8 { "the epilogue sees the i32 accumulator".into() } else { "the epilogue sees the f32 accumulator".into() },
        tile: format!("{:<32}", format!("{}, {}, {},", p.tile.0, p.tile.1, p.tile.2)),
        mfma_note: format!("{} MFMA", crate::layout::ck_mfma(c.plan.target, int8)),
        k1s: format!("{:<32}", format!("{k1}, {},", if b_k_contiguous { k1 } else { 4 })),
        a_transfer: k_major_transfer("A"),
        pipeline: match p.schedule { GemmSchedule::Ck { pipeline, .. } => pipeline.into(), GemmSchedule::Cutlass { .. } => String::new() },
        scheduler: match p.schedule { GemmSchedule::Ck { scheduler, .. } => scheduler.into(), GemmSchedule::Cutlass { .. } => String::new() },
        b_transfer: if b_k_contiguous {
            k_major_transfer("B")
        } else {
            vec![
                "S<16, 16, 1>, S<0, 2, 1>, S<0, 2, 1>, // B: thread cluster K0_N_K1, arrange order, source access order".into(),
                "1, 8, 4, false,                 // B: source vector dim (N), source / LDS vector widths, no extra LDS row".into(),
            ]
        },
        ptr_a: ta.name.name.clone(),
        ptr_b: tb.name.name.clone(),
        ptr_d: td.name.name.clone(),
        // A is M×K row-major; B is K×N (row-major: stride N) or N×K (column-major: stride K).
        stride_a: da[1].clone(),
        stride_b: db[1].clone(),
        stride_d: dd[1].clone(),
        problem: format!("{}, {}, {}", dd[0], dd[1], if da.len() == 2 { da[1].clone() } else { "1".into() }),
        uses_col,
        byte_counts,
        launcher_ctx: launcher(c),
        doc_launch: "one CK device GEMM on `stream` (grid and workgroup size chosen by CK)".into(),
        doc_invalid: if element_counts.is_empty() {
            "CK's IsSupportedArgument rejects the sizes or strides".into()
        } else {
            format!("a tensor spans 2^31 bytes or more ({} elements), or CK's IsSupportedArgument rejects the sizes or strides", element_counts.join(", "))
        },
        // CK checks the launch itself and throws, and the launcher cannot recover the code.
        doc_errors: String::new(),
        doc_unknown: "the launch fails (composable_kernel reports that by throwing, without the HIP error code)".into(),
    }
}
