//! Building generated code: finding the toolchain and driving nvcc through the cc crate.
//!
//! cc composes the compiler invocation (nvcc, optimisation, `-fPIC` for the host side via
//! `-Xcompiler`, include paths); this module adds the target's flags, runs it with its
//! output captured (shown verbatim, with the kernel's name, on failure), reports progress
//! on long compiles, and links shared libraries and executables.

use crate::target::Target;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The compiler and headers a build uses.
#[derive(Clone, Debug)]
pub struct Toolchain {
    /// nvcc.
    pub nvcc: PathBuf,
    /// CUTLASS's `include/` folder (holding `cute/` and `cutlass/`).
    pub cutlass_include: PathBuf,
    /// nvcc's version line.
    pub version: String,
}

/// Build failures.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No usable toolchain.
    #[error("{0}")]
    Toolchain(String),
    /// The compiler or linker failed; its output verbatim.
    #[error("{what} failed for {kernel}:\n{output}")]
    Tool {
        /// Kernel name.
        kernel: String,
        /// Compile or link.
        what: String,
        /// nvcc's output.
        output: String,
    },
    /// I/O.
    #[error("{0}")]
    Io(String),
}

fn cache_root() -> PathBuf {
    std::env::var_os("TILEGEN_TOOLCHAIN_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tilegen")
    })
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Finds nvcc and the CUTLASS headers: explicit paths first, then `TILEGEN_CUDA_HOME` /
/// `TILEGEN_CUTLASS_DIR`, then the pinned toolchain from `scripts/install-toolchain.sh`,
/// then `nvcc` on `PATH` (and `/usr/local/cuda`).
pub fn find_toolchain(nvcc: Option<&Path>, cutlass: Option<&Path>) -> Result<Toolchain, BuildError> {
    let pinned = cache_root().join("cuda-13.0.88/nvidia/cu13/bin/nvcc");
    let nvcc = match nvcc {
        Some(p) => p.to_path_buf(),
        None => std::env::var_os("TILEGEN_CUDA_HOME").map(|h| PathBuf::from(h).join("bin/nvcc")).filter(|p| p.is_file())
            .or_else(|| pinned.is_file().then_some(pinned.clone()))
            .or_else(|| on_path("nvcc"))
            .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/nvcc")).filter(|p| p.is_file()))
            .ok_or_else(|| BuildError::Toolchain("no nvcc found: run scripts/install-toolchain.sh, put nvcc on PATH, or pass --nvcc PATH".into()))?,
    };
    if !nvcc.is_file() {
        return Err(BuildError::Toolchain(format!("{} does not exist", nvcc.display())));
    }
    let include = match cutlass {
        Some(p) => if p.join("include/cute").is_dir() { p.join("include") } else { p.to_path_buf() },
        None => std::env::var_os("TILEGEN_CUTLASS_DIR").map(|d| PathBuf::from(d).join("include"))
            .filter(|p| p.join("cute").is_dir())
            .or_else(|| Some(cache_root().join("cutlass-4.2.0.0/cutlass_library/source/include")).filter(|p| p.join("cute").is_dir()))
            .ok_or_else(|| BuildError::Toolchain("no CUTLASS headers found: run scripts/install-toolchain.sh or pass --cutlass DIR (a folder holding include/cute)".into()))?,
    };
    if !include.join("cute/tensor.hpp").is_file() {
        return Err(BuildError::Toolchain(format!("{} has no cute/tensor.hpp", include.display())));
    }
    let out = Command::new(&nvcc).arg("--version").output().map_err(|e| BuildError::Toolchain(format!("running {}: {e}", nvcc.display())))?;
    let version = String::from_utf8_lossy(&out.stdout).lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("unknown").trim().to_string();
    Ok(Toolchain { nvcc, cutlass_include: include, version })
}

