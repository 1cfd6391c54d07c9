#!/usr/bin/env bash
# Downloads the Debian packages the device machine lacks (it has no network) into .deps/debs,
# which is git-ignored and carried to the device: header-only deps, unpacked there into a prefix.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.deps/debs"
cd "$root/.deps/debs"
apt-get download libfmt-dev libfmt9 nlohmann-json3-dev doctest-dev 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
ls -1 "$root/.deps/debs"
