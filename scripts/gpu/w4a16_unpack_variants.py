#!/usr/bin/env python3
"""Timing study of two unpacking changes the w4a16 decode kernels' bars may need.

Usage: w4a16_unpack_variants.py OUT [--nvcc PATH] [--cutlass INCLUDE] [--jobs N]

The w4a16 decode kernels (specs/w4a16_gemm_bf16.yaml) are bound by their consumers' unpacking
(notes/PERF.md, sessions 13-15). Two changes would each need a spec-level choice, so they are
measured here first, on copies of the committed generated/<target>/w4a16_gemm_bf16.cu (sm80
and sm90a) with only the k-tile's unpack-and-MMA loop replaced:
  awq    the weight pair (2i, 2i+1) sits in nibbles (i, i+4) of the word, as AWQ's packing
         order puts it: one shift and one lop3 per pair instead of a byte permute and a lop3
         (a packing order the spec would have to declare; results are wrong for this
         script's weights, so these variants are timing only);
  after  the MMAs take q - 8 exactly and each 128-deep step's f32 sums are scaled after them
         (one packed FMA per pair fewer; numerically valid, more exact than rounding each
         weight to bf16 first, which is the spec's stated rounding);
  awqafter  both; v0  the same loop as generated (the baseline, built the same way).
Each variant exports tilegen_w4a16_gemm_bf16_cfg_<name> from OUT/<target>/lib<...>.so, so
bench_w4a16.py times it beside cuBLAS (the `after` variants pass its checks):
  cd scripts/gpu && python3 bench_w4a16.py sm80=OUT/sm80 sm90a=OUT/sm90a \\
      --kernels w4a16_gemm_bf16_cfg_v0,w4a16_gemm_bf16_cfg_awq,w4a16_gemm_bf16_cfg_after,w4a16_gemm_bf16_cfg_awqafter
Builds need only nvcc and CUTLASS (scripts/install-toolchain.sh); about a minute each.
"""
import argparse, concurrent.futures, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.expanduser("~/.cache/tilegen")
GENCODE = {"sm80": "-gencode=arch=compute_80,code=sm_90", "sm90a": "-gencode=arch=compute_90a,code=sm_90a"}
VARIANTS = [("v0", False, False), ("awq", True, False), ("after", False, True), ("awqafter", True, True)]

HELPER = r'''
// Study variant of dequant_int4x2: kAwq takes the pair from nibbles (idx, idx + 4) (one shift);
// kScale multiplies by the scale here, else the MMA sees q - zero, scaled after it.
template <bool kAwq, bool kScale>
CUTE_DEVICE uint32_t dequant_variant(uint32_t word, int idx, uint32_t scales, uint32_t neg_bias) {
  uint32_t const one = 0x3F80u * 0x10001u, neg_zero = 0x80008000u, mask = 0x000F000Fu, magic = 0x4300u * 0x10001u;
  uint32_t const pair = kAwq ? word >> (4 * idx) : __byte_perm(word, word >> 4, 0x0400u + 0x0101u * idx);
  uint32_t x, v;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x) : "r"(pair), "r"(mask), "r"(magic));
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(one), "r"(neg_bias));
  if constexpr (kScale) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(v), "r"(scales), "r"(neg_zero));
  }
  return v;
}
'''


