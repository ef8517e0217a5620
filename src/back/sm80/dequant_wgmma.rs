//! The template context of sm90a's wide-tile 4-bit-weight GEMM ([`DequantWgmmaPlan`]): the
//! spec's names, the plan's atoms and budgets, and the comments tying them to spec lines.

use super::common::{element_alias, grid_ctx};
use super::context::dequant_int4x2_helpers;
use super::dequant_gemm::{operands_ctx, OperandsCtx, PlanRefs};
use crate::layout::{DequantWgmmaPlan, WGMMA_PRODUCER_THREADS};
use crate::Compiled;
use serde::Serialize;

/// A barrier over the consumer threads (the producer warpgroup leaves early).
const CONSUMER_SYNC: &str = helper!("consumer_sync.cuh");
/// A peer block's shared memory address (distributed shared memory).
const PEER_SHARED: &str = helper!("peer_shared.cuh");

/// The wide-tile template's context: [`OperandsCtx`] and the plan's own choices.
#[derive(Serialize)]
pub struct Context {
    #[serde(flatten)]
    pub operands: OperandsCtx,
    pub target_banner: String,
    pub helpers: Vec<String>,
    /// The packed words' order (`sequential` or `interleaved`), for the comments.
    pub order: &'static str,
    pub doc_launch: String,
    pub doc_invalid: String,
    pub doc_errors: String,
    pub warpgroups: i64,
    pub producer_threads: i64,
    pub producer_regs: i64,
    pub consumer_regs: i64,
    /// The warpgroup MMA atom and the shared layouts' GMMA atoms.
    pub mma_op: String,
    pub a_atom: String,
    pub w_atom: String,
    /// The swizzle width of `w_atom`, in bytes.
    pub w_swizzle_bytes: i64,
    /// The half-height instantiation's atom, if the launcher may run it.
    pub half_op: Option<String>,
    /// Whether the launcher may split k between the two blocks of a cluster.
    pub split: bool,
    /// The launcher's comment on how it gets more blocks for a small grid (half-height tiles,
    /// the k split), or `None` when it launches the spec's grid as it is.
    pub launch_rule: Option<String>,
    /// `x`, `y` or `z`: the grid dimension stepping A's row tiles.
    pub m_grid_dim: String,
    /// The launcher's parameter names, passed on to `launch`.
    pub launch_args: Vec<String>,
    /// `W_s`: its name, element alias and spec line.
    pub w_s: String,
    pub w_s_elem: String,
    pub w_s_line: usize,
    /// The block indices of the tiles: C's row tile, the weight tile.
    pub m_index: String,
    pub n_index: String,
    /// C's elements per 16-byte store.
    pub c_vector: i64,
}

/// The context for a spec planned with `p`.
pub fn build(c: &Compiled, p: &DequantWgmmaPlan) -> Context {
    let spec = &c.spec;
    let [ta, _, _, _] = p.tensors;
    let w_s = spec.buffers[p.buffers[3]].name.name.clone();
    let (_, _, grid_doc) = grid_ctx(c);
    let order = spec.nibble_order();
    let threads = spec.threads.0;
    let split = p.split_k.is_ok();
    let operands = operands_ctx(c, PlanRefs {
            tensors: p.tensors,
            buffers: p.buffers,
            stmts: [p.pipeline, p.gemm, p.dequant, p.store],
            copies: p.copies,
            stages: p.stages,
            group: p.group,
            zero: &p.zero,
            why: &p.why,
        });
    Context {
        operands,
        target_banner: "Target sm90a: the wide-tile 4-bit-weight GEMM (a TMA producer warpgroup filling mbarrier stages, weights unpacked into the warpgroup MMAs' register A operand).".into(),
        order: order.name(),
        helpers: dequant_int4x2_helpers(order, true).chain([CONSUMER_SYNC].into_iter().chain(split.then_some(PEER_SHARED)).map(String::from)).collect(),
        doc_launch: format!("grid ({}){}, {} threads (the spec's {threads} and a TMA producer warpgroup), {} bytes of dynamic shared memory (the limit is raised when over 48 KB)",
            grid_doc.join(", "),
            match (&p.half_op, split) {
                (Some(_), true) => format!(" in clusters of one block; when that grid would occupy at most half the device's SMs, twice the blocks along {}'s rows (tiles of half the rows) if the last row tile is at most half used, then, if the grid still occupies at most half the SMs, two blocks along z in clusters of 1x1x2 (the pair splits k)", spec.tensors[ta].name.name),
                (Some(_), false) => format!(", or with twice the blocks along {}'s rows (tiles of half the rows) when that grid would occupy at most half the device's SMs", spec.tensors[ta].name.name),
                (None, true) => " in clusters of one block, or with two blocks along z in clusters of 1x1x2 (the pair splits k) when that grid would occupy at most half the device's SMs".into(),
                (None, false) => String::new(),
            },
            threads + WGMMA_PRODUCER_THREADS, c.plan.smem.total),
        doc_invalid: "the grid exceeds CUDA's limits".into(),
        doc_errors: if p.half_op.is_some() || split {
            "cudaGetDevice, cudaDeviceGetAttribute, cudaFuncSetAttribute or the launch"
        } else {
            "cudaFuncSetAttribute or the launch"
        }.into(),
        warpgroups: p.warpgroups,
        producer_threads: WGMMA_PRODUCER_THREADS,
        producer_regs: p.regs.0,
        consumer_regs: p.regs.1,
        mma_op: p.op.clone(),
        a_atom: p.a_atom.into(),
        w_atom: p.w_atom.into(),
        w_swizzle_bytes: p.w_swizzle_bytes,
        half_op: p.half_op.clone(),
        split,
        launch_rule: launch_rule(spec.tensors[ta].name.name.as_str(), p.half_op.is_some(), split),
        m_grid_dim: ["x", "y", "z"][p.m_grid_dim.unwrap_or(0)].into(),
        launch_args: spec.tensors.iter().map(|t| t.name.name.clone()).chain(c.info.runtime_dims.iter().cloned()).collect(),
        w_s_elem: element_alias(&w_s),
        w_s_line: c.line(spec.buffers[p.buffers[3]].span),
        w_s,
        m_index: p.tile_index[0].clone(),
        n_index: p.tile_index[1].clone(),
        c_vector: p.c_vector,
    }
}

/// The launcher's comment on the ways it gets more blocks when the spec's grid would occupy at
/// most half the SMs: the half-height instantiation of `a`'s row tiles, the k split, or both.
fn launch_rule(a: &str, half: bool, split: bool) -> Option<String> {
    let halve = format!("half as many rows of `{a}` per block (twice the blocks along them)");
    let split_k = "k split between the two blocks of a cluster along z when the grid still occupies at most half the SMs";
    let ways = match (half, split) {
        (true, true) => format!("{halve} when the last row tile is at most half used, then {split_k}"),
        (true, false) => halve,
        (false, true) => split_k.to_string(),
        (false, false) => return None,
    };
    Some(format!("A grid that would occupy at most half the SMs gets more blocks: {ways}."))
}
