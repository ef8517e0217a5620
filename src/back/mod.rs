//! Backends: a checked, planned spec → C++ source files.
//!
//! Requires: a [`crate::Compiled`] (checked and planned for the backend's target).
//! Guarantees: deterministic text (no timestamps, no absolute paths, ordered maps) or a
//! [`Diagnostic`] for what the backend cannot lower; never a panic.
//!
//! Each backend builds a flat, serialisable context (names chosen, C++ spellings
//! computed) and hands it to Tera templates that only print.

/// A C++ helper the generated code may need (a device function or a layout utility), kept
/// as a plain C++ file under `templates/helpers/` so that it reads (and diffs) as C++; the
/// text is the file's, without its final newline. Defined before the backend modules, which
/// see it by textual scope.
macro_rules! helper {
    ($file:literal) => {
        $crate::back::without_final_newline(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/helpers/", $file)))
    };
}

/// `text` without one final `\n`: the helper files end in a newline, the emitted blocks do not.
pub(crate) const fn without_final_newline(text: &'static str) -> &'static str {
    match text.as_bytes() {
        [rest @ .., b'\n'] => match std::str::from_utf8(rest) {
            Ok(t) => t,
            Err(_) => panic!("a helper file is not UTF-8"),
        },
        _ => text,
    }
}

pub mod ck;
pub mod conv;
pub mod launcher;
pub mod sm80;
pub mod sm90a;

use crate::diag::Diagnostic;
use crate::target::Target;
use crate::Compiled;

/// One `using Element<Name> = <type>;` line of a generated kernel: the alias, its C++ type and
/// what it is the element of (``tensor `Q` ``, ``shared buffer `Q_s` ``). Every back end's
/// context lists them under `elements`; [`render_pair_extending`] drops those the rendered
/// code never names.
#[derive(serde::Serialize)]
pub(crate) struct ElementCtx {
    pub alias: String,
    pub cpp_type: String,
    pub of: String,
}

/// One `constexpr <cpp_type> <name> = <value>;` line of a generated kernel: a spec constant
/// and the spec line that declares it. Every back end that declares the spec's constants lists
/// them under `constants`; [`render_pair_extending`] sets `unused` on those the rendered code
/// never reads (a tile setting of another target, a stage count once the loop is serial), which
/// the templates declare `[[maybe_unused]]`, as nvcc and hipcc would otherwise warn.
#[derive(serde::Serialize)]
pub(crate) struct ConstantCtx {
    pub cpp_type: String,
    pub name: String,
    pub value: String,
    pub line: usize,
    pub unused: bool,
}

/// The spec's constants as C++ declarations, each marked used until the rendered code says
/// otherwise.
pub(crate) fn constants_ctx(c: &Compiled) -> Vec<ConstantCtx> {
    c.spec.constants.iter().map(|k| {
        let (cpp_type, value) = conv::constant_decl(&c.info, &k.name.name);
        ConstantCtx { cpp_type: cpp_type.into(), name: k.name.name.clone(), value, line: c.line(k.name.span), unused: false }
    }).collect()
}

/// One generated file: its name (relative to the target's output folder) and contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputFile {
    /// File name, e.g. `gemm_bf16.cu`.
    pub name: String,
    /// Text.
    pub contents: String,
}

/// The version of CUTLASS generated code is written against (the pinned wheel).
pub const CUTLASS_VERSION: &str = "4.2.0 (PyPI nvidia-cutlass==4.2.0.0)";

/// Names every backend's generated code declares itself (locals of the launcher, helpers;
/// `config` is the launchers' cudaLaunchKernelEx / hipLaunchKernelEx configuration). C++ keywords and types
/// are the checker's ([`crate::check::refused_name`]).
const RESERVED_ALL: [&str; 14] = [
    "stream", "tid", "e", "c", "r", "v", "acc_rows_cols", "acc_as_operand_a", "err", "grid", "grid_x", "grid_y",
    "grid_z", "config",
];
/// Names the CuTe code (sm80, and sm90a's fused programs) declares or calls.
const RESERVED_CUTE: [&str; 65] = [
    "cute", "cutlass", "Tensor", "Layout", "Shape", "Stride", "Int", "copy", "gemm", "clear", "size", "shape",
    "smem", "smem_buf", "tiled_mma", "thr_mma", "load_tile", "read_stage", "write_stage", "num_tiles", "k_block",
    "GMMA", "fence_view_async_shared", "warpgroup_arrive", "warpgroup_commit_batch", "warpgroup_wait",
    "warpgroup_fence_operand", "SharedStorage", "stage", "tile", "block_linear", "group_blocks", "group_first",
    "group_rows", "scaled", "swap_mn", "Copy_Atom", "MMA_Atom", "Swizzle", "Tile", "UniversalCopy",
    "cast_smem_ptr_to_uint", "composition", "cp_async_fence", "cp_async_wait", "elem_less", "fill", "get",
    "local_tile", "make_coord", "make_fragment_like", "make_gmem_ptr", "make_identity_tensor", "make_shape",
    "make_smem_ptr", "make_stride", "make_tensor", "make_tiled_copy", "make_tiled_copy_A", "make_tiled_copy_B",
    "make_tiled_copy_C", "partition_fragment_C", "tile_to_shape", "make_tiled_mma", "cosize_v",
];
/// Names the thin-tile dequant GEMM's code declares besides the CuTe ones.
const RESERVED_THIN: [&str; 101] = [
    "lane", "warp", "g", "t", "wn", "wk", "w_row", "k0", "m0", "n0", "next_k", "mma_tile", "tile", "stage", "kernel",
    "row", "col", "chunk", "share", "sum0", "sum1", "out", "scale_row", "scale_slot", "scale_copier", "scale_first",
    "scale_shift", "scale_bytes", "bytes", "odd_rows", "smem_bytes", "words_lo",
    "words_hi", "scale_lo", "scale_hi", "lo", "hi", "x", "d", "mt", "s", "h", "i", "in_k", "k_left", "accum", "Mma",
    "partials", "SharedStorage", "cp_async_16", "cp_async_4_bytes", "dequant_int4x2", "int4x2_pair", "ld_shared_u16", "ld_shared_v4",
    "w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "cp_async_16_l1", "full", "empty", "next", "next_stage",
    "mbarrier_init", "mbarrier_wait", "mbarrier_arrive", "mbarrier_arrive_on_copies", "dequant_neg_bias", "neg_bias_lo",
    "neg_bias_hi", "zp_offset", "decode", "dequant_int4x2_exact", "half_bits_to_float", "step", "chain", "fmaf",
    // programmatic dependent launch
    "pdl", "cudaLaunchAttribute", "cudaLaunchAttributeProgrammaticStreamSerialization", "grid_dependency_wait",
    "launch_dependent_grids", "prefetch_l2", "prefetch_bytes", "attributes", "attributes_err", "cudaFuncAttributes", "cudaFuncGetAttributes",
    "loaded_ptx_version", "ptx_version", "version_err", "kDevicesRemembered", "remembered", "rememberable", "device_err", "cudaGetDevice",
];
/// Names every sm90a producer/consumer pipeline calls unqualified: CuTe's mbarrier functions
/// and the consumers' named barrier (sm90a's fused programs and the thin-tile GEMM's flavour).
const RESERVED_SM90A_BARRIERS: [&str; 5] = ["consumer_sync", "initialize_barrier", "set_barrier_transaction_bytes", "wait_barrier", "arrive_barrier"];
/// Names the thin-tile GEMM's sm90a flavour (a TMA producer warp) adds to [`RESERVED_THIN`]
/// and [`RESERVED_SM90A_BARRIERS`]: its locals and the CuTe, CUTLASS and CUDA names it calls
/// unqualified.
const RESERVED_THIN_TMA: [&str; 23] = [
    "slot", "span", "k_span", "tile_rows", "box_rows", "map", "span_dims", "line_dims", "word_dims", "row_bytes", "strides",
    "box", "unit", "CUresult", "cuTensorMapEncodeTiled", "cuuint32_t", "cuuint64_t", "make_uint4", "sizeof_bits_v",
    "ComposedLayout", "smem_ptr_flag_bits", "CUtensorMap", "CUDA_SUCCESS",
];
/// Names sm90a's wide-tile dequant GEMM (`DequantWgmmaPlan`) declares besides the CuTe ones and
/// [`RESERVED_SM90A_BARRIERS`]: its locals, helpers and launch function, and the CuTe and CUDA
/// names it calls unqualified.
const RESERVED_WIDE: [&str; 53] = [
    "kernel", "rows", "cols", "MmaOp", "a_regs", "bias_hi", "bias_lo", "nibble_pair", "int4x2_pair", "col", "dequant_int4x2",
    "dequant_int4x2_exact", "dequant_neg_bias", "device", "g", "h",
    "half_rows", "k16", "lane", "launch", "load_scales", "n0", "neg_bias", "next_scales", "next_zeros",
    "partition_shape_A", "scale2", "scale_rows", "sms", "t", "w_regs", "w_row", "words_hi", "words_lo", "zero_rows",
    "prefetch_tma_descriptor",
    // splitting k over a cluster of two blocks
    "k_half", "first_tile", "last_tile", "kt", "split_k", "partial", "peer_partial", "v", "p", "cluster", "config",
    "peer_shared", "block_rank_in_cluster", "cluster_arrive", "cluster_arrive_relaxed", "cluster_wait",
    "make_float4",
];
/// Names the CuTe lowering of a `dequant_int4` statement declares (its helpers and locals,
/// those of the odd-rows instantiation's scales copy and launcher included).
const RESERVED_DEQUANT: [&str; 22] = [
    "dequant_int4x2", "dequant_int4x2_exact", "dequant_int4x8", "dequant_neg_bias", "packed", "scale", "zero", "wc", "b0", "b1", "nibble_pair", "int4x2_pair", "b_row",
    "b_words", "b_scales", "b_neg_bias", "recast", "cp_async_4_bytes", "cp_async_rows_from_words", "odd_rows", "kernel",
    "smem_bytes",
];
/// Names sm90a's fused programs (TMA, WGMMA, warp specialisation) declare besides the CuTe ones
/// and [`RESERVED_SM90A_BARRIERS`].
const RESERVED_SM90A_FUSED: [&str; 5] = ["phase", "prev_stage", "after_mma", "during_mma", "prefetch_tma_descriptor"];
/// Names the CUTLASS 3.x (sm90a collective) launcher declares.
const RESERVED_SM90A: [&str; 31] = [
    "cute", "cutlass", "args", "params", "kernel", "cluster", "err", "device", "workspace", "workspace_bytes", "Acc",
    "launch", "result",
    "ClusterShape", "Epilogue", "EpilogueSchedule", "EpilogueTile", "GemmKernel", "KernelSchedule", "LayoutA",
    "LayoutB", "LayoutC", "LayoutD", "RoundStyle", "TileScheduler", "TileShape", "sm_count", "size", "Int", "Shape",
    "Stride",
];
/// Names the composable_kernel code declares.
const RESERVED_CK: [&str; 14] = [
    "ck", "argument", "acc", "d0", "d1", "d2", "d3", "Row", "Col", "S", "PassThrough", "DeviceGemm", "Epilogue",
    "StreamConfig",
];
/// Names the composable_kernel fused attention code declares.
const RESERVED_CK_ATTENTION: [&str; 21] = [
    "ck", "argument", "attention", "PassThrough", "Scale", "Seq", "GemmSpecialization", "MaskingSpecialization",
    "TensorSpecialization", "DeviceAttention", "kSoftmaxScale", "kHeadDim", "q_lengths", "q_strides", "k_lengths",
    "k_strides", "v_lengths", "v_strides", "o_lengths", "o_strides", "StreamConfig",
];

/// Prefixes the generated code's own names are built from (CUTLASS's `kName` constants aside):
/// element and layout aliases, tiled MMAs, TMA descriptors, copy atoms and their thread
/// slices; and the CUDA and HIP runtimes' functions. Followed by an upper-case letter, a
/// digit, `_` or nothing.
const RESERVED_TYPE_PREFIXES: [&str; 12] = ["Element", "SmemLayout", "Tiled", "Tma", "S2R", "R2S", "G2S", "S2G", "Collective", "Alignment", "cuda", "hip"];
/// Prefixes of generated locals, functions and macros, followed by anything (`_` covers
/// CuTe's `_` and `_1`, `_16`, ... as well as names C++ keeps for itself; `CU_` the CUDA
/// driver API's enumerators, which the tensor maps name).
const RESERVED_PREFIXES: [&str; 13] = ["s2r_", "r2s_", "g2s_", "s2g_", "tma_", "make_tma_", "thr_mma", "tiled_mma", "tilegen", "_", "CUTE_", "CUTLASS_", "CU_"];

/// Whether `name` follows one of the generated code's naming conventions: a CUTLASS-style
/// `kName` constant, a CuTe atom (`SM80_...`, `Sm90...`), or a prefix of
/// [`RESERVED_TYPE_PREFIXES`] or [`RESERVED_PREFIXES`].
fn reserved_by_convention(name: &str) -> bool {
    let k_constant = name.strip_prefix('k').and_then(|rest| rest.chars().next()).is_some_and(|ch| ch.is_ascii_uppercase());
    // CuTe's tensor names, built from spec names: mA (global), gA (tile), sA_s (shared), rA
    // (registers), cA (coordinates), and their partitions tCsA_s, tXgA, tCcacc.
    let mut chars = name.chars();
    let cute_tensor = match (chars.next(), chars.next(), chars.next()) {
        (Some('m' | 'g' | 's' | 'r' | 'c'), Some(b), _) => b.is_ascii_uppercase(),
        (Some('t'), Some(b), Some(c)) => b.is_ascii_uppercase() && c.is_ascii_lowercase(),
        _ => false,
    };
    // CuTe's MMA and copy atoms and CUTLASS's epilogue operations: SM80_16x8x16_..., Sm90EVT.
    let atom = ["SM", "Sm"].iter().any(|p| name.strip_prefix(p).and_then(|rest| rest.chars().next()).is_some_and(|ch| ch.is_ascii_digit()));
    let typed = RESERVED_TYPE_PREFIXES.iter().any(|p| {
        name.strip_prefix(p).is_some_and(|rest| rest.chars().next().is_none_or(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit() || ch == '_'))
    });
    k_constant || cute_tensor || atom || typed || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether `name` is one the AMD tile lowering derives from a fragment's: `acc_row`, `acc_col`
/// and `acc_group`, the wave offsets of fragment `acc`.
fn tile_derived(c: &Compiled, name: &str) -> bool {
    c.plan.tile.is_some() && c.spec.buffers.iter().any(|b| name.strip_prefix(b.name.name.as_str()).is_some_and(|sfx| ["_row", "_col", "_group"].contains(&sfx)))
}

/// Whether the C++ that `c`'s target renders for it declares or calls `name` itself (a
/// local, a type, a helper), so that a spec name spelled so would clash with it or be
/// shadowed by it. The lists are checked against the rendered bundled specs by
/// `tests/reserved_names.rs`.
pub fn is_reserved(c: &Compiled, name: &str) -> bool {
    let extra: &[&str] = match c.plan.target {
        _ if c.plan.dequant_gemm.is_some() => &RESERVED_THIN,
        _ if c.plan.dequant_wgmma.is_some() => &RESERVED_WIDE,
        _ if c.plan.rows.is_some() => &sm80::rows::RESERVED_ROWS,
        Target::Sm80 => &[],
        Target::Sm90a if c.plan.collective.is_some() => &RESERVED_SM90A,
        Target::Sm90a => &RESERVED_SM90A_FUSED,
        Target::Gfx942 | Target::Gfx90a if c.plan.attention.is_some() => &RESERVED_CK_ATTENTION,
        Target::Gfx942 | Target::Gfx90a if c.plan.tile.is_some() => &ck::RESERVED_TILE,
        Target::Gfx942 | Target::Gfx90a => &RESERVED_CK,
    };
    let cute = matches!(c.plan.target, Target::Sm80) || (c.plan.target == Target::Sm90a && c.plan.collective.is_none());
    // The collective's epilogue visitor tree numbers its nodes and scalars.
    let evt = c.plan.collective.is_some() && ["Node", "Scalar"].iter().any(|p| name.strip_prefix(p).is_some_and(|n| n.chars().all(|ch| ch.is_ascii_digit())));
    let dequant = cute && !c.plan.dequants.is_empty() && RESERVED_DEQUANT.contains(&name);
    // sm90a's producer/consumer pipelines: the fused programs' and the thin-tile GEMM's.
    let thin_tma = c.plan.dequant_gemm.as_ref().is_some_and(|p| p.tma.is_some());
    let fused_sm90a = c.plan.target == Target::Sm90a && c.plan.collective.is_none() && c.plan.dequant_gemm.is_none();
    let pipeline = (thin_tma && RESERVED_THIN_TMA.contains(&name)) || ((thin_tma || fused_sm90a) && RESERVED_SM90A_BARRIERS.contains(&name));
    evt || dequant || pipeline || tile_derived(c, name) || RESERVED_ALL.contains(&name) || conv::MATH_FUNCTIONS.contains(&name) || is_helper(name) || extra.contains(&name)
        || (cute && RESERVED_CUTE.contains(&name)) || reserved_by_convention(name)
}

/// Spec names that would collide with names the target's generated C++ declares: one
/// error each, at the declaration.
fn reserved_names(c: &Compiled) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    // CuTe code spells every spec name; the library paths (CUTLASS collectives, CK) only the
    // launcher's parameters and the constants.
    let spells_all = matches!(c.plan.target, Target::Sm80) || (c.plan.target == Target::Sm90a && c.plan.collective.is_none()) || c.plan.tile.is_some() || c.plan.rows.is_some();
    let mut names: Vec<&String> = c.info.symbols.iter()
        .filter(|(_, sym)| spells_all || matches!(sym, crate::check::Symbol::Tensor(_) | crate::check::Symbol::RuntimeDim | crate::check::Symbol::Constant(_)))
        .map(|(n, _)| n).collect();
    if spells_all {
        c.spec.walk(&mut |s| {
            if let crate::ast::StmtKind::Parallel { vars, .. } = &s.kind {
                names.extend(vars.iter().map(|v| &v.name));
            }
        });
    }
    names.sort();
    names.dedup();
    for name in names {
        if is_reserved(c, name) {
            let span = decl_span(c, name).unwrap_or(c.spec.kernel.span);
            let hint = if reserved_by_convention(name) {
                "rename it in the spec: generated code owns the names of the forms kName, ElementName, SmemLayoutName, TiledName, TmaName, s2r_name and tilegen_name, and CuTe's tensor names mName, gName, sName, rName, cName and tXyName"
            } else if tile_derived(c, name) {
                "rename it in the spec: the tile lowering names a fragment's wave offsets <fragment>_row, <fragment>_col and <fragment>_group"
            } else {
                "rename it in the spec"
            };
            errors.push(Diagnostic::error(span, format!("the name `{name}` collides with a name in the generated {} code", c.plan.target)).hint(hint));
        }
    }
    // The CuTe (and row-wise) code names each tensor's and buffer's element type `Element<Name>` (the first
    // letter upper-cased): two names that differ only there, with different types, would share
    // one alias. (The 4-bit GEMMs' own lowerings spell only the tensors' and shared tiles'; the
    // row-wise lowering's HIP flavour spells them all.)
    let cute_aliases = matches!(c.plan.target, Target::Sm80) || (c.plan.target == Target::Sm90a && c.plan.collective.is_none()) || c.plan.rows.is_some();
    if cute_aliases && c.plan.dequant_gemm.is_none() && c.plan.dequant_wgmma.is_none() {
        let spec = &c.spec;
        let declared = spec.tensors.iter().map(|t| (&t.name, t.dtype.0)).chain(spec.buffers.iter().map(|b| (&b.name, b.dtype.0)));
        let mut seen: Vec<(String, &crate::ast::Ident, crate::ast::DType)> = Vec::new();
        for (name, dtype) in declared {
            let alias = format!("Element{}", conv::upper_first(&name.name));
            match seen.iter().find(|(a, _, _)| *a == alias) {
                Some((_, first, d)) if *d != dtype => errors.push(Diagnostic::error(name.span, format!(
                    "`{}` ({dtype}) and `{}` ({d}) would share the element type alias `{alias}` in the generated {} code", name.name, first.name, c.plan.target))
                    .label(first.span, "declared here")
                    .hint("rename one of them (names that differ only in the case of their first letter clash)")),
                Some(_) => {}
                None => seen.push((alias, name, dtype)),
            }
        }
    }
    errors
}

/// Where a spec name is declared (or first bound, for loop and parallel variables).
fn decl_span(c: &Compiled, name: &str) -> Option<crate::diag::Span> {
    let spec = &c.spec;
    spec.tensors.iter().find(|t| t.name.name == name).map(|t| t.name.span)
        .or_else(|| spec.buffers.iter().find(|b| b.name.name == name).map(|b| b.name.span))
        .or_else(|| spec.constants.iter().find(|k| k.name.name == name).map(|k| k.name.span))
        .or_else(|| spec.grid.iter().find(|g| g.var.name == name).map(|g| g.var.span))
        .or_else(|| {
            let mut found = None;
            spec.walk(&mut |s| {
                if found.is_some() {
                    return;
                }
                match &s.kind {
                    crate::ast::StmtKind::Loop { var, .. } if var.name == name => found = Some(var.span),
                    crate::ast::StmtKind::Parallel { vars, .. } => found = vars.iter().find(|v| v.name == name).map(|v| v.span),
                    _ => {}
                }
            });
            found
        })
        .or_else(|| spec.tensors.iter().flat_map(|t| &t.shape).find_map(|d| match d {
            crate::ast::Dim::Named(i) | crate::ast::Dim::Div(i, _, _) if i.name == name => Some(i.span),
            _ => None,
        }))
}

/// Renders a compiled spec for its target.
pub fn render(c: &Compiled) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    let clashes = reserved_names(c);
    if !clashes.is_empty() {
        return Err(clashes);
    }
    match c.plan.target {
        Target::Sm80 => sm80::render(c),
        Target::Sm90a => sm90a::render(c),
        Target::Gfx942 | Target::Gfx90a => ck::render(c),
    }
}

