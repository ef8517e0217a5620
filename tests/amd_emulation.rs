//! The AMD tile lowering's generated HIP, run on the CPU against the golden cases.
//!
//! There is no AMD GPU here. `tests/amd_emu/` emulates the part of HIP and composable_kernel
//! that the tile lowering emits: one OS thread per GPU thread, LDS as function statics, and
//! each MFMA as a wave-wide exchange of operands computed from the instruction's lane layout.
//! The generated `.hip` is built with the host's g++ against that shim (its hipLaunchKernelEx
//! runs the grid), linked with `tilegen validate`'s harness, and every golden
//! case is compared under its tolerance. This checks the generated code's indexing, barriers,
//! k-split sums, ragged edges, conversions and operand layouts; it does not check the timing
//! or the memory model of real hardware.

use std::path::{Path, PathBuf};
use std::process::Command;
use tilegen::diag::SourceFile;
use tilegen::target::Target;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds the emulated kernel and the validation harness for a spec; returns the compiled
/// spec and the executable. `mutate` edits the generated source first (negative controls).
fn build(spec: &str, target: Target, dir: &Path, mutate: impl Fn(String) -> String) -> (tilegen::Compiled, PathBuf) {
    build_text(spec, std::fs::read_to_string(root().join(spec)).unwrap(), target, dir, mutate)
}

/// [`build`] for a spec's text (`spec` names it in diagnostics).
fn build_text(spec: &str, text: String, target: Target, dir: &Path, mutate: impl Fn(String) -> String) -> (tilegen::Compiled, PathBuf) {
    let c = tilegen::compile(SourceFile::new(spec, text), target).map_err(|(f, d)| d.iter().map(|d| d.render(&f)).collect::<Vec<_>>().join("\n")).unwrap();
    assert!(c.plan.tile.is_some() || c.plan.rows.is_some(), "{spec} takes the tile or the row-wise lowering on {target}");
    let files = tilegen::back::render(&c).unwrap();
    let kernel = c.spec.kernel.name.clone();
    for f in &files {
        let contents = if f.name.ends_with(".hip") { mutate(f.contents.clone()) } else { f.contents.clone() };
        std::fs::write(dir.join(&f.name), contents).unwrap();
    }
    std::fs::write(dir.join("harness.cpp"), tilegen::validate::harness_source(&c).unwrap()).unwrap();
    let exe = dir.join(format!("{kernel}_emulated"));
    let out = Command::new("g++")
        .args(["-std=c++20", "-O2", "-pthread", "-w", "-x", "c++"])
        .arg("-I").arg(root().join("tests/amd_emu"))
        .arg("-I").arg(dir)
        .arg(dir.join(format!("{kernel}.hip")))
        .arg(dir.join("harness.cpp"))
        .arg("-o").arg(&exe)
        .output().expect("running g++");
    assert!(out.status.success(), "g++ failed on the emulated {kernel}:\n{}", String::from_utf8_lossy(&out.stderr));
    (c, exe)
}

/// Runs every golden case; returns (case, output, relative error, passed).
fn run(c: &tilegen::Compiled, exe: &Path) -> Vec<(String, String, f64, bool)> {
    let rows = tilegen::validate::run_golden_cases(c, exe, &[], &root(), None).unwrap();
    rows.into_iter().map(|r| match r.result {
        Ok(cmp) => (r.case, r.output, cmp.rel, cmp.pass),
        Err(e) => (r.case, format!("error: {e}"), f64::INFINITY, false),
    }).collect()
}

fn check_spec(spec: &str, min_cases: usize) {
    for target in [Target::Gfx942, Target::Gfx90a] {
        let dir = tempfile::tempdir().unwrap();
        let (c, exe) = build(spec, target, dir.path(), |s| s);
        let rows = run(&c, &exe);
        for (case, output, rel, pass) in &rows {
            eprintln!("{spec} {target} {case} {output}: rel {rel:.2e} {}", if *pass { "pass" } else { "FAIL" });
        }
        assert!(rows.len() >= min_cases, "{spec}: expected {min_cases} golden cases, ran {}", rows.len());
        assert!(rows.iter().all(|r| r.3), "{spec} on {target}: the emulated kernel missed its golden outputs: {rows:?}");
    }
}

