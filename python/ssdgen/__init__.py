"""ssdgen: the JIT-compiled Mamba2 SSD chunked scan.

`import ssdgen` loads libssdgen.so (the one installed inside this package, or $SSDGEN_LIBRARY) and
checks that its struct layout matches these bindings; it needs no GPU. The PyTorch drop-in for
mamba_ssm's `mamba_chunk_scan_combined` lives in `ssdgen.torch` (docs/python.md).
"""
import ctypes
import os
import threading

from . import _capi

__all__ = ["SsdError", "library", "library_path", "library_version", "runtime", "__version__"]


class SsdError(RuntimeError):
    """A failing library call. `status` is the ssd_status name (e.g. "SSD_ERROR_COMPILE"), `detail`
    the library's message (it names the offending argument where there is one)."""

    def __init__(self, what, code, status, detail):
        super().__init__(f"{what}: {status}: {detail}" if detail else f"{what}: {status}")
        self.code = code
        self.status = status
        self.detail = detail


def _default_library_path():
    return os.environ.get("SSDGEN_LIBRARY") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "libssdgen.so")


library_path = _default_library_path()
library = _capi.load_library(library_path)
library_version = library.ssd_version_string().decode()
__version__ = library_version


def check(status, what):
    """Raises SsdError for a non-zero ssd_status (reads the calling thread's detail)."""
    if status != 0:
        detail = library.ssd_last_error_detail().decode(errors="replace")
        raise SsdError(what, status, _capi.STATUS_NAMES.get(status, f"status {status}"), detail)


_runtime = None
_runtime_lock = threading.Lock()


def runtime():
    """The process's ssd_runtime (created on first use; kernels compile for the arch of the device
    whose context is current at each call; cache from $SSD_CACHE_DIR / $SSD_CACHE_MODE). It lives
    as long as the process: the kernels it loaded stay valid for every CUDA context."""
    global _runtime
    if _runtime is None:
        with _runtime_lock:
            if _runtime is None:
                options = _capi.RuntimeOptions()
                library.ssd_runtime_options_init(ctypes.byref(options))
                handle = ctypes.c_void_p()
                check(library.ssd_runtime_create(ctypes.byref(options), ctypes.byref(handle)), "ssd_runtime_create")
                _runtime = handle
    return _runtime
