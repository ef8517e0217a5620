#!/usr/bin/env python3
"""Validate and time tilegen's row-wise kernels (programs without gemms) against torch in one process.

Usage: bench_rows.py TARGET=LIBDIR... [--kernels k1,k2] [--check-only] [--compiled] [--markdown FILE]

Kernels (tests/golden/specs): softmax_bf16 (Y = softmax(X) along rows, rows of up to 1024),
softmax_wide_bf16 (the same over rows of any length, in column chunks of 16384),
rms_norm_bf16 (Y = X / sqrt(mean(X²) + 1e-6) · W, rows of up to 8192), rms_norm_wide_bf16 (the
same over rows of any length, in column chunks of 16384) and layer_norm_bf16
(Y = (X - mean) / sqrt(var + 1e-5) · gamma + beta, rows of up to 4096). For each library: random
bf16 inputs, NaN-poisoned outputs, the launcher's return code checked, every output element
checked as written, relative error (Frobenius) against the same math in f32 torch; a row length
that is not a whole number of 16-byte vectors must be refused. Then the median time (CUDA-graph
replays, three input sets rotated so that L2 does not flatter either side) against torch's own
kernel (torch.softmax, torch.nn.functional.rms_norm, torch.nn.functional.layer_norm) and, with
--compiled, torch.compile's (Triton) version of the same function, compiled afresh for each
shape (static shapes), interleaved in the same process. Reports bytes read and written per
second (each counted once). Exits 1 if any check fails.
"""
import argparse, ctypes, os, sys
import torch

from bench import time_ms  # scripts/gpu/bench.py: the same timing for every peer

F = torch.nn.functional


def softmax_ref(X, V):
    return torch.softmax(X.float(), dim=-1)


def rms_ref(X, V):
    x = X.float()
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * V[0].float()


def layer_norm_ref(X, V):
    return F.layer_norm(X.float(), (X.shape[-1],), V[0].float(), V[1].float(), 1e-5)


# kernel -> (1-D tensors [N] after X, reference, torch peer, check shapes (M, N), timed shapes)
KERNELS = {
    "softmax_bf16": (0, softmax_ref, lambda X, V: torch.softmax(X, dim=-1),
                     [(1, 8), (13, 1000), (77, 1024), (300, 520), (4096, 1024)],
                     [(16384, 1024), (65536, 1024)]),
    "softmax_wide_bf16": (0, softmax_ref, lambda X, V: torch.softmax(X, dim=-1),
                          [(1, 8), (3, 4088), (5, 10000), (13, 32768), (2, 131080)],
                          [(4096, 32000), (2048, 128256)]),
    "rms_norm_bf16": (1, rms_ref, lambda X, V: F.rms_norm(X, (X.shape[-1],), V[0], 1e-6),
                      [(1, 8), (5, 1000), (13, 4096), (77, 8192), (300, 2056)],
                      [(4096, 8192), (16384, 8192)]),
    "rms_norm_wide_bf16": (1, rms_ref, lambda X, V: F.rms_norm(X, (X.shape[-1],), V[0], 1e-6),
                           [(1, 8), (5, 1000), (3, 20000), (7, 65536), (2, 131080)],
                           [(4096, 16384), (1024, 65536)]),
    "layer_norm_bf16": (2, layer_norm_ref, lambda X, V: F.layer_norm(X, (X.shape[-1],), V[0], V[1], 1e-5),
                        [(1, 8), (5, 1000), (13, 4096), (77, 2048), (300, 1032)],
                        [(16384, 4096), (65536, 4096)]),
}


def load(libdir, name):
    fn = getattr(ctypes.CDLL(os.path.join(libdir, f"lib{name}.so")), f"tilegen_{name}")
    fn.restype = ctypes.c_int
    return fn


