//! The `tilegen` command line: a thin wrapper over the library.

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tilegen::diag::render_all;
use tilegen::output::{self, GenError};
use tilegen::target::Target;

/// Exit codes, as documented in the README.
mod exit {
    pub const OK: u8 = 0;
    /// A spec has errors, `gen --check` found drift, or a build or validation failed.
    pub const FAILED: u8 = 1;
    /// A bad command line (as clap reports them): e.g. `build` for an AMD target.
    pub const USAGE: u8 = 2;
    /// Reading or writing a file failed.
    pub const IO: u8 = 3;
}

#[derive(Parser)]
#[command(name = "tilegen", version, about = "Translate tile-model kernel specs (YAML) into readable CUTLASS/CuTe C++.",
    after_help = "Exit codes: 0 success; 1 a spec has errors (or warnings, under --deny-warnings), `gen --check` found drift, or a build or validation failed; 2 bad command line; 3 a file could not be read or written.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Render specs into C++: <OUT>/<target>/<kernel>.cu (.hip for AMD targets) and <kernel>.h.
    #[command(after_help = "Examples:\n  tilegen gen                                   # every specs/*.yaml into generated/<target>/\n  tilegen gen --check                           # CI: exit 1 with a diff if generated/ is stale\n  tilegen gen specs/gemm_bf16.yaml -o build/gen --target sm80")]
    Gen {
        /// Spec files (default: every specs/*.yaml).
        specs: Vec<PathBuf>,
        /// Output root; files go to <OUT>/<target>/.
        #[arg(short, long, default_value = "generated")]
        out: PathBuf,
        /// Targets to render for (default: every target).
        #[arg(long, value_delimiter = ',', value_parser = parse_target)]
        target: Vec<Target>,
        /// Write nothing; exit 1 and print unified diffs if the files on disk differ, are
        /// missing, or are stale (files tilegen generated that no spec produces now; with no
        /// specs named, `gen` removes those).
        #[arg(long)]
        check: bool,
        /// Fail (exit 1, writing nothing) if a spec has warnings.
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Parse, check and infer layouts; write nothing.
    #[command(after_help = "Without --target, every target is checked as `tilegen gen` renders them: a target with no\nlowering for a spec is a note (gen skips that pair), anything else an error. A target named\nwith --target must lower the spec: every reason it cannot is an error. Without --target, the\nspec's own constants (no target's overrides: what `tilegen run` executes) are checked too.\n\nExample:\n  tilegen check specs/*.yaml\n  tilegen check --target gfx942 specs/w4a16_gemm_bf16.yaml\n")]
    Check {
        /// Spec files.
        #[arg(required = true)]
        specs: Vec<PathBuf>,
        /// Targets whose limits to check against (default: all, as `gen`).
        #[arg(long, value_delimiter = ',', value_parser = parse_target)]
        target: Vec<Target>,
        /// Exit 1 if a spec has warnings.
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Run a spec on the CPU reference interpreter (small shapes).
    #[command(after_help = "Reads <tensor>.npy from --inputs for every input tensor and every output the spec also\nreads (updated in place) (bf16 as uint16 bits, f8e4m3 as uint8 bits, arrays in logical C\norder), infers the runtime sizes from their shapes, and writes <tensor>.npy for every\noutput to --out.\n\nExample:\n  tilegen run specs/gemm_bf16.yaml --inputs tests/golden/gemm_bf16/ragged_77x136x264 --out /tmp/out")]
    Run {
        /// The spec file.
        spec: PathBuf,
        /// Folder with one <tensor>.npy per input tensor.
        #[arg(long)]
        inputs: PathBuf,
        /// Folder to write the outputs to.
        #[arg(long)]
        out: PathBuf,
        /// A runtime size no input determines, as NAME=VALUE.
        #[arg(long = "size", value_parser = parse_size)]
        sizes: Vec<(String, i64)>,
    },
    /// Render and compile specs with nvcc into <OUT>/<target>/: .cu, .h, .o and lib<kernel>.so.
    #[command(after_help = "The toolchain is found automatically (TILEGEN_CUDA_HOME / TILEGEN_CUTLASS_DIR, the pinned\ntoolchain from scripts/install-toolchain.sh, or nvcc on PATH); override with --nvcc/--cutlass.\n\nExample:\n  tilegen build specs/gemm_bf16.yaml specs/gemm_f16.yaml -o build --sm 80,90")]
    Build {
        #[command(flatten)]
        opts: BuildOpts,
    },
    /// Build specs, then run every golden case on the GPU and compare (needs an NVIDIA GPU).
    #[command(after_help = "Prints a table (kernel, case, sizes, max abs err, rel err, unwritten elements) and exits 1\nif any case fails.\n\nExamples:\n  tilegen validate specs/*.yaml --sm 90\n  tilegen validate specs/gemm_bf16.yaml --target sm90a --wrap 'compute-sanitizer --tool racecheck --error-exitcode 1'")]
    Validate {
        #[command(flatten)]
        opts: BuildOpts,
        /// Run each case's harness under this command (split on spaces), e.g. compute-sanitizer.
        #[arg(long)]
        wrap: Option<String>,
        /// Only the golden cases whose name contains this text.
        #[arg(long)]
        cases: Option<String>,
    },
    /// Print what layout inference decided for a spec.
    #[command(after_help = "Example:\n  tilegen explain specs/gemm_bf16.yaml")]
    Explain {
        /// The spec file.
        spec: PathBuf,
        /// Target to plan for (default: sm80, or the first target that lowers the spec when
        /// sm80 has no lowering for it).
        #[arg(long, value_parser = parse_target)]
        target: Option<Target>,
    },
}

#[derive(clap::Args)]
struct BuildOpts {
    /// Spec files (default: every specs/*.yaml).
    specs: Vec<PathBuf>,
    /// Output root; files go to <OUT>/<target>/.
    #[arg(short, long, default_value = "build")]
    out: PathBuf,
    /// Target.
    #[arg(long, default_value = "sm80", value_parser = parse_target)]
    target: Target,
    /// nvcc to use.
    #[arg(long)]
    nvcc: Option<PathBuf>,
    /// CUTLASS root (holding include/cute) or include folder.
    #[arg(long)]
    cutlass: Option<PathBuf>,
    /// GPU architectures to emit machine code for (sm80 target; PTX is added for JIT on
    /// newer GPUs). Default: 80,90. The sm90a target always builds sm_90a.
    #[arg(long, value_delimiter = ',')]
    sm: Vec<u32>,
    /// Parallel compiles (each takes about 2 GB of memory).
    #[arg(short, long, default_value_t = 2)]
    jobs: usize,
}

fn parse_size(s: &str) -> Result<(String, i64), String> {
    let (k, v) = s.split_once('=').ok_or("expected NAME=VALUE")?;
    if k.trim().is_empty() {
        return Err("expected NAME=VALUE, with a size's name before `=`".into());
    }
    let v: i64 = v.parse().map_err(|_| format!("`{v}` is not an integer"))?;
    if v < 1 {
        return Err(format!("{k} = {v}: a size must be at least 1"));
    }
    Ok((k.trim().to_string(), v))
}

fn parse_target(s: &str) -> Result<Target, String> {
    // The list-taking options (`gen`, `check`) split on commas before this sees the text.
    if s.contains(',') {
        return Err(format!("`{s}` names several targets, and this command takes one: run it once per target"));
    }
    Target::from_name(s).ok_or_else(|| {
        let hint = Target::suggest(s).map(|t| format!("did you mean `{t}`? ")).unwrap_or_default();
        format!("unknown target `{s}`; {hint}targets: {}", Target::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", "))
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Gen { specs, out, target, check, deny_warnings } => generate(specs, &out, target, check, deny_warnings),
        Command::Check { specs, target, deny_warnings } => check(&specs, target, deny_warnings),
        Command::Explain { spec, target } => explain(&spec, target),
        Command::Run { spec, inputs, out, sizes } => run(&spec, &inputs, &out, sizes),
        Command::Build { opts } => build(opts, None, None),
        Command::Validate { opts, wrap, cases } => build(opts, Some(wrap.map(|w| w.split_whitespace().map(String::from).collect()).unwrap_or_default()), cases),
    };
    ExitCode::from(code)
}

fn fail(e: GenError) -> u8 {
    match e {
        GenError::Spec(report) => {
            eprint!("{report}");
            exit::FAILED
        }
        io @ GenError::Io { .. } => {
            eprintln!("tilegen: error: {io}");
            exit::IO
        }
    }
}

/// Prints each spec's warnings to stderr; returns how many specs have some.
fn print_warnings(specs: &[PathBuf]) -> Result<usize, GenError> {
    let mut warned = 0;
    for path in specs {
        if let Some(report) = output::spec_warnings(path)? {
            eprint!("{report}");
            warned += 1;
        }
    }
    Ok(warned)
}

/// The error that ends a run under `--deny-warnings`.
fn denied(warned: usize) -> u8 {
    eprintln!("tilegen: error: {warned} spec(s) with warnings, and --deny-warnings makes them errors");
    exit::FAILED
}

fn generate(specs: Vec<PathBuf>, out: &Path, targets: Vec<Target>, check: bool, deny_warnings: bool) -> u8 {
    // Over every target, a spec one of them has no lowering for is skipped with a note (as
    // `check` does); a target asked for by name must render every spec.
    let lenient = targets.is_empty();
    let targets = if lenient { Target::ALL.to_vec() } else { targets };
    let defaulted = specs.is_empty();
    let specs = if defaulted {
        match output::default_specs(Path::new(".")) {
            Ok(s) if !s.is_empty() => s,
            Ok(_) => {
                eprintln!("tilegen: error: no specs given and specs/ holds no .yaml files");
                return exit::FAILED;
            }
            Err(e) => return fail(e),
        }
    } else {
        specs
    };
    let warned = match print_warnings(&specs) {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    if deny_warnings && warned > 0 {
        return denied(warned);
    }
    let mut files = std::collections::BTreeMap::new();
    for target in targets {
        let generated = if lenient { output::generate_with_notes(&specs, target, out) } else { output::generate(&specs, target, out).map(|f| (f, Vec::new())) };
        match generated {
            Ok((f, notes)) => {
                files.extend(f);
                for n in notes {
                    eprintln!("note: {n}");
                }
            }
            Err(e) => return fail(e),
        }
    }
    if check {
        // Stale files are judged only when the whole spec set was rendered.
        match output::check_files(&files, defaulted) {
            Ok(drift) if drift.is_clean() => {
                println!("{} file(s) up to date with {} spec(s)", files.len(), specs.len());
                exit::OK
            }
            Ok(drift) => {
                print!("{}", drift.report());
                exit::FAILED
            }
            Err(e) => fail(e),
        }
    } else {
        let written = match output::write_files(&files) {
            Ok(w) => w,
            Err(e) => return fail(e),
        };
        for p in &written {
            println!("wrote {}", p.display());
        }
        // Outputs of specs no longer in specs/ go, as `--check` would flag them; only when
        // the whole spec set was rendered, and only files carrying tilegen's banner.
        let stale = if defaulted { output::stale_files(&files) } else { Vec::new() };
        if let Err(e) = output::remove_files(&stale) {
            return fail(e);
        }
        for p in &stale {
            println!("removed {} (no spec generates it now)", p.display());
        }
        println!("{} file(s) from {} spec(s): {} written, {} unchanged{}", files.len(), specs.len(), written.len(), files.len() - written.len(),
            if stale.is_empty() { String::new() } else { format!(", {} stale removed", stale.len()) });
        exit::OK
    }
}

/// `tilegen check`: each spec against each target. With no targets named, every target, and a
/// pair with no lowering (every diagnostic marked unsupported) is a note, as `gen` skips it.
fn check(specs: &[PathBuf], targets: Vec<Target>, deny_warnings: bool) -> u8 {
    let lenient = targets.is_empty();
    let targets = if lenient { Target::ALL.to_vec() } else { targets };
    let mut code = exit::OK;
    for path in specs {
        let mut ok = Vec::new();
        // Each distinct report, with the targets that gave it: errors in the spec itself
        // (syntax, names, shapes) are the same for every target and print once.
        let mut reports: Vec<(String, Vec<&'static str>)> = Vec::new();
        let mut add_report = |report: String, by: &'static str| match reports.iter_mut().find(|(r, _)| *r == report) {
            Some((_, ts)) => ts.push(by),
            None => reports.push((report, vec![by])),
        };
        for &target in &targets {
            let file = match output::read_spec(path) {
                Ok(f) => f,
                Err(e) => {
                    code = code.max(fail(e));
                    break;
                }
            };
            let (file, d) = match tilegen::compile(file, target) {
                Ok(c) => match tilegen::back::render(&c) {
                    Ok(_) => {
                        ok.push(target.name());
                        continue;
                    }
                    Err(d) => (c.file, d),
                },
                Err(e) => e,
            };
            if lenient && !d.is_empty() && d.iter().all(|x| x.unsupported) {
                eprintln!("note: {}", output::skip_note(&file.path, target, &d));
            } else {
                add_report(render_all(&d, &file), target.name());
                code = code.max(exit::FAILED);
            }
        }
        // The spec's own constants, no target's overrides: what `tilegen run` executes. An
        // error there that every target's overrides hide would otherwise pass until `run`.
        // The same check gives the spec's warnings, with or without --target. (A file that
        // cannot be read was reported above.)
        let own = output::read_spec(path).ok().map(tilegen::check_spec);
        let mut checked = targets.len();
        if lenient && let Some(result) = &own {
            checked += 1;
            if let Err((file, d)) = result {
                add_report(render_all(d, file), "`tilegen run` (no target's overrides)");
                code = code.max(exit::FAILED);
            }
        }
        for (report, ts) in &reports {
            // Name the targets unless the report holds for every target checked.
            if ts.len() < checked {
                eprintln!("{}: for {}:", path.display(), ts.join(", "));
            }
            eprint!("{report}");
        }
        if let Some(Ok(c)) = &own && let Some(report) = output::render_warnings(c) {
            eprint!("{report}");
            if deny_warnings {
                code = code.max(denied(1));
            }
        }
        if !ok.is_empty() {
            println!("{}: ok for {}", path.display(), ok.join(", "));
        }
    }
    code
}

fn explain(spec: &Path, target: Option<Target>) -> u8 {
    let file = match output::read_spec(spec) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    if let Err(e) = print_warnings(&[spec.to_path_buf()]) {
        return fail(e);
    }
    let first = target.unwrap_or(Target::Sm80);
    let mut result = tilegen::compile(file.clone(), first);
    // Not asked for a target, and sm80 has no lowering (an sm90a-only FP8 GEMM, say): the
    // first target that has one, with a note, as `gen` would render it.
    if let (None, Err((_, d))) = (target, &result) && !d.is_empty() && d.iter().all(|x| x.unsupported)
        && let Some(c) = Target::ALL.iter().skip(1).find_map(|&t| tilegen::compile(file.clone(), t).ok()) {
        eprintln!("note: explaining {} ({first}: {}; `--target` picks another)", c.plan.target, d[0].message);
        result = Ok(c);
    }
    match result {
        Ok(c) => {
            print!("{}", tilegen::explain::explain(&c));
            exit::OK
        }
        Err((file, d)) => {
            eprint!("{}", render_all(&d, &file));
            exit::FAILED
        }
    }
}

fn run(spec: &Path, inputs: &Path, out: &Path, sizes: Vec<(String, i64)>) -> u8 {
    use tilegen::interp::npy::Array;
    let file = match output::read_spec(spec) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let c = match tilegen::check_spec(file) {
        Ok(c) => c,
        Err((file, d)) => {
            eprint!("{}", render_all(&d, &file));
            return exit::FAILED;
        }
    };
    if let Some(report) = output::render_warnings(&c) {
        eprint!("{report}");
    }
    // Sizes named on the command line: each once, and each one of the spec's runtime sizes.
    let mut explicit = std::collections::BTreeMap::new();
    for (name, value) in sizes {
        let problem = if explicit.contains_key(&name) {
            Some(format!("--size {name} is given twice"))
        } else if let Some(v) = c.info.const_int(&name) {
            Some(format!("`{name}` is a constant of the spec ({v}), not a runtime size"))
        } else if !c.info.runtime_dims.contains(&name) {
            let hint = tilegen::diag::did_you_mean(&name, c.info.runtime_dims.iter().map(String::as_str)).map(|h| format!("; {h}")).unwrap_or_default();
            Some(format!("`{name}` is not a runtime size of {} (they are {}){hint}", c.file.path, c.info.runtime_dims.join(", ")))
        } else {
            None
        };
        if let Some(p) = problem {
            eprintln!("tilegen: error: {p}");
            return exit::USAGE;
        }
        explicit.insert(name, value);
    }
    let mut tensors = std::collections::BTreeMap::new();
    // Inputs, and outputs the spec also reads (updated in place: their initial contents).
    for t in c.spec.tensors.iter().filter(|t| c.spec.starts_from(t)) {
        let path = inputs.join(format!("{}.npy", t.name.name));
        match Array::read(&path, t.dtype.0) {
            Ok(a) => {
                tensors.insert(t.name.name.clone(), a);
            }
            Err(e) => {
                eprintln!("tilegen: error: {}: {e}", path.display());
                // An unreadable file is an I/O failure; one that is not the tensor's array
                // (format, dtype) is bad input, like a spec error.
                return if matches!(e, tilegen::interp::npy::NpyError::Io(_)) { exit::IO } else { exit::FAILED };
            }
        }
    }
    let line_of = |span: tilegen::diag::Span| c.file.line_col(span.start).0;
    let result = tilegen::interp::infer_sizes(&c.spec, &c.info, &tensors, &explicit)
        .and_then(|sizes| tilegen::interp::run(&c.spec, &c.info, &line_of, &sizes, &mut tensors));
    if let Err(e) = result {
        eprintln!("tilegen: error: {}: {e}", c.file.path);
        return exit::FAILED;
    }
    if let Err(e) = output::make_folder(out) {
        return fail(e);
    }
    for t in c.spec.tensors.iter().filter(|t| t.output) {
        let path = out.join(format!("{}.npy", t.name.name));
        if let Err(e) = tensors[&t.name.name].write(&path) {
            eprintln!("tilegen: error: {}: {e}", path.display());
            return exit::IO;
        }
        println!("wrote {}", path.display());
    }
    exit::OK
}

fn build(opts: BuildOpts, validate: Option<Vec<String>>, cases: Option<String>) -> u8 {
    if opts.target.is_amd() {
        eprintln!(
            "tilegen: error: `{}` builds and validates NVIDIA targets with nvcc; the {} files are compiled with hipcc \
             (scripts/install-hip-toolchain.sh, then `hipcc -std=c++17 -O3 --offload-arch={} -c <kernel>.hip`), and no AMD GPU is here to run them",
            if validate.is_some() { "tilegen validate" } else { "tilegen build" }, opts.target, opts.target);
        return exit::USAGE;
    }
    // The sm80 target's code (cp.async, bf16 mma.sync) runs on sm_80 and newer; the sm90a
    // target builds sm_90a machine code only (wgmma has no PTX fallback).
    match opts.target {
        Target::Sm80 if opts.sm.iter().any(|sm| *sm < 80) => {
            let old: Vec<String> = opts.sm.iter().filter(|sm| **sm < 80).map(u32::to_string).collect();
            eprintln!("tilegen: error: --sm {}: the sm80 target's kernels (cp.async, bf16 mma.sync) need sm 80 or newer", old.join(","));
            return exit::USAGE;
        }
        Target::Sm90a if opts.sm.iter().any(|sm| *sm != 90) => {
            eprintln!("tilegen: error: --sm {}: the sm90a target builds sm_90a machine code only (warpgroup MMAs have no PTX to run elsewhere): leave --sm out, or give 90",
                opts.sm.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
            return exit::USAGE;
        }
        _ => {}
    }
    let specs = if opts.specs.is_empty() {
        match output::default_specs(Path::new(".")) {
            Ok(s) => s,
            Err(e) => return fail(e),
        }
    } else {
        opts.specs
    };
    if let Err(e) = print_warnings(&specs) {
        return fail(e);
    }
    let tc = match tilegen::build::find_toolchain(opts.nvcc.as_deref(), opts.cutlass.as_deref()) {
        Ok(tc) => tc,
        Err(e) => {
            eprintln!("tilegen: error: {e}");
            return exit::FAILED;
        }
    };
    let sms = if opts.sm.is_empty() { opts.target.default_sms().to_vec() } else { opts.sm };
    let results = tilegen::build::build_specs(&specs, opts.target, &opts.out, &tc, &sms, opts.jobs);
    let mut code = exit::OK;
    let mut rows = Vec::new();
    for r in results {
        match r {
            Err(e) => {
                eprintln!("{e}");
                code = exit::FAILED;
            }
            Ok(b) if validate.is_some() => match tilegen::validate::validate_built(&b, &tc, Path::new("."), validate.as_deref().unwrap_or_default(), cases.as_deref()) {
                Ok(r) => rows.extend(r),
                Err(e) => {
                    eprintln!("{}: {e}", b.kernel);
                    code = exit::FAILED;
                }
            },
            Ok(b) => println!("{}", b.shared_library.display()),
        }
    }
    if validate.is_some() && !tilegen::validate::print_table(&rows) {
        code = exit::FAILED;
    }
    code
}
