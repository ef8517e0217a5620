#!/usr/bin/env bash
# Installs tilegen's pinned NVIDIA toolchain from PyPI, idempotently:
#   * nvcc 13.0 (CUDA_HOME layout) from the nvidia-* wheels, installed with --no-deps
#     because the nvcc wheel's own dependencies are unpinned;
#   * the CUTLASS 4.2 / CuTe headers from nvidia-cutlass==4.2.0.0.
#
# Everything goes to a per-user cache keyed by the pinned versions
# (${TILEGEN_TOOLCHAIN_DIR:-$HOME/.cache/tilegen}/...), so every fresh clone reuses it.
# A completed install is marked by a stamp file; an interrupted one is redone from scratch.
#
# Prints, as its last line, the shell assignments other scripts can eval:
#   TILEGEN_CUDA_HOME=... TILEGEN_CUTLASS_DIR=...
set -euo pipefail

CUDA_PINS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
)
CUTLASS_PIN=nvidia-cutlass==4.2.0.0

ROOT="${TILEGEN_TOOLCHAIN_DIR:-$HOME/.cache/tilegen}"
CUDA_DIR="$ROOT/cuda-13.0.88"
CUTLASS_DIR="$ROOT/cutlass-4.2.0.0"
PYTHON="${PYTHON:-python3}"

say() { echo "install-toolchain: $*" >&2; }
die() { say "error: $*"; exit 1; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found; tilegen's toolchain comes from PyPI wheels and needs Python 3 with pip"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "pip is not available for $PYTHON"
command -v unzip >/dev/null || "$PYTHON" -c 'import zipfile' || die "neither unzip nor Python's zipfile is available"

pip_fetch() { # pip_fetch WHAT PIP_ARGS... ; turns pip's failure into a clear message
  local what=$1 log
  shift
  log="$(mktemp)"
  if ! "$PYTHON" -m pip "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "pip could not fetch $what -- is PyPI reachable (proxy, PIP_INDEX_URL)? Nothing was installed; rerun when it is."
  fi
  rm -f "$log"
}

# begin DIR MESSAGE: returns 1 when DIR is already complete; otherwise starts DIR.partial afresh.
begin() {
  if [[ -f "$1/.complete" ]]; then return 1; fi
  say "$2"
  rm -rf "$1" "$1.partial"
  mkdir -p "$1.partial"
}

# finish DIR: the install is whole; move it into place and mark it complete.
finish() {
  mv "$1.partial" "$1"
  touch "$1/.complete"
}

install_cuda() {
  begin "$CUDA_DIR" "installing nvcc 13.0 wheels into $CUDA_DIR (about 104 MB download)" || return 0
  pip_fetch "the nvcc 13.0 wheels (${CUDA_PINS[*]})" install --quiet --no-deps --no-cache-dir --disable-pip-version-check \
    --target "$CUDA_DIR.partial" "${CUDA_PINS[@]}"
  local home="$CUDA_DIR.partial/nvidia/cu13"
  [[ -x "$home/bin/nvcc" ]] || die "the nvcc wheel did not provide $home/bin/nvcc"
  # nvcc links against lib64/; the wheels ship lib/.
  [[ -e "$home/lib64" ]] || ln -s lib "$home/lib64"
  finish "$CUDA_DIR"
}

install_cutlass() {
  begin "$CUTLASS_DIR" "installing CUTLASS 4.2 headers into $CUTLASS_DIR (6.4 MB download)" || return 0
  mkdir -p "$CUTLASS_DIR.partial/wheel"
  pip_fetch "$CUTLASS_PIN" download --quiet --no-deps --no-cache-dir --disable-pip-version-check \
    -d "$CUTLASS_DIR.partial/wheel" "$CUTLASS_PIN"
  local whl
  whl="$(ls "$CUTLASS_DIR.partial"/wheel/nvidia_cutlass-4.2.0.0-*.whl)"
  "$PYTHON" - "$whl" "$CUTLASS_DIR.partial" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
keep = ("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/")
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(keep)]
    if not names:
        sys.exit("install-toolchain: error: no CUTLASS headers found in " + whl)
    z.extractall(dest, names)
PY
  [[ -f "$CUTLASS_DIR.partial/cutlass_library/source/include/cute/tensor.hpp" ]] \
    || die "cute/tensor.hpp missing after unpacking $whl"
  mv "$CUTLASS_DIR.partial/wheel" "$CUTLASS_DIR.partial/wheel-kept"
  finish "$CUTLASS_DIR"
}

mkdir -p "$ROOT"
install_cuda
install_cutlass
"$CUDA_DIR/nvidia/cu13/bin/nvcc" --version | tail -2 >&2
echo "TILEGEN_CUDA_HOME=$CUDA_DIR/nvidia/cu13 TILEGEN_CUTLASS_DIR=$CUTLASS_DIR/cutlass_library/source"