def call(fn, X, V, Y):
    p = lambda t: ctypes.c_void_p(t.data_ptr())
    M, N = X.shape
    return fn(p(X), *(p(v) for v in V), p(Y), M, N, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def inputs(M, N, vectors, gen):
    """X [M, N] (offset, so that centring matters) and `vectors` 1-D tensors [N] near 1."""
    X = (torch.randn(M, N, device="cuda", generator=gen) * 3 + 1).to(torch.bfloat16)
    V = tuple((1 + 0.1 * torch.randn(N, device="cuda", generator=gen)).to(torch.bfloat16) for _ in range(vectors))
    return X, V


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libdirs", nargs="+")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--compiled", action="store_true")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int.from_bytes(os.urandom(4), "little"))
    failures, rows = 0, []
    for spec in args.libdirs:
        target, libdir = spec.split("=", 1)
        for name in args.kernels.split(","):
            if name not in KERNELS or not os.path.exists(os.path.join(libdir, f"lib{name}.so")):
                continue
            fn = load(libdir, name)
            vectors, ref_fn, peer, checks, timed = KERNELS[name]
            for (M, N) in checks:
                X, V = inputs(M, N, vectors, gen)
                Y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                rc = call(fn, X, V, Y)
                torch.cuda.synchronize()
                if rc != 0:
                    ok, msg = False, f"launcher returned {rc}"
                else:
                    ref = ref_fn(X, V)
                    unwritten = int(torch.isnan(Y).sum())
                    err = float((Y.float() - ref).norm() / ref.norm())
                    ok, msg = unwritten == 0 and err <= 1e-2, f"rel err {err:.2e} (bound 1e-02), unwritten {unwritten}"
                failures += not ok
                print(f"check {target:5s} {name:14s} {M}x{N}: {'PASS' if ok else 'FAIL'} {msg}", flush=True)
            # Contract: rows must be whole 16-byte vectors.
            X, V = inputs(4, 1001, vectors, gen)
            rc = call(fn, X, V, torch.empty_like(X))
            failures += rc != 1
            print(f"check {target:5s} {name:14s} N=1001 (not a multiple of 8): {'PASS' if rc == 1 else 'FAIL'} launcher returned {rc}", flush=True)
            for (M, N) in [] if args.check_only else timed:
                sets = [inputs(M, N, vectors, gen) + (torch.empty(M, N, device="cuda", dtype=torch.bfloat16),) for _ in range(3)]
                peers = [("torch", peer)]
                if args.compiled:
                    # A fresh compile for each shape, specialised to it: without the reset, a
                    # second shape of the same function recompiles for dynamic shapes, a
                    # slower kernel that would flatter the ratio.
                    torch._dynamo.reset()
                    peers.append(("torch.compile", torch.compile(lambda X, V, f=ref_fn: f(X, V).to(torch.bfloat16), dynamic=False)))
                ours, theirs = [], {p: [] for p, _ in peers}
                for _ in range(2):  # interleaved; each side keeps its better median
                    ours.append(time_ms(lambda s: call(fn, s[0], s[1], s[2]), sets, 200))
                    for pname, pf in peers:
                        theirs[pname].append(time_ms(lambda s: pf(s[0], s[1]), sets, 200))
                t = min(ours)
                nbytes = 2 * M * N * 2 + vectors * N * 2
                for pname, _ in peers:
                    tp = min(theirs[pname])
                    rows.append((f"{name} ({target})", f"{M}x{N}", t, nbytes, pname, tp))
                    print(f"time  {target:5s} {name:14s} {M}x{N}: {t * 1e3:.1f} us ({nbytes / t / 1e6:.0f} GB/s) vs {pname} {tp * 1e3:.1f} us ({nbytes / tp / 1e6:.0f} GB/s) -> {tp / t:.2f}x", flush=True)
    table = ["| kernel | M x N | us | GB/s read+written | peer | peer us | ratio (peer / ours) |", "|---|---|---|---|---|---|---|"]
    for name, shape, t, b, pname, tp in rows:
        table.append(f"| {name} | {shape} | {t * 1e3:.1f} | {b / t / 1e6:.0f} | {pname} | {tp * 1e3:.1f} | {tp / t:.2f}x |")
    print("\n" + "\n".join(table))
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n## Row-wise programs (softmax, RMSNorm, LayerNorm)\n\n" + "\n".join(table) + "\n")
    print(f"\n{len(rows)} timed, {failures} check failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
