#!/usr/bin/env python3
"""Validate and time tilegen's GEMM-family kernels (attention: bench_attention.py) against torch/cuBLAS in one process.

Usage: bench.py TARGET=LIBDIR... [--kernels k1,k2] [--shapes MxNxK,...] [--quick] [--markdown BENCHMARKS.md]
                [--nvcc-version TEXT]

Each LIBDIR holds lib<kernel>.so files built for TARGET (e.g. sm80=build/sm80). For each
kernel: fresh random inputs (never zeros), NaN-poisoned outputs, the launcher's return code
checked, every output element checked as written, relative error against an f32 torch
reference; then the median time over CUDA-graph replays with inputs rotated so that L2 does not
flatter either side, against the peer in the same process (cuBLAS through torch.matmul,
plus the same epilogue in torch). Prints a table (and writes it, with the date, GPU and
versions, to --markdown); exits 1 if any check fails.
"""
import argparse, ctypes, datetime, os, statistics, subprocess, sys
import torch

# kernel -> (input dtype, has bias, relative-error bound on the output, epilogue on (x, bias))
KERNELS = {
    "gemm_bf16": (torch.bfloat16, False, 1e-2, lambda x, b: x),
    "gemm_f16": (torch.float16, False, 2e-2, lambda x, b: x),   # f16 accumulation: wider bound
    "gemm_bias_relu_bf16": (torch.bfloat16, True, 1e-2, lambda x, b: torch.relu(x + b)),
    "gemm_bias_gelu_bf16": (torch.bfloat16, True, 1e-2, lambda x, b: torch.nn.functional.gelu(x + b) * 0.5),
}
PEER_NAMES = {
    "gemm_bias_relu_bf16": "cuBLAS (torch.matmul) + bias + relu in torch",
    "gemm_bias_gelu_bf16": "cuBLAS (torch.matmul) + bias + gelu + scale in torch",
}
CHECK_SHAPES = [(1000, 1000, 1000), (1, 4096, 4096), (77, 136, 264), (4096, 4096, 4096), (129, 8, 8)]
BENCH_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 28672, 8192)]


def parse_shapes(text):
    """`4096x4096x4096,8192x8192x8192` -> [(4096, 4096, 4096), (8192, 8192, 8192)]."""
    shapes = []
    for item in text.split(","):
        dims = item.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(f"`{item}` is not MxNxK with positive integers")
        shapes.append(tuple(int(d) for d in dims))
    return shapes


def load(libdir, name):
    lib = ctypes.CDLL(os.path.join(libdir, f"lib{name}.so"))
    fn = getattr(lib, f"tilegen_{name}")
    fn.restype = ctypes.c_int
    return fn


def call(fn, name, A, B, C, bias, M, N, K):
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    p = lambda t: ctypes.c_void_p(t.data_ptr())
    if bias is not None:
        return fn(p(A), p(B), p(bias), p(C), M, N, K, stream)
    return fn(p(A), p(B), p(C), M, N, K, stream)


def reference(name, A, B, bias):
    return KERNELS[name][3](A.float() @ B.float(), None if bias is None else bias.float())


def peer(name, A, B, bias):
    return KERNELS[name][3](torch.matmul(A, B), bias)


def inputs(M, N, K, dtype, bias, gen):
    A = torch.randn(M, K, device="cuda", dtype=torch.float32, generator=gen).to(dtype)
    B = torch.randn(K, N, device="cuda", dtype=torch.float32, generator=gen).to(dtype)
    b = torch.randn(N, device="cuda", dtype=torch.float32, generator=gen).to(dtype) if bias else None
    return A, B, b


def check(fn, name, dtype, bias, bound, M, N, K, gen):
    base = name.split("_cfg_")[0]
    A, B, b = inputs(M, N, K, dtype, bias, gen)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    rc = call(fn, name, A, B, C, b, M, N, K)
    torch.cuda.synchronize()
    if rc != 0:
        return False, f"launcher returned {rc}"
    unwritten = int(torch.isnan(C).sum())
    ref = reference(base, A, B, b)
    err = float((C.float() - ref).norm() / ref.norm().clamp_min(1e-30))
    ok = unwritten == 0 and err <= bound
    return ok, f"rel err {err:.2e} (bound {bound:.0e}), unwritten {unwritten}"


