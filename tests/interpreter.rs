//! The CPU reference interpreter reproduces every golden output (computed independently by
//! numpy in scripts/golden_outputs.py), and a wrong program does not.

use std::path::Path;
use tilegen::diag::SourceFile;
use tilegen::golden::{cases_path, interpret_case, load_cases};
use tilegen::target::Target;

fn compile(path: &Path, text: Option<String>) -> tilegen::Compiled {
    let text = text.unwrap_or_else(|| std::fs::read_to_string(path).unwrap());
    tilegen::compile(SourceFile::new(path.display().to_string(), text), Target::Sm80).map_err(|(_, d)| format!("{d:?}")).unwrap()
}

#[test]
fn interpreter_reproduces_every_golden_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut specs: Vec<_> = std::fs::read_dir(root.join("specs")).unwrap().map(|e| e.unwrap().path()).collect();
    specs.sort();
    let mut checked = 0;
    for spec in specs {
        let c = compile(&spec, None);
        let path = cases_path(root, &c.spec.kernel.name);
        let set = load_cases(&path).unwrap_or_else(|e| panic!("every bundled spec needs golden cases: {e}"));
        assert_eq!(set.kernel, c.spec.kernel.name);
        assert!(set.cases.len() >= 2);
        for case in &set.cases {
            let results = interpret_case(&c, path.parent().unwrap(), case).unwrap();
            assert!(!results.is_empty());
            for (name, cmp) in results {
                eprintln!("{} {} {name}: rel {:.2e} max abs {:.2e}", set.kernel, case.name, cmp.rel, cmp.max_abs);
                assert!(cmp.pass, "{} case {} output {name}: {cmp:?} (rtol {})", set.kernel, case.name, case.rtol);
                // Rounding to the output dtype leaves a visible, bounded error: the
                // comparison is against an independent f64 reference, not a copy of ours.
                assert!(cmp.rel > 0.0);
                checked += 1;
            }
        }
    }
    assert!(checked >= 9, "only {checked} outputs checked");
}

#[test]
fn a_wrong_program_fails_its_golden_outputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = root.join("specs/gemm_bias_relu_bf16.yaml");
    // Drop the ReLU: the result must no longer match numpy's reference.
    let text = std::fs::read_to_string(&spec).unwrap().replace("max(acc[i, j] + f32(bias[bx*block_N + j]), 0.0)", "acc[i, j] + f32(bias[bx*block_N + j])");
    let c = compile(&spec, Some(text));
    let path = cases_path(root, "gemm_bias_relu_bf16");
    let set = load_cases(&path).unwrap();
    let case = set.cases.iter().find(|c| c.name.starts_with("ragged")).unwrap();
    let results = interpret_case(&c, path.parent().unwrap(), case).unwrap();
    assert!(results.iter().all(|(_, cmp)| !cmp.pass), "{results:?}");
}

