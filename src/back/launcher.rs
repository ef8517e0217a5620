//! The C launcher's contract, shared by every backend: parameters, argument checks
//! and the documentation the `.h` carries.

use crate::ast::{walk_stmts, Dim, Order, StmtKind};
use crate::back::ck::Lowering;
use crate::Compiled;
use serde::Serialize;

/// One argument check: a C++ condition that makes the launcher return an error.
#[derive(Serialize)]
pub struct CheckCtx {
    /// The condition.
    pub cond: String,
    /// Why it is required.
    pub why: String,
}

/// Launcher parameters, checks and docs.
#[derive(Serialize)]
pub struct LauncherCtx {
    /// The C parameters (without the stream).
    pub c_params: Vec<String>,
    /// Conditions rejecting sizes: below 1, not the multiple the spec needs, over a target's
    /// limit.
    pub size_checks: Vec<String>,
    /// Conditions rejecting runtime sizes over kMaxSize (2^30), so that the kernel's int
    /// coordinates of a tile past an edge cannot overflow.
    pub size_limits: Vec<String>,
    /// Conditions rejecting null pointers.
    pub null_checks: Vec<String>,
    /// Alignment checks.
    pub align_checks: Vec<CheckCtx>,
    /// One line per tensor for the header.
    pub doc_tensors: Vec<String>,
    /// What the tensors a `dequant_int4` reads hold: its packed words' order, its zero points.
    pub doc_packed: Vec<String>,
    /// The sizes' contract.
    pub doc_sizes: String,
    /// The alignment contract, one line per tensor.
    pub doc_alignment: Vec<String>,
    /// The spec's constants with the values this build fixed (`D = 128, out_scale = 0.5`);
    /// empty without constants.
    pub doc_constants: String,
    /// Whether the Sizes line names multiples the launcher checks (`K % 128`).
    pub size_multiples: bool,
}

/// What every generated file's header comment names.
#[derive(Serialize)]
pub struct HeaderCtx {
    /// Target name.
    pub target: String,
    /// Kernel name.
    pub kernel: String,
    /// The spec's one-line doc.
    pub doc: String,
    /// The spec's path as the banner names it ([`Compiled::source_name`]).
    pub spec_path: String,
    /// tilegen's version.
    pub version: String,
    /// The CUTLASS version the code is written against.
    pub cutlass: String,
    /// The C launcher's name.
    pub launcher: String,
    /// The runtime API's prefix: `cuda` or `hip`.
    pub api: String,
    /// The runtime API's name in prose: `CUDA` or `HIP`.
    pub api_name: String,
    /// The runtime header to include.
    pub runtime_header: String,
    /// The translation unit's extension.
    pub source_ext: String,
    /// The banner's build command, one comment line each: the flags `tilegen build` uses.
    pub build: Vec<String>,
    /// Where the target's `targets:` entry changed constants or the thread count, which and
    /// at which spec line, for the constants' comment: `` (sm90a's `targets:` entry, spec 28,
    /// sets block_N, block_K, stages)``; empty otherwise.
    pub constants_note: String,
    /// Whether the launch's error is read with `hipGetLastError`, which the header warns also
    /// returns an error an earlier call left pending: the composable_kernel launchers, whose
    /// invokers launch and check for themselves (set by [`header`]). tilegen's own kernels
    /// launch with `cudaLaunchKernelEx` / `hipLaunchKernelEx`, which return the error itself.
    pub reads_last_error: bool,
}

/// The header fields for a compiled spec.
pub fn header(c: &Compiled) -> HeaderCtx {
    let amd = c.plan.target.is_amd();
    HeaderCtx {
        target: c.plan.target.name().into(),
        kernel: c.spec.kernel.name.clone(),
        doc: c.spec.doc.clone().unwrap_or_default(),
        spec_path: c.source_name.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        cutlass: crate::back::CUTLASS_VERSION.into(),
        launcher: format!("tilegen_{}", c.spec.kernel.name),
        api: if amd { "hip" } else { "cuda" }.into(),
        api_name: if amd { "HIP" } else { "CUDA" }.into(),
        runtime_header: if amd { "hip/hip_runtime.h" } else { "cuda_runtime.h" }.into(),
        source_ext: c.plan.target.source_extension().into(),
        build: build_lines(c.plan.target, &c.spec.kernel.name),
        constants_note: constants_note(c),
        reads_last_error: amd && matches!(crate::back::ck::lowering(c), Some(Lowering::Attention(_) | Lowering::DeviceGemm(_))),
    }
}

