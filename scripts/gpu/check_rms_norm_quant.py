#!/usr/bin/env python3
"""Validate and time rms_norm_quant_i8 (tests/golden/specs): RMSNorm fused with dynamic
per-token int8 quantization, against the same math in torch.

Usage: check_rms_norm_quant.py TARGET=LIBDIR...   (MODE=--check-only skips the timed shapes;
       SHAPES=MxN,... sets them, default 4096x8192,16384x8192)

The reference: Y = rms_norm(X, W) in f32, Scale = max |Y| / 127 per row (at least 1e-10 / 127),
Q = round(Y / Scale) (ties to even). Q is poisoned with -128 (which the kernel never writes:
|Q| <= 127) and Scale with NaN, so every element must be written. A float computed in another
order may round the other way at a tie, so Q may differ from the reference by 1 in a few
elements (at most 1 in 1000), never by more; Scale to 1e-5; the dequantized Q * Scale to 1e-2
of Y. A row length that is not whole 16-byte vectors of X must be refused.
Then the median time (CUDA-graph replays, three input sets rotated; scripts/gpu/bench.py)
against the same function in torch eager and compiled by torch.compile (Triton; compiled
afresh for each shape, static shapes), in the same process. Exits 1 if any check fails.
"""
import os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows_check import launchers, pointer as p, stream, time_against_torch, timed_shapes

F = torch.nn.functional


def quant(X, W):
    """The spec's math in torch: (Q int8, Scale f32 [M])."""
    y = F.rms_norm(X.float(), (X.shape[-1],), W.float(), 1e-6)
    s = y.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10) / 127.0
    return torch.round(y / s).to(torch.int8), s.squeeze(-1)


def main():
    fails = 0
    g = torch.Generator(device="cuda")
    g.manual_seed(7)
    timed = timed_shapes("4096x8192,16384x8192")
    for target, fn in launchers(sys.argv[1:], "rms_norm_quant_i8"):
        run = lambda X, W, Q, S: fn(p(X), p(W), p(Q), p(S), X.shape[0], X.shape[1], stream())
        shapes = [(1, 8), (5, 1000), (13, 4096), (77, 8192), (300, 2056), (3, 8)]
        for (M, N) in shapes + timed:
            X = (torch.randn(M, N, device="cuda", generator=g) * 3 + 1).to(torch.bfloat16)
            if M == 3:
                X[1] = 0  # an all-zero row quantizes to zeros
            W = (1 + 0.1 * torch.randn(N, device="cuda", generator=g)).to(torch.bfloat16)
            Q = torch.full((M, N), -128, device="cuda", dtype=torch.int8)
            S = torch.full((M,), float("nan"), device="cuda")
            rc = run(X, W, Q, S)
            torch.cuda.synchronize()
            rq, rs = quant(X, W)
            y = F.rms_norm(X.float(), (N,), W.float(), 1e-6)
            dq = (Q.int() - rq.int()).abs()
            off1, worse = int((dq == 1).sum()), int((dq > 1).sum())
            s_err = float(((S - rs).abs() / rs).max())
            deq = float((Q.float() * S[:, None] - y).norm() / y.norm().clamp_min(1e-30))
            unwritten = int((Q == -128).sum() + torch.isnan(S).sum())
            ok = rc == 0 and worse == 0 and off1 <= max(1, M * N // 1000) and s_err < 1e-5 and (deq < 1e-2 or M == 3) and unwritten == 0
            fails += not ok
            print(f"{target} {M}x{N}: {'PASS' if ok else 'FAIL'} rc {rc} Q off by 1: {off1}, by more: {worse}; "
                  f"Scale rel err {s_err:.1e}; dequantized rel err {deq:.1e}; unwritten {unwritten}")
            if M >= 4096:
                sets = [(X.clone(), W, torch.empty_like(Q), torch.empty_like(S)) for _ in range(3)]
                time_against_torch(target, (M, N), lambda s: run(*s), lambda s: quant(s[0], s[1]), sets, 3 * M * N + 2 * N + 4 * M)
        # A row that is not whole 16-byte vectors of X is refused.
        X = torch.zeros(2, 1001, device="cuda", dtype=torch.bfloat16)
        rc = run(X, torch.ones(1001, device="cuda", dtype=torch.bfloat16), torch.empty(2, 1001, device="cuda", dtype=torch.int8), torch.empty(2, device="cuda"))
        ok = rc != 0
        fails += not ok
        print(f"{target} 2x1001 refused: {'PASS' if ok else 'FAIL'} rc {rc}")
    print(f"{fails} failure(s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
