//! Golden tests: expected C++ for test specs and expected diagnostics for bad specs.
//!
//! `tests/golden/specs/*.yaml` render to `tests/golden/<target>/<kernel>.{cu,h}` for every
//! target (or, where a target cannot lower the spec, to `<spec>.stderr` there);
//! `tests/golden/bad/*.yaml` must fail with exactly `tests/golden/bad/*.stderr`;
//! `tests/golden/warnings/*.yaml` must compile with exactly the warnings of their `.stderr`.
//! A mismatch fails with a unified diff; `BLESS=1 cargo test --test golden` rewrites.

use std::path::{Path, PathBuf};
use tilegen::diag::render_all;
use tilegen::target::Target;

fn bless() -> bool {
    std::env::var_os("BLESS").is_some_and(|v| v == "1")
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml")).collect();
    v.sort();
    v
}

/// Compares `actual` with the file at `path` (or writes it under BLESS=1); returns a failure.
fn compare(path: &Path, actual: &str) -> Option<String> {
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return None;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    (expected != actual).then(|| tilegen::output::unified_diff(path, &expected, actual))
}

fn rel(path: &Path) -> PathBuf {
    // Specs are named relative to the crate root in outputs, as a user in a checkout would.
    path.strip_prefix(env!("CARGO_MANIFEST_DIR")).map(Path::to_path_buf).unwrap_or_else(|_| path.to_path_buf())
}

#[test]
fn golden_cpp() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let specs = yaml_files("tests/golden/specs");
    assert!(specs.len() >= 3, "golden specs are missing");
    let mut failures = Vec::new();
    let mut rendered = 0;
    for target in Target::ALL {
        // The files this target's specs produce; any other file in its folder is stale (a
        // spec's old diagnostics beside its new C++, say).
        let mut produced = std::collections::BTreeSet::new();
        for spec in &specs {
            // Each target either renders the spec (golden C++) or explains why not (golden
            // diagnostics next to where the C++ would be).
            match tilegen::output::generate_with_notes(&[rel(spec)], target, Path::new("tests/golden")) {
                // Skipped (`tilegen gen`'s note): every reason the target has no lowering.
                Ok((files, notes)) if files.is_empty() && !notes.is_empty() => {
                    let text = std::fs::read_to_string(spec).unwrap();
                    let source = tilegen::diag::SourceFile::new(rel(spec).to_string_lossy().into_owned(), text);
                    let Err((file, diags)) = tilegen::compile(source, target) else { panic!("{}: skipped for {}, yet it compiles", spec.display(), target.name()) };
                    let stem = spec.file_stem().unwrap().to_string_lossy().into_owned();
                    let path = Path::new("tests/golden").join(target.name()).join(format!("{stem}.stderr"));
                    produced.insert(path.file_name().unwrap().to_owned());
                    if let Some(diff) = compare(&path, &render_all(&diags, &file)) {
                        failures.push(diff);
                    }
                }
                Ok((files, _)) => {
                    for (path, contents) in files {
                        rendered += 1;
                        produced.insert(path.file_name().unwrap().to_owned());
                        if let Some(diff) = compare(&path, &contents) {
                            failures.push(diff);
                        }
                    }
                }
                Err(tilegen::output::GenError::Spec(report)) => {
                    let stem = spec.file_stem().unwrap().to_string_lossy().into_owned();
                    let path = Path::new("tests/golden").join(target.name()).join(format!("{stem}.stderr"));
                    produced.insert(path.file_name().unwrap().to_owned());
                    if let Some(diff) = compare(&path, &report) {
                        failures.push(diff);
                    }
                }
                Err(e) => panic!("{}: {e}", spec.display()),
            }
        }
        let dir = Path::new("tests/golden").join(target.name());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if !produced.contains(path.file_name().unwrap()) {
                if bless() {
                    std::fs::remove_file(&path).unwrap();
                } else {
                    failures.push(format!("{}: no golden spec produces this file for {} (BLESS=1 removes it)", path.display(), target.name()));
                }
            }
        }
    }
    assert!(rendered >= 8, "only {rendered} golden files rendered");
    assert!(failures.is_empty(), "golden C++ drifted (BLESS=1 to accept):\n{}", failures.join("\n"));
}

