//! The sm90a backend: CUTLASS 3.x collectives (TMA, WGMMA, warp specialisation) for
//! GEMM-shaped specs, with the spec's element-wise epilogue as an epilogue visitor tree.
//!
//! Requires: a spec planned for [`Target::Sm90a`](crate::target::Target::Sm90a). Specs with
//! a [`CollectivePlan`] render here; other (fused) programs render through the sm80 backend
//! (its cp.async pipeline, with warpgroup MMAs where the plan has them), built for sm_90a.
//! Guarantees: a `.cu` with explicit schedules, stage count, tile and
//! cluster shapes (never `Auto`), and the same C launcher contract as every target.

use super::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use super::OutputFile;
use crate::ast::{DType, Dim};
use crate::back::conv::cpp_type;
use crate::diag::Diagnostic;
use crate::layout::{BatchForm, CollectivePlan, EpilogueOp, EvtNode, GemmSchedule};
use crate::Compiled;
use crate::back::conv::upper_first;
use crate::back::{ConstantCtx, ElementCtx};
use serde::Serialize;

const KERNEL_TEMPLATE: &str = include_str!("../../../templates/sm90a/kernel.cu.tera");

#[derive(Serialize)]
struct Context {
    #[serde(flatten)]
    header: HeaderCtx,
    why: String,
    gemm_line: usize,
    epilogue_lines: String,
    /// CTAs per swizzle band of the persistent tile scheduler.
    swizzle: i64,
    /// The line of the store (`copy(acc, C[...])`).
    store_line: usize,
    constants: Vec<ConstantCtx>,
    elements: Vec<ElementCtx>,
    layout_a: String,
    layout_a_note: String,
    layout_b: String,
    layout_b_note: String,
    layout_d: String,
    element_a: String,
    element_b: String,
    element_d: String,
    element_accumulator: String,
    element_compute: String,
    element_compute_note: String,
    tile: String,
    cluster: String,
    epilogue_tile: String,
    stages: String,
    kernel_schedule: String,
    epilogue_schedule: String,
    evt_nodes: Vec<EvtNodeCtx>,
    evt_root: String,
    evt_args: Vec<String>,
    stride_a: String,
    stride_b: String,
    stride_d: String,
    problem: String,
    ptr_a: String,
    ptr_b: String,
    ptr_d: String,
    #[serde(flatten)]
    launcher_ctx: LauncherCtx,
    doc_launch: String,
    doc_invalid: String,
    doc_errors: String,
    /// When the launcher returns the runtime's "unknown" error (text for the header).
    doc_unknown: String,
}

#[derive(Serialize)]
struct EvtNodeCtx {
    name: String,
    comment: String,
    definition: String,
}

struct EvtBuilder<'a> {
    c: &'a Compiled,
    /// The batches are the collective's batch mode (not folded into M): a per-batch vector
    /// steps by its length from batch to batch.
    batch_mode: bool,
    nodes: Vec<EvtNodeCtx>,
    scalars: usize,
    computes: usize,
}

