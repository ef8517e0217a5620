//! `tilegen build` drives nvcc through the cc crate into an object and a shared library,
//! and the validation harness builds and links against it (running it needs a GPU, which
//! CI lacks: that part runs on the GPU machine, see scripts/gpu/roundtrip.sh).

use std::path::Path;
use std::process::Command;
use tilegen::target::Target;

#[test]
fn build_makes_a_shared_library_and_the_harness_links() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let spec = "tests/golden/specs/gemm_serial_masked.yaml";
    let o = Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .args(["build", spec, "--sm", "80", "-o"]).arg(out.path())
        .current_dir(root).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    let dir = out.path().join("sm80");
    for f in ["gemm_serial_masked.cu", "gemm_serial_masked.h", "gemm_serial_masked.o", "libgemm_serial_masked.so"] {
        assert!(dir.join(f).is_file(), "{f} missing:\n{text}");
    }
    // The spec's own warning (its unused `stages`) comes first; nvcc gives none.
    let building = text.find("building ").expect("a build line");
    assert!(text[..building].contains("warning: constant `stages` is never used"), "{text}");
    assert!(!text[building..].contains("warning"), "{text}");
    // The harness: generated C++ with a main, linked with the kernel's object.
    let tc = tilegen::build::find_toolchain(None, None).unwrap();
    let file = tilegen::output::read_spec(&root.join(spec)).unwrap();
    let compiled = tilegen::compile(file, Target::Sm80).map_err(|_| ()).unwrap();
    let built = tilegen::build::Built {
        kernel: "gemm_serial_masked".into(),
        compiled,
        dir: dir.clone(),
        object: dir.join("gemm_serial_masked.o"),
        shared_library: dir.join("libgemm_serial_masked.so"),
    };
    let exe = tilegen::validate::build_harness(&built, &tc).unwrap();
    // Without arguments it prints its usage and exits 2, before touching the GPU.
    let o = Command::new(&exe).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("usage:"));
}

#[test]
fn build_reports_a_missing_toolchain_clearly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .args(["build", "specs/gemm_bf16.yaml", "--nvcc", "/nonexistent/nvcc"])
        .current_dir(root).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/nvcc does not exist"));
}
