#!/usr/bin/env bash
# The Python package on the device machine, in one call: `pip install ./python` there (no network:
# scikit-build-core, cmake and ninja are preinstalled; fmt and nlohmann-json come from the carried
# .deps), into build-gpu/pylib, then scripts/python_gpu_test.py with a fresh kernel cache (so the
# kernels are JIT-compiled inside the Python process). Ends with python_gpu_test.py's PASS/FAIL table.
#
#   here:   bash scripts/fetch-gpu-deps.sh          (once; fills .deps/debs)
#   device: run(command="bash scripts/python-gpu-test.sh [python_gpu_test.py options]",
#               carry=[".deps", ".peer"])            (.peer: optional copy of mamba_ssm, see the script)
#   Under the 10-minute limit of one call, split the sections if needed, e.g.
#     --only=first-call,opcheck,kwargs,shapes   then   --only=peer,compile,repeat,layouts,batch,training,devices,cold-capture
#
# Logs go to $OUT (the device tool brings them back), else build-gpu/out.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/build-gpu/out}
mkdir -p "$out"
prefix=$root/.deps/prefix
ls "$root"/.deps/debs/*.deb >/dev/null 2>&1 || { echo "no .deps/debs: run scripts/fetch-gpu-deps.sh here and carry .deps" >&2; exit 2; }
for deb in "$root"/.deps/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
# (Printed, not kept in $OUT: the device tool returns 8 files, gpu-test.sh says why.)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

pylib=$root/build-gpu/pylib
rm -rf "$pylib"
start=$(date +%s)
# A kept build directory: a second call on a warm machine rebuilds nothing.
if ! CMAKE_PREFIX_PATH="$prefix/usr" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) SKBUILD_BUILD_DIR="$root/build-gpu/skbuild" \
    python3 -m pip install "$root/python" --no-build-isolation --no-deps --no-index --target "$pylib" -v \
    >"$root/build-gpu/pip-install.log" 2>&1; then
  tail -40 "$root/build-gpu/pip-install.log"
  echo "python-gpu-test.sh: pip install ./python failed"
  exit 1
fi
echo "pip install ./python: $(( $(date +%s) - start )) s ($(ls "$pylib"/ssdgen))"

export SSD_CACHE_DIR=$(mktemp -d)
trap 'rm -rf "$SSD_CACHE_DIR"' EXIT
PYTHONPATH="$pylib" PYTHONUNBUFFERED=1 python3 "$root/scripts/python_gpu_test.py" "$@" 2>&1 | tee "$out/python-gpu.log"
exit "${PIPESTATUS[0]}"