def loop(awq, after, a_read):
    """The k-tile lambda of the generated kernel, with the variant's unpacking."""
    flags = f"{'true' if awq else 'false'}, {'false' if after else 'true'}"
    words = "\n".join(f"        uint32_t const w{2 * p + h} = dequant_variant<{flags}>({'hi' if h else 'lo'}, {p}, scale_{'hi' if h else 'lo'}, neg_bias);"
                      for p in range(4) for h in range(2))
    sums = "      float sums[kMTiles][2][4] = {};\n" if after else ""
    scale = ("      float const s_lo = __uint_as_float(scale_lo << 16), s_hi = __uint_as_float(scale_hi << 16);\n"
             "      CUTE_UNROLL\n      for (int mt = 0; mt < kMTiles; ++mt) {\n"
             + "".join(f"        accum[mt][0][{e}] = fmaf(s_{'lo' if e < 2 else 'hi'}, sums[mt][0][{e}] + sums[mt][1][{e}], accum[mt][0][{e}]);\n" for e in range(4))
             + "      }\n") if after else ""
    return f"""  auto mma_tile = [&](int stage) {{
    CUTE_UNROLL
    for (int s = 0; s < kStepsPerWarp; ++s) {{
      uint4 const words_lo = ld_shared_v4(Wq_rd[0][s] + stage * kStageWq_s * sizeof(ElementWq_s));
      uint4 const words_hi = ld_shared_v4(Wq_rd[1][s] + stage * kStageWq_s * sizeof(ElementWq_s));
      uint32_t const scale_lo = ld_shared_u16(scales_rd[0][s] + stage * kStageS_s<kOddRows> * sizeof(ElementS_s)) * 0x10001u;
      uint32_t const scale_hi = ld_shared_u16(scales_rd[1][s] + stage * kStageS_s<kOddRows> * sizeof(ElementS_s)) * 0x10001u;
      constexpr uint32_t neg_bias = dequant_neg_bias<8, ElementS_s>();
{sums}      CUTE_UNROLL
      for (int i = 0; i < 4; ++i) {{
        uint32_t const lo = (&words_lo.x)[i], hi = (&words_hi.x)[i];
{words}
        CUTE_UNROLL
        for (int mt = 0; mt < kMTiles; ++mt) {{
{a_read}
          float (&d)[4] = {'sums' if after else 'accum'}[mt][i % 2];
          Mma::fma(d[0], d[1], d[2], d[3], w0, w1, w2, w3, x.x, x.y, d[0], d[1], d[2], d[3]);
          Mma::fma(d[0], d[1], d[2], d[3], w4, w5, w6, w7, x.z, x.w, d[0], d[1], d[2], d[3]);
        }}
      }}
{scale}    }}
  }};
"""


def variant_source(src, name, awq, after):
    start = src.index("  auto mma_tile = [&](int stage) {")
    end = src.index("  };\n", start) + len("  };\n")
    a_read = next(l for l in src[start:end].split("\n") if "uint4 const x = " in l)
    out = src[:start] + loop(awq, after, a_read) + src[end:]
    out = out.replace("namespace tilegen::w4a16_gemm_bf16 {", "namespace tilegen::w4a16_gemm_bf16 {\n" + HELPER, 1)
    return out.replace('extern "C" int tilegen_w4a16_gemm_bf16(', f'extern "C" int tilegen_w4a16_gemm_bf16_cfg_{name}(', 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--nvcc", default=os.path.join(CACHE, "cuda-13.0.88/nvidia/cu13/bin/nvcc"))
    ap.add_argument("--cutlass", default=os.path.join(CACHE, "cutlass-4.2.0.0/cutlass_library/source/include"))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    builds = []
    for target in GENCODE:
        generated = os.path.join(ROOT, "generated", target)
        src = open(os.path.join(generated, "w4a16_gemm_bf16.cu")).read()
        os.makedirs(os.path.join(args.out, target), exist_ok=True)
        for name, awq, after in VARIANTS:
            cu = os.path.join(args.out, target, f"w4a16_gemm_bf16_cfg_{name}.cu")
            open(cu, "w").write(variant_source(src, name, awq, after))
            so = os.path.join(args.out, target, f"libw4a16_gemm_bf16_cfg_{name}.so")
            builds.append([args.nvcc, "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-DNDEBUG", GENCODE[target], f"-I{args.cutlass}",
                           f"-I{generated}", "-shared", "-Xcompiler", "-fPIC", "-o", so, cu])
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda cmd: subprocess.run(cmd, capture_output=True, text=True), builds))
    failed = 0
    for cmd, r in zip(builds, results):
        ok = r.returncode == 0 and "warning" not in r.stderr.lower()
        failed += not ok
        print(f"{'built' if ok else 'FAILED'} {cmd[-2]}" + ("" if ok else f"\n{r.stderr}"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