impl EvtBuilder<'_> {
    /// Declares the node's type alias; returns (alias, argument initialiser lines).
    fn node(&mut self, n: &EvtNode, root: bool, depth: usize) -> (String, Vec<String>) {
        let pad = "    ".repeat(depth + 1);
        match n {
            EvtNode::Acc if !root => {
                if !self.nodes.iter().any(|x| x.name == "Acc") {
                    self.nodes.push(EvtNodeCtx { name: "Acc".into(), comment: "the accumulator".into(), definition: "Sm90AccFetch".into() });
                }
                ("Acc".into(), vec![format!("{pad}{{}},  // Acc")])
            }
            EvtNode::RowBroadcast { tensor } | EvtNode::ColBroadcast { tensor } => {
                let t = &self.c.spec.tensors[*tensor];
                let row = matches!(n, EvtNode::RowBroadcast { .. });
                let name = format!("{}{}", if row { "Row" } else { "Col" }, upper_first(&t.name.name));
                // A 2-D vector holds one per batch ([batch, N] or [batch, M]). In the batch mode
                // it steps by its length per batch; folded into M, a packed [batch, M] is one
                // value per folded row.
                let per_batch = crate::layout::is_per_batch_vector(t);
                let batch_stride = per_batch && self.batch_mode;
                if !self.nodes.iter().any(|x| x.name == name) {
                    let (kind, stride, what) = match (row, batch_stride) {
                        (true, false) => ("Sm90RowBroadcast", "Stride<_0, _1, _0>", "one value per output column, broadcast down the rows"),
                        (true, true) => ("Sm90RowBroadcast", "Stride<_0, _1, int64_t>", "one value per output column and batch, broadcast down the rows"),
                        (false, false) if per_batch => ("Sm90ColBroadcast", "Stride<_1, _0, _0>", "one value per output row of every batch (the batches folded into M), broadcast along the columns"),
                        (false, false) => ("Sm90ColBroadcast", "Stride<_1, _0, _0>", "one value per output row, broadcast along the columns"),
                        (false, true) => ("Sm90ColBroadcast", "Stride<_1, _0, int64_t>", "one value per output row and batch, broadcast along the columns"),
                    };
                    // Row broadcasts load 16-byte pieces; column broadcasts one element at a
                    // time (alignment 1: any number of rows, any pointer of the element type).
                    let elem = format!("Element{}", upper_first(&t.name.name));
                    let alignment = if row { format!("128 / cutlass::sizeof_bits<{elem}>::value") } else { "1".to_string() };
                    self.nodes.push(EvtNodeCtx {
                        name: name.clone(),
                        comment: format!("`{}`: {what}", t.name.name),
                        definition: format!("{kind}<0, TileShape, {elem}, ElementCompute, {stride}, {alignment}, false>"),
                    });
                }
                let stride = match (row, batch_stride) {
                    (_, false) => "{}".to_string(),
                    (true, true) => format!("{{cute::Int<0>{{}}, cute::Int<1>{{}}, int64_t({})}}", dim(&t.shape[1])),
                    (false, true) => format!("{{cute::Int<1>{{}}, cute::Int<0>{{}}, int64_t({})}}", dim(&t.shape[1])),
                };
                (name, vec![format!("{pad}{{static_cast<Element{} const*>({}), Element{}(0.0f), {stride}}},  // {}", upper_first(&t.name.name), t.name.name, upper_first(&t.name.name), t.name.name)])
            }
            EvtNode::Scalar { value } => {
                self.scalars += 1;
                let name = format!("Scalar{}", self.scalars);
                self.nodes.push(EvtNodeCtx { name: name.clone(), comment: format!("the constant {value}"), definition: "Sm90ScalarBroadcast<ElementCompute, Stride<_0, _0, _0>, 1>".into() });
                (name.clone(), vec![format!("{pad}{{{{{value}}}}},  // {name} = {value}")])
            }
            EvtNode::Compute { op, children } => {
                let functor = op.cutlass_functor();
                let mut kids = Vec::new();
                let mut args = Vec::new();
                for ch in children {
                    let (k, a) = self.node(ch, false, depth + 1);
                    kids.push(k);
                    args.extend(a);
                }
                self.computes += 1;
                let name = if root { "Epilogue".to_string() } else { format!("Node{}", self.computes) };
                let out = if root { "ElementD" } else { "ElementCompute" };
                self.nodes.push(EvtNodeCtx {
                    name: name.clone(),
                    comment: format!("{}({})", op.name(), kids.join(", ")),
                    definition: format!("Sm90EVT<Sm90Compute<{functor}, {out}, ElementCompute, RoundStyle>, {}>", kids.join(", ")),
                });
                let mut lines = vec![format!("{pad}{{  // {name}")];
                lines.extend(args);
                lines.push(format!("{pad}    {{}},  // {}", op.name()));
                lines.push(format!("{pad}}},"));
                (name, lines)
            }
            // A bare accumulator or broadcast as the whole epilogue: convert it to ElementD.
            other => self.node(&EvtNode::Compute { op: EpilogueOp::Identity, children: vec![other.clone()] }, true, depth),
        }
    }
}


fn dim(d: &Dim) -> String {
    d.text()
}

/// Renders the `.cu` and `.h` for a spec planned for sm90a.
pub fn render(c: &Compiled) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    let Some(p) = &c.plan.collective else {
        // Not GEMM-shaped: the CuTe mma.sync lowering, built for sm_90a.
        return super::sm80::render(c);
    };
    super::render_pair(c, KERNEL_TEMPLATE, &context(c, p))
}

