//! The sm80 backend: CuTe C++ with cp.async multistage pipelines, ldmatrix and mma.sync; on
//! sm90a it also renders fused programs, with warpgroup MMAs (`wgmma.mma_async`) where the
//! plan has them ([`crate::layout::Wgmma`]).
//!
//! Requires: a spec planned for [`Target::Sm80`](crate::target::Target::Sm80).
//! Guarantees: a `.cu` translation unit (kernel + `extern "C"` launcher) and a `.h` with the
//! launcher's prototype and contract, or diagnostics for constructs this backend does not
//! lower; the text depends only on the spec, its display path and tilegen's version.

mod body;
mod common;
mod context;
pub(crate) use common::kernel_signature;
mod dequant_gemm;
mod dequant_wgmma;
pub(crate) mod rows;
mod tma;

use super::OutputFile;
use crate::diag::Diagnostic;
use crate::Compiled;

const KERNEL_TEMPLATE: &str = include_str!("../../../templates/sm80/kernel.cu.tera");
/// The thin-tile dequant GEMM: the kernel's skeleton, which each flavour's template extends
/// with its copies, pipeline and launch (`{% block %}`s).
const DEQUANT_GEMM_BASE: &str = include_str!("../../../templates/sm80/dequant_gemm.cu.tera");
/// Every thread issues its own cp.async copies into mbarrier stages.
const DEQUANT_GEMM_CP_ASYNC: &str = include_str!("../../../templates/sm80/dequant_gemm_cp_async.cu.tera");
/// A TMA producer warp fills the stages (sm90a, `DequantGemmPlan::tma`).
const DEQUANT_GEMM_TMA: &str = include_str!("../../../templates/sm80/dequant_gemm_tma.cu.tera");
/// sm90a's wide-tile dequant GEMM: warpgroup MMAs with the unpacked weights in registers.
const DEQUANT_GEMM_WGMMA: &str = include_str!("../../../templates/sm80/dequant_gemm_wgmma.cu.tera");

/// Renders the `.cu` and `.h` for a spec planned for sm80.
pub fn render(c: &Compiled) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    if let Some(p) = &c.plan.rows {
        return super::render_pair(c, rows::TEMPLATE, &rows::build(c, p)?);
    }
    if let Some(p) = &c.plan.dequant_gemm {
        let flavour = if p.tma.is_some() { DEQUANT_GEMM_TMA } else { DEQUANT_GEMM_CP_ASYNC };
        return super::render_pair_extending(c, &[("dequant_gemm.cu", DEQUANT_GEMM_BASE)], flavour, &dequant_gemm::build(c, p));
    }
    if let Some(p) = &c.plan.dequant_wgmma {
        return super::render_pair(c, DEQUANT_GEMM_WGMMA, &dequant_wgmma::build(c, p));
    }
    let ctx = context::build(c)?;
    super::render_pair(c, KERNEL_TEMPLATE, &ctx)
}
