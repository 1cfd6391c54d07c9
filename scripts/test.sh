#!/usr/bin/env bash
# The whole test suite on this machine: configure, build, then ctest (doctest units incl. the
# multi-process cache test, lit + FileCheck on emitted source and PTX, the install/find_package
# check, pytest over tests/python and the Python wheel) and the GPU tests, which without a GPU
# report every case as skipped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SSD_BUILD_DIR:-$root/build}
bash "$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
export SSD_CACHE_DIR=$(mktemp -d)
trap 'rm -rf "$SSD_CACHE_DIR"' EXIT
ctest --test-dir "$build" --output-on-failure -E '^gpu$'
cat "$build/tests/python-summary.txt"
echo "== GPU tests"
"$build/tests/ssd_gpu_tests" -ni | grep -E "^GPU tests|test cases:|Status:"
