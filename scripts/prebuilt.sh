#!/usr/bin/env bash
# The binaries for `scripts/gpu-test.sh --prebuilt=DIR` (device time spent on tests, not on a build):
# copies ssd_gpu_tests, ssdgen and libssdgen.so from the local Release build into DIR (default .gl,
# git-ignored), which the device call then carries: run(command="bash scripts/gpu-test.sh
# --prebuilt=.gl ...", carry=[".gl"]). The CUDA toolkit of this machine and the device's agree
# (CUDA 13); libcuda is loaded at run time on both.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/${1:-.gl}
build=${SSD_BUILD_DIR:-$root/build}
# libssdgen.so by its file: the target name `ssdgen` is also the CLI's output file, which ninja builds instead.
ninja -C "$build" ssd_gpu_tests ssdgen_cli libssdgen.so >/dev/null
mkdir -p "$dir"
cp "$build/tests/ssd_gpu_tests" "$build/ssdgen" "$dir/"
cp -L "$build/libssdgen.so" "$dir/libssdgen.so"
echo "prebuilt: $(cd "$dir" && ls | tr "\n" " ")in ${dir#$root/} ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ', with uncommitted changes'))"
