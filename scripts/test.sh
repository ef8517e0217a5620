#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs the pinned toolchains (cached), then runs
# every Rust test, including the compile tests that build every generated .cu with nvcc and
# every generated .hip with hipcc.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/install-toolchain.sh | tail -1 | sed 's/^/export /')"
export TILEGEN_CUDA_HOME TILEGEN_CUTLASS_DIR
# AMD: hipcc 7.2.4 and composable_kernel from Debian's packages, in a cached sid root.
TILEGEN_HIPCC=$(bash scripts/install-hip-toolchain.sh | tail -1 | sed -n 's/^TILEGEN_HIPCC=//p')
[[ -x $TILEGEN_HIPCC ]] || { echo "test.sh: scripts/install-hip-toolchain.sh did not give a hipcc" >&2; exit 1; }
export TILEGEN_HIP_BIN=$(dirname "$TILEGEN_HIPCC")
cargo build --locked --release
# Lints: the code stays clippy-clean (tests included). Where the toolchain has no clippy
# component, say so rather than pass silently.
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --locked --release --all-targets -- -D warnings
else
  echo "test.sh: cargo clippy is not installed: lints NOT checked" >&2
fi
# The regeneration check users run in CI, on the bundled specs.
./target/release/tilegen gen --check --deny-warnings
cargo test --locked --release -- --test-threads 2
