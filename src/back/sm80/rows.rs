//! The template context of the row-wise lowering ([`RowsPlan`]): each spec statement as a
//! commented block of C++ over a thread's share of the row tile, `(row, vector, element)`.
//! One context and one template (templates/rows.tera) for both flavours: CUDA on CuTe and
//! CUTLASS types (sm80, sm90a) and HIP on composable_kernel's (gfx942, gfx90a), whose
//! spellings differ only where [`Flavor`] says.

use super::body::{assign_code, mark_used, AssignCtx};
use super::common::{block_indices_ctx, constants_ctx, element_alias, elements_ctx, elements_ctx_with, grid_ctx, kernel_signature, BlockIndexCtx, ConstantCtx, ElementCtx, PlainEnv};
use crate::ast::*;
use crate::back::conv::{mentions, offset, with_lower_bounds, Conv, Env};
use crate::back::launcher::{header, launcher, HeaderCtx, LauncherCtx};
use crate::check::Symbol;
use crate::diag::Diagnostic;
use crate::layout::rows::RowsPlan;
use crate::target::Target;
use crate::Compiled;
use serde::Serialize;

/// The kernel and launcher template, both flavours.
pub(crate) const TEMPLATE: &str = include_str!("../../../templates/rows.tera");

/// The row reduction over a row's threads (shuffles, then shared memory across warps).
const ROW_REDUCE: &str = helper!("row_reduce.cuh");
/// The same for HIP: 64-lane waves, LDS across waves.
const ROW_REDUCE_HIP: &str = helper!("row_reduce_hip.cuh");

/// Names the row-wise lowering's code (both flavours) declares or calls unqualified besides
/// [`crate::back`]'s common ones.
pub const RESERVED_ROWS: [&str; 22] = [
    "row_group", "row_lane", "row_scratch", "row_reduce", "rr", "vv", "ee", "row", "col", "v", "kMax", "scratch",
    "offset", "other", "warp", "first", "w", "AlignedArray", "RowTileValues", "ck", "Vec", "wave",
];

/// One spec statement's block of code.
#[derive(Serialize)]
pub struct StmtCtx {
    /// `spec N: <text>`.
    pub line: usize,
    pub text: String,
    /// What the block does and why (empty: nothing to add).
    pub why: String,
    /// The code, one line each, indented relative to the kernel body.
    pub code: Vec<String>,
}

/// One fragment's declaration.
#[derive(Serialize)]
pub struct FragmentCtx {
    pub name: String,
    pub decl: String,
    pub line: usize,
    pub what: String,
}

#[derive(Serialize)]
pub struct Context {
    #[serde(flatten)]
    pub header: HeaderCtx,
    #[serde(flatten)]
    pub launcher_ctx: LauncherCtx,
    pub target_banner: String,
    /// The flavour's lines (the build command is the header's): the includes, whether the
    /// code uses namespace cute, what the element types' comment adds, and the lines after the
    /// element types and after the row tile's constants.
    pub includes: Vec<String>,
    pub using_cute: bool,
    pub elements_note: String,
    pub after_elements: Vec<String>,
    pub after_layout: Vec<String>,
    /// Lanes per warp (wave), and the word for one.
    pub warp: i64,
    pub warp_word: String,
    pub threads: i64,
    pub constants: Vec<ConstantCtx>,
    pub elements: Vec<ElementCtx>,
    pub helpers: Vec<String>,
    pub block_indices: Vec<BlockIndexCtx>,
    pub kernel_params: Vec<String>,
    pub kernel_args: Vec<String>,
    pub grid: Vec<String>,
    pub grid_limits: Vec<String>,
    pub doc_launch: String,
    pub doc_invalid: String,
    pub doc_errors: String,
    /// The row tile: its spec extents, line, and the plan's numbers and reasons.
    pub tile_rows: String,
    pub tile_cols: String,
    pub tile_line: usize,
    pub vector: i64,
    pub threads_per_row: i64,
    pub why: String,
    pub cross_warp: bool,
    pub fragments: Vec<FragmentCtx>,
    /// Loads of the 1-D tensors read at the column index, before the statements.
    pub column_vectors: Vec<String>,
    pub stmts: Vec<StmtCtx>,
}

