#!/usr/bin/env python3
"""Validate and time layer_norm_fwd_bf16 (tests/golden/specs) against torch.native_layer_norm.

Usage: check_layer_norm_fwd.py TARGET=LIBDIR...   (MODE=--check-only skips the timed shape)

Checks Y, Mean and Rstd (NaN-poisoned first: every element must be written) against
torch.native_layer_norm in f32 at ragged shapes, then times 16384x4096 against it in the same
process (CUDA-graph replays, scripts/gpu/bench.py). Exits 1 if any check fails.
"""
import ctypes, os, sys, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import best_ms
fails = 0
g = torch.Generator(device="cuda"); g.manual_seed(11)
p = lambda t: ctypes.c_void_p(t.data_ptr())
for spec in sys.argv[1:]:
    target, libdir = spec.split("=", 1)
    fn = ctypes.CDLL(os.path.join(libdir, "liblayer_norm_fwd_bf16.so")).tilegen_layer_norm_fwd_bf16; fn.restype = ctypes.c_int
    run = lambda X, G, Bt, Y, Mn, R: fn(p(X), p(G), p(Bt), p(Y), p(Mn), p(R), X.shape[0], X.shape[1], ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    for (M, N) in [(1, 8), (5, 1000), (13, 4096), (300, 1032)] + ([] if "--check-only" in os.environ.get("MODE", "") else [(16384, 4096)]):
        X = (torch.randn(M, N, device="cuda", generator=g) * 3 + 1).to(torch.bfloat16)
        G = (1 + 0.1 * torch.randn(N, device="cuda", generator=g)).to(torch.bfloat16)
        Bt = (0.1 * torch.randn(N, device="cuda", generator=g)).to(torch.bfloat16)
        Y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        Mn = torch.full((M,), float("nan"), device="cuda"); R = torch.full((M,), float("nan"), device="cuda")
        rc = run(X, G, Bt, Y, Mn, R); torch.cuda.synchronize()
        ry, rm, rr = torch.native_layer_norm(X.float(), (N,), G.float(), Bt.float(), 1e-5)
        e = lambda a, b: float((a.float() - b.float().reshape(a.shape)).norm() / b.float().norm())
        errs = (e(Y, ry), e(Mn, rm), e(R, rr)); un = int(torch.isnan(Y).sum() + torch.isnan(Mn).sum() + torch.isnan(R).sum())
        ok = rc == 0 and errs[0] < 1e-2 and errs[1] < 1e-5 and errs[2] < 1e-5 and un == 0; fails += not ok
        print(f"{target} {M}x{N}: {'PASS' if ok else 'FAIL'} rc {rc} rel err Y {errs[0]:.1e} mean {errs[1]:.1e} rstd {errs[2]:.1e} unwritten {un}")
        if M == 16384:
            sets = [(X, G, Bt, torch.empty_like(X), torch.empty(M, device="cuda"), torch.empty(M, device="cuda")) for _ in range(3)]
            ours = best_ms(lambda s: run(*s), sets, 200)
            theirs = best_ms(lambda s: torch.native_layer_norm(s[0], (N,), s[1], s[2], 1e-5), sets, 200)
            print(f"time {target} {M}x{N}: {ours * 1e3:.1f} us vs torch.native_layer_norm {theirs * 1e3:.1f} us -> {theirs / ours:.2f}x")
print(f"{fails} failure(s)"); sys.exit(1 if fails else 0)