#[test]
fn golden_diagnostics() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let specs = yaml_files("tests/golden/bad");
    assert!(specs.len() >= 15, "at least 15 bad specs are expected, found {}", specs.len());
    let mut failures = Vec::new();
    for spec in specs {
        let file = tilegen::output::read_spec(&rel(&spec)).unwrap();
        let report = match tilegen::compile(file, Target::Sm80) {
            Err((file, diags)) => render_all(&diags, &file),
            Ok(c) => match tilegen::back::render(&c) {
                Err(diags) => render_all(&diags, &c.file),
                Ok(_) => {
                    failures.push(format!("{}: expected errors, but it compiled", spec.display()));
                    continue;
                }
            },
        };
        // Every report points at a location with a caret.
        assert!(report.contains(": error: ") && report.contains('^'), "{report}");
        if let Some(diff) = compare(&spec.with_extension("stderr"), &report) {
            failures.push(diff);
        }
    }
    assert!(failures.is_empty(), "golden diagnostics drifted (BLESS=1 to accept):\n{}", failures.join("\n"));
}

#[test]
fn golden_warnings() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let specs = yaml_files("tests/golden/warnings");
    assert!(!specs.is_empty(), "golden warning specs are missing");
    let mut failures = Vec::new();
    for spec in specs {
        // A warning never stops a spec: every target that lowers the spec still renders it.
        let file = tilegen::output::read_spec(&rel(&spec)).unwrap();
        let compiled = tilegen::compile(file, Target::Sm80).unwrap_or_else(|(f, d)| panic!("{}", render_all(&d, &f)));
        assert!(tilegen::back::render(&compiled).is_ok(), "{}: warnings stopped rendering", spec.display());
        let report = tilegen::output::spec_warnings(&rel(&spec)).unwrap().unwrap_or_default();
        assert!(report.contains(": warning: ") && !report.contains(": error: ") && report.contains('^'), "{}: {report}", spec.display());
        if let Some(diff) = compare(&spec.with_extension("stderr"), &report) {
            failures.push(diff);
        }
    }
    // The bundled specs and the golden C++ specs do nothing needlessly, except for the one
    // golden spec that keeps an unused constant to show its [[maybe_unused]] declaration.
    for spec in yaml_files("specs").into_iter().chain(yaml_files("tests/golden/specs")) {
        let report = tilegen::output::spec_warnings(&rel(&spec)).unwrap();
        if spec.ends_with("gemm_serial_masked.yaml") {
            let report = report.unwrap_or_default();
            assert!(report.contains("warning: constant `stages` is never used") && report.contains(": 1 warning found"), "{report}");
        } else if let Some(report) = report {
            failures.push(format!("{}: unexpected warnings:\n{report}", spec.display()));
        }
    }
    assert!(failures.is_empty(), "golden warnings drifted (BLESS=1 to accept):\n{}", failures.join("\n"));
}