/// Inside a parallel block over the row tile (`vars` = (i, j)) or its row values (`vars` =
/// (i)): element (i, j) of a 2-D fragment is `x(rr, vv, ee)`, row value `m[i]` is `m(rr)`.
struct RowTileEnv<'a> {
    c: &'a Compiled,
    conv: &'a Conv<'a>,
    plan: &'a RowsPlan,
    vars: &'a [Ident],
    flavor: Flavor,
    /// The block's chunk vectors: tensor, and its offset's C++.
    chunks: Vec<(usize, String)>,
}

impl Env for RowTileEnv<'_> {
    fn buffer_element(&self, buffer: usize, idx: &[Expr]) -> Option<String> {
        let is = |x: &Expr, v: &Ident| matches!(&x.kind, ExprKind::Name(n) if *n == v.name);
        let b = &self.c.spec.buffers[buffer];
        let at = if self.plan.tiles.contains(&buffer) && idx.len() == 2 && self.vars.len() == 2 && is(&idx[0], &self.vars[0]) && is(&idx[1], &self.vars[1]) {
            self.flavor.tile(&b.name.name)
        } else if self.plan.stats.contains(&buffer) && idx.len() == 1 && is(&idx[0], &self.vars[0]) {
            self.flavor.stat(&b.name.name)
        } else {
            return None;
        };
        Some(if matches!(b.dtype.0, DType::BF16 | DType::F16) { format!("static_cast<float>({at})") } else { at })
    }

    fn tensor_element(&self, tensor: usize, idx: &[Expr]) -> Option<String> {
        if self.vars.len() != 2 {
            return None;
        }
        let is_j = |e: &Expr| matches!(&e.kind, ExprKind::Name(n) if *n == self.vars[1].name);
        let t = &self.c.spec.tensors[tensor];
        let x = match idx {
            [e] if is_j(e) && self.plan.column_vectors.contains(&tensor) => format!("{}_vec[vv][ee]", t.name.name),
            [Expr { kind: ExprKind::Binary(BinOp::Add, a, b), .. }] if is_j(a) || is_j(b) => {
                let offset = if is_j(b) { a } else { b };
                let text = self.conv.expr(offset, &PlainEnv);
                if !self.chunks.iter().any(|(ct, o)| *ct == tensor && *o == text) {
                    return None;
                }
                format!("{}_chunk[vv][ee]", t.name.name)
            }
            _ => return None,
        };
        Some(if t.dtype.0.is_float() { self.flavor.to_float(&x) } else { format!("static_cast<int32_t>({x})") })
    }
}

const ROW: &str = "row_group + kRowGroups * rr";
const COL: &str = "(row_lane + kThreadsPerRow * vv) * kVector";

/// The spellings that differ between the CUDA (CuTe) and the HIP (composable_kernel) code.
#[derive(Clone, Copy)]
struct Flavor {
    hip: bool,
    /// As [`Conv::fp8_in_software`]: stores to f8e4m3 round with `float_to_e4m3` (sm80 code).
    fp8_in_software: bool,
}

