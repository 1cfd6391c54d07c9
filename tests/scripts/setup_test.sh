#!/usr/bin/env bash
# scripts/setup.sh with stand-ins for dpkg-query, apt-get, id and sudo on PATH (nothing is
# installed): a missing package goes through apt-get with DEBIAN_FRONTEND=noninteractive and
# DEBCONF_NOWARNINGS=yes, as root and through sudo (which resets the environment), and only the
# script's own lines are printed: no debconf warning.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/cuda/include"
touch "$work/cuda/include/nvrtc.h" "$work/cuda/include/cuda.h"

# Every package is installed except doctest-dev.
cat >"$work/bin/dpkg-query" <<'STUB'
#!/bin/sh
for last; do :; done
[ "$last" = doctest-dev ] && exit 1
echo "install ok installed"
STUB
# Warns on stderr as Debian's apt-get does on a machine without apt-utils, unless told not to.
cat >"$work/bin/apt-get" <<'STUB'
#!/bin/sh
echo "apt-get $* frontend=${DEBIAN_FRONTEND:-} nowarnings=${DEBCONF_NOWARNINGS:-}" >>"$APT_LOG"
[ "${DEBIAN_FRONTEND:-}" = noninteractive ] || echo "debconf: unable to initialize frontend: Dialog" >&2
[ "${DEBCONF_NOWARNINGS:-}" = yes ] || echo "debconf: delaying package configuration, since apt-utils is not installed" >&2
STUB
# sudo resets the environment (env_reset); the stand-ins need PATH and APT_LOG.
cat >"$work/bin/sudo" <<'STUB'
#!/bin/sh
exec env -i PATH="$PATH" APT_LOG="$APT_LOG" "$@"
STUB
cat >"$work/bin/id" <<'STUB'
#!/bin/sh
echo "$FAKE_UID"
STUB
chmod +x "$work/bin/"*

status=0
for uid in 0 1000; do
  export APT_LOG=$work/apt-$uid.log
  env -u DEBIAN_FRONTEND -u DEBCONF_NOWARNINGS FAKE_UID=$uid PATH="$work/bin:$PATH" SSD_CUDA_ROOT="$work/cuda" SSD_SETUP_PYTHON=0 \
    bash "$repo/scripts/setup.sh" >"$work/out" 2>"$work/err" || { echo "uid $uid: setup.sh failed"; status=1; }
  if [ -s "$work/err" ]; then
    echo "uid $uid: setup.sh wrote to stderr:"; cat "$work/err"; status=1
  fi
  printf 'setup: installing doctest-dev\nsetup: dependencies present\n' | cmp -s - "$work/out" \
    || { echo "uid $uid: unexpected output:"; cat "$work/out"; status=1; }
  grep -c "frontend=noninteractive nowarnings=yes" "$APT_LOG" | grep -qx 2 \
    || { echo "uid $uid: apt-get calls:"; cat "$APT_LOG"; status=1; }
  grep -q "^apt-get install -y -qq doctest-dev " "$APT_LOG" || { echo "uid $uid: no install of doctest-dev"; status=1; }
  [ $status = 0 ] && echo "uid $uid: quiet, apt-get called as expected"
done
exit $status