def time_ms(run, sets, iters):
    """Median device time of one call of `run`, in ms.

    The calls are captured in a CUDA graph (four passes over the rotated input sets) and the
    graph is replayed back to back, each replay between two events; the host's launch
    latency (Python, ctypes or torch dispatch: 10-15 us a call on the H200 machine) is
    outside the events for every side alike, which matters for kernels of tens of
    microseconds. Warm-up runs eagerly first, on a side stream as graph capture requires.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(5):
            run(sets[i % len(sets)])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    calls = 4 * len(sets)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            run(sets[i % len(sets)])
    replays = max(5, iters // calls)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    graph.replay()  # queued first, so the timed replays start with the device already busy
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) / calls for start, end in events)


def best_ms(run, sets, iters):
    """The lower of two `time_ms` measurements: one-off interference (a clock ramp, another
    process) costs a rerun, not a wrong ratio."""
    return min(time_ms(run, sets, iters) for _ in range(2))


def bench_kernel(target, libdir, name, args, gen, rows):
    failures = 0
    base = name.split("_cfg_")[0]
    dtype, bias, bound, _ = KERNELS[base]
    fn = load(libdir, name)
    for (M, N, K) in CHECK_SHAPES[: 3 if args.quick else None]:
        ok, msg = check(fn, name, dtype, bias, bound, M, N, K, gen)
        failures += not ok
        print(f"check {target:5s} {name:32s} {M}x{N}x{K}: {'PASS' if ok else 'FAIL'} {msg}", flush=True)
    # Contract: misaligned leading dimensions are refused, not run.
    A, B, b = inputs(64, 64, 72, dtype, bias, gen)
    C = torch.empty(64, 64, device="cuda", dtype=dtype)
    rc = call(fn, name, A, B, C, b, 64, 64, 71)
    ok = rc == 1
    failures += not ok
    print(f"check {target:5s} {name:32s} K=71 (not a multiple of 8): {'PASS' if ok else 'FAIL'} launcher returned {rc}")
    for (M, N, K) in args.shapes[:1] if args.quick else args.shapes:
        nsets = 3
        sets = [inputs(M, N, K, dtype, bias, gen) + (torch.empty(M, N, device="cuda", dtype=dtype),) for _ in range(nsets)]
        ok, msg = check(fn, name, dtype, bias, bound, M, N, K, gen)
        failures += not ok
        iters = 30 if M >= 8192 else 100
        # Interleaved, twice each; each side keeps its better median, so clock and
        # neighbour noise hits both alike.
        ours, theirs = [], []
        for _ in range(2):
            ours.append(time_ms(lambda s: call(fn, name, s[0], s[1], s[3], s[2], M, N, K), sets, iters))
            theirs.append(time_ms(lambda s: peer(base, s[0], s[1], s[2]), sets, iters))
        flops = 2.0 * M * N * K
        rows.append((f"{name} ({target})", f"{M}x{N}x{K}", min(ours), max(ours), min(theirs), flops))

    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libdirs", nargs="+", help="TARGET=DIR with lib<kernel>.so files")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--shapes", type=parse_shapes, default=BENCH_SHAPES,
                    help="timed shapes as MxNxK, comma-separated (default: %(default)s)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--markdown", help="write the table, with date, GPU and versions, to this file")
    ap.add_argument("--nvcc-version", default="", help="the nvcc that built the libraries, for the record")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int.from_bytes(os.urandom(4), "little"))
    failures = 0
    rows = []
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    for spec in args.libdirs:
        target, libdir = spec.split("=", 1)
        for name in args.kernels.split(","):
            # Attention kernels are timed by bench_attention.py.
            if name.split("_cfg_")[0] not in KERNELS or not os.path.exists(os.path.join(libdir, f"lib{name}.so")):
                continue
            failures += bench_kernel(target, libdir, name, args, gen, rows)
    table = [
        "| kernel | M x N x K | ms | TFLOP/s | peer | peer ms | peer TFLOP/s | ratio (peer ms / ours) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, shape, t, t_hi, tp, flops in rows:
        peer_name = PEER_NAMES.get(name.split(" ")[0].split("_cfg_")[0], "cuBLAS (torch.matmul)")
        table.append(f"| {name} | {shape} | {t:.3f} | {flops / t / 1e9:.0f} | {peer_name} | {tp:.3f} | {flops / tp / 1e9:.0f} | {tp / t:.2f}x |")
    print()
    print("\n".join(table))
    if args.markdown:
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        except OSError:
            driver = "unknown"
        header = [
            "# Benchmarks",
            "",
            "Written by `scripts/gpu/bench.py` (through `scripts/gpu/roundtrip.sh`); regenerate on a GPU machine rather than editing.",
            "Each kernel is checked against an f32 torch reference before timing; times are medians over CUDA-graph replays",
            "after warm-up (host launch latency excluded for every side), with three input sets rotated so that L2 does not",
            "flatter either side; the peer runs in the same process, interleaved with ours (two medians each, the better one",
            "kept for both sides).",
            "",
            f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- GPU: {torch.cuda.get_device_name()} (driver {driver})",
            f"- torch {torch.__version__}, CUDA {torch.version.cuda}; kernels built by {args.nvcc_version or 'nvcc'}",
            "",
        ]
        with open(args.markdown, "w") as f:
            f.write("\n".join(header + table) + "\n")
    print(f"\n{len(rows)} timed, {failures} check failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