#[test]
fn per_group_zero_points_are_applied_and_checked() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = root.join("specs/w4a16_zp_gemm_bf16.yaml");
    let path = cases_path(root, "w4a16_zp_gemm_bf16");
    let set = load_cases(&path).unwrap();
    let case = set.cases.iter().find(|c| c.name.starts_with("ragged")).unwrap();
    let dir = path.parent().unwrap();
    let c = compile(&spec, None);
    let line_of = |span: tilegen::diag::Span| c.file.line_col(span.start).0;
    let run = |edit: &dyn Fn(&mut Vec<f64>)| {
        let mut tensors = tilegen::golden::load_inputs(&c.spec, dir, case).unwrap();
        edit(&mut tensors.get_mut("zeros").unwrap().data);
        let sizes = tilegen::interp::infer_sizes(&c.spec, &c.info, &tensors, &case.sizes).unwrap();
        tilegen::interp::run(&c.spec, &c.info, &line_of, &sizes, &mut tensors).map(|_| tensors).map_err(|e| e.to_string())
    };
    // Every zero point 8 (what `zero=8` means) instead of the drawn ones: the golden output,
    // computed with them, no longer matches.
    let out = run(&|z| z.iter_mut().for_each(|v| *v = 8.0)).unwrap();
    let expected = tilegen::golden::load_expected(dir, case).unwrap();
    let cmp = tilegen::golden::compare(&out["C"], &expected["C"], case.rtol);
    assert!(!cmp.pass, "{cmp:?}");
    // A zero point the kernels cannot represent exactly is refused, naming the element of the
    // input tensor (the case's zeros are [N, K/128] = [.., 4], so element 5 is [1, 1]) ...
    let err = run(&|z| z[5] = 7.5).unwrap_err();
    assert_eq!(err, "`zeros`[1, 1] is 7.5; the dequant_int4 at spec line 30 reads `zeros` as zero points (through `Z_s`), which are integers 0 to 15");
    let err = run(&|z| z[2] = 16.0).unwrap_err();
    assert!(err.starts_with("`zeros`[0, 2] is 16;"), "{err}");
    // ... or, for zero points the body computes, the element of the tile and where the run was.
    let text = std::fs::read_to_string(&spec).unwrap().replace("copy(zeros[bx*block_N, k*(block_K/128)], Z_s)", "fill(Z_s, 7.5)")
        .replace("threads: 256", "threads: 64");  // the general lowering, as the thin tile copies its zero points
    let c = compile(&spec, Some(text));
    let line_of = |span: tilegen::diag::Span| c.file.line_col(span.start).0;
    let mut tensors = tilegen::golden::load_inputs(&c.spec, dir, case).unwrap();
    let sizes = tilegen::interp::infer_sizes(&c.spec, &c.info, &tensors, &case.sizes).unwrap();
    let err = tilegen::interp::run(&c.spec, &c.info, &line_of, &sizes, &mut tensors).unwrap_err().to_string();
    assert_eq!(err, "spec line 30: `Z_s`[0, 0] is 7.5 (at bx = 0, by = 0, k = 0); zero points are integers 0 to 15");
}

/// `tilegen run` needs no target: a spec only sm90a lowers runs on the interpreter, and its
/// result is the exact integer product, scaled.
#[test]
fn run_interprets_a_spec_that_only_one_target_lowers() {
    use tilegen::ast::DType;
    use tilegen::interp::npy::Array;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The W8A8 golden without its sm80 tile override: its Hopper-sized stages overflow sm80's
    // shared memory, so only sm90a lowers it.
    let golden = std::fs::read_to_string(root.join("tests/golden/specs/gemm_w8a8_bf16.yaml")).unwrap();
    let text: String = golden.lines().filter(|l| !l.contains("sm80")).map(|l| format!("{l}\n")).collect();
    assert_ne!(text, golden);
    assert!(tilegen::compile(SourceFile::new("w8a8", text.clone()), Target::Sm80).is_err());
    assert!(tilegen::compile(SourceFile::new("w8a8", text.clone()), Target::Sm90a).is_ok());
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("gemm_w8a8_bf16.yaml");
    std::fs::write(&spec, text).unwrap();
    let (m, n, k) = (37usize, 50usize, 96usize);
    // Deterministic int8 values over the whole range, and scales that are powers of two apart.
    let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 + 11) % 256) as f64 - 128.0).collect();
    let b: Vec<f64> = (0..n * k).map(|i| ((i * 53 + 7) % 256) as f64 - 128.0).collect();
    let sa: Vec<f64> = (0..m).map(|i| 2f64.powi(-10 - (i % 3) as i32)).collect();
    let sb: Vec<f64> = (0..n).map(|j| 1.0 + j as f64 / 64.0).collect();
    let (inputs, out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&inputs).unwrap();
    for (name, dtype, shape, data) in [("A", DType::I8, vec![m, k], &a), ("B", DType::I8, vec![n, k], &b), ("a_scale", DType::F32, vec![m], &sa), ("b_scale", DType::F32, vec![n], &sb)] {
        Array { shape, dtype, data: data.clone() }.write(&inputs.join(format!("{name}.npy"))).unwrap();
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .arg("run").arg(&spec).arg("--inputs").arg(&inputs).arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = Array::from_npy(&std::fs::read(out.join("C.npy")).unwrap(), DType::BF16).unwrap();
    assert_eq!(c.shape, vec![m, n]);
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|x| a[i * k + x] * b[j * k + x]).sum();
            let want = dot * sa[i] * sb[j];
            let got = c.data[i * n + j];
            assert!((got - want).abs() <= want.abs() / 128.0, "C[{i}, {j}] = {got}, want {want}");
        }
    }
}

