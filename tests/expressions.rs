//! Expressions of a spec rendered to C++ compute what the spec means.
//!
//! Each expression is rendered by the back ends' converter, compiled into a small host program
//! with the host's g++ (the spec's constants as `constexpr`), and its printed value compared
//! with the checker's own evaluation of the same expression. Compound operands of the
//! spelled-out forms (`ceildiv`, `min`, `max`, a prefix `-`) are where a missing bracket
//! changes the value.

use std::process::Command;
use tilegen::back::conv::{Conv, Env};
use tilegen::diag::{SourceFile, Span};
use tilegen::front::expr::ExprParser;
use tilegen::target::Target;

struct NoBuffers;

impl Env for NoBuffers {
    fn buffer_element(&self, _buffer: usize, _idx: &[tilegen::ast::Expr]) -> Option<String> {
        None
    }
}

const SPEC: &str = "kernel: t
tensors:
  A: {dtype: bf16, shape: [M, K]}
  B: {dtype: bf16, shape: [K, N]}
  C: {dtype: bf16, shape: [M, N], output: true}
constants: {block_M: 64, block_N: 64, block_K: 32, stages: 2, two: 2, h: 48, p: 7, q: 12, r: 3, big: 1000, x: 1.0, one: 1.0, fbig: 1.0e8, tiny: 1.0e-30, huge: 1.0e30}
grid:
  bx: ceildiv(N, block_N)
  by: ceildiv(M, block_M)
threads: 128
buffers:
  A_s: {scope: shared, dtype: bf16, shape: [block_M, block_K]}
  B_s: {scope: shared, dtype: bf16, shape: [block_K, block_N]}
  acc: {scope: fragment, dtype: f32, shape: [block_M, block_N]}
body:
  - clear(acc)
  - pipelined(k, ceildiv(K, block_K), stages):
      - copy(A[by*block_M, k*block_K], A_s)
      - copy(B[k*block_K, bx*block_N], B_s)
      - gemm(A_s, B_s, acc)
  - copy(acc, C[by*block_M, bx*block_N])
";

/// Integer expressions whose operators meet in the spelled-out forms.
const CASES: [&str; 20] = [
    "ceildiv(p - q, r)",
    "ceildiv(p - q - r, two)",
    "ceildiv(-big, q) + ceildiv(big, q)",
    "ceildiv(0 - p, p)",
    "ceildiv(big, 2 * h)",
    "ceildiv(big, block_M / two)",
    "ceildiv(big, 2 * block_M / two)",
    "ceildiv(big, 64 + 64)",
    "ceildiv(big, q - p)",
    "ceildiv(big - q, r)",
    "ceildiv(p * q, r + 2)",
    "min(q - p, r)",
    "max(p, q - r * 2)",
    "min(big / q, p + r) * 2",
    "-(-p)",
    "-(q - p)",
    "q - -p",
    "big / (two * r)",
    "big % (q - p) + 1",
    "two * ceildiv(big, q) - min(p, r)",
];

