#!/usr/bin/env python3
"""Golden outputs for every spec in specs/: deterministic inputs and expected outputs.

The expected outputs come from an independent reference written directly in numpy (one
function per kernel below), never from tilegen. For each kernel, tests/golden/<kernel>/
holds:

  cases.yaml              the cases: runtime sizes, input and expected files, tolerance
  <case>/<tensor>.npy     each input tensor, in the tensor's dtype (bf16 as uint16 bits)
  <case>/<tensor>.expected.npy
                          each output tensor's exact value (float64 reference, stored as
                          float32), before rounding to the output dtype

Arrays hold the logical tensor in C order whatever the tensor's `order` (a consumer that
needs column-major memory re-lays it out). A result passes when
||out - expected|| / ||expected|| <= rtol (Frobenius norms) and every element is finite.

Usage: scripts/golden-outputs.sh   (runs this file with the pinned numpy; byte-identical)
"""
import math
import sys
import zlib
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent


def round_bf16(x):
    """Rounds float32 values to bfloat16 (nearest even), returning the uint16 bit patterns."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f64(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def make_input(rng, dtype, shape, integers=None):
    """Fresh N(0, 1) values rounded to `dtype`, or integers drawn from range(integers) when
    given: (array to store, float64 values it holds)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if integers is not None:
        x = rng.integers(0, integers, size=shape).astype(np.float32)
    if dtype == "bf16":
        bits = round_bf16(x)
        return bits, bf16_to_f64(bits)
    if dtype == "f16":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    if dtype == "f32":
        return x, x.astype(np.float64)
    if dtype == "i32":
        # Packed 4-bit values: every bit pattern is a valid word.
        w = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.int32)
        return w, w
    raise SystemExit(f"golden_outputs: no input generator for dtype {dtype}")


# Independent references: float64 math on the rounded inputs.
def gemm(t):
    return {"C": t["A"] @ t["B"]}


def gemm_bias_relu(t):
    return {"C": np.maximum(t["A"] @ t["B"] + t["bias"][None, :], 0.0)}


def gemm_bias_gelu(t):
    x = t["A"] @ t["B"] + t["bias"][None, :]
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return {"C": 0.5 * (0.5 * x * (1.0 + erf(x / math.sqrt(2.0))))}