#[test]
fn run_refuses_sizes_the_spec_does_not_have_and_arrays_of_another_dtype() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inputs = root.join("tests/golden/gemm_bf16/ragged_77x136x264");
    let out = tempfile::tempdir().unwrap();
    let run = |spec: &str, extra: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_tilegen")).current_dir(root)
            .args(["run", spec, "--inputs"]).arg(&inputs).arg("--out").arg(out.path()).args(extra).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    // A misspelt size: a command-line error (exit 2) that names the spec's sizes, not a silent
    // success; so are a repeated size, a constant's name, an empty name and a size below 1.
    let (code, text) = run("specs/gemm_bf16.yaml", &["--size", "m=77"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("`m` is not a runtime size of specs/gemm_bf16.yaml (they are M, N, K); did you mean `M`?"), "{text}");
    for (args, want) in [
        (&["--size", "M=77", "--size", "M=78"][..], "--size M is given twice"),
        (&["--size", "=5"][..], "with a size's name before `=`"),
        (&["--size", "M=0"][..], "a size must be at least 1"),
    ] {
        let (code, text) = run("specs/gemm_bf16.yaml", args);
        assert_eq!(code, Some(2), "{text}");
        assert!(text.contains(want), "{text}");
    }
    let (code, text) = run("specs/flash_attention_fwd_bf16.yaml", &["--size", "D=128"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("`D` is a constant of the spec (128), not a runtime size"), "{text}");
    // bf16 arrays given to an f16 spec: bad input (exit 1), not an I/O failure (exit 3).
    let (code, text) = run("specs/gemm_f16.yaml", &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("expected dtype <f2 for f16"), "{text}");
    // The same run with its own sizes succeeds.
    let (code, text) = run("specs/gemm_bf16.yaml", &["--size", "M=77"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(out.path().join("C.npy").is_file());
}

/// `order=interleaved` reads the same values from words repacked in interleaved order: the
/// bundled 4-bit spec with the order changed reproduces its golden output from repacked words,
/// and not from the original ones.
#[test]
fn interleaved_words_repacked_give_the_golden_output() {
    use tilegen::ast::NibbleOrder;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = root.join("specs/w4a16_gemm_bf16.yaml");
    let path = cases_path(root, "w4a16_gemm_bf16");
    let set = load_cases(&path).unwrap();
    let dir = path.parent().unwrap();
    let text = std::fs::read_to_string(&spec).unwrap().replace("zero=8)", "zero=8, order=interleaved)");
    let c = compile(&spec, Some(text));
    assert_eq!(c.spec.nibble_order(), NibbleOrder::Interleaved);
    let line_of = |span: tilegen::diag::Span| c.file.line_col(span.start).0;
    let repack = |w: f64| {
        let w = w as i64 as u32;
        let v = (0..8).fold(0u32, |acc, i| acc | (((w >> (4 * i)) & 15) << NibbleOrder::Interleaved.shift(i)));
        v as i32 as f64
    };
    for case in &set.cases {
        let expected = tilegen::golden::load_expected(dir, case).unwrap();
        for repacked in [true, false] {
            let mut tensors = tilegen::golden::load_inputs(&c.spec, dir, case).unwrap();
            if repacked {
                tensors.get_mut("Wq").unwrap().data.iter_mut().for_each(|w| *w = repack(*w));
            }
            let sizes = tilegen::interp::infer_sizes(&c.spec, &c.info, &tensors, &case.sizes).unwrap();
            tilegen::interp::run(&c.spec, &c.info, &line_of, &sizes, &mut tensors).unwrap();
            let cmp = tilegen::golden::compare(&tensors["C"], &expected["C"], case.rtol);
            assert_eq!(cmp.pass, repacked, "case {} (repacked: {repacked}): {cmp:?}", case.name);
        }
    }
}
