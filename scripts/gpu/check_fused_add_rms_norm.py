#!/usr/bin/env python3
"""Validate and time fused_add_rms_norm_bf16 (tests/golden/specs): the residual add and RMSNorm
in one pass, R updated in place, against the same math in torch.

Usage: check_fused_add_rms_norm.py TARGET=LIBDIR...   (MODE=--check-only skips the timed shapes;
       SHAPES=MxN,... sets them, default 4096x8192,16384x8192)

The reference: R' = bf16(X + R), Y = rms_norm(R') · W in f32. Y is poisoned with NaN (every
element must be written); R is compared in full, so a row the kernel skipped keeps its old
values and fails. A row length that is not whole 16-byte vectors must be refused. Then the
median time (CUDA-graph replays, three input sets rotated; scripts/gpu/bench.py) against
torch eager (`R.add_(X)`, then `F.rms_norm`) and the same function compiled by torch.compile
(static shapes, compiled afresh per shape), in the same process. Exits 1 if any check fails.
"""
import os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows_check import launchers, pointer as p, stream, time_against_torch, timed_shapes

F = torch.nn.functional


def fused_add_rms_norm(X, R, W):
    R.add_(X)
    return F.rms_norm(R, (R.shape[-1],), W, 1e-6)


def main():
    fails = 0
    g = torch.Generator(device="cuda")
    g.manual_seed(5)
    timed = timed_shapes("4096x8192,16384x8192")
    for target, fn in launchers(sys.argv[1:], "fused_add_rms_norm_bf16"):
        run = lambda X, W, R, Y: fn(p(X), p(W), p(R), p(Y), X.shape[0], X.shape[1], stream())
        for (M, N) in [(1, 8), (5, 1000), (13, 4096), (77, 8192), (300, 2056)] + timed:
            X = (torch.randn(M, N, device="cuda", generator=g) * 3 + 1).to(torch.bfloat16)
            R = torch.randn(M, N, device="cuda", generator=g).to(torch.bfloat16)
            W = (1 + 0.1 * torch.randn(N, device="cuda", generator=g)).to(torch.bfloat16)
            ref_r = (X.float() + R.float()).to(torch.bfloat16)
            ref_y = F.rms_norm(ref_r.float(), (N,), W.float(), 1e-6)
            Y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            rc = run(X, W, R, Y)
            torch.cuda.synchronize()
            r_exact = bool(torch.equal(R, ref_r))
            err = float((Y.float() - ref_y).norm() / ref_y.norm())
            unwritten = int(torch.isnan(Y).sum())
            ok = rc == 0 and r_exact and err < 1e-2 and unwritten == 0
            fails += not ok
            print(f"{target} {M}x{N}: {'PASS' if ok else 'FAIL'} rc {rc} R == bf16(X + R): {r_exact}; Y rel err {err:.1e}; unwritten {unwritten}")
            if M >= 4096:
                sets = [(X.clone(), W, R.clone(), torch.empty_like(Y)) for _ in range(3)]
                time_against_torch(target, (M, N), lambda s: run(*s), lambda s: fused_add_rms_norm(s[0], s[2], s[1]), sets, 8 * M * N + 2 * N)
        X = torch.zeros(2, 1001, device="cuda", dtype=torch.bfloat16)
        rc = run(X, torch.ones(1001, device="cuda", dtype=torch.bfloat16), torch.zeros_like(X), torch.empty_like(X))
        ok = rc != 0
        fails += not ok
        print(f"{target} 2x1001 refused: {'PASS' if ok else 'FAIL'} rc {rc}")
    print(f"{fails} failure(s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