impl Flavor {
    fn unroll(self) -> &'static str {
        if self.hip { "#pragma unroll" } else { "CUTE_UNROLL" }
    }
    /// Element (rr, vv, ee) of a 2-D fragment.
    fn tile(self, name: &str) -> String {
        if self.hip { format!("{name}[rr][vv][ee]") } else { format!("{name}(rr, vv, ee)") }
    }
    /// Element rr of a 1-D fragment.
    fn stat(self, name: &str) -> String {
        if self.hip { format!("{name}[rr]") } else { format!("{name}(rr)") }
    }
    fn vector(self, elem: &str) -> String {
        if self.hip { format!("Vec<{elem}, kVector>") } else { format!("cutlass::AlignedArray<{elem}, kVector>") }
    }
    fn to_float(self, x: &str) -> String {
        if self.hip { format!("ck::type_convert<float>({x})") } else { format!("static_cast<float>({x})") }
    }
    fn convert(self, elem: &str, x: &str) -> String {
        if self.hip { format!("ck::type_convert<{elem}>({x})") } else { format!("static_cast<{elem}>({x})") }
    }
    /// A fragment value (`float`, or on CUDA a 16-bit float of type `from`) stored to a tensor
    /// of `to` (element type `elem`): integers convert toward zero, saturating.
    fn store(self, to: DType, elem: &str, from: DType, x: &str) -> String {
        let x = if from == DType::F32 { x.to_string() } else { format!("static_cast<float>({x})") };
        match to {
            DType::F8E4M3 if self.fp8_in_software => crate::back::conv::float_to_e4m3(&x),
            _ => crate::back::conv::float_to_int(to, &x).unwrap_or_else(|| self.convert(elem, &x)),
        }
    }
    /// A tensor element of `from` loaded into a fragment of element type `elem` (`float` on HIP).
    fn load(self, from: DType, elem: &str, x: &str) -> String {
        match (self.hip, from.is_float()) {
            (true, true) => self.to_float(x),
            (true, false) => format!("static_cast<float>({x})"),
            (false, _) => format!("static_cast<{elem}>({x})"),
        }
    }
    /// `var = zeros;` for a vector of `elem`.
    fn zero_vector(self, var: &str, elem: &str) -> String {
        if self.hip { format!("{var} = Vec<{elem}, kVector>{{}};") } else { format!("{var}.fill({elem}(0));") }
    }
}