/// See [`HeaderCtx::constants_note`].
fn constants_note(c: &Compiled) -> String {
    let target = c.plan.target;
    let Some(o) = c.spec.targets.iter().find(|o| o.target.name == target.name()) else { return String::new() };
    let mut names: Vec<&str> = o.constants.iter().map(|k| k.name.name.as_str()).collect();
    if o.threads.is_some() {
        names.push("threads");
    }
    if names.is_empty() {
        return String::new();
    }
    format!(" ({target}'s `targets:` entry, spec {}, sets {})", c.line(o.target.span), names.join(", "))
}

/// The build command a generated file's banner gives: for the NVIDIA targets the flags of
/// `tilegen build` ([`crate::build::gencode_flags`] for the target's default SMs, so machine code
/// for each of them and, on sm80, PTX that later GPUs compile at load time).
pub fn build_lines(target: crate::target::Target, kernel: &str) -> Vec<String> {
    if target.is_amd() {
        return vec![format!("Build: hipcc -std=c++17 -O3 --offload-arch={target} -c {kernel}.hip")];
    }
    let mut lines = vec!["Build: nvcc -std=c++17 -O3 --expt-relaxed-constexpr -DNDEBUG -I<cutlass>/include".to_string()];
    let flags = crate::build::gencode_flags(target, target.default_sms());
    let n = flags.len();
    for (i, pair) in flags.chunks(2).enumerate() {
        let last = (i + 1) * 2 >= n;
        lines.push(format!("       {}{}", pair.join(" "), if last { format!(" -c {kernel}.cu") } else { String::new() }));
    }
    lines
}

/// The header's lines on the tensors each `dequant_int4` reads through a copy: where the packed
/// words keep their values (the spec's `order`), and that zero points are small integers.
fn packed_tensors_doc(c: &Compiled) -> Vec<String> {
    let spec = &c.spec;
    let mut lines = Vec::new();
    walk_stmts(&spec.body, &mut |s| {
        let StmtKind::Dequant { src, zero, order, .. } = &s.kind else { return };
        let line = c.line(s.span);
        for t in spec.tensors_copied_into(&src.name) {
            lines.push(format!(
                "`{t}` (read by the dequant_int4 at spec {line}) packs eight 4-bit values into each 32-bit word along its last dimension, in {} order ({})",
                order.name(),
                order.layout()
            ));
        }
        if let Some(z) = zero.tile() {
            for t in spec.tensors_copied_into(&z.name) {
                lines.push(format!("`{t}` holds zero points: integers 0 to 15, one per group of values"));
            }
        }
    });
    lines
}

