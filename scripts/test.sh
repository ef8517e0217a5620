#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs the pinned toolchain (cached), then runs
# every Rust test, including the compile test that builds every generated .cu with nvcc.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/install-toolchain.sh | tail -1 | sed 's/^/export /')"
export TILEGEN_CUDA_HOME TILEGEN_CUTLASS_DIR
cargo build --locked --release
# The regeneration check users run in CI, on the bundled specs.
./target/release/tilegen gen --check
cargo test --locked --release -- --test-threads 2
