#!/usr/bin/env bash
# ctest's `python_wheel` test: `pip wheel ./python` (scikit-build-core driving the project's CMake,
# no build isolation: the build tools come from scripts/setup-python.sh), installed into a fresh
# venv that sees the system's torch, then imported and called from outside the source tree.
#
# It builds the whole library once more (about 75 s of CPU here), so it runs when SSD_TEST_WHEEL=1
# (.ci/run sets it) and otherwise reports itself skipped (exit 77, counted as skipped).
set -euo pipefail
if [ "${SSD_TEST_WHEEL:-0}" != 1 ]; then
  echo "python_wheel: skipped (set SSD_TEST_WHEEL=1 to build and install the wheel; CI does)"
  exit 77
fi
python=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel "$root/python" --no-build-isolation --no-deps -w "$work/wheel" -q
wheel=$(ls "$work"/wheel/ssdgen-*.whl)
"$python" -c "import sys, zipfile; sys.exit('ssdgen/libssdgen.so' not in zipfile.ZipFile(sys.argv[1]).namelist())" \
  "$wheel" || { echo "wheel lacks ssdgen/libssdgen.so" >&2; exit 1; }
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps --no-index "$wheel"
cd "$work"
env -u SSDGEN_LIBRARY -u PYTHONPATH "$work/venv/bin/python" - <<'PY'
import os, ssdgen, ssdgen.torch, torch
assert ssdgen.library_path.startswith(os.path.dirname(ssdgen.__file__)), ssdgen.library_path
x = torch.empty(1, 64, 2, 32, dtype=torch.bfloat16, device="meta")
B = torch.empty(1, 64, 1, 16, dtype=torch.bfloat16, device="meta")
out = ssdgen.torch.mamba_chunk_scan_combined(x, torch.empty(1, 64, 2, device="meta"), torch.empty(2, device="meta"),
                                             B, B, 64)
assert out.shape == x.shape
print(f"wheel: ssdgen {ssdgen.__version__} imports and traces from {ssdgen.library_path}")
PY
