#!/usr/bin/env bash
# The Python side of the set-up (pip, PyPI only), for the python3 on PATH (the interpreter CMake
# finds and the tests run): pytest, scikit-build-core (the wheel test builds python/ without build
# isolation), numpy (torch warns without it) and PyTorch for the CPU tests of ssdgen.torch.
#
# PyPI has no CPU-only torch wheel for Linux x86_64: the standard wheel (about 540 MB) pulls the CUDA
# 13 runtime wheels (about 3 GB installed); on this kind of machine the whole install takes about
# two minutes, once. The tests use only its CPU, meta and fake tensors; no GPU is needed. The
# version is the device machine's, so both run the same torch.library.
set -euo pipefail
python=${PYTHON:-python3}
torch_version=2.11.0
need=()
"$python" -c "import pytest" 2>/dev/null || need+=(pytest)
"$python" -c "import scikit_build_core" 2>/dev/null || need+=("scikit-build-core>=0.10")
"$python" -c "import numpy" 2>/dev/null || need+=(numpy)
"$python" -c "import venv, ensurepip" 2>/dev/null || { echo "setup-python: $python has no venv/ensurepip" >&2; exit 1; }
# torch >= 2.4 (torch.library.custom_op, register_fake, register_autograd) is kept if present. The
# version comes from the installed metadata: importing torch costs seconds on every test run (the
# Python tests import it and fail loudly if it is broken).
torch_installed() { "$python" -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null; }
if ! "$python" -c "
import importlib.metadata as m, sys
v = m.version('torch')
sys.exit(tuple(int(x) for x in v.split('+')[0].split('.')[:2]) < (2, 4))" 2>/dev/null; then
  need+=("torch==$torch_version")
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-python: installing ${need[*]} for $python"
  "$python" -m pip install -q --disable-pip-version-check "${need[@]}"
fi
echo "setup-python: pytest, scikit-build-core, torch $(torch_installed) present"