/// Errors of the template engine are bugs in tilegen; they surface as a diagnostic at the
/// kernel name instead of a panic.
pub(crate) fn template_error(c: &Compiled, e: &dyn std::error::Error) -> Vec<Diagnostic> {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    vec![Diagnostic::error(c.spec.kernel.span, format!("internal error while rendering templates: {msg}"))
        .hint("this is a tilegen bug; please report it with the spec")]
}

/// The launcher header template, shared by the NVIDIA targets.
pub(crate) const HEADER_TEMPLATE: &str = include_str!("../../templates/launcher.h.tera");

/// Tera components the sm80 kernel template calls (a tile's TMA view, stages and issue).
const TMA_COMPONENTS: &str = include_str!("../../templates/sm80/tma.cu.tera");

/// The declaration of a spec constant ([`ConstantCtx`]), for every template that declares them.
const CONSTANT_COMPONENT: &str = include_str!("../../templates/constants.tera");

/// The launcher's size checks ([`launcher::LauncherCtx`]), for every template.
const LAUNCHER_COMPONENT: &str = include_str!("../../templates/launcher.tera");

/// The device helpers generated code calls by name, in key order: each defines the functions
/// listed, written for CuTe (`CUTE_DEVICE`).
const CALLED_HELPERS: [(&[&str], &str); 6] = [
    (&["fast_exp2"], helper!("fast_exp2.cuh")),
    (&["float_to_e4m3"], helper!("float_to_e4m3.cuh")),
    (&["float_to_i8", "float_to_i32"], helper!("float_to_int.cuh")),
    (&["gelu_erf"], helper!("gelu_erf.cuh")),
    (&["sigmoid"], helper!("sigmoid.cuh")),
    (&["silu"], helper!("silu.cuh")),
];

