//! What every sm80-family kernel context shares (the CuTe kernels and the thin-tile dequant
//! GEMM): spec constants, element aliases, the kernel's signature, its block indices (or
//! their rasterized decode), and the launch grid.

use crate::ast::*;
use crate::back::conv::{cpp_type, upper_first, Conv, Env};
pub(crate) use crate::back::{constants_ctx, ConstantCtx, ElementCtx};
use crate::layout::Swizzle;
use crate::Compiled;
use serde::Serialize;
use std::collections::BTreeSet;

#[derive(Serialize)]
pub struct BlockIndexCtx {
    pub name: String,
    /// The index's value, e.g. `blockIdx.x`, with a trailing comment when it needs one.
    pub value: String,
}

/// Grouped block rasterization (`crate::layout::RasterPlan`): the two block indices come
/// from the block's place in the launch grid.
#[derive(Serialize)]
pub struct RasterCtx {
    pub why: String,
    pub group: i64,
    /// The block index split into groups of rows, and its launch-grid dimension (`x`, `y`).
    pub group_var: String,
    pub group_dim: String,
    /// The block index walked inside a group, and its launch-grid dimension.
    pub walk_var: String,
    pub walk_dim: String,
}

/// Reads that are not allowed outside `parallel` blocks never reach this environment.
pub struct PlainEnv;

impl Env for PlainEnv {
    fn buffer_element(&self, _buffer: usize, _idx: &[Expr]) -> Option<String> {
        None
    }
}

/// `Int<expr>` spellings of buffer extents, using the spec's own constant names.
pub(super) fn static_extents(c: &Compiled, buffer: usize, dims: &[usize]) -> Vec<String> {
    let conv = Conv { spec: &c.spec, info: &c.info, hip: false, fp8_in_software: false };
    let b = &c.spec.buffers[buffer];
    dims.iter().map(|d| format!("Int<{}>{{}}", conv.expr(&b.shape[*d], &PlainEnv))).collect()
}

pub(super) fn element_alias(name: &str) -> String {
    format!("Element{}", upper_first(name))
}

pub(super) fn swizzle_text(s: Swizzle) -> String {
    format!("{}, {}, {}", s.bits, s.base, s.shift)
}

/// One element-type alias per tensor and buffer (`ElementA`), each spelled once.
pub(super) fn elements_ctx(c: &Compiled) -> Vec<ElementCtx> {
    elements_ctx_with(c, cpp_type)
}

/// [`elements_ctx`] with the C++ type of each dtype spelled by `spell` (composable_kernel's
/// for the row-wise lowering's HIP flavour).
pub(super) fn elements_ctx_with(c: &Compiled, spell: fn(DType) -> &'static str) -> Vec<ElementCtx> {
    let mut elements = Vec::new();
    for t in &c.spec.tensors {
        elements.push(ElementCtx { alias: element_alias(&t.name.name), cpp_type: spell(t.dtype.0).into(), of: format!("tensor `{}`", t.name.name) });
    }
    for b in &c.spec.buffers {
        elements.push(ElementCtx { alias: element_alias(&b.name.name), cpp_type: spell(b.dtype.0).into(), of: format!("{} buffer `{}`", b.scope.0.name(), b.name.name) });
    }
    let mut seen = BTreeSet::new();
    elements.retain(|e| seen.insert(e.alias.clone()));
    elements
}

/// The kernel's parameters (tensors, then runtime sizes) and the launcher's arguments for them.
pub(crate) fn kernel_signature(c: &Compiled) -> (Vec<String>, Vec<String>) {
    let mut params = Vec::new();
    let mut args = Vec::new();
    for t in &c.spec.tensors {
        let (n, alias) = (&t.name.name, element_alias(&t.name.name));
        let cst = if t.output { "" } else { " const" };
        params.push(format!("{alias}{cst}* __restrict__ {n}"));
        args.push(format!("static_cast<{alias}{cst}*>({n})"));
    }
    for d in &c.info.runtime_dims {
        params.push(format!("int {d}"));
        args.push(d.clone());
    }
    (params, args)
}

/// The spec's block indices as kernel locals.
pub(super) fn block_indices_ctx(c: &Compiled) -> Vec<BlockIndexCtx> {
    let grid_dims = ["x", "y", "z"];
    // A grid variable the body never names gets no local (nvcc would warn about it).
    c.spec.grid.iter().enumerate().filter(|(_, g)| c.spec.body_mentions(&g.var.name)).map(|(i, g)| BlockIndexCtx {
        name: g.var.name.clone(),
        value: if g.descending {
            format!("gridDim.{d} - 1 - blockIdx.{d};  // descending: the first blocks take the last tiles", d = grid_dims[i])
        } else {
            format!("blockIdx.{};", grid_dims[i])
        },
    }).collect()
}

/// The launch grid: its three extents as C++, the checks against CUDA's limits, and the
/// extents as the spec wrote them (for the header).
pub(super) fn grid_ctx(c: &Compiled) -> (Vec<String>, Vec<String>, Vec<String>) {
    let conv = Conv { spec: &c.spec, info: &c.info, hip: false, fp8_in_software: false };
    let mut grid: Vec<String> = c.spec.grid.iter().map(|g| conv.expr(&g.extent, &crate::back::conv::GridEnv)).collect();
    while grid.len() < 3 {
        grid.push("1".into());
    }
    let limits = vec![
        "grid_x < 1 || grid_x > 2147483647".to_string(),
        "grid_y < 1 || grid_y > 65535".to_string(),
        "grid_z < 1 || grid_z > 65535".to_string(),
    ];
    let doc = c.spec.grid.iter().map(|g| c.file.snippet(g.extent.span).to_string()).collect();
    (grid, limits, doc)
}

pub(super) fn raster_ctx(c: &Compiled) -> Option<RasterCtx> {
    let r = c.plan.raster.as_ref()?;
    let dims = ["x", "y", "z"];
    Some(RasterCtx {
        why: r.why.clone(),
        group: r.group,
        group_var: c.spec.grid[r.group_dim].var.name.clone(),
        group_dim: dims[r.group_dim].into(),
        walk_var: c.spec.grid[r.walk_dim].var.name.clone(),
        walk_dim: dims[r.walk_dim].into(),
    })
}
