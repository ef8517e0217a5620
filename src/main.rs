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
    /// A spec has errors, or `gen --check` found drift.
    pub const FAILED: u8 = 1;
    /// Reading or writing a file failed.
    pub const IO: u8 = 3;
}

#[derive(Parser)]
#[command(name = "tilegen", version, about = "Translate tile-model kernel specs (YAML) into readable CUTLASS/CuTe C++.",
    after_help = "Exit codes: 0 success; 1 a spec has errors or `gen --check` found drift; 2 bad command line; 3 a file could not be read or written.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Render specs into C++: <OUT>/<target>/<kernel>.cu and <kernel>.h.
    #[command(after_help = "Examples:\n  tilegen gen                                   # every specs/*.yaml into generated/sm80/\n  tilegen gen --check                           # CI: exit 1 with a diff if generated/ is stale\n  tilegen gen specs/gemm_bf16.yaml -o build/gen --target sm80")]
    Gen {
        /// Spec files (default: every specs/*.yaml).
        specs: Vec<PathBuf>,
        /// Output root; files go to <OUT>/<target>/.
        #[arg(short, long, default_value = "generated")]
        out: PathBuf,
        /// Target to render for.
        #[arg(long, default_value = "sm80", value_parser = parse_target)]
        target: Target,
        /// Write nothing; exit 1 and print unified diffs if the files on disk differ, are
        /// missing, or are stale (generated-looking files no spec produces).
        #[arg(long)]
        check: bool,
    },
    /// Parse, check and infer layouts; write nothing.
    #[command(after_help = "Example:\n  tilegen check specs/*.yaml")]
    Check {
        /// Spec files.
        #[arg(required = true)]
        specs: Vec<PathBuf>,
        /// Target whose limits to check against.
        #[arg(long, default_value = "sm80", value_parser = parse_target)]
        target: Target,
    },
    /// Print what layout inference decided for a spec.
    #[command(after_help = "Example:\n  tilegen explain specs/gemm_bf16.yaml")]
    Explain {
        /// The spec file.
        spec: PathBuf,
        /// Target to plan for.
        #[arg(long, default_value = "sm80", value_parser = parse_target)]
        target: Target,
    },
}

fn parse_target(s: &str) -> Result<Target, String> {
    Target::from_name(s).ok_or_else(|| {
        format!("unknown target `{s}`; targets: {}", Target::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", "))
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Gen { specs, out, target, check } => generate(specs, &out, target, check),
        Command::Check { specs, target } => check(&specs, target),
        Command::Explain { spec, target } => explain(&spec, target),
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

fn generate(specs: Vec<PathBuf>, out: &Path, target: Target, check: bool) -> u8 {
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
    let files = match output::generate(&specs, target, out) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
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
        match output::write_files(&files) {
            Ok(()) => {
                for p in files.keys() {
                    println!("wrote {}", p.display());
                }
                exit::OK
            }
            Err(e) => fail(e),
        }
    }
}

fn check(specs: &[PathBuf], target: Target) -> u8 {
    let mut code = exit::OK;
    for path in specs {
        let file = match output::read_spec(path) {
            Ok(f) => f,
            Err(e) => {
                code = code.max(fail(e));
                continue;
            }
        };
        match tilegen::compile(file, target) {
            Ok(c) => match tilegen::back::render(&c) {
                Ok(_) => println!("{}: ok", c.file.path),
                Err(d) => {
                    eprint!("{}", render_all(&d, &c.file));
                    code = code.max(exit::FAILED);
                }
            },
            Err((file, d)) => {
                eprint!("{}", render_all(&d, &file));
                code = code.max(exit::FAILED);
            }
        }
    }
    code
}

fn explain(spec: &Path, target: Target) -> u8 {
    let file = match output::read_spec(spec) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    match tilegen::compile(file, target) {
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