/// nvcc `-gencode` flags: machine code for each `sms` entry plus PTX for the lowest, so
/// that newer GPUs can JIT it. The sm80 target's machine code for sm_90 and later comes from
/// compute_90 PTX, where its kernels' `__CUDA_ARCH__ >= 900` branches (programmatic dependent
/// launch) exist; for sm_80 to sm_89, and in the PTX, from compute_80.
pub fn gencode_flags(target: Target, sms: &[u32]) -> Vec<String> {
    match target {
        Target::Sm80 => {
            let mut flags: Vec<String> = sms.iter().map(|sm| format!("-gencode=arch=compute_{},code=sm_{sm}", if *sm >= 90 { 90 } else { 80 })).collect();
            flags.push("-gencode=arch=compute_80,code=compute_80".into());
            flags
        }
        // wgmma and setmaxnreg exist only in sm_90a machine code (no PTX fallback).
        Target::Sm90a => vec!["-gencode=arch=compute_90a,code=sm_90a".into()],
        // hipcc builds: see scripts/install-hip-toolchain.sh and tests/compile.rs.
        Target::Gfx942 | Target::Gfx90a => Vec::new(),
    }
}

fn host_triple() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// Runs `cmd`, printing a line every 20 s while it runs; returns (success, output).
fn run_with_progress(mut cmd: Command, label: &str) -> Result<(bool, String), BuildError> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| BuildError::Io(format!("starting {label}: {e}")))?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let start = Instant::now();
    let mut next = Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| BuildError::Io(e.to_string()))? {
            break status;
        }
        if start.elapsed() >= next {
            eprintln!("  still {label} ({} s)", next.as_secs());
            next += Duration::from_secs(20);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = err_reader.join().unwrap_or_default() + &out_reader.join().unwrap_or_default();
    Ok((status.success(), text))
}

/// Compiles one CUDA source to an object file.
pub fn compile(tc: &Toolchain, target: Target, sms: &[u32], kernel: &str, src: &Path, obj: &Path, includes: &[&Path]) -> Result<String, BuildError> {
    let mut b = cc::Build::new();
    // cc picks nvcc from NVCC; a snapshot of the environment keeps CFLAGS & co. out of it.
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = ["PATH", "HOME", "TMPDIR"].iter()
        .filter_map(|k| std::env::var_os(k).map(|v| ((*k).into(), v)))
        .collect();
    env.push(("NVCC".into(), tc.nvcc.clone().into_os_string()));
    b.set_envs_snapshot(env)
        .cuda(true)
        .ccbin(false)
        .target(&host_triple())
        .host(&host_triple())
        .opt_level(3)
        .debug(false)
        .warnings(false)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .pic(true)
        .flag("-std=c++17")
        .flag("--expt-relaxed-constexpr")
        .define("NDEBUG", None)
        .include(&tc.cutlass_include);
    for inc in includes {
        b.include(inc);
    }
    for f in gencode_flags(target, sms) {
        b.flag(&f);
    }
    let tool = b.try_get_compiler().map_err(|e| BuildError::Toolchain(e.to_string()))?;
    let mut cmd = tool.to_command();
    cmd.arg("-c").arg(src).arg("-o").arg(obj);
    let (ok, output) = run_with_progress(cmd, &format!("compiling {kernel}"))?;
    if !ok {
        return Err(BuildError::Tool { kernel: kernel.into(), what: "nvcc compile".into(), output });
    }
    Ok(output)
}

/// Links objects into a shared library (`shared`) or an executable, with the CUDA runtime
/// linked statically.
pub fn link(tc: &Toolchain, kernel: &str, objs: &[PathBuf], out: &Path, shared: bool) -> Result<(), BuildError> {
    let mut cmd = Command::new(&tc.nvcc);
    if shared {
        cmd.arg("-shared");
    }
    cmd.args(objs).arg("-o").arg(out).arg("--cudart").arg("static");
    let (ok, output) = run_with_progress(cmd, &format!("linking {kernel}"))?;
    if !ok {
        return Err(BuildError::Tool { kernel: kernel.into(), what: "nvcc link".into(), output });
    }
    Ok(())
}

