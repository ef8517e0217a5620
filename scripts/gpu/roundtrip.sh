#!/usr/bin/env bash
# The GPU round trip on a machine with nvcc, torch and a GPU but no internet:
#   scripts/gpu/roundtrip.sh CUTLASS_WHEEL [SRC_DIR...]
# unpacks the CUTLASS headers from the wheel, builds every generated/sm80/*.cu (and any
# .cu in the extra SRC_DIRs) into lib<kernel>.so with that machine's nvcc, then validates
# and times them with scripts/gpu/bench_gemm.py; the table is printed last.
# sm80-target code is compiled to sm_80 and sm_90 machine code (it runs on both).
set -euo pipefail
wheel=${1:?usage: roundtrip.sh CUTLASS_WHEEL [SRC_DIR...]}
shift
work=${TILEGEN_GPU_WORK:-/tmp/tilegen-gpu}
mkdir -p "$work/cutlass" "$work/lib"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("cutlass_library/source/include/")])' "$wheel" "$work/cutlass"
inc="$work/cutlass/cutlass_library/source/include"
nvcc --version | tail -1
srcs=(generated/sm80/*.cu)
for d in "$@"; do srcs+=("$d"/*.cu); done
pids=()
for src in "${srcs[@]}"; do
  k=$(basename "$src" .cu)
  ( nvcc -std=c++17 -O3 --expt-relaxed-constexpr -DNDEBUG -shared -Xcompiler -fPIC \
      -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=sm_90 \
      -I"$inc" -I"$(dirname "$src")" -Xptxas -v "$src" -o "$work/lib/lib$k.so" > "$work/lib/$k.log" 2>&1 \
    && echo "built $k: $(grep -A1 "for 'sm_90'" "$work/lib/$k.log" | grep -o 'Used [0-9]* registers' | head -1)" \
    || { echo "FAILED to build $k"; cat "$work/lib/$k.log"; exit 1; } ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
kernels=$(for src in "${srcs[@]}"; do basename "$src" .cu; done | paste -sd, -)
PYTHONUNBUFFERED=1 python3 scripts/gpu/bench_gemm.py "$work/lib" --kernels "$kernels" ${TILEGEN_BENCH_ARGS:-}