/// Whether `name` is one of the functions [`CALLED_HELPERS`] define (a spec name spelled so
/// would hide it).
fn is_helper(name: &str) -> bool {
    CALLED_HELPERS.iter().any(|(names, _)| names.contains(&name))
}

/// The signature `<name>(<parameters>)` with which `helper` (one of [`CALLED_HELPERS`]'
/// texts) defines `name`, or `None` where it does not.
fn helper_signature<'a>(helper: &'a str, name: &str) -> Option<&'a str> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let start = helper.match_indices(&format!("{name}(")).map(|(i, _)| i).find(|&i| !helper[..i].chars().next_back().is_some_and(ident))?;
    let end = start + helper[start..].find(')')?;
    Some(&helper[start..=end])
}

/// `code` without its `//` comments (a `//` inside a literal is not one).
fn uncommented(code: &str) -> String {
    code.lines().map(|l| {
        let body = l.trim_start();
        if body.starts_with("//") { "" } else { trailing_comment(l).map_or(l, |at| &l[..at]) }
    }).collect::<Vec<_>>().join("\n")
}

/// The helpers of [`CALLED_HELPERS`] that `code` (without comments) calls and does not define
/// (with a helper's own signature for one of its functions): one scan of the rendered kernel
/// decides every inclusion, so a call and its definition cannot disagree.
fn called_helpers(code: &str) -> Vec<&'static str> {
    CALLED_HELPERS.iter().filter(|(names, text)| {
        let defined = names.iter().filter_map(|n| helper_signature(text, n)).any(|sig| code.contains(sig));
        names.iter().any(|n| conv::mentions(code, n)) && !defined
    }).map(|(_, text)| *text).collect()
}