/// What `build` produced for one spec.
#[derive(Clone, Debug)]
pub struct Built {
    /// Kernel name.
    pub kernel: String,
    /// The compiled spec.
    pub compiled: crate::Compiled,
    /// Folder holding the `.cu`, `.h`, `.o` and `.so`.
    pub dir: PathBuf,
    /// The object file.
    pub object: PathBuf,
    /// The shared library.
    pub shared_library: PathBuf,
}

/// Renders, compiles and links `specs` into `out/<target>/`, `jobs` compiles at a time.
/// Errors are per spec, in spec order.
pub fn build_specs(specs: &[PathBuf], target: Target, out: &Path, tc: &Toolchain, sms: &[u32], jobs: usize) -> Vec<Result<Built, String>> {
    let dir = out.join(target.name());
    let mut results: Vec<Option<Result<Built, String>>> = (0..specs.len()).map(|_| None).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots = std::sync::Mutex::new(&mut results);
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(specs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= specs.len() {
                    break;
                }
                let r = build_one(&specs[i], target, &dir, tc, sms);
                if let Ok(mut slots) = slots.lock() {
                    slots[i] = Some(r);
                }
            });
        }
    });
    results.into_iter().map(|r| r.unwrap_or_else(|| Err("not built".into()))).collect()
}

fn build_one(spec: &Path, target: Target, dir: &Path, tc: &Toolchain, sms: &[u32]) -> Result<Built, String> {
    let file = crate::output::read_spec(spec).map_err(|e| e.to_string())?;
    let mut compiled = crate::compile(file, target).map_err(|(f, d)| crate::diag::render_all(&d, &f))?;
    compiled.source_name = crate::output::banner_path(spec, dir.parent().unwrap_or(dir));
    let files = crate::back::render(&compiled).map_err(|d| crate::diag::render_all(&d, &compiled.file))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let map = files.iter().map(|f| (dir.join(&f.name), f.contents.clone())).collect();
    crate::output::write_files(&map).map_err(|e| e.to_string())?;
    let kernel = compiled.spec.kernel.name.clone();
    let src = dir.join(format!("{kernel}.{}", target.source_extension()));
    let object = dir.join(format!("{kernel}.o"));
    let shared_library = dir.join(format!("lib{kernel}.so"));
    // Unchanged sources keep their timestamps (writes skip identical text), so an object
    // newer than its source and header is current.
    let newer = |out: &Path, inputs: &[&Path]| {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        m(out).is_some_and(|o| inputs.iter().all(|i| m(i).is_some_and(|t| t <= o)))
    };
    let header = dir.join(format!("{kernel}.h"));
    let stamp = dir.join(format!("{kernel}.flags"));
    let flags = format!("{} {:?} {}", tc.nvcc.display(), gencode_flags(target, sms), tc.cutlass_include.display());
    let same_flags = std::fs::read_to_string(&stamp).is_ok_and(|f| f == flags);
    if same_flags && newer(&shared_library, &[&src, &header]) {
        eprintln!("{} is up to date", shared_library.display());
    } else {
        eprintln!("building {kernel} with {} ({})", tc.nvcc.display(), tc.version);
        // The stamp goes first and comes back last: a build cut short (a half-written object
        // or library newer than its sources) is never taken for a current one.
        let _ = std::fs::remove_file(&stamp);
        let start = Instant::now();
        let warnings = compile(tc, target, sms, &kernel, &src, &object, &[dir]).map_err(|e| e.to_string())?;
        if !warnings.trim().is_empty() {
            eprintln!("{kernel}: nvcc said:\n{warnings}");
        }
        link(tc, &kernel, std::slice::from_ref(&object), &shared_library, true).map_err(|e| e.to_string())?;
        std::fs::write(&stamp, flags).map_err(|e| format!("{}: {e}", stamp.display()))?;
        eprintln!("built {} in {:.0} s", shared_library.display(), start.elapsed().as_secs_f64());
    }
    Ok(Built { kernel, compiled, dir: dir.to_path_buf(), object, shared_library })
}
