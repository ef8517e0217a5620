#!/usr/bin/env bash
# The GPU round trip, for a machine with nvcc, PyTorch and an NVIDIA GPU but no internet:
#
#   scripts/gpu/roundtrip.sh TILEGEN_BINARY CUTLASS_WHEEL [EXTRA_SPEC...]
#
# 1. unpacks the CUTLASS headers from the wheel (PyPI nvidia-cutlass==4.2.0.0);
# 2. `tilegen validate` builds every specs/*.yaml for each target in $TILEGEN_TARGETS
#    (default "sm80 sm90a") with that machine's nvcc and checks each golden case on the GPU;
# 3. scripts/gpu/bench.py checks the GEMM-family kernels against torch on fresh random inputs
#    and times them against cuBLAS in the same process, writing BENCHMARKS.md (to $BENCH_OUT,
#    default ./BENCHMARKS.md); scripts/gpu/bench_attention.py does the same for attention
#    against torch SDPA's FLASH and CUDNN backends and appends its table, and
#    scripts/gpu/bench_w4a16.py times 4-bit-weight GEMMs against bf16 cuBLAS, and
#    scripts/gpu/bench_linear_attention.py times linear attention against plain torch. EXTRA_SPECs (e.g. tile-size variants) are built for sm80 and timed too.
# With TILEGEN_SANITIZE=1, the ragged golden case of each kernel also runs under
# compute-sanitizer memcheck and racecheck. The benchmark table is printed last; the exit status is 1 if any check failed.
set -euo pipefail
tilegen=${1:?usage: roundtrip.sh TILEGEN_BINARY CUTLASS_WHEEL [EXTRA_SPEC...]}
wheel=${2:?usage: roundtrip.sh TILEGEN_BINARY CUTLASS_WHEEL [EXTRA_SPEC...]}
shift 2
work=${TILEGEN_GPU_WORK:-/tmp/tilegen-gpu}
targets=${TILEGEN_TARGETS:-sm80 sm90a}
mkdir -p "$work/cutlass"
python3 - "$wheel" "$work/cutlass" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("cutlass_library/source/include/")])
PY
cutlass="$work/cutlass/cutlass_library/source"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
jobs=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))
status=0
libdirs=()
for t in $targets; do
  # sm80 code is built as sm_90 machine code here (it runs on sm_80 and later).
  "$tilegen" validate specs/*.yaml --target "$t" -o "$work/build" --nvcc "$nvcc" --cutlass "$cutlass" --sm 90 -j "$jobs" || status=1
  libdirs+=("$t=$work/build/$t")
  if [[ -n ${TILEGEN_SANITIZE:-} ]]; then
    # Every golden case again under compute-sanitizer (the builds are reused).
    for tool in memcheck racecheck; do
      echo "compute-sanitizer --tool $tool, target $t:"
      "$tilegen" validate specs/*.yaml --target "$t" -o "$work/build" --nvcc "$nvcc" --cutlass "$cutlass" --sm 90 -j "$jobs" \
        --cases ragged --wrap "compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 5" 2>&1 | grep -v "is up to date" || status=1
    done
  fi
done
kernels=$(for s in specs/*.yaml; do sed -n 's/^kernel: *//p' "$s"; done)
if [[ $# -gt 0 ]]; then
  "$tilegen" build "$@" --target sm80 -o "$work/build" --nvcc "$nvcc" --cutlass "$cutlass" --sm 90 -j "$jobs" >/dev/null || status=1
  kernels="$kernels $(for s in "$@"; do sed -n 's/^kernel: *//p' "$s"; done)"
fi
PYTHONUNBUFFERED=1 python3 scripts/gpu/bench.py "${libdirs[@]}" --kernels "$(echo $kernels | tr ' ' ',')" \
  --markdown "${BENCH_OUT:-BENCHMARKS.md}" --nvcc-version "$("$nvcc" --version | tail -1)" ${TILEGEN_BENCH_ARGS:-} || status=1
# Attention against torch SDPA (FLASH and CUDNN backends); appends its table.
PYTHONUNBUFFERED=1 python3 scripts/gpu/bench_attention.py "${libdirs[@]}" --kernels "$(echo $kernels | tr ' ' ',')" \
  --markdown "${BENCH_OUT:-BENCHMARKS.md}" ${TILEGEN_BENCH_ARGS:-} || status=1
# 4-bit-weight GEMMs against bf16 cuBLAS on the unquantized weights; appends its table.
PYTHONUNBUFFERED=1 python3 scripts/gpu/bench_w4a16.py "${libdirs[@]}" --kernels "$(echo $kernels | tr ' ' ',')" \
  --markdown "${BENCH_OUT:-BENCHMARKS.md}" ${TILEGEN_BENCH_ARGS:-} || status=1
# Chunked causal linear attention against the same algorithm in plain torch; appends its table.
PYTHONUNBUFFERED=1 python3 scripts/gpu/bench_linear_attention.py "${libdirs[@]}" --kernels "$(echo $kernels | tr ' ' ',')" \
  --markdown "${BENCH_OUT:-BENCHMARKS.md}" ${TILEGEN_BENCH_ARGS:-} || status=1
exit $status
