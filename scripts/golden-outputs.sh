#!/usr/bin/env bash
# Regenerates tests/golden/<kernel>/ for every spec in specs/ (byte-identical on rerun):
# a virtual environment with the pinned numpy and PyYAML in build/pyenv, then
# scripts/golden_outputs.py.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x build/pyenv/bin/python ]] || ! build/pyenv/bin/python -c 'import numpy, yaml' 2>/dev/null; then
  python3 -m venv build/pyenv
  build/pyenv/bin/pip install -q --disable-pip-version-check -r scripts/requirements.txt \
    || { echo "golden-outputs: could not install scripts/requirements.txt from PyPI" >&2; exit 1; }
fi
exec build/pyenv/bin/python scripts/golden_outputs.py "$@"