fn context(c: &Compiled, p: &CollectivePlan) -> Context {
    let spec = &c.spec;
    let (ta, tb, td) = (&spec.tensors[p.a], &spec.tensors[p.b], &spec.tensors[p.d]);
    let line = |span: crate::diag::Span| c.line(span);
    let mut gemm_line = 0;
    let mut epilogue_lines = Vec::new();
    let mut store_line = 0;
    spec.walk(&mut |s| match &s.kind {
        crate::ast::StmtKind::Gemm { .. } => gemm_line = line(s.span),
        crate::ast::StmtKind::Assign { .. } => epilogue_lines.push(line(s.span).to_string()),
        // The last copy is the store.
        crate::ast::StmtKind::Copy { .. } => store_line = line(s.span),
        _ => {}
    });
    let constants = crate::back::constants_ctx(c);
    let element = |alias: &str, t: &crate::ast::Tensor, of: String| ElementCtx { alias: alias.into(), cpp_type: cpp_type(t.dtype.0).into(), of };
    let mut elements = vec![
        element("ElementA", ta, format!("tensor `{}`", ta.name.name)),
        element("ElementB", tb, format!("tensor `{}`", tb.name.name)),
        element("ElementD", td, format!("tensor `{}` (the output)", td.name.name)),
    ];
    crate::layout::collect_broadcasts(&p.epilogue, &mut |t, _| {
        let alias = format!("Element{}", upper_first(&spec.tensors[t].name.name));
        if !elements.iter().any(|e| e.alias == alias) {
            elements.push(element(&alias, &spec.tensors[t], format!("tensor `{}`", spec.tensors[t].name.name)));
        }
    });
    // Names of M, N, K (and the batch) as the launcher knows them. A batched GEMM's leading
    // dimension is its batch mode L, or folds into M when B is shared by every batch.
    let lead = usize::from(p.batch.is_some());
    let (m, n) = (dim(&td.shape[lead]), dim(&td.shape[lead + 1]));
    let form = p.batch.as_ref().map(|b| b.form);
    let (problem_m, l) = match &p.batch {
        Some(b) if !b.form.is_batch_mode() => (format!("{} * {m}", b.extent), "1".to_string()),
        Some(b) => (m.clone(), b.extent.clone()),
        None => (m.clone(), "1".to_string()),
    };
    let k = {
        // K is the A dimension that is not M.
        let a_dims: Vec<String> = ta.shape[ta.shape.len().saturating_sub(2)..].iter().map(dim).collect();
        a_dims.iter().find(|d| **d != m).cloned().unwrap_or_else(|| a_dims.last().cloned().unwrap_or_default())
    };
    // CUTLASS 3 strides are (row-mode, col-mode, batch) in the operand's own order: the
    // `cute::make_stride` and its type for a matrix whose rows (`row_major`) or columns are
    // `ld` apart, with a batch stride, or the static 0 of an operand shared by every batch.
    let strides = |ld: &str, row_major: bool, batch: Option<String>| -> (String, String) {
        let (st, lt) = match batch {
            Some(b) => (b, "int64_t"),
            None => ("cute::Int<0>{}".to_string(), "cute::Int<0>"),
        };
        if row_major {
            (format!("cute::make_stride(int64_t({ld}), cute::Int<1>{{}}, {st})"), format!("cute::Stride<int64_t, cute::Int<1>, {lt}>"))
        } else {
            (format!("cute::make_stride(cute::Int<1>{{}}, int64_t({ld}), {st})"), format!("cute::Stride<cute::Int<1>, int64_t, {lt}>"))
        }
    };
    let shared_a = form == Some(BatchForm::SharedA);
    let shared_b = form == Some(BatchForm::SharedB);
    let batch_stride = |shared: bool, rows: &str, cols: &str| (!shared).then(|| format!("int64_t({rows}) * {cols}"));
    // A is (M, K); B is (N, K), so B's "RowMajor" (K x N, N contiguous) is N-contiguous.
    let a_row = p.layouts.0 == "RowMajor";
    let (stride_a, stride_type_a) = strides(if a_row { &k } else { &m }, a_row, batch_stride(shared_a, &m, &k));
    let (stride_b, stride_type_b) = if p.layouts.1 == "RowMajor" {
        strides(&n, false, batch_stride(shared_b, &k, &n))
    } else {
        strides(&k, true, batch_stride(shared_b, &n, &k))
    };
    let d_row = p.layouts.2 == "RowMajor";
    let (stride_d, _) = strides(if d_row { &n } else { &m }, d_row, batch_stride(false, &m, &n));
    // An operand shared by every batch is named by its stride type (the layout tags imply a
    // dynamic batch stride).
    let layout_type = |layout: &str, shared: bool, stride_type: String| -> (String, String) {
        if shared {
            (stride_type, format!("{}, one matrix for every batch (batch stride 0)", if layout == "RowMajor" { "row-major" } else { "column-major" }))
        } else {
            (format!("cutlass::layout::{layout}"), String::new())
        }
    };
    let (layout_a, layout_a_note) = layout_type(p.layouts.0, shared_a, stride_type_a);
    let (layout_b, layout_b_note) = layout_type(p.layouts.1, shared_b, stride_type_b);
    let mut evt = EvtBuilder { c, batch_mode: form.is_some_and(BatchForm::is_batch_mode), nodes: Vec::new(), scalars: 0, computes: 0 };
    let (root, mut args) = evt.node(&p.epilogue, true, 0);
    if let Some(last) = args.last_mut() {
        *last = last.trim_end_matches(',').to_string();
    }
    // The outermost braces belong to `args.epilogue.thread = { ... };`.
    if args.len() >= 2 {
        args.remove(0);
        args.pop();
    }
    let t = p.tile;
    let stages_name = spec.pipelined_stages(|_| true).map_or_else(|| p.stages.to_string(), |st| c.file.snippet(st.span).to_string());
    let ext = |v: i64, name: &str| if spec.constants.iter().any(|k| k.name.name == name && matches!(k.value.kind, crate::ast::ExprKind::Int(x) if x == v)) { format!("Int<{name}>") } else { format!("Int<{v}>") };
    let doc_launch = format!(
        "persistent grid of at most one CTA per SM, in {}x{} clusters, {} threads (one producer and two consumer warpgroups), about {} bytes of shared memory; any workspace CUTLASS asks for is allocated and freed on `stream`",
        p.cluster.0, p.cluster.1, crate::layout::COLLECTIVE_THREADS, p.smem_bytes);
    Context {
        header: header(c),
        why: p.why.clone(),
        gemm_line,
        epilogue_lines: epilogue_lines.join(", "),
        store_line,
        constants,
        elements,
        layout_a,
        layout_a_note,
        layout_b,
        layout_b_note,
        layout_d: p.layouts.2.into(),
        element_a: cpp_type(ta.dtype.0).into(),
        element_b: cpp_type(tb.dtype.0).into(),
        element_d: cpp_type(td.dtype.0).into(),
        element_compute: cpp_type(p.epilogue_compute).into(),
        element_compute_note: (if p.epilogue_compute == DType::I32 { "the i32 accumulator is stored as is, exactly" } else { "the epilogue computes in f32" }).into(),
        element_accumulator: cpp_type(match p.accumulator {
            DType::F16 | DType::I32 => p.accumulator,
            _ => DType::F32,
        }).into(),
        tile: format!("{}, {}, {}", ext(t.0, "block_M"), ext(t.1, "block_N"), ext(t.2, "block_K")),
        cluster: format!("Int<{}>, Int<{}>, _1", p.cluster.0, p.cluster.1),
        swizzle: p.swizzle,
        epilogue_tile: match p.schedule { GemmSchedule::Cutlass { epilogue_tile: (m, n), .. } => format!("Int<{m}>, Int<{n}>"), GemmSchedule::Ck { .. } => String::new() },
        stages: stages_name,
        kernel_schedule: match p.schedule { GemmSchedule::Cutlass { kernel, .. } => kernel.into(), GemmSchedule::Ck { .. } => String::new() },
        epilogue_schedule: match p.schedule { GemmSchedule::Cutlass { epilogue, .. } => epilogue.into(), GemmSchedule::Ck { .. } => String::new() },
        evt_nodes: evt.nodes,
        evt_root: root,
        evt_args: args,
        stride_a,
        stride_b,
        stride_d,
        problem: format!("{problem_m}, {n}, {k}, {l}"),
        ptr_a: ta.name.name.clone(),
        ptr_b: tb.name.name.clone(),
        ptr_d: td.name.name.clone(),
        launcher_ctx: {
            let mut l = launcher(c);
            // The folded M is one int in CUTLASS's problem shape.
            if let Some(b) = p.batch.as_ref().filter(|b| !b.form.is_batch_mode()) {
                l.size_checks.push(format!("int64_t({}) * {m} > 2147483647", b.extent));
                l.doc_sizes.push_str(&format!(", and {} * {m} at most 2147483647 (one GEMM over the batches)", b.extent));
            }
            l
        },
        doc_launch,
        doc_invalid: "CUTLASS's can_implement rejects the problem".into(),
        doc_errors: "cudaGetDevice, the workspace allocation, cudaFuncSetAttribute or the launch".into(),
        doc_unknown: "CUTLASS fails to initialise its workspace".into(),
    }
}
