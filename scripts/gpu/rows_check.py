"""What the row-wise check scripts (check_rms_norm_quant.py, check_fused_add_rms_norm.py,
check_quant_fp8.py) share: their TARGET=LIBDIR arguments, the MODE and SHAPES settings, and
the timing against torch eager and torch.compile in the same process."""
import ctypes, os
import torch

from bench import best_ms  # the same timing for every peer


def pointer(t):
    return ctypes.c_void_p(t.data_ptr())


def stream():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def launchers(argv, kernel):
    """(target, launcher) for each TARGET=LIBDIR argument: tilegen_<kernel> from lib<kernel>.so."""
    for spec in argv:
        target, libdir = spec.split("=", 1)
        fn = getattr(ctypes.CDLL(os.path.join(libdir, f"lib{kernel}.so")), f"tilegen_{kernel}")
        fn.restype = ctypes.c_int
        yield target, fn


def timed_shapes(default):
    """The timed (M, N) shapes: none with MODE=--check-only, else SHAPES=MxN,... or `default`."""
    if "--check-only" in os.environ.get("MODE", ""):
        return []
    return [tuple(int(d) for d in x.split("x")) for x in os.environ.get("SHAPES", default).split(",")]


def time_against_torch(target, shape, ours, peer, sets, bytes_moved):
    """Times `ours(set)` against `peer(set)` eager and compiled by torch.compile (static shapes,
    compiled afresh), best of two medians each, and prints one line."""
    torch._dynamo.reset()
    compiled = torch.compile(peer, dynamic=False)
    t_ours = best_ms(ours, sets, 200)
    t_eager = best_ms(peer, sets, 200)
    t_comp = best_ms(compiled, sets, 200)
    tbs = bytes_moved / (t_ours * 1e-3) / 1e12
    print(f"time {target} {shape[0]}x{shape[1]}: {t_ours * 1e3:.1f} us ({tbs:.2f} TB/s) vs torch {t_eager * 1e3:.1f} us -> {t_eager / t_ours:.2f}x, "
          f"vs torch.compile {t_comp * 1e3:.1f} us -> {t_comp / t_ours:.2f}x")