/// The context for a spec planned row-wise.
pub fn build(c: &Compiled, p: &RowsPlan) -> Result<Context, Vec<Diagnostic>> {
    let spec = &c.spec;
    let hip = c.plan.target.is_amd();
    let conv = Conv { spec, info: &c.info, hip, fp8_in_software: c.plan.target == Target::Sm80 };
    let flavor = Flavor { hip, fp8_in_software: conv.fp8_in_software };
    let mut errors = Vec::new();
    let (grid, grid_limits, grid_doc) = grid_ctx(c);
    let (kernel_params, kernel_args) = kernel_signature(c);
    let threads = spec.threads.0;
    let tile = &spec.buffers[p.tiles[0]];
    // Helpers called by name (float_to_i8, fast_exp2, ...) are added when rendering.
    let mut helpers: Vec<String> = Vec::new();
    let mut reduces = false;
    spec.walk(&mut |s| reduces |= matches!(s.kind, StmtKind::Reduce { .. }));
    if reduces {
        helpers.push(if hip { ROW_REDUCE_HIP } else { ROW_REDUCE }.into());
    }
    let fragments = spec.buffers.iter().enumerate().map(|(b, buf)| {
        let n = &buf.name.name;
        let (decl, what) = match (p.tiles.contains(&b), hip) {
            (true, false) => (format!("Tensor {n} = make_tensor<{}>(RowTileValues{{}});", element_alias(n)), format!("{} values per thread: (row, vector, element)", p.values_per_thread())),
            (true, true) => (format!("{} {n}[kRowsPerThread][kVectorsPerRow][kVector];", element_alias(n)), format!("{} values per thread: (row, vector, element)", p.values_per_thread())),
            (false, false) => (format!("Tensor {n} = make_tensor<{}>(Shape<Int<kRowsPerThread>>{{}});", element_alias(n)), "one value per row this thread holds".to_string()),
            (false, true) => (format!("{} {n}[kRowsPerThread];", element_alias(n)), "one value per row this thread holds".to_string()),
        };
        FragmentCtx { decl, line: c.line(buf.span), name: n.clone(), what }
    }).collect();
    let stmts = stmt_blocks(c, p, &conv, flavor, &spec.body, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    let banner_target = match c.plan.target {
        Target::Sm90a => "Target sm90a: the row-wise lowering (rows in registers, 16-byte vector loads and stores, warp-shuffle reductions); a program without gemms has no use for TMA or warpgroup MMAs, so this is sm80's code built for sm_90a.".to_string(),
        Target::Sm80 => "Target sm80: the row-wise lowering (rows in registers, 16-byte vector loads and stores, warp-shuffle reductions; runs on sm_80 and later).".to_string(),
        t => format!("Target {t}: the row-wise lowering in HIP on composable_kernel's element types (rows in registers, 16-byte vector loads and stores, reductions by shuffles within 64-lane waves), built with hipcc 7.2.4. Compile-checked, and run on the test suite's CPU emulation of HIP; no AMD GPU has run this file."),
    };
    let constants = constants_ctx(c);
    let elements = if hip { elements_ctx_with(c, crate::back::ck::element) } else { elements_ctx(c) };
    let api = if hip { "HIP" } else { "CUDA" };
    Ok(Context {
        header: header(c),
        launcher_ctx: launcher(c),
        target_banner: banner_target,
        includes: if hip {
            ["\"ck/ck.hpp\"", "\"ck/utility/data_type.hpp\"", "\"ck/utility/type_convert.hpp\""].map(String::from).to_vec()
        } else {
            ["<cute/tensor.hpp>", "<cutlass/array.h>", "<cutlass/numeric_types.h>"].map(String::from).to_vec()
        },
        using_cute: !hip,
        elements_note: if hip { " (CK's bf16 is a bit pattern: values go through ck::type_convert)".into() } else { String::new() },
        after_elements: if hip {
            ["// N elements of type T as one register vector (one 16-byte access at most).", "template <typename T, int N>", "using Vec = typename ck::vector_type<T, N>::type;"].map(String::from).to_vec()
        } else {
            Vec::new()
        },
        after_layout: if hip {
            Vec::new()
        } else {
            vec!["using RowTileValues = Layout<Shape<Int<kRowsPerThread>, Int<kVectorsPerRow>, Int<kVector>>>;  // a thread's (row, vector, element)".into()]
        },
        warp: p.warp,
        warp_word: if hip { "wave" } else { "warp" }.into(),
        threads,
        constants,
        elements,
        helpers,
        block_indices: block_indices_ctx(c),
        kernel_params,
        kernel_args,
        grid,
        grid_limits,
        doc_launch: format!("grid ({}), {threads} threads, {}", grid_doc.join(", "),
            if p.cross_warp { format!("{} bytes of static {} (the reductions' partials)", p.scratch_bytes(threads), if hip { "LDS" } else { "shared memory" }) } else if hip { "no LDS".into() } else { "no shared memory".into() }),
        doc_invalid: format!("the grid exceeds {api}'s limits"),
        doc_errors: "the launch".into(),
        tile_rows: conv.expr(&tile.shape[0], &PlainEnv),
        tile_cols: conv.expr(&tile.shape[1], &PlainEnv),
        tile_line: c.line(tile.span),
        vector: p.vector,
        threads_per_row: p.threads_per_row,
        why: p.why.clone(),
        cross_warp: p.cross_warp,
        fragments,
        column_vectors: column_vector_loads(c, p, flavor),
        stmts,
    })
}

/// One block of code per statement of `body` (a loop's block holds its statements' blocks).
fn stmt_blocks(c: &Compiled, p: &RowsPlan, conv: &Conv, flavor: Flavor, body: &[Stmt], errors: &mut Vec<Diagnostic>) -> Vec<StmtCtx> {
    let hip = flavor.hip;
    let u = flavor.unroll();
    let mut stmts = Vec::new();
    for s in body {
        let line = c.line(s.span);
        let text = c.file.snippet(s.span).to_string();
        let (why, code) = match &s.kind {
            StmtKind::Clear { buf } if !hip => (String::new(), vec![format!("clear({});", buf.name)]),
            StmtKind::Fill { buf, value } if !hip => (String::new(), vec![format!("fill({}, {});", buf.name, conv.expr(value, &PlainEnv))]),
            StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => {
                let value = match &s.kind {
                    StmtKind::Fill { value, .. } => conv.expr(value, &PlainEnv),
                    _ => "0.0f".to_string(),
                };
                let on_tile = matches!(c.info.symbols.get(&buf.name), Some(Symbol::Buffer(b)) if p.tiles.contains(b));
                (String::new(), element_loops(u, on_tile, vec![format!("{} = {value};", if on_tile { flavor.tile(&buf.name) } else { flavor.stat(&buf.name) })]))
            }
            StmtKind::Copy { .. } => {
                let Some(cp) = p.copies.iter().find(|cp| cp.stmt == s.id) else { continue };
                if cp.row_values { row_values_code(c, conv, flavor, cp) } else { copy_code(c, conv, p, flavor, cp) }
            }
            StmtKind::Reduce { op, src, dst, clear, .. } => reduce_code(c, p, flavor, *op, src, dst, *clear),
            StmtKind::Parallel { vars, body } => {
                let chunk_vectors: Vec<_> = p.chunk_vectors.iter().filter(|cv| cv.block == s.id).collect();
                let chunks = chunk_vectors.iter().map(|cv| (cv.tensor, conv.expr(&cv.offset, &PlainEnv))).collect();
                let env = RowTileEnv { c, conv, plan: p, vars, flavor, chunks };
                let mut flags = vec![false; vars.len()];
                let mut assigns: Vec<AssignCtx> = Vec::new();
                for st in body {
                    if let StmtKind::Assign { value, target, .. } = &st.kind {
                        mark_used(value, vars, &mut flags, &c.info);
                        let on_tile = matches!(c.info.symbols.get(&target.name), Some(Symbol::Buffer(b)) if p.tiles.contains(b));
                        let at = move |t: &str| if on_tile { flavor.tile(t) } else { flavor.stat(t) };
                        assigns.extend(assign_code(conv, c, st, &env, &at, errors));
                    }
                }
                let two_d = vars.len() == 2;
                // A variable read only as the column index of a column vector is not spelled.
                let spelled = |v: &str| assigns.iter().any(|a| mentions(&a.code, v));
                let flags: Vec<bool> = flags.iter().zip(vars).map(|(f, v)| *f && spelled(&v.name)).collect();
                let mut lines = Vec::new();
                if flags[0] {
                    lines.push(format!("int const {} = {ROW};  // the tile's row", vars[0].name));
                }
                if two_d && flags[1] {
                    lines.push(format!("int const {} = {COL} + ee;  // the tile's column", vars[1].name));
                }
                lines.extend(assigns.iter().map(|a| format!("{}  // spec {}: {}", a.code, a.line, a.text)));
                if chunk_vectors.is_empty() {
                    (String::new(), element_loops(u, two_d, lines))
                } else {
                    // The chunk's vectors of 1-D tensors first, in a scope of their own.
                    let mut code = vec!["{".to_string()];
                    for cv in &chunk_vectors {
                        code.extend(vector_load(c, flavor, cv.tensor, "chunk", Some((&cv.offset, conv.expr(&cv.offset, &PlainEnv))),
                            &format!("the chunk's columns (read as `{}[{} + j]` below)", c.spec.tensors[cv.tensor].name.name, c.file.snippet(cv.offset.span))).into_iter().map(|l| format!("  {l}")));
                    }
                    code.extend(element_loops(u, two_d, lines).into_iter().map(|l| format!("  {l}")));
                    code.push("}".to_string());
                    let names: Vec<String> = chunk_vectors.iter().map(|cv| format!("`{}`", c.spec.tensors[cv.tensor].name.name)).collect();
                    (format!("each thread loads its vectors of {} at the chunk's columns, then computes", names.join(", ")), code)
                }
            }
            StmtKind::Loop { kind, var, count, body, .. } => {
                // The loop's statements, each with its comment, on the same registers.
                let header = format!("for (int {v} = 0; {v} < {n}; ++{v}) {{", v = var.name, n = conv.expr(count, &PlainEnv));
                let mut code = if *kind == LoopKind::Unroll { vec![u.to_string(), header] } else { vec![header] };
                for (i, b) in stmt_blocks(c, p, conv, flavor, body, errors).into_iter().enumerate() {
                    if i > 0 {
                        code.push(String::new());
                    }
                    code.push(format!("  // spec {}: {}", b.line, b.text));
                    if !b.why.is_empty() {
                        code.push(format!("  // {}.", b.why));
                    }
                    code.extend(b.code.into_iter().map(|l| if l.is_empty() { l } else { format!("  {l}") }));
                }
                code.push("}".to_string());
                (String::new(), code)
            }
            _ => continue,
        };
        stmts.push(StmtCtx { line, text, why: crate::back::conv::upper_first(&why), code });
    }
    stmts
}

/// Each 1-D tensor that parallel blocks read at their column index `j`
/// ([`RowsPlan::column_vectors`]), loaded once at the kernel's start: one vector at each of the
/// thread's column vectors (the same in every row it holds), zeros past the tensor's end (the
/// launcher checks that its length is whole vectors). The loads are then in flight beside the
/// row tile's.
fn column_vector_loads(c: &Compiled, p: &RowsPlan, flavor: Flavor) -> Vec<String> {
    p.column_vectors.iter().flat_map(|&t| {
        let n = &c.spec.tensors[t].name.name;
        vector_load(c, flavor, t, "vec", None, &format!("the thread's columns (read as `{n}[j]` below)"))
    }).collect()
}

/// `<tensor>_<suffix>[kVectorsPerRow]`: the thread's vectors of a 1-D tensor at its columns
/// of the row tile, plus `start` (a chunk's first column, and its C++); zeros outside the
/// tensor (the launcher checks that its length is whole vectors).
fn vector_load(c: &Compiled, flavor: Flavor, t: usize, suffix: &str, start: Option<(&Expr, String)>, what: &str) -> Vec<String> {
    let ten = &c.spec.tensors[t];
    let (n, e) = (&ten.name.name, element_alias(&ten.name.name));
    let (_, inside) = offset(ten, &["col".to_string()]);
    let inside = with_lower_bounds(start.as_ref().filter(|(o, _)| !crate::check::non_negative(o, &c.info.symbols)).map(|_| "col").into_iter(), inside);
    let start = start.map(|(_, text)| format!("int64_t({text}) + ")).unwrap_or_default();
    let vec_t = flavor.vector(&e);
    vec![
        format!("{vec_t} {n}_{suffix}[kVectorsPerRow];  // `{n}` at {what}"),
        flavor.unroll().to_string(),
        "for (int vv = 0; vv < kVectorsPerRow; ++vv) {".to_string(),
        format!("  int64_t const col = {start}{COL};"),
        format!("  if ({inside}) {{"),
        format!("    {n}_{suffix}[vv] = *reinterpret_cast<{vec_t} const*>({n} + col);"),
        "  } else {".to_string(),
        format!("    {}", flavor.zero_vector(&format!("{n}_{suffix}[vv]"), &e)),
        "  }".to_string(),
        "}".to_string(),
    ]
}

/// A load or store of the row tile: vector by vector, whole vectors inside the tensor only
/// (the launcher checks that rows are whole vectors), zeros loaded elsewhere.
fn copy_code(c: &Compiled, conv: &Conv, p: &RowsPlan, flavor: Flavor, cp: &crate::layout::rows::RowsCopy) -> (String, Vec<String>) {
    let t = &c.spec.tensors[cp.tensor];
    let b = &c.spec.buffers[cp.buffer];
    let (tn, bn) = (&t.name.name, &b.name.name);
    let (te, be) = (element_alias(tn), element_alias(bn));
    let u = flavor.unroll();
    let (r0, c0) = (origin_start(conv, &cp.origin[0]), origin_start(conv, &cp.origin[1]));
    let (linear, inside) = offset(t, &["row".to_string(), "col".to_string()]);
    let inside = with_lower_bounds(["row", "col"].into_iter().zip(&cp.origin).filter(|(_, o)| !crate::check::non_negative(o, &c.info.symbols)).map(|(v, _)| v), inside);
    let vec_t = flavor.vector(&te);
    let bytes = p.vector * t.dtype.0.bytes() as i64;
    let mut code = vec![
        u.to_string(),
        "for (int rr = 0; rr < kRowsPerThread; ++rr) {".to_string(),
        format!("  int64_t const row = {r0}{ROW};"),
        format!("  {u}"),
        "  for (int vv = 0; vv < kVectorsPerRow; ++vv) {".to_string(),
        format!("    int64_t const col = {c0}{COL};"),
    ];
    let why = if cp.load {
        code.extend([
            format!("    {vec_t} v;"),
            format!("    if ({inside}) {{"),
            format!("      v = *reinterpret_cast<{vec_t} const*>({tn} + {linear});"),
            "    } else {".to_string(),
            format!("      {}", flavor.zero_vector("v", &te)),
            "    }".to_string(),
            format!("    {u}"),
            "    for (int ee = 0; ee < kVector; ++ee) {".to_string(),
            format!("      {} = {};", flavor.tile(bn), flavor.load(t.dtype.0, &be, "v[ee]")),
            "    }".to_string(),
        ]);
        format!("each thread loads its {bytes}-byte vectors of the tile; vectors past the tensor's rows or columns read as zeros")
    } else {
        code.extend([
            format!("    if ({inside}) {{"),
            format!("      {vec_t} v;"),
            format!("      {u}"),
            "      for (int ee = 0; ee < kVector; ++ee) {".to_string(),
            format!("        v[ee] = {};", flavor.store(t.dtype.0, &te, b.dtype.0, &flavor.tile(bn))),
            "      }".to_string(),
            format!("      *reinterpret_cast<{vec_t}*>({tn} + {linear}) = v;"),
            "    }".to_string(),
        ]);
        format!("each thread stores its {bytes}-byte vectors, converted to {}{}; vectors past the tensor's rows or columns are skipped", t.dtype.0, if t.dtype.0.is_float() { "" } else { " (toward zero, saturating)" })
    };
    code.extend(["  }".to_string(), "}".to_string()]);
    (why, code)
}

/// `int64_t(origin) + ` before a thread's offset, or nothing for an origin of 0.
fn origin_start(conv: &Conv, e: &Expr) -> String {
    if matches!(e.kind, ExprKind::Int(0)) { String::new() } else { format!("int64_t({}) + ", conv.expr(e, &PlainEnv)) }
}

/// A copy of row values (a 1-D fragment) to or from a 1-D tensor: each thread loads the
/// values of its rows (zeros past the tensor); the row's first thread stores them (every
/// thread of a row holds the same).
fn row_values_code(c: &Compiled, conv: &Conv, flavor: Flavor, cp: &crate::layout::rows::RowsCopy) -> (String, Vec<String>) {
    let r0 = origin_start(conv, &cp.origin[0]);
    let t = &c.spec.tensors[cp.tensor];
    let b = &c.spec.buffers[cp.buffer];
    let (tn, bn) = (&t.name.name, &b.name.name);
    let (te, be) = (element_alias(tn), element_alias(bn));
    let u = flavor.unroll();
    let (linear, inside) = offset(t, &["row".to_string()]);
    let inside = with_lower_bounds((!crate::check::non_negative(&cp.origin[0], &c.info.symbols)).then_some("row").into_iter(), inside);
    let stat = flavor.stat(bn);
    let row = format!("int64_t const row = {r0}{ROW};");
    if cp.load {
        let value = flavor.load(t.dtype.0, &be, &format!("{tn}[{linear}]"));
        let zero = if flavor.hip { "0.0f".to_string() } else { format!("{be}(0)") };
        let code = vec![
            u.to_string(),
            "for (int rr = 0; rr < kRowsPerThread; ++rr) {".to_string(),
            format!("  {row}"),
            format!("  {stat} = ({inside}) ? {value} : {zero};"),
            "}".to_string(),
        ];
        ("each thread loads the value of each row it holds; rows past the tensor read as zero".to_string(), code)
    } else {
        let code = vec![
            "if (row_lane == 0) {".to_string(),
            format!("  {u}"),
            "  for (int rr = 0; rr < kRowsPerThread; ++rr) {".to_string(),
            format!("    {row}"),
            format!("    if ({inside}) {{"),
            format!("      {tn}[{linear}] = {};", flavor.store(t.dtype.0, &te, b.dtype.0, &stat)),
            "    }".to_string(),
            "  }".to_string(),
            "}".to_string(),
        ];
        (format!("every thread of a row holds its value; the row's first thread stores it, converted to {}{}; rows past the tensor are skipped", t.dtype.0, if t.dtype.0.is_float() { "" } else { " (toward zero, saturating)" }), code)
    }
}

/// `body` (one statement per element) inside the loops over a thread's values of the row tile
/// (`tile`) or its row values.
fn element_loops(u: &str, tile: bool, body: Vec<String>) -> Vec<String> {
    let mut code = vec![u.to_string(), "for (int rr = 0; rr < kRowsPerThread; ++rr) {".to_string()];
    let depth = if tile { 3 } else { 1 };
    if tile {
        code.extend([format!("  {u}"), "  for (int vv = 0; vv < kVectorsPerRow; ++vv) {".into(), format!("    {u}"), "    for (int ee = 0; ee < kVector; ++ee) {".into()]);
    }
    code.extend(body.into_iter().map(|l| format!("{}{l}", "  ".repeat(depth))));
    for d in (0..depth).rev() {
        code.push(format!("{}}}", "  ".repeat(d)));
    }
    code
}

/// A row reduction: each thread folds its values of a row, then `row_reduce` combines the
/// row's threads.
fn reduce_code(c: &Compiled, p: &RowsPlan, flavor: Flavor, op: ReduceOp, src: &Ident, dst: &Ident, clear: bool) -> (String, Vec<String>) {
    let u = flavor.unroll();
    let dtype = |n: &str| match c.info.symbols.get(n) {
        Some(Symbol::Buffer(b)) => c.spec.buffers[*b].dtype.0,
        _ => DType::F32,
    };
    let widen = |x: String, d: DType| if d == DType::F32 { x } else { format!("static_cast<float>({x})") };
    let max = op == ReduceOp::Max;
    let element = widen(flavor.tile(&src.name), dtype(&src.name));
    let op = |a: &str, b: String| if max { format!("{a} = fmaxf({a}, {b});") } else { format!("{a} += {b};") };
    let scratch = if p.cross_warp { ", row_scratch" } else { "" };
    let reduced = format!("row_reduce<{max}, kThreadsPerRow>(v{scratch})");
    let old = widen(flavor.stat(&dst.name), dtype(&dst.name));
    let value = match (clear, max) {
        (true, _) => reduced,
        (false, true) => format!("fmaxf({old}, {reduced})"),
        (false, false) => format!("{old} + {reduced}"),
    };
    let value = if dtype(&dst.name) == DType::F32 { value } else { format!("static_cast<{}>({value})", element_alias(&dst.name)) };
    let code = vec![
        u.to_string(),
        "for (int rr = 0; rr < kRowsPerThread; ++rr) {".to_string(),
        format!("  float v = {};", if max { "-INFINITY" } else { "0.0f" }),
        format!("  {u}"),
        "  for (int vv = 0; vv < kVectorsPerRow; ++vv) {".to_string(),
        format!("    {u}"),
        "    for (int ee = 0; ee < kVector; ++ee) {".to_string(),
        format!("      {}", op("v", element)),
        "    }".to_string(),
        "  }".to_string(),
        format!("  {} = {value};", flavor.stat(&dst.name)),
        "}".to_string(),
    ];
    let (warps, lds) = if flavor.hip { ("waves", "LDS") } else { ("warps", "shared memory") };
    let across = if p.cross_warp {
        format!("xor-shuffles within each {}, then the {} {warps}' partials through {lds}", &warps[..warps.len() - 1], p.threads_per_row / p.warp)
    } else {
        format!("xor-shuffles over its {} lanes", p.threads_per_row)
    };
    let why = format!(
        "each thread folds its values of each row it holds; the row's {} threads then combine them ({across}){}",
        p.threads_per_row,
        if clear { String::new() } else { format!("; the result is combined with `{}`'s previous value (clear=false)", dst.name) });
    (why, code)
}