/// A whole-buffer write warns when a later statement of the same block overwrites the buffer
/// whole before anything reads it, and not when something reads it in between, a later write
/// is partial, conditional or in a loop, or the first write is the one inside a block.
#[test]
fn overwritten_writes_warn_only_when_nothing_can_read_them() {
    let spec = |body: &str| format!("kernel: k
tensors:
  A: {{dtype: f16, shape: [M, K]}}
  C: {{dtype: f32, shape: [M, K], output: true}}
constants: {{block_M: 64, block_K: 64}}
grid:
  bx: ceildiv(M, block_M)
threads: 128
buffers:
  A_s: {{scope: shared, dtype: f16, shape: [block_M, block_K]}}
  acc: {{scope: fragment, dtype: f32, shape: [block_M, block_K]}}
body:
{body}  - copy(acc, C[bx*block_M, 0])
");
    let warnings = |body: &str| {
        let checked = tilegen::check_spec(tilegen::diag::SourceFile::new("k.yaml", spec(body))).unwrap_or_else(|(f, d)| panic!("{}", render_all(&d, &f)));
        checked.info.warnings.iter().map(|w| w.message.clone()).filter(|m| m.contains("overwritten")).collect::<Vec<_>>()
    };
    let add = "  - parallel(i, j):\n      - acc[i, j] += A_s[i, j]\n";
    let copy = "  - copy(A[bx*block_M, 0], A_s)\n";
    // Overwritten whole: a clear by a fill, a copy by the same copy.
    assert_eq!(warnings(&format!("  - clear(acc)\n  - fill(acc, 1.0)\n{copy}{add}")).len(), 1);
    assert_eq!(warnings(&format!("  - clear(acc)\n{copy}{copy}{add}")), ["the values this writes to `A_s` are overwritten before any statement reads them"]);
    // Read in between, or the later write is partial: nothing to say.
    assert!(warnings(&format!("  - clear(acc)\n{copy}{add}{copy}{add}")).is_empty());
    assert!(warnings(&format!("  - clear(acc)\n  - parallel(i, j):\n      - acc[i, j] = 2.0\n{copy}{add}")).is_empty());
    // The later write conditional, or in a loop (which might not run): nothing either.
    assert!(warnings(&format!("  - clear(acc)\n  - if M > 64:\n      - fill(acc, 1.0)\n{copy}{add}")).is_empty());
    assert!(warnings(&format!("  - clear(acc)\n  - serial(t, ceildiv(K, 64)):\n      - fill(acc, 1.0)\n{copy}{add}")).is_empty());
    // Inside a loop, the next statement of the same body counts.
    assert_eq!(warnings(&format!("  - clear(acc)\n  - serial(t, 2):\n{}{}      - parallel(i, j):\n          - acc[i, j] += A_s[i, j]\n",
        copy.replacen("  -", "      -", 1), copy.replacen("  -", "      -", 1))).len(), 1);
}

/// Every launcher of a kernel tilegen writes returns its launch's own error: every CUDA kernel,
/// CUTLASS's sm90a collectives included, is launched with cudaLaunchKernelEx and every HIP kernel
/// of tilegen's own with hipLaunchKernelEx, and none reads <api>GetLastError, which would return an
/// error an earlier call left pending. composable_kernel's invokers launch and read
/// hipGetLastError themselves; those headers say so. (Rendered here rather than read from disk,
/// which `BLESS=1` rewrites while tests run.)
#[test]
fn launchers_return_their_own_launch_error() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let specs: Vec<PathBuf> = yaml_files("specs").into_iter().chain(yaml_files("tests/golden/specs")).map(|p| rel(&p)).collect();
    let (mut cuda, mut hip, mut ck) = (0, 0, 0);
    for target in [Target::Sm80, Target::Sm90a, Target::Gfx942, Target::Gfx90a] {
        let (files, _) = tilegen::output::generate_with_notes(&specs, target, Path::new("out")).unwrap_or_else(|e| panic!("{e}"));
        let api = if target.is_amd() { "hip" } else { "cuda" };
        for (src, source) in files.iter().filter(|(p, _)| p.extension().is_some_and(|x| x == "cu" || x == "hip")) {
            let header = &files[&src.with_extension("h")];
            assert!(!source.contains("<<<"), "{}: a <<<...>>> launch", src.display());
            assert!(!source.contains("GemmUniversalAdapter<"), "{}: CUTLASS's adapter launches for itself", src.display());
            if source.contains("MakeInvoker()") {
                assert!(header.contains("composable_kernel reads its launch's error with hipGetLastError"), "{}: the header's caveat", src.display());
                ck += 1;
                continue;
            }
            assert!(source.contains(&format!("{api}LaunchKernelEx(")), "{}: launched otherwise", src.display());
            assert!(!source.contains("GetLastError()"), "{}", src.display());
            assert!(!header.contains("GetLastError"), "{}: the header's contract", src.with_extension("h").display());
            if target.is_amd() { hip += 1 } else { cuda += 1 }
        }
    }
    assert!(cuda >= 40 && hip >= 20 && ck >= 10, "only {cuda} CUDA, {hip} HIP and {ck} composable_kernel sources");
}
