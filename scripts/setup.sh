#!/usr/bin/env bash
# Installs what a fresh Debian machine of this project's kind lacks (apt; PyPI for the Python tests
# through scripts/setup-python.sh). The CUDA 13 toolkit
# (NVRTC and cuda.h) is expected at /usr/local/cuda or SSD_CUDA_ROOT; no GPU or driver is needed.
set -euo pipefail
packages=(cmake ninja-build g++ python3 python3-pytest libfmt-dev nlohmann-json3-dev doctest-dev llvm-14-tools)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  # `env` after sudo, which resets the environment. noninteractive: no debconf questions;
  # DEBCONF_NOWARNINGS=yes: no "delaying package configuration, since apt-utils is not installed"
  # (debconf(7)). apt's errors still reach stderr.
  apt=($SUDO env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get)
  "${apt[@]}" update -qq
  "${apt[@]}" install -y -qq "${missing[@]}" >/dev/null
fi
cuda=${SSD_CUDA_ROOT:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ] || [ ! -f "$cuda/include/cuda.h" ]; then
  echo "setup: no CUDA toolkit at $cuda (need nvrtc.h, cuda.h, libnvrtc); set SSD_CUDA_ROOT" >&2
  exit 1
fi
# SSD_SETUP_PYTHON=0 leaves the Python side out (tests/scripts/setup_test.sh checks the apt part alone).
[ "${SSD_SETUP_PYTHON:-1}" = 0 ] || bash "$(dirname "$0")/setup-python.sh"
echo "setup: dependencies present"
