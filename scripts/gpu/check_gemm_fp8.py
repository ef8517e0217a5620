#!/usr/bin/env python3
"""Validate and time gemm_fp8_bf16 (tests/golden/specs, sm90a): an FP8 (E4M3) GEMM with
per-row and per-column scales, against torch in one process.

Usage: check_gemm_fp8.py LIBDIR   (MODE=--check-only skips the timed shapes)

Checks C against the f32 product of the same E4M3 values, scaled (rel err below 1e-2, every
element written: C is poisoned with NaN), at ragged and square shapes. Then the median time
(CUDA-graph replays, three input sets rotated; scripts/gpu/bench.py) against
torch._scaled_mm with the same row-wise scales (cuBLASLt / torch's FP8 kernels) and, for
scale, bf16 torch.matmul (cuBLAS) at the same shape. Exits 1 if any check fails.
"""
import ctypes, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import best_ms


def main():
    libdir = sys.argv[1]
    fn = ctypes.CDLL(os.path.join(libdir, "libgemm_fp8_bf16.so")).tilegen_gemm_fp8_bf16
    fn.restype = ctypes.c_int
    p = lambda t: ctypes.c_void_p(t.data_ptr())
    run = lambda A, B, sa, sb, C: fn(p(A), p(B), p(sa), p(sb), p(C), A.shape[0], B.shape[0], A.shape[1], ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    g = torch.Generator(device="cuda")
    g.manual_seed(9)
    fails = 0
    timed = "--check-only" not in os.environ.get("MODE", "")
    shapes = [(77, 136, 256), (1000, 1000, 1024), (129, 16, 128), (4096, 4096, 4096)]
    for (M, N, K) in shapes + ([(8192, 8192, 8192), (4096, 28672, 8192)] if timed else []):
        A = (torch.randn(M, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        B = (torch.randn(N, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        sa = torch.rand(M, device="cuda", generator=g) * 0.01 + 0.001
        sb = torch.rand(N, device="cuda", generator=g) * 0.01 + 0.001
        C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        rc = run(A, B, sa, sb, C)
        torch.cuda.synchronize()
        ref = (A.float() @ B.float().t()) * sa[:, None] * sb[None, :]
        err = float((C.float() - ref).norm() / ref.norm())
        unwritten = int(torch.isnan(C).sum())
        ok = rc == 0 and err < 1e-2 and unwritten == 0
        fails += not ok
        print(f"{M}x{N}x{K}: {'PASS' if ok else 'FAIL'} rc {rc} rel err {err:.1e} unwritten {unwritten}")
        if timed and M >= 4096:
            sets = [(A, B, sa, sb, torch.empty_like(C)) for _ in range(3)]
            ours = best_ms(lambda s: run(*s), sets, 100)
            scaled = lambda s: torch._scaled_mm(s[0], s[1].t(), scale_a=s[2][:, None], scale_b=s[3][None, :], out_dtype=torch.bfloat16)
            try:
                peer = best_ms(scaled, sets, 100)
                peer_text = f"torch._scaled_mm {peer * 1e3:.1f} us -> {peer / ours:.2f}x"
            except RuntimeError as e:
                peer_text = f"torch._scaled_mm unavailable ({str(e).splitlines()[0][:80]})"
            Ab, Bb = A.to(torch.bfloat16), B.to(torch.bfloat16)
            bsets = [(Ab, Bb) for _ in range(3)]
            bf16 = best_ms(lambda s: torch.matmul(s[0], s[1].t()), bsets, 100)
            tflops = 2 * M * N * K / (ours * 1e-3) / 1e12
            print(f"time {M}x{N}x{K}: {ours * 1e3:.1f} us ({tflops:.0f} TFLOP/s) vs {peer_text}; vs bf16 cuBLAS {bf16 * 1e3:.1f} us -> {bf16 / ours:.2f}x")
    print(f"{fails} failure(s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
