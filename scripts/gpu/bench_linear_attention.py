#!/usr/bin/env python3
"""Validate and time tilegen's chunked causal linear attention against plain torch in one process.

Usage: bench_linear_attention.py TARGET=LIBDIR... [--kernels k1,k2] [--quick] [--markdown FILE]

For each linear_attention_* library: fresh N(0, 1) inputs as [batch, seq, heads, dim]
tensors, NaN-poisoned outputs, the launcher's return code checked, every output element
checked as written, relative error against the quadratic form O = tril(Q·Kᵀ/√D)·V in f32;
then the median time (three input sets rotated so that L2 does not flatter either side)
against the same chunked algorithm written in plain torch (batched matmuls over all chunks,
an exclusive prefix sum of the per-chunk Kᵀ·V states, no Python loop over chunks), timed
interleaved in the same process. Appends a table to --markdown. Exits 1 if any check fails.
"""
import argparse, ctypes, os, sys
import torch

from bench import time_ms  # scripts/gpu/bench.py: the same timing for every peer

# kernel -> (dtype, head dim, chunk)
KERNELS = {"linear_attention_causal_bf16": (torch.bfloat16, 128, 64)}
CHECK_SHAPES = [(2, 200, 3), (1, 17, 2), (2, 1000, 4), (1, 4096, 8)]  # (B, S, H)
BENCH_SHAPES = [(4, 4096, 16)]


def load(libdir, name):
    fn = getattr(ctypes.CDLL(os.path.join(libdir, f"lib{name}.so")), f"tilegen_{name}")
    fn.restype = ctypes.c_int
    return fn


def call(fn, q, k, v, o):
    B, S, H, _ = q.shape
    p = lambda t: ctypes.c_void_p(t.data_ptr())
    return fn(p(q), p(k), p(v), p(o), B, S, H, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def inputs(B, S, H, D, dtype, gen):
    return [torch.randn(B, S, H, D, device="cuda", generator=gen).to(dtype) for _ in range(3)]


def quadratic(q, k, v):
    """The definition: O[i] = Σ_{j ≤ i} (q_i·k_j/√D) v_j, in f32, as [B, S, H, D]."""
    q, k, v = (x.float().transpose(1, 2) for x in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), 0.0)
    return (s @ v).transpose(1, 2)


def torch_chunked(q, k, v, chunk):
    """The same chunked algorithm in plain torch: intra-chunk causal (Q·Kᵀ)·V plus Q times the
    exclusive prefix sum of the chunks' Kᵀ·V states (kept in f32, used in the input dtype)."""
    B, S, H, D = q.shape
    n = S // chunk
    q, k, v = (x.transpose(1, 2).reshape(B, H, n, chunk, D) for x in (q, k, v))
    kv = (k.transpose(-1, -2) @ v).float()                       # [B, H, n, D, D]
    state = (kv.cumsum(2) - kv).to(q.dtype)                       # Σ over the chunks before
    attn = (q @ k.transpose(-1, -2)).masked_fill(
        torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1), 0.0)
    o = (q @ state + attn @ v) * D ** -0.5
    return o.reshape(B, H, S, D).transpose(1, 2)


def check(fn, name, B, S, H, gen):
    dtype, D, _ = KERNELS[name.split("_cfg_")[0]]
    q, k, v = inputs(B, S, H, D, dtype, gen)
    o = torch.full_like(q, float("nan"))
    rc = call(fn, q, k, v, o)
    torch.cuda.synchronize()
    if rc != 0:
        return False, f"launcher returned {rc}"
    ref = quadratic(q, k, v)
    unwritten = int(torch.isnan(o).sum())
    err = float((o.float() - ref).norm() / ref.norm())
    ok = unwritten == 0 and err <= 1e-2
    return ok, f"rel err {err:.2e} (bound 1e-02), unwritten {unwritten}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libdirs", nargs="+")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int.from_bytes(os.urandom(4), "little"))
    failures, rows = 0, []
    for spec in args.libdirs:
        target, libdir = spec.split("=", 1)
        for name in args.kernels.split(","):
            base = name.split("_cfg_")[0]  # tile-size variants of a bundled spec
            if base not in KERNELS or not os.path.exists(os.path.join(libdir, f"lib{name}.so")):
                continue
            fn = load(libdir, name)
            dtype, D, chunk = KERNELS[base]
            for (B, S, H) in CHECK_SHAPES:
                ok, msg = check(fn, name, B, S, H, gen)
                failures += not ok
                print(f"check {target:5s} {name:34s} B{B} S{S} H{H}: {'PASS' if ok else 'FAIL'} {msg}", flush=True)
            for (B, S, H) in BENCH_SHAPES:
                sets = [inputs(B, S, H, D, dtype, gen) + [torch.empty(B, S, H, D, device="cuda", dtype=dtype)] for _ in range(3)]
                # The peer agrees with the definition too (it is the yardstick, so check it).
                q, k, v, _ = sets[0]
                ref = quadratic(q[:1, :, :2], k[:1, :, :2], v[:1, :, :2])
                peer_err = float((torch_chunked(q[:1, :, :2], k[:1, :, :2], v[:1, :, :2], chunk).float() - ref).norm() / ref.norm())
                print(f"peer  torch chunked B1 S{S} H2: rel err {peer_err:.2e}")
                # Chunked FLOPs: per chunk Q·Kᵀ and P·V (2·C²·D each), Q·S and Kᵀ·V (2·C·D² each).
                flops = B * H * S * (4.0 * chunk * D + 4.0 * D * D)
                ours = [time_ms(lambda s: call(fn, *s), sets, 30)]
                peer = [time_ms(lambda s: torch_chunked(s[0], s[1], s[2], chunk), sets, 30)]
                ours.append(time_ms(lambda s: call(fn, *s), sets, 30))
                peer.append(time_ms(lambda s: torch_chunked(s[0], s[1], s[2], chunk), sets, 30))
                t, pt = min(ours), min(peer)
                rows.append((f"{name} ({target})", f"B{B} S{S} H{H} D{D} chunk {chunk}", t, flops, pt))
                print(f"time  {target:5s} {name:34s} B{B} S{S} H{H}: {t:.3f} ms ({flops / t / 1e9:.0f} TFLOP/s) vs torch chunked {pt:.3f} ms -> {pt / t:.2f}x", flush=True)
    table = ["| kernel | shape | ms | TFLOP/s | peer (plain torch, chunked) ms | ratio (peer ms / ours) |",
             "|---|---|---|---|---|---|"]
    for name, shape, t, flops, pt in rows:
        table.append(f"| {name} | {shape} | {t:.3f} | {flops / t / 1e9:.0f} | {pt:.3f} | {pt / t:.2f}x |")
    print("\n" + "\n".join(table))
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n## Chunked causal linear attention\n\nFLOPs counted as the chunked algorithm's, B·H·S·(4·C·D + 4·D²). Peer: the same chunked algorithm in plain torch (batched matmuls over all chunks, an exclusive prefix sum of the per-chunk Kᵀ·V states in f32), same process, interleaved.\n\n" + "\n".join(table) + "\n")
    print(f"\n{len(rows)} timed, {failures} check failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
