#!/usr/bin/env python3
"""Validate and time tilegen's 4-bit-weight GEMMs against bf16 cuBLAS in one process.

Usage: bench_w4a16.py TARGET=LIBDIR... [--kernels k1,k2] [--quick] [--check-only] [--markdown FILE]

--check-only runs the checks alone (with --quick, only the shapes of at most 2^21 weights: for
compute-sanitizer).

For each library: random packed weights Wq [N, K/8] (every bit pattern valid), bf16 scales
[N, K/128] (and, for the kernels with per-group zero points, zero points 0..15 as bf16
[N, K/128]) and activations A [M, K], NaN-poisoned outputs, the launcher's
return code checked, every output element checked as written, relative error against
A · Wᵀ in f32 with W dequantized in torch; then the median time (three input sets rotated
so that L2 does not flatter either side) against cuBLAS (torch.matmul) on the unquantized
bf16 weights W [N, K], interleaved in the same process. Reports the bytes each side must
read as effective bandwidth. Appends a table to --markdown. Exits 1 if any check fails.
"""
import argparse, ctypes, os, sys
import torch

from bench import time_ms  # scripts/gpu/bench.py: the same timing for every peer

# (M, N, K). K / 128 is odd in four of them (640, 896, 1152): rows of scales then start 2 bytes
# into a word every other row.
CHECK_SHAPES = [(1, 64, 256), (77, 136, 512), (33, 200, 768), (300, 264, 1280), (256, 1024, 1152), (1000, 4096, 1024), (1, 8192, 8192), (16, 4096, 4096),
                (1, 200, 640), (3, 136, 896), (16, 264, 1152)]
DECODE_SHAPES = [(1, 8192, 8192), (16, 8192, 8192), (256, 8192, 8192)]
PREFILL_SHAPES = [(256, 8192, 8192), (1024, 8192, 8192), (4096, 8192, 8192)]
# Kernel -> (element type, whether it takes per-group zero points after the scales, the shapes
# it is timed at, whether its words are packed in interleaved order: `order=interleaved`).
KERNELS = {
    "w4a16_gemm_bf16": (torch.bfloat16, False, DECODE_SHAPES, False),
    "w4a16_zp_gemm_bf16": (torch.bfloat16, True, DECODE_SHAPES, False),
    "w4a16_prefill_gemm_bf16": (torch.bfloat16, False, PREFILL_SHAPES, False),
    # tests/golden/specs: the general lowering with zero points, interleaved words
    "w4_prefill_zp_bf16": (torch.bfloat16, True, PREFILL_SHAPES, True),
    # tests/golden/specs: f16, one warpgroup; on sm90a the general lowering's unfused dequant
    # (the weights unpacked into shared memory for warpgroup MMAs). Checked, not timed.
    "w4_prefill_onewg_f16": (torch.float16, False, [], False),
}


def load(libdir, name):
    fn = getattr(ctypes.CDLL(os.path.join(libdir, f"lib{name}.so")), f"tilegen_{name}")
    fn.restype = ctypes.c_int
    return fn


