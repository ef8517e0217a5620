#!/usr/bin/env python3
"""Validate and time tilegen's int8 GEMMs (tests/golden/specs) against torch in one process.

Usage: check_gemm_int8.py LIBDIR   (MODE=--check-only skips the timed shapes)

LIBDIR holds libgemm_i8_i32.so (C = A·Bᵀ into exact i32, torch._int_mm's form) and/or
libgemm_w8a8_bf16.so (C = bf16(f32(A·Bᵀ) · a_scale[m] · b_scale[n])), built for sm80 or sm90a;
each one found is checked. A [M, K] and B [N, K] are random int8 over the whole range. The i32
output must equal torch._int_mm exactly (itself checked against an f64 product at the small
shapes); the bf16 one is compared with that exact product scaled in f32 (rel err below 1e-2). Outputs are poisoned first (i32: INT32_MIN, bf16: NaN) so every
element must be written; ragged and square shapes. Then the median time (CUDA-graph replays,
three input sets rotated; scripts/gpu/bench.py) against torch._int_mm (plus the scaling in torch
for w8a8) and bf16 cuBLAS (torch.matmul) at the same shape. Exits 1 if any check fails.
"""
import ctypes, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import best_ms


def int_mm(A, B):
    """torch._int_mm on A [M, K] and B [N, K] (it takes B as [K, N])."""
    return torch._int_mm(A, B.t())


def main():
    libdir = sys.argv[1]
    timed = "--check-only" not in os.environ.get("MODE", "")
    p = lambda t: ctypes.c_void_p(t.data_ptr())
    stream = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    kernels = [k for k in ("gemm_i8_i32", "gemm_w8a8_bf16") if os.path.exists(os.path.join(libdir, f"lib{k}.so"))]
    if not kernels:
        sys.exit(f"no libgemm_i8_i32.so or libgemm_w8a8_bf16.so in {libdir}")
    g = torch.Generator(device="cuda")
    g.manual_seed(11)
    fails = 0
    shapes = [(77, 136, 256), (1000, 1000, 1024), (129, 16, 128), (4096, 4096, 4096)]
    for name in kernels:
        fn = getattr(ctypes.CDLL(os.path.join(libdir, f"lib{name}.so")), f"tilegen_{name}")
        fn.restype = ctypes.c_int
        scaled = name == "gemm_w8a8_bf16"
        if scaled:
            run = lambda A, B, sa, sb, C: fn(p(A), p(B), p(sa), p(sb), p(C), A.shape[0], B.shape[0], A.shape[1], stream())
        else:
            run = lambda A, B, sa, sb, C: fn(p(A), p(B), p(C), A.shape[0], B.shape[0], A.shape[1], stream())
        for (M, N, K) in shapes + ([(8192, 8192, 8192), (4096, 28672, 8192)] if timed else []):
            A = torch.randint(-128, 128, (M, K), device="cuda", dtype=torch.int8, generator=g)
            B = torch.randint(-128, 128, (N, K), device="cuda", dtype=torch.int8, generator=g)
            sa = torch.rand(M, device="cuda", generator=g) * 0.01 + 0.001
            sb = torch.rand(N, device="cuda", generator=g) * 0.01 + 0.001
            exact = int_mm(A, B)  # integer arithmetic: exact (|sum| < 2^31 at these K)
            if M * N * K <= 2**28:  # and cross-checked in f64 where that is cheap
                assert torch.equal(exact.double(), A.double() @ B.double().t()), "torch._int_mm is not exact here"

            if scaled:
                C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            else:
                C = torch.full((M, N), -2**31, device="cuda", dtype=torch.int32)
            rc = run(A, B, sa, sb, C)
            torch.cuda.synchronize()
            if scaled:
                ref = exact.float() * sa[:, None] * sb[None, :]
                err = float((C.float() - ref).norm() / ref.norm())
                unwritten = int(torch.isnan(C).sum())
                ok = rc == 0 and err < 1e-2 and unwritten == 0
                detail = f"rel err {err:.1e} unwritten {unwritten}"
            else:
                wrong = int((C != exact).sum())
                ok = rc == 0 and wrong == 0
                detail = f"{wrong} element(s) differ from the exact product"
            fails += not ok
            print(f"{name} {M}x{N}x{K}: {'PASS' if ok else 'FAIL'} rc {rc} {detail}")
            if timed and M >= 4096:
                sets = [(A, B, sa, sb, torch.empty_like(C)) for _ in range(3)]
                ours = best_ms(lambda s: run(*s), sets, 100)
                if scaled:
                    peer_fn = lambda s: (int_mm(s[0], s[1]).float() * s[2][:, None] * s[3][None, :]).to(torch.bfloat16)
                    peer_name = "torch._int_mm + scaling in torch"
                else:
                    peer_fn = lambda s: int_mm(s[0], s[1])
                    peer_name = "torch._int_mm"
                peer = best_ms(peer_fn, sets, 100)
                Ab, Bb = A.to(torch.bfloat16), B.to(torch.bfloat16)
                bf16 = best_ms(lambda s: torch.matmul(s[0], s[1].t()), [(Ab, Bb)] * 3, 100)
                tops = 2 * M * N * K / (ours * 1e-3) / 1e12
                print(f"time {name} {M}x{N}x{K}: {ours * 1e3:.1f} us ({tops:.0f} TOPS) vs {peer_name} {peer * 1e3:.1f} us -> {peer / ours:.2f}x; vs bf16 cuBLAS {bf16 * 1e3:.1f} us -> {bf16 / ours:.2f}x")
    print(f"{fails} failure(s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
