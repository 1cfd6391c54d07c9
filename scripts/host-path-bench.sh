#!/usr/bin/env bash
# The library's own CPU time per ssd_forward / ssd_backward call, without a GPU: the C API against
# a no-op libcuda (scripts/host_path/noop_libcuda.cpp, built into a temporary directory and found
# through LD_LIBRARY_PATH only for this run), so validation, plans, kernel lookups and parameter
# blocks run for real and the driver costs nothing. On a GPU, `ssdgen bench fwd|bwd` measures the
# whole host path (this plus cuLaunchKernel and friends); docs/perf.md compares the two.
#
#   bash scripts/host-path-bench.sh [BUILD_DIR] [--calls N]     (BUILD_DIR default: build)
#   SSD_NOOP_DRIVER_COUNTS=1 bash scripts/host-path-bench.sh    (also: each driver entry point's calls)
#
# The first run compiles the problem's kernels with NVRTC into BUILD_DIR/host-path-cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
[[ $build = /* ]] || build=$root/$build
cuda_include=${SSD_CUDA_ROOT:-/usr/local/cuda}/include
[[ -f $cuda_include/cuda.h ]] || { echo "no cuda.h in $cuda_include (set SSD_CUDA_ROOT)" >&2; exit 2; }
# Under Ninja the target name `ssdgen` is the CLI's output file; the library is libssdgen.so.
if [[ -f $build/build.ninja ]]; then target=libssdgen.so; else target=ssdgen; fi
cmake --build "$build" --target "$target" >/dev/null
lib=$(find "$build" -maxdepth 1 -name 'libssdgen.so.*' -type f | head -1)
[[ -n $lib ]] || { echo "no libssdgen.so in $build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
c++ -O2 -shared -fPIC -I"$cuda_include" "$root/scripts/host_path/noop_libcuda.cpp" -o "$tmp/libcuda.so.1"
c++ -O2 -std=c++17 -I"$root/include" "$root/scripts/host_path/host_path_bench.cpp" "$lib" -Wl,-rpath,"$(dirname "$lib")" -o "$tmp/host_path_bench"
SSD_CACHE_DIR=${SSD_CACHE_DIR:-$build/host-path-cache} LD_LIBRARY_PATH="$tmp" "$tmp/host_path_bench" "$@"