/// Float expressions (the spec's constants x = one = 1, fbig = 1e8, tiny = 1e-30, huge = 1e30)
/// and their value in f32, rounded in the order the spec writes.
fn float_cases() -> [(&'static str, f32); 6] {
    let (x, one, fbig, tiny, huge) = (1.0f32, 1.0f32, 1.0e8f32, 1.0e-30f32, 1.0e30f32);
    [
        ("2.0 * f32(x + 1.0) - f32(x - 1.0) + -f32(x * 3.0 - 1.0)", 2.0 * (x + 1.0) - (x - 1.0) + -(x * 3.0 - 1.0)),
        ("one + (x * (tiny * huge)) + (fbig + (-fbig + one))", one + (x * (tiny * huge)) + (fbig + (-fbig + one))),
        ("x * (tiny * huge)", x * (tiny * huge)),
        ("-(-1.5) * x", 1.5 * x),
        ("x - (one - x) - (fbig - 1.0e8)", x - (one - x) - (fbig - 1.0e8)),
        ("fbig + (one + one) - fbig", fbig + (one + one) - fbig),
    ]
}

#[test]
fn integer_expressions_render_to_cpp_that_computes_their_value() {
    let c = tilegen::compile(SourceFile::new("t.yaml", SPEC.to_string()), Target::Sm80)
        .unwrap_or_else(|(f, d)| panic!("{}", d.iter().map(|d| d.render(&f)).collect::<Vec<_>>().join("\n")));
    let conv = Conv { spec: &c.spec, info: &c.info, hip: false, fp8_in_software: false };
    let mut program = String::from("#include <cstdint>\n#include <cstdio>\n#include <cstring>\n");
    for k in &c.spec.constants {
        let ty = if conv.is_float(&k.value) { "float" } else { "int64_t" };
        program.push_str(&format!("constexpr {ty} {} = {};\n", k.name.name, conv.expr(&k.value, &NoBuffers)));
    }
    program.push_str("int main() {\n");
    let mut expected = Vec::new();
    for case in CASES {
        let e = ExprParser::new(case, None, Span { start: 0, end: 0 }).and_then(ExprParser::whole_expr).unwrap_or_else(|d| panic!("{case}: {}", d.message));
        expected.push(tilegen::check::eval_int(&e, &c.info.symbols).unwrap_or_else(|| panic!("{case} has a value")));
        program.push_str(&format!("  std::printf(\"%lld\\n\", static_cast<long long>({}));\n", conv.expr(&e, &NoBuffers)));
    }
    // Float expressions print their bits: the C++ must round in the spec's order.
    for (case, _) in float_cases() {
        let e = ExprParser::new(case, None, Span { start: 0, end: 0 }).and_then(ExprParser::whole_expr).unwrap_or_else(|d| panic!("{case}: {}", d.message));
        assert!(conv.is_float(&e), "{case}");
        program.push_str(&format!("  {{ float const v = {}; unsigned u; std::memcpy(&u, &v, 4); std::printf(\"%u\\n\", u); }}\n", conv.expr(&e, &NoBuffers)));
    }
    program.push_str("  return 0;\n}\n");

    let dir = tempfile::tempdir().unwrap();
    let (src, exe) = (dir.path().join("exprs.cpp"), dir.path().join("exprs"));
    std::fs::write(&src, &program).unwrap();
    let built = Command::new("g++").args(["-std=c++17", "-Wall", "-Werror", "-o"]).arg(&exe).arg(&src).output().expect("running g++");
    assert!(built.status.success(), "g++ failed:\n{}\n{program}", String::from_utf8_lossy(&built.stderr));
    let run = Command::new(&exe).output().unwrap();
    let got: Vec<i64> = String::from_utf8_lossy(&run.stdout).lines().map(|l| l.parse().unwrap()).collect();
    for ((case, want), got) in CASES.iter().zip(&expected).zip(&got) {
        assert_eq!(got, want, "`{case}` rendered as C++ computes {got}, the spec means {want}:\n{program}");
    }
    for ((case, want), got) in float_cases().iter().zip(&got[CASES.len()..]) {
        let got = f32::from_bits(*got as u32);
        assert_eq!(got.to_bits(), want.to_bits(), "`{case}` rendered as C++ computes {got:e}, the spec means {want:e}:\n{program}");
    }
    assert_eq!(got.len(), CASES.len() + float_cases().len(), "{program}");
}

/// Loop counts' lower bounds over every launch (`check::lower_bound`: sizes at least 1, block
/// indices from 0), against the minimum the rendered C++ reaches over sizes 1..=300 and block
/// indices 0..8 (each bound is reached); the cases given no bound do reach below 1.
#[test]
fn lower_bounds_of_loop_counts_hold_for_every_launch() {
    const BOUNDS: [(&str, Option<i64>); 11] = [
        ("ceildiv(K, block_K)", Some(1)),
        ("min(ceildiv(N, block_N), ceildiv((bx + 1) * block_M, block_N))", Some(1)),
        ("ceildiv(K, block_K) - 1", Some(0)),
        ("(bx + 1) * block_M + block_N - 1", Some(127)),
        ("max(K / block_K, 1)", Some(1)),
        ("K / block_K", Some(0)),
        ("ceildiv(K, two) * by", Some(0)),
        ("min(K, 3) + bx", Some(1)),
        ("ceildiv(K - block_K, block_K)", None),
        ("N - K", None),
        ("K / N", None),
    ];
    let c = tilegen::compile(SourceFile::new("t.yaml", SPEC.to_string()), Target::Sm80)
        .unwrap_or_else(|(f, d)| panic!("{}", d.iter().map(|d| d.render(&f)).collect::<Vec<_>>().join("\n")));
    let conv = Conv { spec: &c.spec, info: &c.info, hip: false, fp8_in_software: false };
    let mut program = String::from("#include <algorithm>\n#include <cstdint>\n#include <cstdio>\n");
    for k in c.spec.constants.iter().filter(|k| !conv.is_float(&k.value)) {
        program.push_str(&format!("constexpr int64_t {} = {};\n", k.name.name, conv.expr(&k.value, &NoBuffers)));
    }
    program.push_str("int main() {\n");
    let mut claimed = Vec::new();
    for (case, want) in BOUNDS {
        let e = ExprParser::new(case, None, Span { start: 0, end: 0 }).and_then(ExprParser::whole_expr).unwrap_or_else(|d| panic!("{case}: {}", d.message));
        claimed.push(tilegen::check::lower_bound(&e, &c.info.symbols));
        assert_eq!(claimed.last().copied().flatten(), want, "`{case}`: lower bound");
        program.push_str(&format!(
            "  {{\n    long long low = 1LL << 40;\n    for (int K = 1; K <= 300; ++K)\n      for (int N = 1; N <= 300; N += 7)\n        for (int bx = 0; bx < 8; ++bx)\n          for (int by = 0; by < 8; by += 3)\n            low = std::min(low, static_cast<long long>({}));\n    std::printf(\"%lld\\n\", low);\n  }}\n",
            conv.expr(&e, &NoBuffers)));
    }
    program.push_str("  return 0;\n}\n");
    let dir = tempfile::tempdir().unwrap();
    let (src, exe) = (dir.path().join("bounds.cpp"), dir.path().join("bounds"));
    std::fs::write(&src, &program).unwrap();
    let built = Command::new("g++").args(["-std=c++17", "-O1", "-Wall", "-Werror", "-Wno-unused-variable", "-o"]).arg(&exe).arg(&src).output().expect("running g++");
    assert!(built.status.success(), "g++ failed:\n{}\n{program}", String::from_utf8_lossy(&built.stderr));
    let run = Command::new(&exe).output().unwrap();
    let lows: Vec<i64> = String::from_utf8_lossy(&run.stdout).lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(lows.len(), BOUNDS.len(), "{program}");
    for (((case, _), bound), low) in BOUNDS.iter().zip(&claimed).zip(&lows) {
        match bound {
            Some(b) => assert_eq!(low, b, "`{case}`: the C++ reaches {low}, the claimed bound is {b}"),
            None => assert!(*low < 1, "`{case}`: no bound claimed, yet the C++ never goes below 1 (minimum {low})"),
        }
    }
}
