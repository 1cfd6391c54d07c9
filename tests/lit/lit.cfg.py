# -*- Python -*-
# lit configuration for the ssdgen command-line tests. CMake configures lit.site.cfg.py (the paths
# of the built tools) in the build tree, which loads this file. Run:
#   python3 /usr/lib/llvm-14/build/utils/lit/lit.py -v <build>/tests/lit
import os
import shutil
import sys

import lit.formats

config.name = "ssdgen"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test"]

config.test_source_root = getattr(config, "ssd_test_source_root", os.path.dirname(os.path.abspath(__file__)))
config.test_exec_root = getattr(config, "ssd_test_exec_root", config.test_source_root)

if not getattr(config, "ssdgen", None) or not getattr(config, "filecheck", None):
    lit_config.fatal("run lit on the configured build directory (<build>/tests/lit), not the source tree")
if not os.path.exists(config.ssdgen):
    lit_config.fatal("ssdgen is not built: %s (ninja ssdgen_cli)" % config.ssdgen)

# Substitutions. Ours come before lit's own (%s, %t, ...), so %ssdgen is not read as %s + "sdgen".
config.substitutions.append(("%ssdgen", config.ssdgen))
config.substitutions.append(("%python", sys.executable))
# `%expect_exit N CMD...` runs CMD, prints "exit code: <rc>" on stderr and succeeds only if rc == N
# (lit's `not` only says "non-zero"). Replacement text: no backslashes, no percent signs.
config.substitutions.append((
    "%expect_exit",
    '"%s" -c "import subprocess,sys; r=subprocess.call(sys.argv[2:]); '
    "print('exit code: '+str(r), file=sys.stderr); sys.exit(0 if r == int(sys.argv[1]) else 1)\""
    % sys.executable))
config.substitutions.append((r"\bFileCheck\b", config.filecheck))

# A private cache for the tests that do not set SSD_CACHE_DIR themselves, emptied on every run;
# nothing from the caller's environment selects another cache or mode.
default_cache = os.path.join(config.test_exec_root, "ssd-cache")
shutil.rmtree(default_cache, ignore_errors=True)
config.environment["SSD_CACHE_DIR"] = default_cache
for name in ("SSD_CACHE_MODE", "SSD_CACHE_SHARED", "SSD_CACHE_MAX_BYTES", "SSD_CACHE_LOCK_TIMEOUT_MS",
             "XDG_CACHE_HOME"):
    config.environment.pop(name, None)
# Library warnings would interleave with checked output; tests that want them set SSD_LOG back.
config.environment["SSD_LOG"] = "quiet"

# Tests of the GPU subcommands' behaviour without a driver run only where libcuda is absent.
import ctypes
try:
    ctypes.CDLL("libcuda.so.1")
except OSError:
    config.available_features.add("no-cuda-driver")
