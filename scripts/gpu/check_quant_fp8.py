#!/usr/bin/env python3
"""Validate and time quant_fp8_per_token (tests/golden/specs): dynamic per-token FP8 (E4M3)
quantization, against the same math in torch.

Usage: check_quant_fp8.py TARGET=LIBDIR...   (MODE=--check-only skips the timed shapes;
       SHAPES=MxN,... sets them, default 4096x8192,16384x8192,16384x4096)

The reference computes what the spec does, in f32: Scale = max(max |X|, 1e-12) / 448 per
row, Q = X * (1 / Scale) clamped to ±448 and converted by torch to float8_e4m3fn (round to
nearest even). Q must match it bit for bit, Scale exactly; Q is poisoned with 0x7f (NaN,
which the kernel never writes: it saturates) and Scale with NaN, so every element must be
written. A row length that is not whole 16-byte vectors of X must be refused. Then the
median time (CUDA-graph replays, three input sets rotated; scripts/gpu/bench.py) against
the same function in torch eager and compiled by torch.compile (static shapes, compiled
afresh per shape), in the same process. Exits 1 if any check fails.
"""
import os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows_check import launchers, pointer as p, stream, time_against_torch, timed_shapes


def quant(X):
    """The spec's math in torch: (Q float8_e4m3fn, Scale f32 [M])."""
    # Tensor by tensor: torch divides by a Python scalar as a multiplication by its
    # reciprocal, which rounds differently from the spec's division.
    s = X.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12) / torch.full((1, 1), 448.0, device=X.device)
    q = (X.float() * (torch.ones_like(s) / s)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, s.squeeze(-1)


def main():
    fails = 0
    g = torch.Generator(device="cuda")
    g.manual_seed(3)
    timed = timed_shapes("4096x8192,16384x8192,16384x4096")
    for target, fn in launchers(sys.argv[1:], "quant_fp8_per_token"):
        run = lambda X, Q, S: fn(p(X), p(Q), p(S), X.shape[0], X.shape[1], stream())
        for (M, N) in [(1, 8), (5, 1000), (13, 4096), (77, 8192), (300, 2056), (3, 8)] + timed:
            # Magnitudes over several binades, so that subnormal outputs occur too.
            X = (torch.randn(M, N, device="cuda", generator=g) * torch.exp2(torch.randint(-12, 4, (M, N), device="cuda", generator=g).float())).to(torch.bfloat16)
            if M == 3:
                X[1] = 0  # an all-zero row quantizes to zeros
            Q = torch.full((M, N), 0x7f, device="cuda", dtype=torch.uint8).view(torch.float8_e4m3fn)
            S = torch.full((M,), float("nan"), device="cuda")
            rc = run(X, Q, S)
            torch.cuda.synchronize()
            rq, rs = quant(X)
            bits, rbits = Q.view(torch.uint8), rq.view(torch.uint8)
            differ = int((bits != rbits).sum())
            s_same = bool(torch.equal(S, rs))
            unwritten = int(((bits & 0x7f) == 0x7f).sum() + torch.isnan(S).sum())
            subnormal = int((((rbits >> 3) & 0xf) == 0).logical_and((rbits & 7) != 0).sum())
            ok = rc == 0 and differ == 0 and s_same and unwritten == 0
            fails += not ok
            print(f"{target} {M}x{N}: {'PASS' if ok else 'FAIL'} rc {rc} Q bits differing: {differ} (subnormal outputs {subnormal}); "
                  f"Scale exact: {s_same}; unwritten {unwritten}")
            if M >= 4096:
                sets = [(X.clone(), torch.empty_like(Q), torch.empty_like(S)) for _ in range(3)]
                time_against_torch(target, (M, N), lambda s: run(*s), lambda s: quant(s[0]), sets, 3 * M * N + 4 * M)
        X = torch.zeros(2, 1001, device="cuda", dtype=torch.bfloat16)
        rc = run(X, torch.empty(2, 1001, device="cuda", dtype=torch.float8_e4m3fn), torch.empty(2, device="cuda"))
        ok = rc != 0
        fails += not ok
        print(f"{target} 2x1001 refused: {'PASS' if ok else 'FAIL'} rc {rc}")
    print(f"{fails} failure(s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
