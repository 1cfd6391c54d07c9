#!/usr/bin/env bash
# The whole test suite on this machine: configure, build, then ctest on every core: the doctest
# units (the preset NVRTC compiles as two tests of their own, unit_nvrtc_sm_80 and _sm_90a; the
# multi-process cache test), lit + FileCheck on emitted source and PTX, the install/find_package
# check, and the GPU tests, which without a GPU report every case skipped. ctest prints each test as
# it finishes; the end gives the real counts (doctest cases, lit tests, GPU cases skipped) and the
# line `tests: N passed, N failed, N skipped`.
#
# SSD_TEST_WARM_CACHE=DIR (an empty directory): the unit tests store the preset kernels they compile
# there and it is kept (.ci/run reuses it read-only); otherwise a temporary one is removed at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SSD_BUILD_DIR:-$root/build}
jobs=$(nproc)
bash "$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export SSD_CACHE_DIR=$scratch/cache
if [ -n "${SSD_TEST_WARM_CACHE:-}" ]; then
  if [ ! -d "$SSD_TEST_WARM_CACHE" ] || [ -n "$(ls -A "$SSD_TEST_WARM_CACHE")" ]; then
    echo "test.sh: SSD_TEST_WARM_CACHE=$SSD_TEST_WARM_CACHE must name an empty directory" >&2
    exit 2
  fi
else
  export SSD_TEST_WARM_CACHE=$scratch/warm-cache
fi

echo "== ctest ($jobs at a time)"
status=0
# Passed tests' output is kept whole (ctest keeps 1 KiB by default): the counts are at its end.
ctest --test-dir "$build" -j"$jobs" --output-on-failure --output-junit "$scratch/ctest.xml" \
  --test-output-size-passed 1000000 || status=1
echo "== counts"
python3 "$root/scripts/test_summary.py" "$scratch/ctest.xml" || status=1
exit $status