/// Builds the launcher context from the spec and the plan's alignment requirements.
pub fn launcher(c: &Compiled) -> LauncherCtx {
    let spec = &c.spec;
    let mut c_params = Vec::new();
    let mut null_checks = Vec::new();
    let mut doc_tensors = Vec::new();
    for t in &spec.tensors {
        let n = &t.name.name;
        c_params.push(format!("{}void* {n}", if t.output { "" } else { "const " }));
        null_checks.push(format!("{n} == nullptr"));
        let dims: Vec<String> = t.shape.iter().map(dim_text).collect();
        let order = match t.shape.len() {
            1 => "",
            2 if t.order.0 != Order::RowMajor => ", column-major",
            2 => ", row-major",
            _ => ", row-major (the last index fastest)",
        };
        let role = match (t.output, spec.is_in_place(t)) {
            (true, true) => "input and output: read, then updated in place",
            (true, false) => "output",
            (false, _) => "input",
        };
        doc_tensors.push(format!("{n:<6} [{}] {}{order} ({role})", dims.join(", "), t.dtype.0));
    }
    let doc_packed = packed_tensors_doc(c);
    for d in &c.info.runtime_dims {
        c_params.push(format!("int {d}"));
    }
    let mut size_checks: Vec<String> = c.info.runtime_dims.iter().map(|d| format!("{d} < 1")).collect();
    let size_limits: Vec<String> = c.info.runtime_dims.iter().map(|d| format!("{d} > kMaxSize")).collect();
    // Divided extents (`K/8`) must divide exactly.
    let divisors = c.info.size_divisors(spec);
    size_checks.extend(divisors.iter().map(|(n, div)| format!("{n} % {div} != 0")));
    let mut align_checks = Vec::new();
    let mut doc_alignment = Vec::new();
    for a in &c.plan.alignment {
        let t = &spec.tensors[a.tensor];
        let bytes = a.vector_elems * t.dtype.0.bytes() as i64;
        let mut conds = vec![format!("reinterpret_cast<uintptr_t>({}) % {bytes} != 0", t.name.name)];
        let contiguous = crate::layout::Alignment::contiguous_dim(t);
        let mut doc = format!("{} must be {bytes}-byte aligned", t.name.name);
        // The leading dimension (the stride between rows or columns) keeps vectors aligned;
        // for a vector, its length keeps the last piece whole.
        let lead = dim_text(&t.shape[contiguous]);
        // An extent fixed when generated (a literal or a constant) that divides needs no check,
        // nor one the size checks above already make whole vectors.
        if a.whole_rows && !c.info.whole_vectors(&divisors, &t.shape[contiguous], a.vector_elems) {
            conds.push(format!("{lead} % {} != 0", a.vector_elems));
            doc.push_str(&format!(" and {lead} a multiple of {}", a.vector_elems));
        }
        doc.push_str(&format!(" ({})", a.why));
        align_checks.push(CheckCtx { cond: conds.join(" || "), why: a.why.clone() });
        doc_alignment.push(doc);
    }
    let doc_sizes = if c.info.runtime_dims.is_empty() {
        "none at run time".to_string()
    } else {
        let multiples: Vec<String> = divisors.iter().map(|(n, div)| format!("{n} a multiple of {div}")).collect();
        if multiples.is_empty() {
            format!("{} from 1 to 2^30; tiles at ragged edges are predicated", c.info.runtime_dims.join(", "))
        } else {
            format!("{} from 1 to 2^30, {} (packed or grouped tensors divide it); tiles at ragged edges are predicated", c.info.runtime_dims.join(", "), multiples.join(", "))
        }
    };
    let constant = |k: &crate::ast::Constant| {
        let value = match c.info.symbols.get(&k.name.name) {
            Some(crate::check::Symbol::Constant(v)) => v.spelling(),
            _ => "?".into(),
        };
        format!("{} = {value}", k.name.name)
    };
    // A composable_kernel instance (AMD device GEMM or fused attention) brings its own tiles,
    // stages and thread count: the constants that only size the spec's tiles do not change it.
    let ck_instance = c.plan.target.is_amd() && crate::back::ck::lowering(c).is_some_and(|l| l.is_ck_instance());
    let (tiling, used): (Vec<_>, Vec<_>) = spec.constants.iter().partition(|k| ck_instance && only_sizes_tiles(spec, &k.name.name));
    let mut doc_constants = used.iter().map(|k| constant(k)).collect::<Vec<_>>().join(", ");
    if !tiling.is_empty() {
        doc_constants = format!("{}{}{} size the spec's tiles, which this CK instance replaces with its own, so they do not change this kernel",
            doc_constants, if doc_constants.is_empty() { "" } else { "; " }, tiling.iter().map(|k| constant(k)).collect::<Vec<_>>().join(", "));
    }
    let size_multiples = !divisors.is_empty();
    LauncherCtx { c_params, size_checks, size_limits, null_checks, align_checks, doc_tensors, doc_packed, doc_sizes, doc_alignment, doc_constants, size_multiples }
}

fn dim_text(d: &Dim) -> String {
    d.text()
}

/// Whether constant `name` only sizes the spec's tiles: it appears in a buffer's shape or a
/// pipeline's stage count and in no tensor's shape.
fn only_sizes_tiles(spec: &crate::ast::Spec, name: &str) -> bool {
    use crate::ast::{Dim, StmtKind};
    let in_tensor = spec.tensors.iter().flat_map(|t| &t.shape).any(|d| match d {
        Dim::Named(n) | Dim::Div(n, _, _) => n.name == name,
        Dim::Fixed(..) => false,
    });
    let mut in_tiles = spec.buffers.iter().any(|b| b.shape.iter().any(|e| e.mentions(name)));
    spec.walk(&mut |s| {
        if let StmtKind::Loop { stages: Some(e), .. } = &s.kind {
            in_tiles |= e.mentions(name);
        }
    });
    in_tiles && !in_tensor
}
