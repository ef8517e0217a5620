//! TMA loads of the sm90a fused programs: the tensor maps the launcher builds on the host
//! (passed as `__grid_constant__` parameters) and the mbarriers the loads complete on.

use super::common::element_alias;
use super::context::LineCtx;
use crate::ast::*;
use crate::back::conv::upper_first;
use crate::layout::MbarrierRole;
use crate::Compiled;
use serde::Serialize;

/// One global → shared copy lowered to TMA loads: the tensor map is built on the host by
/// `make_fn` and reaches the kernel as a `__grid_constant__` parameter of type `name`.
#[derive(Serialize)]
pub struct TmaCtx {
    pub line: usize,
    pub why: String,
    pub name: String,
    pub make_fn: String,
    pub var: String,
    pub fn_params: String,
    pub null_args: String,
    pub args: String,
    pub tensor_code: String,
    pub tensor: String,
    pub tensor_doc: String,
    pub modes: String,
    pub modes_doc: String,
    pub smem_tile: String,
    pub bytes_name: String,
    pub elem: String,
}

/// The "full" mbarrier(s) of a pipeline (named by its loop variable) or of a single TMA
/// copy (named by its buffer): the tile has landed.
pub fn full_barrier(name: &str) -> String {
    format!("smem.full_{name}")
}

/// The "empty" mbarriers of a warp-specialised pipeline: the consumers released the stage.
pub fn empty_barrier(name: &str) -> String {
    format!("smem.empty_{name}")
}

/// The TMA loads' host-side pieces: one per global → shared copy lowered to TMA.
pub(super) fn tma_contexts(c: &Compiled, tensor_codes: &std::collections::BTreeMap<usize, (String, Vec<String>)>) -> Vec<TmaCtx> {
    let (spec, info, plan) = (&c.spec, &c.info, &c.plan);
    let mut out = Vec::new();
    for (&sid, cp) in &plan.copies {
        let (Some(load), Some(ti)) = (&cp.tma, cp.tensor) else { continue };
        let Some((code, dims)) = tensor_codes.get(&ti) else { continue };
        let t = &spec.tensors[ti];
        let buf = &spec.buffers[cp.buffer];
        let (n, b) = (&t.name.name, &buf.name.name);
        // The runtime sizes the tensor's shape names, in the kernel's parameter order.
        let sizes: Vec<&String> = info.runtime_dims.iter().filter(|d| dims.iter().any(|x| x.split(|ch: char| !(ch.is_alphanumeric() || ch == '_')).any(|w| w == d.as_str()))).collect();
        let alias = element_alias(n);
        let mut fn_params = vec![format!("{alias} const* {n}")];
        fn_params.extend(sizes.iter().map(|d| format!("int {d}")));
        let mut null_args = vec!["nullptr".to_string()];
        null_args.extend(sizes.iter().map(|_| "0".to_string()));
        let mut args = vec![format!("static_cast<{alias} const*>({n})")];
        args.extend(sizes.iter().map(|d| d.to_string()));
        let layout = &plan.shared[&cp.buffer];
        let smem = format!("SmemLayout{}", upper_first(b));
        out.push(TmaCtx {
            line: spec.stmt(sid).map(|s| c.line(s.span)).unwrap_or(0),
            why: cp.why.clone(),
            name: format!("Tma{}", upper_first(b)),
            make_fn: format!("make_tma_{b}"),
            var: format!("tma_{b}"),
            fn_params: fn_params.join(", "),
            null_args: null_args.join(", "),
            args: args.join(", "),
            tensor_code: code.clone(),
            tensor: format!("m{n}"),
            tensor_doc: format!("`{n}` [{}]", dims.join(", ")),
            modes: load.tensor_modes.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "),
            modes_doc: load.tensor_modes.iter().map(|m| dims[*m].clone()).collect::<Vec<_>>().join(", "),
            smem_tile: if layout.staged { format!("{smem}Tile") } else { smem },
            bytes_name: format!("kTmaBytes{}", upper_first(b)),
            elem: element_alias(b),
        });
    }
    out
}

/// The mbarriers TMA loads complete on: one per stage of each pipeline whose tiles are
/// TMA loads, one per TMA copy outside pipelines. Returns the shared-storage members and
/// the lines of their one-thread initialisation.
pub(super) fn tma_barriers(c: &Compiled, loads: &[TmaCtx]) -> (Vec<LineCtx>, Vec<String>) {
    let (spec, plan) = (&c.spec, &c.plan);
    let mut members = Vec::new();
    let mut inits = Vec::new();
    if loads.is_empty() {
        return (members, inits);
    }
    for m in &plan.mbarriers {
        let Some(s) = spec.stmt(m.owner) else { continue };
        match &s.kind {
            StmtKind::Loop { var, stages, .. } => {
                let stages_text = stages.as_ref().map(|e| c.file.snippet(e.span).to_string()).unwrap_or_else(|| "1".into());
                if m.role == MbarrierRole::Empty {
                    members.push(LineCtx {
                        code: format!("uint64_t empty_{}[{stages_text}];", var.name),
                        comment: "every consumer thread is done with stage i: the producer may refill it".into(),
                    });
                    continue;
                }
                let p = &plan.pipelines[&m.owner];
                let tiles: Vec<String> = p.producers.iter().filter_map(|id| plan.copies.get(id)).map(|cp| format!("`{}`", spec.buffers[cp.buffer].name.name)).collect();
                members.push(LineCtx {
                    code: format!("uint64_t full_{}[{stages_text}];", var.name),
                    comment: format!("pipeline over `{}` (spec {}): stage i's {} tiles have landed", var.name, c.line(s.span), tiles.join(" and ")),
                });
                // The stage's "empty" barrier, if any, is initialised in the same loop.
                let empty = if plan.mbarriers.iter().any(|e| e.owner == m.owner && e.role == MbarrierRole::Empty) {
                    format!("\n      initialize_barrier({}[stage], kThreads);  // every consumer thread arrives", empty_barrier(&var.name))
                } else {
                    String::new()
                };
                inits.push(format!("for (int stage = 0; stage < {stages_text}; ++stage) {{\n      initialize_barrier({}[stage], 1);  // one arrival: the issuing thread's{empty}\n    }}", full_barrier(&var.name)));
            }
            _ => {
                let Some(cp) = plan.copies.get(&m.owner) else { continue };
                let b = &spec.buffers[cp.buffer].name.name;
                members.push(LineCtx {
                    code: format!("uint64_t full_{b};"),
                    comment: format!("`{b}`'s tile has landed (spec {})", c.line(s.span)),
                });
                inits.push(format!("initialize_barrier({}, 1);", full_barrier(b)));
            }
        }
    }
    for l in loads {
        inits.push(format!("prefetch_tma_descriptor({}.get_tma_descriptor());", l.var));
    }
    (members, inits)
}
