//! The regeneration check, as users run it: `tilegen gen --check`.

use std::path::Path;
use std::process::Command;

fn tilegen(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tilegen")).args(args).current_dir(dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn committed_generated_files_match_the_bundled_specs() {
    let (code, text) = tilegen(Path::new(env!("CARGO_MANIFEST_DIR")), &["gen", "--check"]);
    assert_eq!(code, 0, "generated/ is out of date; run `tilegen gen`:\n{text}");
    assert!(text.contains("up to date"), "{text}");
}

#[test]
fn gen_is_byte_identical_and_check_reports_drift() {
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    for name in ["gemm_bf16.yaml", "gemm_bias_relu_bf16.yaml"] {
        std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs").join(name), specs.join(name)).unwrap();
    }
    // Missing output: exit 1, named.
    let (code, text) = tilegen(dir.path(), &["gen", "--check"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("missing: generated/sm80/gemm_bf16.cu"), "{text}");

    let (code, text) = tilegen(dir.path(), &["gen"]);
    assert_eq!(code, 0, "{text}");
    let first = std::fs::read(dir.path().join("generated/sm80/gemm_bf16.cu")).unwrap();
    // Output equals the committed file: the same bytes in another folder, on another run.
    let committed = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("generated/sm80/gemm_bf16.cu")).unwrap();
    assert_eq!(first, committed);
    let (code, _) = tilegen(dir.path(), &["gen"]);
    assert_eq!(code, 0);
    assert_eq!(std::fs::read(dir.path().join("generated/sm80/gemm_bf16.cu")).unwrap(), first);
    let (code, text) = tilegen(dir.path(), &["gen", "--check"]);
    assert_eq!(code, 0, "{text}");

    // An edited file: exit 1 with a unified diff.
    let cu = dir.path().join("generated/sm80/gemm_bf16.cu");
    let edited = String::from_utf8(first.clone()).unwrap().replacen("clear(acc);", "clear(acc); // edited", 1);
    std::fs::write(&cu, edited).unwrap();
    // A stale file no spec generates.
    std::fs::write(dir.path().join("generated/sm80/old_kernel.cu"), "// old\n").unwrap();
    let (code, text) = tilegen(dir.path(), &["gen", "--check"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("changed: generated/sm80/gemm_bf16.cu"), "{text}");
    assert!(text.contains("-  clear(acc); // edited\n+  clear(acc);\n"), "{text}");
    assert!(text.contains("stale: generated/sm80/old_kernel.cu"), "{text}");
}

#[test]
fn a_failing_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/gemm_bf16.yaml"), specs.join("a.yaml")).unwrap();
    std::fs::write(specs.join("b.yaml"), "kernel: broken\nthreads: 33\n").unwrap();
    let (code, text) = tilegen(dir.path(), &["gen"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("specs/b.yaml:1:1: error: the spec is missing"), "{text}");
    assert!(!dir.path().join("generated").exists(), "a failing run wrote output");
}

#[test]
fn check_and_explain_work_on_the_bundled_specs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (code, text) = tilegen(root, &["check", "specs/gemm_bf16.yaml", "specs/gemm_f16.yaml"]);
    assert_eq!(code, 0, "{text}");
    // A spec sm80 has no lowering for is explained for the first target that has one.
    let (code, text) = tilegen(root, &["explain", "tests/golden/specs/gemm_fp8_bf16.yaml"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("note: explaining sm90a (sm80: the sm80 target takes f8e4m3 tensors") && text.contains("kernel gemm_fp8_bf16 (tests/golden/specs/gemm_fp8_bf16.yaml), target sm90a"), "{text}");
    let (code, text) = tilegen(root, &["explain", "--target", "sm80", "tests/golden/specs/gemm_fp8_bf16.yaml"]);
    assert_eq!(code, 1, "{text}");
    let (code, text) = tilegen(root, &["explain", "specs/gemm_bf16.yaml"]);
    assert_eq!(code, 0, "{text}");
    for needle in ["SM80_16x8x16_F32BF16BF16F32_TN", "Swizzle<", "SM80_CP_ASYNC_CACHEGLOBAL", "Multistage, 4 stage(s)", "warps 2x2", "shared memory:", "registers: about"] {
        assert!(text.contains(needle), "explain lacks {needle}:\n{text}");
    }
    // sm90a: attention's gemms as warpgroup MMAs fed by a producer warpgroup's TMA loads; w4a16
    // stays on mma.sync, with the reason.
    let (code, text) = tilegen(root, &["explain", "specs/flash_attention_fwd_bf16.yaml", "--target", "sm90a"]);
    assert_eq!(code, 0, "{text}");
    for needle in ["2 warpgroup(s)", "warpgroup MMA SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>", "_RS<GMMA::Major::K, GMMA::Major::MN>", "GMMA::Layout_MN_SW128_Atom",
                   "TMA (SM90_TMA_LOAD): 2 box(es) of 64x128 elements", "TMA multistage, warp-specialised", "bytes of TMA mbarriers",
                   "Warp roles", "producer: threads 256..383 (one warpgroup), setmaxnreg 40 registers",
                   "Software pipelining", "tile t's gemm at spec 42 and tile t-1's gemm at spec 58 are issued together",
                   "after it (they use what it reads or writes): spec 56, and the assignment at spec 54"] {
        assert!(text.contains(needle), "explain lacks {needle}:\n{text}");
    }
    // w4a16: sm80 copies with cp.async into padded, swizzled rows; sm90a has a TMA producer warp
    // and keeps the tiles in 256-deep spans under TMA's 128-byte swizzle.
    let (code, text) = tilegen(root, &["explain", "specs/w4a16_gemm_bf16.yaml", "--target", "sm80"]);
    assert_eq!(code, 0, "{text}");
    for needle in ["Thin-tile dequant GEMM", "2 row group(s) of 16 weight rows x 4 k share(s)", "`A_s`: rows of block_K + 16 (padding) elements, Swizzle<1,3,3>", "cp.async multistage on mbarriers",
                   "the launcher runs a second instantiation whose rows have 2 spare slots"] {
        assert!(text.contains(needle), "explain lacks {needle}:\n{text}");
    }
    let (code, text) = tilegen(root, &["explain", "specs/w4a16_gemm_bf16.yaml", "--target", "sm90a"]);
    assert_eq!(code, 0, "{text}");
    for needle in ["Thin-tile dequant GEMM", "mma.sync, not warpgroup MMAs: its dequant_int4", "2 row group(s) of 16 weight rows x 4 k share(s)",
                   "producer: threads 256..287 (one warp)", "`A_s`: 2 span(s) of 256 k per tile", "TMA multistage, warp-specialised, 4 stages",
                   "2 box(es) of (64, 4, rows, 1) per tile", "K % 256 == 128: the odd-rows instantiation's maps",
                   "`scales`: base aligned to 2 elements"] {
        assert!(text.contains(needle), "explain lacks {needle}:\n{text}");
    }
    let (code, _) = tilegen(root, &["gen", "--target", "sm99"]);
    assert_eq!(code, 2);
}

#[test]
fn targets_without_a_lowering_are_skipped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    for name in ["gemm_bf16.yaml", "flash_attention_fwd_bf16.yaml", "linear_attention_causal_bf16.yaml"] {
        std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs").join(name), specs.join(name)).unwrap();
    }
    // A spec with 8-row fragments and over 64 KB of shared tiles has no AMD lowering.
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/specs/w4_thin_f16.yaml"), specs.join("w4_thin_f16.yaml")).unwrap();
    let (code, text) = tilegen(dir.path(), &["gen"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("note: specs/w4_thin_f16.yaml: skipped for gfx942: the gfx942 target has no lowering for this fused program"), "{text}");
    assert!(text.contains("and tilegen's tile lowering on MFMAs cannot take it (2 reasons below)"), "{text}");
    let out = dir.path().join("generated");
    // Attention is recognised and goes to composable_kernel's fused attention on AMD.
    for f in ["sm80/flash_attention_fwd_bf16.cu", "sm90a/flash_attention_fwd_bf16.cu", "gfx942/gemm_bf16.hip", "gfx90a/gemm_bf16.hip", "gfx942/gemm_bf16.h",
              "gfx942/flash_attention_fwd_bf16.hip", "gfx90a/flash_attention_fwd_bf16.h", "sm80/linear_attention_causal_bf16.cu",
              "gfx942/linear_attention_causal_bf16.hip", "gfx90a/linear_attention_causal_bf16.h", "sm80/w4_thin_f16.cu"] {
        assert!(out.join(f).is_file(), "{f} was not written:\n{text}");
    }
    assert!(!out.join("gfx942/w4_thin_f16.hip").exists());
    // `check` without --target agrees: a note for the AMD targets, ok for the others.
    let (code, text) = tilegen(dir.path(), &["check", "specs/w4_thin_f16.yaml"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("specs/w4_thin_f16.yaml: ok for sm80, sm90a") && text.contains("note: specs/w4_thin_f16.yaml: skipped for gfx942: the gfx942 target has no lowering for this fused program"), "{text}");
    // Asked for explicitly, the same pair is an error that says why.
    let (code, text) = tilegen(dir.path(), &["check", "--target", "gfx942", "specs/w4_thin_f16.yaml"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("error: the gfx942 target has no lowering for this fused program"), "{text}");
    // AMD files are built with hipcc, not by `tilegen build` (nvcc): a usage error that says so.
    let (code, text) = tilegen(dir.path(), &["build", "--target", "gfx942", "specs/gemm_bf16.yaml"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("compiled with hipcc"), "{text}");
    // And the check mode agrees with what was written.
    let (code, text) = tilegen(dir.path(), &["gen", "--check"]);
    assert_eq!(code, 0, "{text}");
}