#[test]
fn emulated_w4a16_matches_its_golden_outputs_on_both_amd_targets() {
    check_spec("specs/w4a16_gemm_bf16.yaml", 3);
    check_spec("specs/w4a16_zp_gemm_bf16.yaml", 3);
}

#[test]
fn emulated_linear_attention_matches_its_golden_outputs_on_both_amd_targets() {
    check_spec("specs/linear_attention_causal_bf16.yaml", 3);
}

/// The emulation can fail: a row reduction that skips two of the row's four lanes makes the
/// sliding-window attention disagree with the interpreter.
#[test]
fn emulation_catches_a_row_reduction_that_misses_lanes() {
    let rel = "tests/golden/specs/attention_window_bf16.yaml";
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    let c = tilegen::compile(SourceFile::new(rel, text), Target::Gfx942).map_err(|_| "compile").unwrap();
    let dims = [("B", 1), ("S", 70), ("H", 1)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (inputs, expected) = interpreted(&c, &dims, 0x2545_f491_4f6c_dd1d);
    let dir = tempfile::tempdir().unwrap();
    let (c, exe) = build(rel, Target::Gfx942, dir.path(), |s| {
        assert!(s.contains("__shfl_xor(part, 32)"));
        s.replace("__shfl_xor(part, 32)", "__shfl_xor(part, 0)")
    });
    let got = tilegen::validate::run_harness(&c, &exe, &[], &inputs, &dims, dir.path()).unwrap();
    let cmp = tilegen::golden::compare(&got["O"], &expected["O"], 1e-2);
    assert!(!cmp.pass, "a reduction over half the row's lanes still matched: {cmp:?}");
}

/// The emulation can fail: a row-wise RMSNorm whose reduction skips the last shuffle (each
/// half of a wave sums alone), or the waves' partials through LDS, disagrees with the
/// interpreter.
#[test]
fn emulation_catches_a_row_wise_reduction_that_misses_threads() {
    let rel = "tests/golden/specs/rms_norm_bf16.yaml";
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    let c = tilegen::compile(SourceFile::new(rel, text), Target::Gfx942).map_err(|_| "compile").unwrap();
    let dims = [("M", 2), ("N", 4096)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (inputs, expected) = interpreted(&c, &dims, 0x5851_f42d_4c95_7f2d);
    for (from, to) in [("offset > 0;", "offset > 1;"), ("for (int w = 1; w < kWaves; ++w)", "for (int w = 1; w < 1; ++w)")] {
        let dir = tempfile::tempdir().unwrap();
        let (c, exe) = build(rel, Target::Gfx942, dir.path(), |s| {
            assert!(s.contains(from), "{from}");
            s.replace(from, to)
        });
        let got = tilegen::validate::run_harness(&c, &exe, &[], &inputs, &dims, dir.path()).unwrap();
        let cmp = tilegen::golden::compare(&got["Y"], &expected["Y"], 1e-2);
        assert!(!cmp.pass, "`{to}` still matched: {cmp:?}");
    }
}

/// The emulation can fail: the same kernel with the k-split partial sums not added, or with
/// the MFMA's operands swapped (the untransposed layout), misses its golden outputs.
#[test]
fn emulation_catches_a_wrong_reduction_and_a_wrong_operand_layout() {
    let spec = "specs/w4a16_gemm_bf16.yaml";
    for (what, from, to) in [
        ("k-split partial sums dropped", "total += ksplit[g]", "total += (g == acc_group) * ksplit[g]"),
        ("MFMA operands swapped", "mfma_16x16x16(b_cols, a_rows[bi],", "mfma_16x16x16(a_rows[bi], b_cols,"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (c, exe) = build(spec, Target::Gfx942, dir.path(), |s| {
            assert!(s.contains(from), "the generated code has `{from}`");
            s.replace(from, to)
        });
        let rows = run(&c, &exe);
        assert!(!rows.is_empty() && rows.iter().any(|r| !r.3), "{what}: the emulation still passed: {rows:?}");
    }
}

/// A deterministic stream of small values, exact in bf16 and f16 (k / 64, |k| <= 64), and of
/// whole 32-bit words for packed tensors.
struct Values(u64);

impl Values {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn array(&mut self, dtype: tilegen::ast::DType, shape: Vec<usize>) -> tilegen::interp::npy::Array {
        let n: usize = shape.iter().product();
        let data = (0..n).map(|_| match dtype {
            tilegen::ast::DType::I32 => (self.next() as u32 as i32) as f64,
            tilegen::ast::DType::I8 => ((self.next() % 256) as i64 - 128) as f64,
            _ => ((self.next() % 129) as i64 - 64) as f64 / 64.0,
        }).collect();
        tilegen::interp::npy::Array { shape, dtype, data }
    }
}

type Arrays = std::collections::BTreeMap<String, tilegen::interp::npy::Array>;

/// Random inputs for a spec at `dims` (from `seed`), and the CPU interpreter's run of the
/// spec on them (inputs and outputs).
fn interpreted(c: &tilegen::Compiled, dims: &std::collections::BTreeMap<String, i64>, seed: u64) -> (Arrays, Arrays) {
    let mut values = Values(seed);
    let mut inputs = Arrays::new();
    for t in c.spec.tensors.iter().filter(|t| c.spec.starts_from(t)) {
        let shape = t.shape.iter().map(|d| d.eval(|n| c.info.const_int(n).or_else(|| dims.get(n).copied())).unwrap() as usize).collect();
        let mut a = values.array(t.dtype.0, shape);
        if t.name.name == "zeros" {
            // Zero points are integers 0 to 15.
            a.data.iter_mut().for_each(|v| *v = (v.abs() * 64.0) % 16.0);
        }
        inputs.insert(t.name.name.clone(), a);
    }
    let mut expected = inputs.clone();
    let line_of = |span: tilegen::diag::Span| c.file.line_col(span.start).0;
    tilegen::interp::run(&c.spec, &c.info, &line_of, dims, &mut expected).unwrap();
    (inputs, expected)
}

/// Ragged sizes for each golden spec that the tile or the row-wise lowering takes on AMD.
const SIZES: &[(&str, &[(&str, i64)])] = &[
    ("add_scaled_rows_bf16", &[("M", 7), ("N", 1000)]),
    ("attention_window_bf16", &[("B", 2), ("S", 100), ("H", 2)]),
    ("bmm_bf16", &[("batch", 2), ("M", 70), ("N", 90), ("K", 100)]),
    ("fused_add_rms_norm_bf16", &[("M", 3), ("N", 2056)]),
    ("gemm_nt_f16", &[("M", 70), ("N", 90), ("K", 100)]),
    ("gemm_rowmax_f16", &[("M", 70), ("N", 50), ("K", 100)]),
    ("gemm_scaled_sync", &[("M", 70), ("N", 150), ("K", 100)]),
    ("gemm_serial_masked", &[("M", 70), ("N", 90), ("K", 50)]),
    ("layer_norm_bf16", &[("M", 5), ("N", 1000)]),
    ("layer_norm_fwd_bf16", &[("M", 5), ("N", 1000)]),
    ("linear3d_bf16", &[("batch", 3), ("M", 70), ("N", 90), ("K", 100)]),
    ("rms_norm_bf16", &[("M", 3), ("N", 2056)]),
    ("rms_norm_quant_i8", &[("M", 5), ("N", 1000)]),
    // Two column chunks of 16384, the second ragged (W read as chunk vectors).
    ("rms_norm_wide_bf16", &[("M", 2), ("N", 20000)]),
    ("softmax_bf16", &[("M", 13), ("N", 1000)]),
    // Three column chunks of 16384, the last one ragged.
    ("softmax_wide_bf16", &[("M", 3), ("N", 40000)]),
    ("stacked_linear_bf16", &[("batch", 3), ("M", 70), ("N", 90), ("K", 100)]),
    // K / 128 odd: rows of scales start mid-word every other row.
    ("w4_decode_2warps_zp_bf16", &[("M", 5), ("N", 72), ("K", 640)]),
    ("w4_stationary_bf16", &[("M", 100), ("N", 40)]),
    ("w4_stationary_zp_bf16", &[("M", 100), ("N", 40)]),
];

/// Every golden spec the tile or the row-wise lowering takes, at ragged sizes, on random
/// inputs: the emulated kernel against the CPU interpreter's run of the spec.
#[test]
fn emulated_tile_kernels_match_the_cpu_interpreter_on_the_golden_specs() {
    let mut covered = Vec::new();
    for entry in std::fs::read_dir(root().join("tests/golden/specs")).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let rel = format!("tests/golden/specs/{stem}.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let Ok(c) = tilegen::compile(SourceFile::new(&rel, text), Target::Gfx942) else { continue };
        if c.plan.tile.is_none() && c.plan.rows.is_none() {
            continue;
        }
        let Some((_, dims)) = SIZES.iter().find(|(k, _)| *k == stem) else {
            panic!("{rel} takes the tile or the row-wise lowering: give it sizes in this test");
        };
        let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let (inputs, expected) = interpreted(&c, &dims, 0x9e37_79b9_7f4a_7c15);
        let dir = tempfile::tempdir().unwrap();
        let (c, exe) = build(&rel, Target::Gfx942, dir.path(), |s| s);
        let got = tilegen::validate::run_harness(&c, &exe, &[], &inputs, &dims, dir.path()).unwrap();
        for t in c.spec.tensors.iter().filter(|t| t.output) {
            let cmp = tilegen::golden::compare(&got[&t.name.name], &expected[&t.name.name], 1e-2);
            eprintln!("{rel} gfx942 {dims:?} {}: rel {:.2e}, max abs {:.2e}, unwritten {}", t.name.name, cmp.rel, cmp.max_abs, cmp.non_finite);
            assert!(cmp.pass, "{rel}: the emulated kernel disagrees with the interpreter on `{}`: {cmp:?}", t.name.name);
        }
        covered.push(stem);
    }
    covered.sort();
    assert_eq!(covered, ["add_scaled_rows_bf16", "attention_window_bf16", "bmm_bf16", "fused_add_rms_norm_bf16", "gemm_nt_f16", "gemm_rowmax_f16", "gemm_scaled_sync", "gemm_serial_masked", "layer_norm_bf16", "layer_norm_fwd_bf16", "linear3d_bf16", "rms_norm_bf16", "rms_norm_quant_i8", "rms_norm_wide_bf16", "softmax_bf16", "softmax_wide_bf16", "stacked_linear_bf16", "w4_decode_2warps_zp_bf16", "w4_stationary_bf16", "w4_stationary_zp_bf16"]);
}

/// Tile constants the golden specs do not use (block shapes, k depths, thread counts), each
/// changing the gfx942 plan: the emulated kernel still matches the CPU interpreter at the
/// golden spec's ragged sizes, so layout inference is checked beyond the configurations the
/// golden files pin. (A wider sweep, 120 variants from two random draws, agreed wherever the
/// sizes stayed within what the spec computes: softmax_bf16 and gemm_rowmax_f16 cover rows of
/// at most block_N values, so a narrower tile leaves the rest of a 1000-wide row unwritten.)
#[test]
fn emulated_tile_variants_match_the_cpu_interpreter() {
    let variants: &[(&str, &str, &str)] = &[
        ("attention_window_bf16", "block_N: 32", "block_N: 16"),
        ("bmm_bf16", "block_N: 128", "block_N: 512"),
        ("gemm_nt_f16", "block_K: 64", "block_K: 16"),
        ("gemm_rowmax_f16", "threads: 128", "threads: 64"),
        ("gemm_scaled_sync", "threads: 64", "threads: 512"),
        ("gemm_serial_masked", "block_M: 64", "block_M: 256"),
        ("layer_norm_fwd_bf16", "threads: 128", "threads: 512"),
        ("softmax_bf16", "block_M: 8,", "block_M: 16,"),
        ("w4_stationary_bf16", "threads: 128", "threads: 64"),
        ("w4_stationary_zp_bf16", "block_M: 64", "block_M: 16"),
    ];
    for (stem, from, to) in variants {
        let rel = format!("tests/golden/specs/{stem}.yaml");
        let text = std::fs::read_to_string(root().join(&rel)).unwrap();
        assert!(text.contains(from), "{rel} has `{from}`");
        let variant = text.replacen(from, to, 1);
        // The plan (wave grids, LDS buffers, vectors; not just the constants the code echoes).
        let plan = |t: &str| {
            let c = tilegen::compile(SourceFile::new(&rel, t.to_string()), Target::Gfx942)
                .unwrap_or_else(|(f, d)| panic!("{}", d.iter().map(|d| d.render(&f)).collect::<Vec<_>>().join("\n")));
            format!("{:?} {:?}", c.plan.tile, c.plan.rows)
        };
        assert_ne!(plan(&text), plan(&variant), "{rel}: `{to}` changes the gfx942 plan");
        let dims = SIZES.iter().find(|(k, _)| k == stem).unwrap().1.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let dir = tempfile::tempdir().unwrap();
        let (c, exe) = build_text(&rel, variant, Target::Gfx942, dir.path(), |s| s);
        let (inputs, expected) = interpreted(&c, &dims, 0x9e37_79b9_7f4a_7c15);
        let got = tilegen::validate::run_harness(&c, &exe, &[], &inputs, &dims, dir.path()).unwrap();
        for t in c.spec.tensors.iter().filter(|t| t.output) {
            let cmp = tilegen::golden::compare(&got[&t.name.name], &expected[&t.name.name], 1e-2);
            eprintln!("{rel} with `{to}`, gfx942 {dims:?} {}: rel {:.2e}, max abs {:.2e}, unwritten {}", t.name.name, cmp.rel, cmp.max_abs, cmp.non_finite);
            assert!(cmp.pass, "{rel} with `{to}`: the emulated kernel disagrees with the interpreter on `{}`: {cmp:?}", t.name.name);
        }
    }
}

/// Indices below 0 read as zeros, as the interpreter has them: a row-wise RMSNorm reading its
/// weight one column to the left (`W[k*block_N + j - 1]`) and its second pass one chunk to the
/// left (`(k - 1)*block_N`), and a tile-lowered GEMM whose A tile starts a block of rows up
/// (`(by - 1)*block_M`). The generated code checks those indices against 0 as well as the
/// tensor's extent; reading below the tensor instead would not match.
#[test]
fn indices_below_zero_read_as_zeros_like_the_interpreter() {
    // (spec, text edits, sizes, the output compared)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [(&'a str, i64)], &'a str);
    let cases: [Case; 2] = [
        ("tests/golden/specs/rms_norm_wide_bf16.yaml",
         &[("f32(W[k*block_N + j])", "f32(W[k*block_N + j - 1])"),
           ("      - copy(X[bx*block_M, k*block_N], xs)\n      - parallel(i, j):\n          - xs[i, j] = xs[i, j] * ss[i]",
            "      - copy(X[bx*block_M, (k - 1)*block_N], xs)\n      - parallel(i, j):\n          - xs[i, j] = xs[i, j] * ss[i]")],
         &[("M", 2), ("N", 20000)], "Y"),
        ("specs/gemm_bf16.yaml",
         &[("copy(A[by*block_M, k*block_K], A_s)", "copy(A[(by - 1)*block_M, k*block_K], A_s)")],
         &[("M", 300), ("N", 90), ("K", 100)], "C"),
    ];
    for (rel, edits, dims, out) in cases {
        let mut text = std::fs::read_to_string(root().join(rel)).unwrap();
        for (from, to) in edits {
            assert!(text.contains(from), "{rel}: {from}");
            text = text.replace(from, to);
        }
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("shifted.yaml");
        std::fs::write(&spec, &text).unwrap();
        let spec = spec.to_string_lossy().to_string();
        let c = tilegen::compile(SourceFile::new(&spec, text), Target::Gfx942).map_err(|_| "compile").unwrap();
        let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let (inputs, expected) = interpreted(&c, &dims, 0x1234_5678_9abc_def1);
        let (c, exe) = build(&spec, Target::Gfx942, dir.path(), |s| {
            assert!(s.contains("0 <= "), "{rel}: no lower-bound check in\n{s}");
            s
        });
        let got = tilegen::validate::run_harness(&c, &exe, &[], &inputs, &dims, dir.path()).unwrap();
        let cmp = tilegen::golden::compare(&got[out], &expected[out], 1e-2);
        eprintln!("{rel} shifted {dims:?}: rel {:.2e}, unwritten {}", cmp.rel, cmp.non_finite);
        assert!(cmp.pass, "{rel}: the emulated kernel disagrees with the interpreter: {cmp:?}");
    }
}

/// Row values to and from 1-D tensors: each row scaled by its own factor `S[row]` (loaded per
/// row), and each row's maximum stored (by the row's first thread), at a ragged M and an N
/// shorter than the tile, against the interpreter.
#[test]
fn row_values_load_and_store_like_the_interpreter() {
    let text = r#"kernel: row_scale
tensors:
  X: {dtype: bf16, shape: [M, N]}
  S: {dtype: f32, shape: [M]}
  Y: {dtype: bf16, shape: [M, N], output: true}
  R: {dtype: bf16, shape: [M], output: true}
constants: {block_M: 8, block_N: 256}
grid:
  bx: ceildiv(M, block_M)
threads: 256
buffers:
  xs: {scope: fragment, dtype: f32, shape: [block_M, block_N]}
  s: {scope: fragment, dtype: f32, shape: [block_M]}
  m: {scope: fragment, dtype: f32, shape: [block_M]}
body:
  - copy(X[bx*block_M, 0], xs)
  - copy(S[bx*block_M], s)
  - parallel(i, j):
      - xs[i, j] = select(j < N, xs[i, j] * s[i], -inf)
  - reduce_max(xs, m)
  - copy(xs, Y[bx*block_M, 0])
  - copy(m, R[bx*block_M])
"#;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("row_scale.yaml");
    std::fs::write(&spec, text).unwrap();
    let spec = spec.to_string_lossy().to_string();
    let c = tilegen::compile(SourceFile::new(&spec, text.to_string()), Target::Gfx942).map_err(|_| "compile").unwrap();
    let dims = [("M", 13), ("N", 200)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (inputs, expected) = interpreted(&c, &dims, 0x0bad_cafe_f00d_1234);
    let (c, exe) = build(&spec, Target::Gfx942, dir.path(), |s| {
        assert!(s.contains("if (row_lane == 0) {") && s.contains("s[rr] = (row < M) ? ck::type_convert<float>(S[row]) : 0.0f;"), "{s}");
        s
    });
    let got = tilegen::validate::run_harness(&c, &exe, &[], &inputs, &dims, dir.path()).unwrap();
    for out in ["Y", "R"] {
        let cmp = tilegen::golden::compare(&got[out], &expected[out], 1e-2);
        eprintln!("row_scale {out}: rel {:.2e}, unwritten {}", cmp.rel, cmp.non_finite);
        assert!(cmp.pass, "`{out}`: the emulated kernel disagrees with the interpreter: {cmp:?}");
    }
}

/// Floats convert to integers toward zero, saturating to the type's range, NaN to 0: stores
/// of a float row tile to i8 and i32 tensors, and `i8(...)` casts in a parallel block, at
/// values far outside both ranges and at NaN, against the interpreter. With the helper's clamp
/// removed (a plain conversion, undefined outside the range) the emulated kernel no longer
/// matches.
#[test]
fn float_to_integer_conversions_saturate_like_the_interpreter() {
    let text = r#"kernel: to_ints
tensors:
  X: {dtype: bf16, shape: [M, N]}
  Q8: {dtype: i8, shape: [M, N], output: true}
  Q32: {dtype: i32, shape: [M, N], output: true}
  C: {dtype: f32, shape: [M, N], output: true}
constants: {block_M: 4, block_N: 256, big: 1e10}
grid:
  bx: ceildiv(M, block_M)
threads: 128
buffers:
  xs: {scope: fragment, dtype: f32, shape: [block_M, block_N]}
  ys: {scope: fragment, dtype: f32, shape: [block_M, block_N]}
body:
  - copy(X[bx*block_M, 0], xs)
  - parallel(i, j):
      - xs[i, j] = select(j % 7 == 3, sqrt(-1.0), xs[i, j] * select(j % 3 == 0, 1000.0, big))
      - ys[i, j] = f32(i8(xs[i, j] * 0.1)) + f32(i32(rint(xs[i, j])) % 1000)
  - copy(xs, Q8[bx*block_M, 0])
  - copy(xs, Q32[bx*block_M, 0])
  - copy(ys, C[bx*block_M, 0])
"#;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("to_ints.yaml");
    std::fs::write(&spec, text).unwrap();
    let spec = spec.to_string_lossy().to_string();
    let c = tilegen::compile(SourceFile::new(&spec, text.to_string()), Target::Gfx942).map_err(|_| "compile").unwrap();
    let dims = [("M", 9), ("N", 200)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (inputs, expected) = interpreted(&c, &dims, 0x5eed_0f1a_7e57);
    let saturated = |out: &str, lim: f64| expected[out].data.iter().filter(|v| v.abs() >= lim).count();
    assert!(saturated("Q8", 127.0) > 100 && saturated("Q32", 2147483647.0) > 100, "the inputs must reach both ranges' ends");
    for clamp in [true, false] {
        let sub = tempfile::tempdir().unwrap();
        let (c, exe) = build(&spec, Target::Gfx942, sub.path(), |s| {
            let clamped = "fminf(fmaxf(x, -128.0f), 127.0f)";
            assert!(s.contains(clamped) && s.contains("v[ee] = float_to_i8(xs[rr][vv][ee]);") && s.contains("float_to_i32(rintf("), "{s}");
            if clamp { s } else { s.replace(clamped, "x") }
        });
        let got = tilegen::validate::run_harness(&c, &exe, &[], &inputs, &dims, sub.path()).unwrap();
        let same = |out: &str| got[out].data == expected[out].data;
        eprintln!("to_ints (clamp {clamp}): Q8 {}, Q32 {}, C {}", same("Q8"), same("Q32"), same("C"));
        if clamp {
            for out in ["Q8", "Q32", "C"] {
                assert!(same(out), "`{out}`: the emulated kernel disagrees with the interpreter");
            }
        } else {
            assert!(!same("Q8") && !same("C"), "without the clamp the i8 conversions should differ");
        }
    }
}

/// Launchers refuse runtime sizes over 2^30 (the kernels' int tile coordinates reach a tile
/// past an edge) before touching memory, and run sizes within the limit.
#[test]
fn launchers_refuse_sizes_over_two_to_the_thirty() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "tests/golden/specs/softmax_bf16.yaml";
    let c = tilegen::compile(SourceFile::new(spec, std::fs::read_to_string(root().join(spec)).unwrap()), Target::Gfx942).unwrap();
    for f in tilegen::back::render(&c).unwrap() {
        std::fs::write(dir.path().join(&f.name), f.contents).unwrap();
    }
    std::fs::write(dir.path().join("main.cpp"), r#"#include <cstdint>
#include <cstdio>
#include <vector>
#include "softmax_bf16.h"
int main() {
  std::vector<uint16_t> x(8 * 64, 0x3f80), y(8 * 64, 0);
  int const big = (1 << 30) + 1;
  int const ok = tilegen_softmax_bf16(x.data(), y.data(), 8, 64, nullptr);
  int const rows = tilegen_softmax_bf16(x.data(), y.data(), big, 64, nullptr);
  int const cols = tilegen_softmax_bf16(x.data(), y.data(), 8, big, nullptr);
  int const none = tilegen_softmax_bf16(x.data(), y.data(), 0, 64, nullptr);
  std::printf("%d %d %d %d %d\n", ok, rows, cols, none, int(y[0]));
}
"#).unwrap();
    let exe = dir.path().join("limits");
    let out = Command::new("g++")
        .args(["-std=c++20", "-O2", "-pthread", "-w", "-x", "c++"])
        .arg("-I").arg(root().join("tests/amd_emu"))
        .arg("-I").arg(dir.path())
        .arg(dir.path().join("softmax_bf16.hip"))
        .arg(dir.path().join("main.cpp"))
        .arg("-o").arg(&exe)
        .output().expect("running g++");
    assert!(out.status.success(), "g++ failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    // hipSuccess for the small rows (each of 64 equal values: 1/64 = 0x3c80 in bf16), then
    // hipErrorInvalidValue for M and N over the limit and for M = 0.
    assert_eq!(text.trim(), format!("0 1 1 1 {}", 0x3c80), "{text}");
}