def w4a16(t):
    """C = A · Wᵀ, W[n, k] = bf16((nibble k%8 of Wq[n, k/8] − z) · scales[n, k/128]), with z = 8,
    or zeros[n, k/128] when the kernel has per-group zero points."""
    words = t["Wq"].view(np.uint32)
    n, kw = words.shape
    nibbles = (words[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 15  # [N, K/8, 8]
    z = np.repeat(t["zeros"], 128, axis=1) if "zeros" in t else 8.0
    q = nibbles.reshape(n, kw * 8).astype(np.float64) - z
    s = np.repeat(t["scales"], 128, axis=1)
    w = bf16_to_f64(round_bf16((q * s).astype(np.float32)))  # the kernel's bf16 weight tile
    return {"C": t["A"] @ w.T}


def attention(causal):
    """softmax(Q·Kᵀ/sqrt(D))·V over [batch, seq, heads, dim] tensors, in float64."""
    def reference(t):
        q, k, v = (np.transpose(t[n], (0, 2, 1, 3)) for n in "QKV")  # -> [B, H, S, D]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        if causal:
            rows, cols = np.indices(s.shape[-2:])
            s = np.where(cols <= rows, s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        o = (p / p.sum(axis=-1, keepdims=True)) @ v
        return {"O": np.transpose(o, (0, 2, 1, 3))}
    return reference


def linear_attention_causal(t):
    """O[i] = Σ_{j ≤ i} (Q[i]·K[j]/sqrt(D)) V[j] per batch and head, in float64: the quadratic
    form, not the chunked one the kernel runs."""
    q, k, v = (np.transpose(t[n], (0, 2, 1, 3)) for n in "QKV")  # -> [B, H, S, D]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    rows, cols = np.indices(s.shape[-2:])
    o = np.where(cols <= rows, s, 0.0) @ v
    return {"O": np.transpose(o, (0, 2, 1, 3))}


REFERENCES = {
    "flash_attention_fwd_bf16": attention(causal=False),
    "flash_attention_fwd_causal_bf16": attention(causal=True),
    "flash_attention_fwd_d64_bf16": attention(causal=False),
    "flash_attention_fwd_f16": attention(causal=False),
    "gemm_bias_gelu_bf16": gemm_bias_gelu,
    "gemm_bf16": gemm,
    "gemm_f16": gemm,
    "gemm_bias_relu_bf16": gemm_bias_relu,
    "linear_attention_causal_bf16": linear_attention_causal,
    "w4a16_gemm_bf16": w4a16,
    "w4a16_zp_gemm_bf16": w4a16,
    "w4a16_prefill_gemm_bf16": w4a16,
}

# Inputs that hold small integers: (kernel, tensor) -> values drawn from range(n).
INTEGER_INPUTS = {
    ("w4a16_zp_gemm_bf16", "zeros"): 16,  # 4-bit zero points
}

# Sizes: ragged (not multiples of the tiles), a single row, and several tiles with a
# ragged corner. N and K stay multiples of 8 (the launchers' vector-alignment contract).
GEMM_CASES = [
    ("ragged_77x136x264", {"M": 77, "N": 136, "K": 264}),
    ("row_1x8x8", {"M": 1, "N": 8, "K": 8}),
    ("tiles_200x264x72", {"M": 200, "N": 264, "K": 72}),
]
# Attention (softmax and linear): a ragged sequence (not a multiple of either tile), several
# heads and batches, and a sequence shorter than one key tile (or chunk).
ATTENTION_CASES = [
    ("ragged_b2_s200_h3", {"B": 2, "S": 200, "H": 3}),
    ("short_b1_s17_h2", {"B": 1, "S": 17, "H": 2}),
    ("tiles_b1_s256_h1", {"B": 1, "S": 256, "H": 1}),
]
# 4-bit weights: K a multiple of 128 (one scale per group of 128), a ragged M and N, a single
# row (decode), several K tiles, and an odd number of scales per row (K / 128 = 5: every other
# row of scales starts 2 bytes into a word, which the kernels' odd-rows instantiations take).
W4A16_CASES = [
    ("ragged_77x136x512", {"M": 77, "N": 136, "K": 512}),
    ("row_1x64x256", {"M": 1, "N": 64, "K": 256}),
    ("tiles_33x200x768", {"M": 33, "N": 200, "K": 768}),
    ("groups_3x136x640", {"M": 3, "N": 136, "K": 640}),
]
# The prefill kernel's 128x128 tiles: a ragged M and N over two tiles each, a single row,
# three tiles along every dimension with ragged edges, and an odd number of scales per row
# (K / 128 = 7, so the last 256-deep k tile holds one group of each row).
W4A16_PREFILL_CASES = [
    ("ragged_200x136x512", {"M": 200, "N": 136, "K": 512}),
    ("row_1x64x256", {"M": 1, "N": 64, "K": 256}),
    ("tiles_260x264x768", {"M": 260, "N": 264, "K": 768}),
    ("groups_130x136x896", {"M": 130, "N": 136, "K": 896}),
]
CASES = {name: ATTENTION_CASES if name.startswith(("flash_attention", "linear_attention"))
         else W4A16_PREFILL_CASES if name == "w4a16_prefill_gemm_bf16"
         else W4A16_CASES if name.startswith("w4a16") else GEMM_CASES
         for name in REFERENCES}


def extent(d, consts, sizes):
    """A tensor extent: a number, a constant or size, or `K/8`."""
    d = str(d)
    if "/" in d:
        name, div = (x.strip() for x in d.split("/"))
        return extent(name, consts, sizes) // int(div)
    return int(consts.get(d, sizes.get(d, d)))


def tolerance(spec):
    """Relative error bound: the output dtype's rounding, wider for f16 accumulation."""
    out = [t["dtype"] for t in spec["tensors"].values() if t.get("output")]
    frags = [b["dtype"] for b in (spec.get("buffers") or {}).values() if b.get("scope") == "fragment"]
    if "f16" in frags:
        return 2e-2
    if any(d in ("bf16", "f16") for d in out):
        return 1e-2
    return 1e-3


def write_npy(path, array):
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)


def main():
    specs = sorted((ROOT / "specs").glob("*.yaml"))
    missing = [s.stem for s in specs if yaml.safe_load(s.read_text())["kernel"] not in REFERENCES]
    if missing:
        raise SystemExit(f"golden_outputs: no numpy reference for {', '.join(missing)}; add one to REFERENCES")
    for spec_path in specs:
        spec = yaml.safe_load(spec_path.read_text())
        kernel = spec["kernel"]
        consts = spec.get("constants") or {}
        out_dir = ROOT / "tests" / "golden" / kernel
        out_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            "# Generated by scripts/golden_outputs.py from " + spec_path.relative_to(ROOT).as_posix() + " -- do not edit.",
            f"kernel: {kernel}",
            "cases:",
        ]
        rtol = tolerance(spec)
        for case, sizes in CASES[kernel]:
            rng = np.random.default_rng(zlib.crc32(f"{kernel}/{case}".encode()))
            case_dir = out_dir / case
            case_dir.mkdir(exist_ok=True)
            values, inputs, outputs = {}, [], []
            for name, t in spec["tensors"].items():
                shape = tuple(extent(d, consts, sizes) for d in t["shape"])
                if t.get("output"):
                    outputs.append(name)
                    continue
                stored, values[name] = make_input(rng, t["dtype"], shape, INTEGER_INPUTS.get((kernel, name)))
                write_npy(case_dir / f"{name}.npy", stored)
                inputs.append(name)
            expected = REFERENCES[kernel](values)
            for name in outputs:
                write_npy(case_dir / f"{name}.expected.npy", expected[name].astype(np.float32))
            lines.append(f"  - name: {case}")
            lines.append("    sizes: {" + ", ".join(f"{k}: {v}" for k, v in sizes.items()) + "}")
            lines.append("    inputs: {" + ", ".join(f"{n}: {case}/{n}.npy" for n in inputs) + "}")
            lines.append("    expected: {" + ", ".join(f"{n}: {case}/{n}.expected.npy" for n in outputs) + "}")
            lines.append(f"    rtol: {rtol}")
        (out_dir / "cases.yaml").write_text("\n".join(lines) + "\n")
        print(f"wrote {out_dir.relative_to(ROOT)}/ ({len(CASES[kernel])} cases)")


if __name__ == "__main__":
    sys.exit(main())
