//! Compile test: every generated and golden `.cu` builds with the pinned nvcc, warning-free
//! (sm80 files for sm_80, and those with an sm_90 branch for sm_90 from compute_90 too, as
//! `tilegen build` builds them; sm90a files for sm_90a).
//!
//! The toolchain comes from `scripts/install-toolchain.sh` (cached per user; run here if
//! `TILEGEN_CUDA_HOME` / `TILEGEN_CUTLASS_DIR` are not set). Units compile in parallel,
//! `TILEGEN_COMPILE_JOBS` at a time (default 2: each takes about 2 GB), from a queue.

use std::path::{Path, PathBuf};
use std::process::Command;

fn toolchain() -> (PathBuf, PathBuf) {
    if let (Some(cuda), Some(cutlass)) = (std::env::var_os("TILEGEN_CUDA_HOME"), std::env::var_os("TILEGEN_CUTLASS_DIR")) {
        return (cuda.into(), cutlass.into());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-toolchain.sh");
    let out = Command::new("bash").arg(&script).output().expect("running scripts/install-toolchain.sh");
    assert!(out.status.success(), "the toolchain install failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().to_string();
    let get = |key: &str| last.split_whitespace().find_map(|kv| kv.strip_prefix(key)).map(PathBuf::from)
        .unwrap_or_else(|| panic!("no {key} in the install script's output: {last}"));
    (get("TILEGEN_CUDA_HOME="), get("TILEGEN_CUTLASS_DIR="))
}

/// Runs `f` on every item, `jobs` at a time: each worker takes the next item as soon as its
/// last one is done (a slow GEMM file does not hold a core idle beside a quick one). Items are
/// taken largest file first, so that the slowest units start early. Results in item order.
fn in_parallel<T: Sync, R: Send>(items: &[T], size: impl Fn(&T) -> u64, jobs: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(size(&items[i])));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new((0..items.len()).map(|_| None).collect::<Vec<Option<R>>>());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(&i) = order.get(k) else { break };
                let r = f(&items[i]);
                results.lock().unwrap()[i] = Some(r);
            });
        }
    });
    results.into_inner().unwrap().into_iter().map(|r| r.expect("every item ran")).collect()
}

/// A compiler's run on `src`: it succeeded, printed nothing (no warning) and wrote `obj`; or
/// the failure, with what it printed.
fn quiet_object(out: &std::process::Output, src: &Path, obj: &Path) -> Result<(), String> {
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.trim().is_empty() || !obj.exists() {
        return Err(format!("{}:\n{text}", src.display()));
    }
    Ok(())
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Every `.cu` under generated/ and tests/golden/, with the target folder it is in.
fn sources() -> Vec<(PathBuf, &'static str)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = Vec::new();
    for (dir, arch) in [
        ("generated/sm80", "-gencode=arch=compute_80,code=sm_80"),
        ("tests/golden/sm80", "-gencode=arch=compute_80,code=sm_80"),
        ("generated/sm90a", "-gencode=arch=compute_90a,code=sm_90a"),
        ("tests/golden/sm90a", "-gencode=arch=compute_90a,code=sm_90a"),
    ] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "cu") {
                // The sm80 target's `__CUDA_ARCH__ >= 900` branches compile only from compute_90.
                if arch.contains("compute_80") && std::fs::read_to_string(&p).unwrap().contains("__CUDA_ARCH__ >= 900") {
                    v.push((p.clone(), "-gencode=arch=compute_90,code=sm_90"));
                }
                v.push((p, arch));
            }
        }
    }
    v.sort();
    v
}