/// The context's `elements` ([`ElementCtx`]) that `code` (without comments) names beyond their
/// own declaration, where some are not: a fragment's element type is usually its MMA's
/// accumulator, which the MMA atom spells, so its alias would be dead code. `None` when every
/// alias is named.
fn named_elements(code: &str, context: &tera::Context) -> Option<Vec<tera::Value>> {
    let all: Vec<tera::Value> = context.get("elements").and_then(|v| v.as_array()).map(<[tera::Value]>::to_vec).unwrap_or_default();
    let named: Vec<tera::Value> = all.iter().filter(|e| {
        e.get_from_path("alias").and_then(|a| a.as_str()).is_none_or(|a| conv::mention_count(code, a) > 1)
    }).cloned().collect();
    (named.len() != all.len()).then_some(named)
}

/// [`constants_ctx`] with `unused` set on the constants that `code` (without comments) names
/// only in their own declaration, for a context that lists them as [`ConstantCtx`] (each with
/// its `unused` flag). `None` when every one is read, or the context lists none.
fn constants_marked_unused(c: &Compiled, code: &str, context: &tera::Context) -> Option<Vec<ConstantCtx>> {
    context.get("constants")?.as_array()?.first()?.get_from_path("unused")?;
    let mut constants = constants_ctx(c);
    for k in &mut constants {
        k.unused = conv::mention_count(code, &k.name) == 1;
    }
    constants.iter().any(|k| k.unused).then_some(constants)
}

/// Renders a kernel template and the shared header template with one context into
/// `<kernel>.cu` and `<kernel>.h`.
pub(crate) fn render_pair(c: &Compiled, kernel_template: &str, ctx: &impl serde::Serialize) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    render_pair_extending(c, &[], kernel_template, ctx)
}

/// As [`render_pair`], for a kernel template that extends others: `parents` are (name,
/// source) pairs, each registered before the templates that extend it.
pub(crate) fn render_pair_extending(c: &Compiled, parents: &[(&str, &str)], kernel_template: &str, ctx: &impl serde::Serialize) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    let mut tera = tera::Tera::new();
    tera.autoescape_on(Vec::<&str>::new());
    tera.add_raw_template("tma.cu", TMA_COMPONENTS).map_err(|e| template_error(c, &e))?;
    tera.add_raw_template("constants", CONSTANT_COMPONENT).map_err(|e| template_error(c, &e))?;
    tera.add_raw_template("launcher", LAUNCHER_COMPONENT).map_err(|e| template_error(c, &e))?;
    for (name, source) in parents {
        tera.add_raw_template(name, source).map_err(|e| template_error(c, &e))?;
    }
    tera.add_raw_template("kernel.cu", kernel_template).map_err(|e| template_error(c, &e))?;
    tera.add_raw_template("launcher.h", HEADER_TEMPLATE).map_err(|e| template_error(c, &e))?;
    let mut context = tera::Context::from_serialize(ctx).map_err(|e| template_error(c, &e))?;
    let mut cu = tera.render("kernel.cu", &context).map_err(|e| template_error(c, &e))?;
    // Scans of the rendered kernel, each rendering again if it asks: the helpers the code calls
    // by name go first among the context's helpers; then element aliases the code (helpers
    // included) never names go.
    let called = called_helpers(&uncommented(&cu));
    if !called.is_empty() {
        let hip = c.plan.target.is_amd();
        let mut helpers: Vec<String> = called.iter().map(|h| if hip { h.replace("CUTE_DEVICE", "__device__ inline") } else { h.to_string() }).collect();
        let planned: Vec<tera::Value> = context.get("helpers").and_then(|v| v.as_array()).map(<[tera::Value]>::to_vec).unwrap_or_default();
        helpers.extend(planned.iter().filter_map(|v| v.as_str().map(String::from)));
        context.insert("helpers", &helpers);
        cu = tera.render("kernel.cu", &context).map_err(|e| template_error(c, &e))?;
    }
    if let Some(elements) = named_elements(&uncommented(&cu), &context) {
        context.insert("elements", &elements);
        cu = tera.render("kernel.cu", &context).map_err(|e| template_error(c, &e))?;
    }
    // Spec constants the kernel never reads beyond their declaration ([`ConstantCtx`]).
    if let Some(constants) = constants_marked_unused(c, &uncommented(&cu), &context) {
        context.insert("constants", &constants);
        cu = tera.render("kernel.cu", &context).map_err(|e| template_error(c, &e))?;
    }
    let h = tera.render("launcher.h", &context).map_err(|e| template_error(c, &e))?;
    let kernel = &c.spec.kernel.name;
    Ok(vec![
        OutputFile { name: format!("{kernel}.cu"), contents: tidy(&cu) },
        OutputFile { name: format!("{kernel}.h"), contents: tidy(&h) },
    ])
}

/// Longest comment line, in characters, before `tidy` wraps it.
const COMMENT_WIDTH: usize = 100;

/// Code lines wider than this are broken, or lose their trailing comment to the line(s) above
/// them ([`lay_out`]).
pub(crate) const CODE_WIDTH: usize = 120;

/// Strips trailing spaces, collapses runs of blank lines left by template control flow,
/// lays out code lines wider than [`CODE_WIDTH`] ([`lay_out`]), and wraps comment-only lines
/// longer than [`COMMENT_WIDTH`] at word boundaries, so that the generated source reads well
/// in a review (and a side-by-side diff).
pub(crate) fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    // Whether the next code line starts a statement (the last one ended with `;`, `{` or `}`,
    // or was a preprocessor line): only there may a comment move above it.
    let mut statement_start = true;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        let comment = trailing_comment(line);
        for wrapped in lay_out(line, comment, statement_start) {
            out.push_str(&wrapped);
            out.push('\n');
        }
        let body = line.trim_start();
        if !body.starts_with("//") {
            let code = comment.map_or(line, |at| line[..at].trim_end());
            statement_start = code.is_empty() || body.starts_with('#') || code.ends_with([';', '{', '}']);
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    align_comment_runs(&out)
}