def call(fn, A, Wq, q, C, M, N, K):
    """q: (scales,) or (scales, zeros), as the launcher takes them."""
    p = lambda t: ctypes.c_void_p(t.data_ptr())
    return fn(p(A), p(Wq), *(p(t) for t in q), p(C), M, N, K, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def inputs(M, N, K, dtype, gen, zeros):
    A = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
    Wq = torch.randint(-2**31, 2**31 - 1, (N, K // 8), device="cuda", dtype=torch.int32, generator=gen)
    q = ((torch.randn(N, K // 128, device="cuda", generator=gen) * 0.05).to(dtype),)
    if zeros:
        q += (torch.randint(0, 16, (N, K // 128), device="cuda", generator=gen).to(dtype),)
    return A, Wq, q


def dequantize(Wq, q, interleaved=False):
    """W [N, K]: value i of word w is bits 4i..4i+3 (interleaved: value 2i bits 4i.., value
    2i + 1 bits 16+4i..), minus the zero point (8, or the group's), times its group's scale."""
    shifts = torch.tensor([0, 16, 4, 20, 8, 24, 12, 28] if interleaved else list(range(0, 32, 4)), device=Wq.device, dtype=torch.int32)
    nibbles = ((Wq.unsqueeze(-1) >> shifts) & 15).reshape(Wq.shape[0], -1).float()
    zero = q[1].float().repeat_interleave(128, dim=1) if len(q) > 1 else 8.0
    return ((nibbles - zero) * q[0].float().repeat_interleave(128, dim=1)).to(q[0].dtype)


def check(fn, dtype, zeros, M, N, K, gen, interleaved=False):
    A, Wq, q = inputs(M, N, K, dtype, gen, zeros)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    rc = call(fn, A, Wq, q, C, M, N, K)
    torch.cuda.synchronize()
    if rc != 0:
        return False, f"launcher returned {rc}"
    ref = A.float() @ dequantize(Wq, q, interleaved).float().t()
    unwritten = int(torch.isnan(C).sum())
    err = float((C.float() - ref).norm() / ref.norm())
    ok = unwritten == 0 and err <= 1e-2
    return ok, f"rel err {err:.2e} (bound 1e-02), unwritten {unwritten}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libdirs", nargs="+")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int.from_bytes(os.urandom(4), "little"))
    failures, rows = 0, []
    for spec in args.libdirs:
        target, libdir = spec.split("=", 1)
        for name in args.kernels.split(","):
            base = name.split("_cfg_")[0]
            if base not in KERNELS or not os.path.exists(os.path.join(libdir, f"lib{name}.so")):
                continue
            fn = load(libdir, name)
            dtype, zeros, shapes, interleaved = KERNELS[base]
            for (M, N, K) in CHECK_SHAPES:
                if args.check_only and args.quick and N * K > 2**21:
                    continue
                ok, msg = check(fn, dtype, zeros, M, N, K, gen, interleaved)
                failures += not ok
                print(f"check {target:5s} {name:28s} {M}x{N}x{K}: {'PASS' if ok else 'FAIL'} {msg}", flush=True)
            # Contract: K must be a multiple of the scales' group (128), whatever the kernel's loads.
            A, Wq, q = inputs(4, 64, 512, dtype, gen, zeros)
            rc = call(fn, A, Wq, q, torch.empty(4, 64, device="cuda", dtype=dtype), 4, 64, 192)
            failures += rc != 1
            print(f"check {target:5s} {name:28s} K=192 (not a multiple of 128): {'PASS' if rc == 1 else 'FAIL'} launcher returned {rc}")
            for (M, N, K) in [] if args.check_only else shapes[:1] if args.quick else shapes:
                sets = []
                for _ in range(3):
                    A, Wq, q = inputs(M, N, K, dtype, gen, zeros)
                    sets.append((A, Wq, q, dequantize(Wq, q, interleaved), torch.empty(M, N, device="cuda", dtype=dtype)))
                ours, theirs = [], []
                for _ in range(2):  # interleaved; each side keeps its better median
                    ours.append(time_ms(lambda s: call(fn, s[0], s[1], s[2], s[4], M, N, K), sets, 100))
                    theirs.append(time_ms(lambda s: torch.matmul(s[0], s[3].t()), sets, 100))
                t, tp = min(ours), min(theirs)
                bytes_ours = N * K // 2 + len(sets[0][2]) * N * K // 128 * 2 + M * K * 2 + M * N * 2
                bytes_peer = N * K * 2 + M * K * 2 + M * N * 2
                rows.append((f"{name} ({target})", f"{M}x{N}x{K}", t, bytes_ours, tp, bytes_peer, 2.0 * M * N * K))
                print(f"time  {target:5s} {name:28s} {M}x{N}x{K}: {t * 1e3:.1f} us ({bytes_ours / t / 1e6:.0f} GB/s) vs cuBLAS bf16 {tp * 1e3:.1f} us ({bytes_peer / tp / 1e6:.0f} GB/s) -> {tp / t:.2f}x", flush=True)
    table = ["| kernel | M x N x K | us | GB/s read+written | TFLOP/s | peer | peer us | peer GB/s | ratio (peer / ours) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, shape, t, b, tp, bp, flops in rows:
        table.append(f"| {name} | {shape} | {t * 1e3:.1f} | {b / t / 1e6:.0f} | {flops / t / 1e9:.1f} | cuBLAS bf16 (torch.matmul, unquantized W) | {tp * 1e3:.1f} | {bp / tp / 1e6:.0f} | {tp / t:.2f}x |")
    print("\n" + "\n".join(table))
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n## 4-bit weights (w4a16)\n\nBytes: packed weights, scales (and zero points), A and C for ours; bf16 W, A and C for cuBLAS. What limits the kernel: notes/PERF.md.\n\n" + "\n".join(table) + "\n")
    print(f"\n{len(rows)} timed, {failures} check failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
