#!/usr/bin/env bash
# cmake --install into a temporary prefix, then build and run a consumer that uses find_package(ssdgen).
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in bin/ssdgen include/ssd/ssd.h lib/cmake/ssdgen/ssdgenConfig.cmake; do
  [ -e "$work/prefix/$f" ] || { echo "install is missing $f" >&2; exit 1; }
done
ls "$work/prefix"/lib*/libssdgen.so* >/dev/null
cmake -S "$src/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer"
"$work/prefix/bin/ssdgen" --version