/// Lines with trailing comments that follow each other form a run. Where the template meant
/// their comments to line up (some line of the run pads its comment with three spaces or
/// more), they start in one column: templates pad for the widths they expect, and the values
/// they are given vary. A line whose code reaches past that column keeps two spaces before its
/// comment (it overflows, as in hand-aligned code); so does a line whose comment would pass
/// [`CODE_WIDTH`] there, which is ragged if its comment would fit after its own code. The
/// column is the one, two past some line's code, that leaves the fewest ragged lines, then
/// aligns the most, then is leftmost. A padded comment alone in its run gets two spaces.
fn align_comment_runs(text: &str) -> String {
    let width = |s: &str| s.chars().count();
    let lines: Vec<&str> = text.lines().collect();
    // (code without trailing spaces, comment, the spaces between them) where a line has both.
    let split: Vec<Option<(&str, &str, usize)>> = lines.iter().map(|l| {
        trailing_comment(l).map(|at| {
            let code = l[..at].trim_end();
            (code, &l[at..], at - code.len())
        })
    }).collect();
    let mut out = String::with_capacity(text.len() + 64);
    let mut i = 0;
    while i < lines.len() {
        let end = (i..lines.len()).find(|&j| split[j].is_none()).unwrap_or(lines.len());
        let run: Vec<(&str, &str, usize)> = split[i..end].iter().flatten().copied().collect();
        if !run.iter().any(|&(_, _, gap)| gap >= 3) {
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
            continue;
        }
        // Two past a line's code, with the comment inside the width.
        let fits = |column: usize, (code, comment): (&str, &str)| width(code) + 2 <= column && column + width(comment) <= CODE_WIDTH;
        let ragged = |column: usize| run.iter().filter(|&&(code, comment, _)| {
            width(code) + 2 <= column && !fits(column, (code, comment)) && fits(width(code) + 2, (code, comment))
        }).count();
        let aligned = |column: usize| run.iter().filter(|&&(code, comment, _)| fits(column, (code, comment))).count();
        // A lone comment was padded for neighbours without one: it has nothing to line up with.
        let column = if run.len() == 1 { 0 } else {
            run.iter().map(|&(code, _, _)| width(code) + 2).min_by_key(|&c| (ragged(c), std::cmp::Reverse(aligned(c)), c)).unwrap_or(0)
        };
        for &(code, comment, gap) in &run {
            let pad = if fits(column, (code, comment)) { column - width(code) } else { gap.min(2) };
            out.push_str(&format!("{code}{}{comment}\n", " ".repeat(pad)));
        }
        i = end;
    }
    if !text.ends_with('\n') {
        out.pop();
    }
    out
}

/// One source line as printed: a code line wider than [`CODE_WIDTH`] is broken at its
/// argument lists ([`break_code`]); its trailing comment stays on the last piece where that
/// fits, else moves above the code when that makes every piece fit and the line starts a
/// statement (so that it never lands inside a statement, or between `template <...>` or
/// `CUTE_UNROLL` and what they apply to); inside a statement the code breaks to leave it room
/// where it can, else it stays where it was.
/// `comment` is where the line's trailing comment starts ([`trailing_comment`]).
fn lay_out(line: &str, comment: Option<usize>, statement_start: bool) -> Vec<String> {
    let width = |l: &str| l.chars().count();
    let Some(at) = comment.filter(|_| width(line) > CODE_WIDTH) else {
        return break_code(line);
    };
    let (code, comment) = (line[..at].trim_end(), &line[at..]);
    let mut pieces = break_code(code);
    if !statement_start && width(&pieces[pieces.len() - 1]) + 2 + width(comment) > CODE_WIDTH {
        // Inside a statement the comment cannot move above: the code breaks to make room
        // (break_code_leaving breaks only where every piece, and the room, then fit).
        let roomy = break_code_leaving(code, 2 + width(comment));
        if roomy.len() > 1 {
            pieces = roomy;
        }
    }
    let last = pieces.len() - 1;
    if width(&pieces[last]) + 2 + width(comment) <= CODE_WIDTH || !statement_start || pieces.iter().any(|p| width(p) > CODE_WIDTH) {
        pieces[last] = format!("{}  {comment}", pieces[last]);
        return pieces;
    }
    let indent = &line[..line.len() - line.trim_start().len()];
    wrap_comment(&format!("{indent}{comment}")).into_iter().chain(pieces).collect()
}

