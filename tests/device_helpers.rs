//! Device helpers of the generated code, compiled for the host with g++ and checked against
//! the interpreter's definition of the same conversion.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// float_to_e4m3 (templates/helpers/float_to_e4m3.cuh, the sm80 target's f8e4m3 stores) gives
/// the interpreter's E4M3 bits (round to nearest even, saturating at ±448) for every E4M3
/// value, the midpoints between neighbours (ties), their neighbouring floats, values past the
/// range, infinities, zeros, NaN and a sweep of f32 bit patterns over the whole range.
#[test]
fn float_to_e4m3_matches_the_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("float_to_e4m3");
    let out = Command::new("g++")
        .args(["-std=c++17", "-O2", "-Wall", "-Werror"])
        .arg("-I").arg(root().join("templates/helpers"))
        .arg(root().join("tests/host_emu/float_to_e4m3_main.cpp"))
        .arg("-o").arg(&exe)
        .output().expect("running g++");
    assert!(out.status.success(), "g++: {}", String::from_utf8_lossy(&out.stderr));
    let mut values: Vec<f32> = vec![0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 448.0, 449.0, 463.9, 464.0, 1e30, -1e-30, f32::MIN_POSITIVE];
    let finite: Vec<f64> = (0..=126u8).map(tilegen::interp::e4m3_value).collect();
    for w in finite.windows(2) {
        let mid = ((w[0] + w[1]) / 2.0) as f32;
        values.extend([w[0] as f32, mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits() - 1)]);
    }
    values.extend((0..200_000u32).map(|i| f32::from_bits(i.wrapping_mul(21_475) ^ (i << 16))));
    let all: Vec<f32> = values.iter().flat_map(|v| [*v, -*v]).collect();
    let input = dir.path().join("values.txt");
    std::fs::write(&input, all.iter().map(|v| format!("{:x}\n", v.to_bits())).collect::<String>()).unwrap();
    let out = Command::new(&exe).stdin(Stdio::from(std::fs::File::open(&input).unwrap())).output().unwrap();
    assert!(out.status.success());
    let got: Vec<u8> = String::from_utf8(out.stdout).unwrap().lines().map(|l| u8::from_str_radix(l, 16).unwrap()).collect();
    assert_eq!(got.len(), all.len());
    let mut checked = 0;
    for (v, g) in all.iter().zip(&got) {
        let want = tilegen::interp::e4m3_bits(*v as f64);
        if v.is_nan() {
            assert_eq!(g & 0x7f, 0x7f, "NaN -> {g:02x}");
        } else {
            assert_eq!(*g, want, "{v:e} ({:08x}): helper {g:02x}, interpreter {want:02x}", v.to_bits());
        }
        checked += 1;
    }
    assert!(checked > 400_000);
}

/// int4x2_pair (templates/helpers/int4x2_pair*.cuh, the first step of every NVIDIA unpacking)
/// finds values 2p and 2p + 1 of a word where the interpreter reads them (`NibbleOrder::shift`),
/// in both orders, for words that set each nibble to each value.
#[test]
fn int4x2_pair_matches_the_interpreter_in_both_orders() {
    use tilegen::ast::NibbleOrder;
    let dir = tempfile::tempdir().unwrap();
    // Every nibble of a word takes every value (word w: nibble i is (w + 3i) % 16), plus a sweep.
    let mut words: Vec<u32> = (0..16u32).map(|w| (0..8).fold(0, |acc, i| acc | (((w + 3 * i) % 16) << (4 * i)))).collect();
    words.extend((0..4096u32).map(|i| i.wrapping_mul(2_654_435_761)));
    let input = dir.path().join("words.txt");
    std::fs::write(&input, words.iter().map(|w| format!("{w:x}\n")).collect::<String>()).unwrap();
    for order in [NibbleOrder::Sequential, NibbleOrder::Interleaved] {
        let exe = dir.path().join(order.name());
        let mut cmd = Command::new("g++");
        cmd.args(["-std=c++17", "-O2", "-Wall", "-Werror"]).arg("-I").arg(root().join("templates/helpers"));
        if order == NibbleOrder::Interleaved {
            cmd.arg("-DINTERLEAVED");
        }
        let out = cmd.arg(root().join("tests/host_emu/int4x2_pair_main.cpp")).arg("-o").arg(&exe).output().expect("running g++");
        assert!(out.status.success(), "g++: {}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new(&exe).stdin(Stdio::from(std::fs::File::open(&input).unwrap())).output().unwrap();
        assert!(out.status.success());
        let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect();
        assert_eq!(lines.len(), words.len());
        for (w, line) in words.iter().zip(&lines) {
            let value = |i: usize| (w >> order.shift(i)) & 15;
            let want: Vec<String> = (0..4).map(|p| format!("{:08x}", value(2 * p) | (value(2 * p + 1) << 16))).collect();
            assert_eq!(line, &want.join(" "), "{} order, word {w:08x}", order.name());
        }
    }
}

/// loaded_ptx_version (templates/helpers/loaded_ptx_version.cuh, the sm80 decode launchers'
/// choice of programmatic dependent launch) asks the runtime once per device and then answers
/// from memory; each device keeps its own answer; a failed query is reported and not remembered;
/// devices past the remembered ones are asked every time; cudaGetDevice's error is reported.
#[test]
fn loaded_ptx_version_asks_once_per_device() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("loaded_ptx_version");
    let out = Command::new("g++")
        .args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-I").arg(root().join("templates/helpers"))
        .arg(root().join("tests/host_emu/loaded_ptx_version_main.cpp"))
        .arg("-o").arg(&exe)
        .output().expect("running g++");
    assert!(out.status.success(), "g++: {}", String::from_utf8_lossy(&out.stderr));
    let script = [
        ("ptx 0 90", None),
        ("ptx 1 80", None),
        ("ask 0", Some("err=0 version=90 asked=1")),
        ("ask 0", Some("err=0 version=90 asked=1")), // remembered
        ("ask 1", Some("err=0 version=80 asked=2")), // another device, asked once
        ("ask 1", Some("err=0 version=80 asked=2")),
        ("ask 0", Some("err=0 version=90 asked=2")),
        ("ptx 3 90", None),
        ("fail 98", None),
        ("ask 3", Some("err=98 version=-1 asked=3")), // the error, not remembered
        ("fail 0", None),
        ("ask 3", Some("err=0 version=90 asked=4")),
        ("ask 3", Some("err=0 version=90 asked=4")),
        ("ptx 70 90", None),
        ("ask 70", Some("err=0 version=90 asked=5")), // past the remembered devices
        ("ask 70", Some("err=0 version=90 asked=6")),
        ("nodevice 100", None),
        ("ask 0", Some("err=100 version=-1 asked=6")),
    ];
    let input: String = script.iter().map(|(c, _)| format!("{c}\n")).collect();
    let mut child = Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the stand-in exited with {:?}", out.status);
    let want: Vec<&str> = script.iter().filter_map(|(_, w)| *w).collect();
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().collect::<Vec<_>>(), want);
}