#[test]
fn generated_sources_compile_warning_free_with_pinned_nvcc() {
    let (cuda, cutlass) = toolchain();
    let nvcc = cuda.join("bin/nvcc");
    assert!(nvcc.exists(), "{} is missing", nvcc.display());
    let srcs = sources();
    assert!(srcs.len() >= 10, "expected the bundled and golden kernels of both targets, found {}", srcs.len());
    assert!(srcs.iter().any(|(p, a)| a.contains("compute_90,") && p.ends_with("generated/sm80/w4a16_gemm_bf16.cu")),
            "the sm80 decode kernel's sm_90 branch (programmatic dependent launch) is not compiled");
    let jobs: usize = std::env::var("TILEGEN_COMPILE_JOBS").ok().and_then(|j| j.parse().ok()).unwrap_or(2).max(1);
    let out_dir = tempfile::tempdir().unwrap();
    let units: Vec<(usize, &(PathBuf, &str))> = srcs.iter().enumerate().collect();
    let results = in_parallel(&units, |(_, (src, _))| file_size(src), jobs, |(i, (src, arch))| -> Result<(), String> {
        // One object per unit: a file compiled for two architectures, or a golden file named
        // like a bundled one, never shares its object with another unit in flight.
        let obj = out_dir.path().join(format!("{i}_{}.o", src.file_stem().unwrap().to_string_lossy()));
        let out = Command::new(&nvcc)
            .args(["-std=c++17", "-O3", "--expt-relaxed-constexpr", "-DNDEBUG", arch, "-Werror", "all-warnings"])
            .arg(format!("-I{}", cutlass.join("include").display()))
            .arg("-c").arg(src).arg("-o").arg(&obj)
            .env("PATH", format!("{}:{}", cuda.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
            .output()
            .expect("running nvcc");
        quiet_object(&out, src, &obj).map_err(|e| format!("{arch}: {e}"))?;
        eprintln!("compiled {} for {arch} ({} bytes of object code)", src.display(), file_size(&obj));
        Ok(())
    });
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "nvcc failed or warned:\n{}", failures.join("\n"));
}

/// The pinned AMD toolchain's wrappers folder (from `scripts/install-hip-toolchain.sh`,
/// cached per user; run here if `TILEGEN_HIP_BIN` is not set).
fn hip_toolchain() -> PathBuf {
    if let Some(bin) = std::env::var_os("TILEGEN_HIP_BIN") {
        return bin.into();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-hip-toolchain.sh");
    let out = Command::new("bash").arg(&script).output().expect("running scripts/install-hip-toolchain.sh");
    assert!(out.status.success(), "the AMD toolchain install failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().to_string();
    let hipcc = last.strip_prefix("TILEGEN_HIPCC=").map(PathBuf::from)
        .unwrap_or_else(|| panic!("no TILEGEN_HIPCC= in the install script's output: {last}"));
    hipcc.parent().unwrap().to_path_buf()
}

/// Every `.hip` under generated/ and tests/golden/, with the architecture of its folder.
fn hip_sources() -> Vec<(PathBuf, &'static str)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = Vec::new();
    for arch in ["gfx942", "gfx90a"] {
        for dir in [root.join("generated").join(arch), root.join("tests/golden").join(arch)] {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "hip") {
                    v.push((p, arch));
                }
            }
        }
    }
    v.sort();
    v
}

/// The vector widths, in bytes, that a row-wise program's comments give its copies of the row
/// tile (`Each thread loads its 16-byte vectors`), each once.
fn vector_bytes(text: &str, verb: &str) -> Vec<usize> {
    let key = format!("Each thread {verb}s its ");
    let mut widths: Vec<usize> = text.match_indices(&key)
        .filter_map(|(at, _)| text[at + key.len()..].split("-byte").next()?.parse().ok())
        .collect();
    widths.sort_unstable();
    widths.dedup();
    widths
}

/// Every generated `.hip` builds with the pinned hipcc for its architecture, warning-free,
/// and its device code runs on the matrix cores: the code object holds MFMA instructions; a
/// row-wise program (no gemm) instead moves its rows as vector global loads and stores as wide
/// as its comments say (16 bytes; 8 for an i8 row beside a bf16 one).
/// Nothing here runs on an AMD GPU (there is none); this is what the AMD targets promise.
#[test]
fn amd_sources_compile_warning_free_with_pinned_hipcc_and_use_mfma() {
    let srcs = hip_sources();
    // Every bundled spec renders for both AMD targets.
    for spec in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs")).unwrap() {
        let stem = spec.unwrap().path().file_stem().unwrap().to_string_lossy().to_string();
        for arch in ["gfx942", "gfx90a"] {
            assert!(srcs.iter().any(|(p, a)| *a == arch && p.ends_with(format!("generated/{arch}/{stem}.hip"))), "generated/{arch}/{stem}.hip is missing");
        }
    }
    let bin = hip_toolchain();
    let (hipcc, objdump) = (bin.join("tilegen-hipcc"), bin.join("tilegen-llvm-objdump"));
    let jobs: usize = std::env::var("TILEGEN_COMPILE_JOBS").ok().and_then(|j| j.parse().ok()).unwrap_or(2).max(1);
    let out_dir = tempfile::tempdir().unwrap();
    let results = in_parallel(&srcs, |(src, _)| file_size(src), jobs, |(src, arch)| -> Result<(), String> {
        let obj = out_dir.path().join(format!("{arch}-{}.o", src.file_stem().unwrap().to_string_lossy()));
        let out = Command::new(&hipcc)
            .args(["-std=c++17", "-O3", &format!("--offload-arch={arch}"), "-Wall", "-Wextra", "-Werror"])
            .arg("-c").arg(src).arg("-o").arg(&obj)
            .output()
            .expect("running hipcc");
        quiet_object(&out, src, &obj)?;
        // Unbundle the device code object (written next to the object), then disassemble it.
        let unbundle = Command::new(&objdump).arg("--offloading").arg(&obj).output().expect("running llvm-objdump --offloading");
        let name = obj.file_name().unwrap().to_string_lossy().into_owned();
        let device = std::fs::read_dir(out_dir.path()).unwrap().map(|e| e.unwrap().path())
            .find(|p| p.file_name().is_some_and(|f| f.to_string_lossy().starts_with(&format!("{name}.")) && f.to_string_lossy().ends_with(arch)));
        let Some(device) = device else {
            return Err(format!("{}: no {arch} code object in {} ({})", src.display(), obj.display(), String::from_utf8_lossy(&unbundle.stderr)));
        };
        let dis = Command::new(&objdump).arg("-d").arg(&device).output().expect("running llvm-objdump -d");
        let count = |op: &str| String::from_utf8_lossy(&dis.stdout).lines().filter(|l| l.contains(op)).count();
        let mfma = count("v_mfma");
        let text = std::fs::read_to_string(src).unwrap_or_default();
        if text.contains("the row-wise lowering") {
            // Each copy of the row tile moves the vectors its comment names (16 bytes, or 8
            // for an i8 row beside a bf16 one): the code object holds global accesses of
            // each of those widths.
            let mut seen = Vec::new();
            for verb in ["load", "store"] {
                for bytes in vector_bytes(&text, verb) {
                    let op = match bytes {
                        16 => format!("global_{verb}_dwordx4"),
                        8 => format!("global_{verb}_dwordx2"),
                        n => return Err(format!("{}: a row-wise {verb} of {n}-byte vectors", src.display())),
                    };
                    let n = count(&op);
                    if n == 0 {
                        return Err(format!("{}: the {arch} code object of a row-wise program has no {bytes}-byte global {verb}s ({op})", src.display()));
                    }
                    seen.push(format!("{n} {bytes}-byte {verb}s"));
                }
            }
            if seen.is_empty() {
                return Err(format!("{}: a row-wise program that names no vector loads or stores", src.display()));
            }
            eprintln!("compiled {} for {arch}: {}", src.display(), seen.join(", "));
        } else if mfma == 0 {
            return Err(format!("{}: the {arch} code object has no v_mfma instruction", src.display()));
        } else {
            eprintln!("compiled {} for {arch}: {mfma} MFMA instructions", src.display());
        }
        Ok(())
    });
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "hipcc failed, warned, or emitted no MFMA (no 16-byte accesses for a row-wise program):\n{}", failures.join("\n"));
}