/// Where the `//` comment after code on `line` starts (outside string and character
/// literals); `None` for a line without one or one that is all comment.
fn trailing_comment(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        match (quote, bytes[i]) {
            (Some(_), b'\\') => i += 1,
            (Some(q), b) if b == q => quote = None,
            (None, b'"' | b'\'') => quote = Some(bytes[i]),
            (None, b'/') if bytes.get(i + 1) == Some(&b'/') => {
                return (!line[..i].trim().is_empty()).then_some(i);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Breaks a code line wider than [`CODE_WIDTH`] after commas of an argument or initializer
/// list, as clang-format does: each continuation is aligned one column after the bracket that
/// opened the list, and each line takes as many arguments as fit. It may also break after a
/// spaced `&&` or `||` (aligned with the condition's start) and before a ternary's `?` and `:`.
/// Where that cannot make every piece fit, the commas of template argument lists
/// (`Layout<Shape<...>,\n Stride<...>>`) join in; failing that, the line breaks after an
/// assignment's ` = ` or after the `(` of a call that ends it, the rest four columns in; and last
/// (a right-hand side too long for a line of its own, or a declaration of several names) after
/// the spaced `+` and `-` outside brackets of an assignment's right-hand side, then its `*` and
/// `/` too, aligned with where the right-hand side (or the declarator after a comma) starts. A line
/// is broken only where every piece then fits within the width. Index brackets, one-line
/// blocks (`[&](int k) { ... }`), literals and preprocessor lines are kept whole; a line with
/// no break point stays whole. Only whitespace changes.
fn break_code(line: &str) -> Vec<String> {
    break_code_leaving(line, 0)
}

/// [`break_code`], leaving `reserve` columns free after the last piece (for a trailing
/// comment), so that a line that fits alone may break too.
fn break_code_leaving(line: &str, reserve: usize) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let body = line.trim_start();
    if chars.len() + reserve <= CODE_WIDTH || body.starts_with('#') || body.starts_with("//") {
        return wrap_comment(line);
    }
    // Break points: (the index the continuation starts at, the index its alignment is taken
    // from and the columns added to it, how many brackets are open there). After `, ` the
    // continuation aligns one past the list's opener; before a ternary's ` ? ` or ` : `, four
    // past the start of the list element (or of the right-hand side) the ternary is in.
    type Break = (usize, Option<usize>, usize, usize);
    let mut breaks: Vec<Break> = Vec::new();
    // Open brackets: (kind, index, where the current element of the list starts); closed
    // ones as (opener's index, closer's index).
    let mut open: Vec<(char, usize, usize)> = Vec::new();
    let mut closer: Vec<(usize, usize)> = Vec::new();
    // A ternary's ` ? ` and ` : `: (index, its element's start, depth, its list's opener).
    let mut ternary: Vec<(usize, usize, usize, Option<usize>)> = Vec::new();
    let indent = chars.iter().take_while(|c| **c == ' ').count();
    // Where the outermost expression starts: the line's text, or after its first ` = `.
    let mut top_start = indent;
    let mut quote: Option<char> = None;
    // Whether the line closes a bracket it did not open (it continues a list); checked at the
    // end, so that commas before the closing bracket count too.
    let mut closed_earlier = false;
    // The statement's first ` = ` outside brackets, and whether a comma follows outside them
    // (a declaration of several names, or a list continued from an earlier line).
    let mut assign: Option<usize> = None;
    let mut top_comma = false;
    // The first `(` outside other brackets: a call's or a cast's.
    let mut first_paren: Option<usize> = None;
    let spaced = |i: usize| i > 0 && chars[i - 1] == ' ' && chars.get(i + 1) == Some(&' ');
    let spaced_pair = |i: usize| i > 0 && chars[i - 1] == ' ' && chars.get(i + 2) == Some(&' ');
    // Commas of template argument lists (`Layout<Shape<...>, Stride<...>>`): used only where
    // no other break makes the line fit.
    let mut template_breaks: Vec<Break> = Vec::new();
    // After a spaced `+` or `-` (then `*` or `/`) outside brackets in an assignment's
    // right-hand side: used where nothing else makes the line fit.
    let mut additive_breaks: Vec<Break> = Vec::new();
    let mut multiplicative_breaks: Vec<Break> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let ch = chars[i];
        match quote {
            Some(_) if ch == '\\' => i += 1,
            Some(q) if ch == q => quote = None,
            Some(_) => {}
            None => match ch {
                '"' | '\'' => quote = Some(ch),
                // A block (`) {`: a lambda's or statement's body) is kept whole: marked `b`.
                '{' if chars[..i].iter().rev().find(|c| **c != ' ') == Some(&')') => open.push(('b', i, i + 1)),
                '(' | '[' | '{' => {
                    if ch == '(' && open.iter().all(|o| o.0 == '<') && first_paren.is_none() {
                        first_paren = Some(i);
                    }
                    open.push((ch, i, i + 1));
                }
                // A template's argument list: `<` right after a name (comparisons are spaced).
                '<' if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') => open.push((ch, i, i + 1)),
                '>' if open.last().is_some_and(|o| o.0 == '<') => {
                    open.pop();
                }
                ')' | ']' | '}' => {
                    closed_earlier |= open.iter().all(|o| o.0 == '<');
                    while let Some(o) = open.pop() {
                        if o.0 != '<' {
                            closer.push((o.1, i));
                            break;
                        }
                    }
                }
                '=' if open.is_empty() && top_start == indent && spaced(i) => {
                    top_start = i + 2;
                    assign = Some(i);
                }
                ',' if chars.get(i + 1) == Some(&' ') => {
                    let whole = open.iter().any(|o| matches!(o.0, 'b' | '['));
                    if let Some(('<', at, _)) = open.last().copied() && !whole {
                        template_breaks.push((i + 2, Some(at), 1, open.len()));
                    }
                    if let Some(('(' | '{', at, _)) = open.last().copied() && !whole {
                        breaks.push((i + 2, Some(at), 1, open.len()));
                        if let Some(top) = open.last_mut() {
                            top.2 = i + 2;
                        }
                    } else if open.is_empty() {
                        // A list opened on an earlier line (a launch's arguments): its
                        // continuations keep this line's indent.
                        breaks.push((i + 2, None, 0, 0));
                        top_comma = true;
                        top_start = i + 2;
                    }
                }
                // After a spaced `&&` or `||`: the continuation aligns with the start of the
                // list element the condition is (of `static_assert`, `if`), or of the statement's
                // right-hand side.
                '&' | '|' if chars.get(i + 1) == Some(&ch) && spaced_pair(i) && !open.iter().any(|o| matches!(o.0, 'b' | '<' | '[')) => {
                    breaks.push((i + 3, Some(open.last().map_or(top_start, |o| o.2)), 0, open.len()));
                }
                '+' | '-' | '*' | '/' if spaced(i) && open.is_empty() && assign.is_some() => {
                    let operators = if matches!(ch, '+' | '-') { &mut additive_breaks } else { &mut multiplicative_breaks };
                    operators.push((i + 2, Some(top_start), 0, 0));
                }
                '?' | ':' if spaced(i) && !open.iter().any(|o| matches!(o.0, 'b' | '<' | '[')) => {
                    ternary.push((i, open.last().map_or(top_start, |o| o.2), open.len(), open.last().map(|o| o.1)));
                }
                _ => {}
            },
        }
        i += 1;
    }
    if !closed_earlier {
        breaks.retain(|b| b.1.is_some());
    }
    // A ternary breaks only where it ends its statement or list: outermost, or in brackets
    // after which the line only closes (`f(a, c ? x : y);`), never inside `int64_t(c ? x : y) * n`.
    let ends_line = |opener: Option<usize>| opener.is_none_or(|o| {
        closer.iter().find(|c| c.0 == o).is_some_and(|c| chars[c.1 + 1..].iter().all(|ch| matches!(ch, ')' | ']' | '}' | ';' | ',' | ' ')))
    });
    breaks.extend(ternary.into_iter().filter(|t| ends_line(t.3)).map(|(at, start, depth, _)| (at, Some(start), 4, depth)));
    breaks.sort();
    // The pieces the line breaks into at `breaks`, each line taking as much as fits (or, with
    // `sparing`, breaking at the first point that fits).
    let layout = |breaks: &[Break], sparing: bool| -> Vec<String> {
        // Output lines as (index of their first character, the column it is printed at).
        let mut lines: Vec<(usize, usize)> = vec![(0, 0)];
        let column = |lines: &[(usize, usize)], at: usize| {
            let (start, col) = lines.iter().rev().find(|(s, _)| *s <= at).copied().unwrap_or((0, 0));
            col + at - start
        };
        loop {
            let (start, col) = *lines.last().unwrap_or(&(0, 0));
            if col + chars.len() - start + reserve <= CODE_WIDTH {
                break;
            }
            // Of the breaks that keep this line within the width (the text up to the comma),
            // one in the outermost list, the last of those; else the first break there is (a
            // long argument then has a line of its own).
            // A continuation aligned past the width's last 40 columns has too little room:
            // such a break is no candidate.
            let align = |b: &Break| b.1.map_or(indent, |a| column(&lines, a) + b.2);
            let later = breaks.iter().filter(|b| b.0 > start + 2 && align(b) + 40 <= CODE_WIDTH);
            let mut fitting = later.clone().filter(|b| col + b.0 - 1 - start <= CODE_WIDTH);
            let outermost = fitting.clone().map(|b| b.3).min();
            let pick = if sparing { fitting.find(|b| Some(b.3) == outermost) } else { fitting.rfind(|b| Some(b.3) == outermost) };
            let pick = pick.or_else(|| later.clone().next());
            let Some(b) = pick else { break };
            lines.push((b.0, align(b)));
        }
        lines.iter().enumerate().map(|(n, &(start, col))| {
            let end = lines.get(n + 1).map_or(chars.len(), |l| l.0);
            let text: String = chars[start..end].iter().collect();
            format!("{}{}", " ".repeat(if n == 0 { 0 } else { col }), text.trim_end())
        }).collect()
    };
    // Broken only where every piece then fits: a partial break reads worse than none.
    let fit = |pieces: &[String]| {
        pieces.iter().all(|p| p.chars().count() <= CODE_WIDTH) && pieces.last().is_some_and(|p| p.chars().count() + reserve <= CODE_WIDTH)
    };
    // After the ` = ` of an assignment or declaration of one name, its right-hand side four
    // columns in on the next line, or after the line's first `(` where the line ends with its
    // list (a call's arguments), those four columns in: whichever takes fewer lines (then the
    // first), each piece broken as above where it still does not fit.
    // Only on a line that closes what it opens: later lines may be aligned to this one's text.
    let self_contained = open.is_empty() && !closed_earlier;
    let fallback = || {
        let mut fallbacks: Vec<Vec<String>> = Vec::new();
        for (at, skip) in [(assign.filter(|_| !top_comma), 2), (first_paren.filter(|&p| chars.get(p + 1).is_some_and(|c| *c != ')') && ends_line(Some(p))), 1)] {
            let Some(at) = at.filter(|_| self_contained) else { continue };
            let rest: String = chars[at + skip..].iter().collect();
            let mut pieces = vec![chars[..=at].iter().collect::<String>()];
            pieces.extend(break_code_leaving(&format!("{}{}", " ".repeat(indent + 4), rest.trim_start()), reserve));
            if fit(&pieces) {
                fallbacks.push(pieces);
            }
        }
        fallbacks.into_iter().min_by_key(Vec::len)
    };
    // The ways to break the line, in order: the first whose pieces all fit wins.
    enum Tier {
        /// The break points of the tiers before plus these, laid out greedily (each line takes
        /// as much as fits) or sparingly (each breaks at the first point that fits).
        Breaks(Vec<Break>, bool),
        /// `fallback` above.
        Fallback,
    }
    let tiers = [
        // Argument lists, conditions and ternaries; greedy first, and where a full line leaves
        // the rest unbreakable, breaking earlier may not.
        Tier::Breaks(Vec::new(), false),
        Tier::Breaks(Vec::new(), true),
        // The template argument lists' commas too, aligned after their `<`.
        Tier::Breaks(template_breaks, false),
        Tier::Fallback,
        // After the additive operators outside brackets of an assignment's right-hand side,
        // then its multiplicative ones too, aligned with where it (or, after a comma outside
        // brackets, the next declarator) starts; like the fallback, only on a self-contained line.
        Tier::Breaks(if self_contained { additive_breaks } else { Vec::new() }, false),
        Tier::Breaks(if self_contained { multiplicative_breaks } else { Vec::new() }, false),
    ];
    for tier in tiers {
        let pieces = match tier {
            Tier::Breaks(added, sparing) => {
                breaks.extend(added);
                breaks.sort();
                Some(layout(&breaks, sparing)).filter(|p| fit(p))
            }
            Tier::Fallback => fallback(),
        };
        if let Some(pieces) = pieces {
            return pieces;
        }
    }
    vec![line.to_string()]
}

/// Splits a `// ...` line wider than [`COMMENT_WIDTH`] into several, keeping its indent.
fn wrap_comment(line: &str) -> Vec<String> {
    let body = line.trim_start();
    if line.chars().count() <= COMMENT_WIDTH || !body.starts_with("// ") {
        return vec![line.to_string()];
    }
    // Continuation lines keep the comment's own indentation (`//   item` stays indented).
    let inner = body[2..].len() - body[2..].trim_start().len();
    let prefix = format!("{}//{}", &line[..line.len() - body.len()], " ".repeat(inner.max(1)));
    let mut lines = Vec::new();
    let mut current = prefix.clone();
    for word in body[2..].split(' ').filter(|w| !w.is_empty()) {
        let fits = current.chars().count() + 1 + word.chars().count() <= COMMENT_WIDTH;
        if current.len() > prefix.len() && !fits {
            lines.push(std::mem::replace(&mut current, prefix.clone()));
        }
        if current.len() > prefix.len() {
            current.push(' ');
        }
        current.push_str(word);
    }
    lines.push(current);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_are_included_for_calls_in_code_only() {
        let names = |code: &str| called_helpers(&uncommented(code)).iter().map(|h| CALLED_HELPERS.iter().position(|(_, t)| t == h).unwrap()).collect::<Vec<_>>();
        // Calls, in key order, one helper for both float_to_int functions.
        assert_eq!(names("  y = silu(x) + float_to_i32(z);\n  q = float_to_i8(w);"), [2, 5]);
        // A comment, a longer identifier or a definition already present include nothing.
        assert_eq!(names("  y = x;  // silu(x) would be float_to_i8(x)"), Vec::<usize>::new());
        assert_eq!(names("  y = my_silu(x) + fast_exp2_table[0];"), Vec::<usize>::new());
        assert_eq!(names("__host__ __device__ inline float gelu_erf(float x) { return x; }\n  e = gelu_erf(acc);"), Vec::<usize>::new());
    }

    #[test]
    fn every_called_helper_defines_its_functions() {
        for (names, text) in CALLED_HELPERS {
            for name in names {
                let sig = helper_signature(text, name).unwrap_or_else(|| panic!("{name} is not defined in\n{text}"));
                assert!(sig.starts_with(name) && sig.ends_with(')') && !sig.contains('\n'), "{sig}");
            }
        }
        assert_eq!(helper_signature(helper!("float_to_int.cuh"), "float_to_i8"), Some("float_to_i8(float x)"));
        assert_eq!(helper_signature("float my_silu(float x);", "silu"), None);
    }

    #[test]
    fn helpers_lose_one_final_newline_only() {
        assert_eq!(without_final_newline("a\nb\n"), "a\nb");
        assert_eq!(without_final_newline("a\n\n"), "a\n");
        assert_eq!(without_final_newline("a"), "a");
        let fast_exp2 = helper!("fast_exp2.cuh");
        assert!(fast_exp2.starts_with("// 2^x") && fast_exp2.ends_with('}'), "{fast_exp2}");
    }

    #[test]
    fn long_comments_wrap_and_code_stays() {
        let long = format!("  // {}", "word ".repeat(40));
        let code = format!("  int x = f({});", "y + ".repeat(40));
        let out = tidy(&format!("{long}\n{code}\n"));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(lines[..3].iter().all(|l| l.starts_with("  // word") && l.chars().count() <= COMMENT_WIDTH), "{out}");
        assert_eq!(lines[..3].iter().map(|l| l.matches("word").count()).sum::<usize>(), 40, "no word is lost");
        assert_eq!(lines[3], code, "code lines are never split");
    }

    #[test]
    fn wide_code_lines_lose_their_trailing_comment_to_the_line_above() {
        let code = format!("    Tensor t = make_tensor({});", "a".repeat(80));
        let out = tidy(&format!("{code}  // the tile (spec 12)\n  short();  // stays\n"));
        assert_eq!(out, format!("    // the tile (spec 12)\n{code}\n  short();  // stays\n"));
        // A long comment moved up wraps like any other; the code line is left whole.
        let out = tidy(&format!("{code}  // {}\n", "word ".repeat(30)));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() == 3 && lines[..2].iter().all(|l| l.starts_with("    // word")) && lines[2] == code, "{out}");
        // Only above a statement's first line: a line continuing a statement, or one after
        // `template <...>` or `CUTE_UNROLL`, keeps its comment, and its code breaks to make room.
        for before in ["  auto x = f(a,", "template <bool kOdd>", "  CUTE_UNROLL"] {
            let text = format!("{before}\n{code}  // the tile (spec 12)\n");
            let broken = format!("{before}\n    Tensor t = make_tensor(\n        {});  // the tile (spec 12)\n", "a".repeat(80));
            assert_eq!(tidy(&text), broken, "after {before}");
        }
        // Nor where moving it leaves the code too wide, or the comment fits after the broken code.
        let wide = format!("    Tensor t = make_tensor({});", "a".repeat(120));
        assert_eq!(tidy(&format!("{wide}  // c\n")), format!("{wide}  // c\n"));
        let args = format!("  Tensor t = make_tensor({}, {});", "a".repeat(60), "b".repeat(60));
        assert_eq!(tidy(&format!("{args}  // c\n")), format!("  Tensor t = make_tensor({},\n{}{});  // c\n", "a".repeat(60), " ".repeat("  Tensor t = make_tensor(".len()), "b".repeat(60)));
        // `//` inside a string or character literal is not a comment.
        let quoted = format!("  puts(\"http://{}\"); char c = '/';", "x".repeat(120));
        assert_eq!(tidy(&quoted), format!("{quoted}\n"));
        assert_eq!(trailing_comment("  f(\"a\\\"//\");  // c"), Some(15));
        assert_eq!(trailing_comment("  // all comment"), None);
        // A list opened on an earlier line breaks at its own commas, keeping the line's indent;
        // a declaration of several names does not.
        let args = format!("      {}, B, S, H);", ["static_cast<ElementQ const*>(Q)"; 4].join(", "));
        assert_eq!(break_code(&args), [format!("      {},", ["static_cast<ElementQ const*>(Q)"; 3].join(", ")),
                                       "      static_cast<ElementQ const*>(Q), B, S, H);".to_string()]);
        // A ternary that ends its list or statement breaks before `?` and `:`, four columns in
        // from where its condition starts; one inside a larger expression does not.
        let (cond, yes, no) = ("(row < M && col < N)".repeat(2), format!("load({})", "x".repeat(85)), "zero()");
        let call = format!("  store(&dst[r], {cond} ? {yes} : {no});");
        let at = "  store(&dst[r], ".len() + 4;
        assert_eq!(break_code(&call), [format!("  store(&dst[r], {cond}"), format!("{}? {yes}", " ".repeat(at)), format!("{}: {no});", " ".repeat(at))]);
        let inner = format!("  p = base + int64_t({cond} ? {yes} : 0) * n;");
        assert_eq!(break_code(&inner), std::slice::from_ref(&inner));
        let names = format!("  int const {};", (0..12).map(|i| format!("value{i} = a * b + c")).collect::<Vec<_>>().join(", "));
        assert_eq!(break_code(&names), std::slice::from_ref(&names));
    }

    #[test]
    fn a_right_hand_side_without_commas_moves_to_its_own_line() {
        let sum = (0..9).map(|i| format!("term{i} * k")).collect::<Vec<_>>().join(" + ");
        let line = format!("  float const total = {sum};");
        assert_eq!(break_code(&line), [String::from("  float const total ="), format!("      {sum};")]);
        // A declaration of several names has no one right-hand side to move; nor has a line whose
        // right-hand side would not fit on a line of its own either: they break after the sum's
        // `+`, continuations aligned with the right-hand side.
        let terms = |r: std::ops::Range<usize>| r.map(|i| format!("term{} * k", i % 9)).collect::<Vec<_>>().join(" + ");
        let two = format!("  int const a = {sum}, b = a + 1;");
        assert_eq!(break_code(&two), [format!("  int const a = {} +", terms(0..8)), format!("                {}, b = a + 1;", terms(8..9))]);
        let longer = format!("  float const total = {sum} + {sum};");
        assert_eq!(break_code(&longer), [format!("  float const total = {} +", terms(0..8)),
                                         format!("                      {} +", terms(8..16)),
                                         format!("                      {};", terms(16..18))]);
        // Products break after their `*` only where the sum's `+` leave a piece too wide.
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let product = format!("    out(e) = f({a}) * (c ? g({b}) : 0.f) * (d ? h({b}) : 0.f);");
        assert_eq!(break_code(&product), [format!("    out(e) = f({a}) * (c ? g({b}) : 0.f) *"), format!("             (d ? h({b}) : 0.f);")]);
        let sum_of_products = format!("    out(e) = f({a}) * g({b}) + h({b});");
        assert_eq!(break_code(&sum_of_products), [format!("    out(e) = f({a}) * g({b}) +"), format!("             h({b});")]);
        // A call that ends the statement, its argument too long beside it: after its `(`.
        let inner = format!("shape(partition(make_identity(make_shape_of_{})))", "x".repeat(60));
        let call = format!("  Tensor fragment = make_tensor<Element>({inner});");
        assert_eq!(break_code(&call), [String::from("  Tensor fragment = make_tensor<Element>("), format!("      {inner});")]);
        // Commas of an argument list still come first.
        let call = format!("  auto t = make_tensor({}, {});", "a".repeat(60), "b".repeat(60));
        assert_eq!(break_code(&call)[0], format!("  auto t = make_tensor({},", "a".repeat(60)));
    }

    #[test]
    fn conditions_break_after_their_operators_and_type_lists_at_their_commas() {
        let (a, b) = ("x".repeat(50), "y".repeat(50));
        let cond = format!("  static_assert({a} == 1 && {b} == 2 && z < 3, \"why\");");
        assert_eq!(break_code(&cond), [format!("  static_assert({a} == 1 &&"), format!("                {b} == 2 && z < 3, \"why\");")]);
        // Template arguments break only where nothing else does, aligned after their `<`.
        let layout = format!("using L = Layout<Shape<Int<{a}>, _1>, Stride<Int<{b}>, _1>>;");
        assert_eq!(break_code(&layout), [format!("using L = Layout<Shape<Int<{a}>, _1>,"), format!("                 Stride<Int<{b}>, _1>>;")]);
    }

    #[test]
    fn padded_comment_runs_line_up_two_columns_past_the_widest_code() {
        // The template padded for shorter values: both comments move to one column.
        let text = "    Layout<Shape<Int<4>, Int<1>, _1>>,  // warps (M, N, K)\n    Tile<Int<64>, Int<16>, _16>>;          // one MMA step\n";
        let want = "    Layout<Shape<Int<4>, Int<1>, _1>>,  // warps (M, N, K)\n    Tile<Int<64>, Int<16>, _16>>;       // one MMA step\n";
        assert_eq!(tidy(text), want);
        assert_eq!(tidy(want), want, "aligned runs stay as they are");
        // Runs nobody padded, and code without comments between runs, are left alone.
        let plain = "using A = float;  // a\nusing Bb = float;  // b\nint x;\n";
        assert_eq!(tidy(plain), plain);
        // A padded comment with no commented neighbour gets two spaces.
        assert_eq!(tidy("int x;\nconstexpr int k = 4;        // stages\nint y;\n"), "int x;\nconstexpr int k = 4;  // stages\nint y;\n");
        // Code wider than the column overflows with two spaces. A comment that would pass the
        // width in the widest code's column pulls the column left rather than hang ragged.
        let long = "x".repeat(60);
        let run = format!("    a,     // one\n    {long},  // two\n    bb,  // {}\n", "c".repeat(40));
        let out = tidy(&run);
        let columns: Vec<usize> = out.lines().map(|l| l.find("//").unwrap()).collect();
        assert_eq!(columns, [67, 67, 67], "{out}");
        let wide = format!("    a,  // one\n    {long},     // two\n    bb,  // {}\n", "c".repeat(60));
        let out = tidy(&wide);
        let columns: Vec<usize> = out.lines().map(|l| l.find("//").unwrap()).collect();
        assert_eq!(columns, [9, 67, 9], "the third line's comment fits after its own code, not after the 60 x's:\n{out}");
    }

    /// The committed generated and golden sources are tidy's output already: tidying them again
    /// changes nothing (layout is a fixed point, so regeneration is byte-identical).
    #[test]
    fn tidy_is_idempotent_on_every_committed_source() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut checked = 0;
        for dir in ["generated/sm80", "generated/sm90a", "generated/gfx942", "generated/gfx90a", "tests/golden/sm80", "tests/golden/sm90a", "tests/golden/gfx942", "tests/golden/gfx90a"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
            for e in entries {
                let path = e.expect("a directory entry").path();
                if !path.extension().is_some_and(|x| x == "cu" || x == "hip" || x == "h") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a readable source");
                let again = tidy(&text);
                if again != text {
                    let line = text.lines().zip(again.lines()).position(|(a, b)| a != b).map_or(0, |i| i + 1);
                    panic!("{}: tidy changes line {line}", path.display());
                }
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} sources checked");
    }

    /// The bundled kernels (the code users vendor) and the golden ones fit the width: every
    /// line that was too wide found a break (CK's stores name their indices rather than
    /// repeating sums of them; long trip counts are named before their loop).
    #[test]
    fn committed_sources_fit_the_code_width() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut checked = 0;
        for dir in ["generated/sm80", "generated/sm90a", "generated/gfx942", "generated/gfx90a", "tests/golden/sm80", "tests/golden/sm90a", "tests/golden/gfx942", "tests/golden/gfx90a"] {
            for e in std::fs::read_dir(root.join(dir)).expect("a generated directory") {
                let path = e.expect("a directory entry").path();
                // Golden diagnostics (.stderr) are messages, not source.
                if !path.extension().is_some_and(|x| x == "cu" || x == "hip" || x == "h") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a readable source");
                if let Some((n, line)) = text.lines().enumerate().find(|(_, l)| l.chars().count() > CODE_WIDTH) {
                    panic!("{}:{}: {} columns: {line}", path.display(), n + 1, line.chars().count());
                }
                checked += 1;
            }
        }
        assert!(checked >= 200, "only {checked} sources checked");
    }
}
