"""ctypes view of include/ssd/ssd.h: the structs, the entry points, and the checks that the layout
declared here is the one the loaded library was built with.

Every struct that starts with `struct_size` has an `*_init` function that writes the library's
sizeof into that field, so the size and the defaults at the offsets declared here are checked
against the library at import (a mismatch raises ImportError). tests/python/test_capi.py compiles
the header and compares every field offset (including ssd_tensor's and ssd_forward_layout's,
which have no init function).
"""
import ctypes
import math
import os
import sys

MAX_DIMS = 6  # SSD_MAX_DIMS

# ssd_status
STATUS_NAMES = {
    0: "SSD_OK", 1: "SSD_ERROR_INVALID_ARGUMENT", 2: "SSD_ERROR_INVALID_CONFIG", 3: "SSD_ERROR_INVALID_SHAPE",
    4: "SSD_ERROR_INVALID_STRIDE", 5: "SSD_ERROR_INVALID_DTYPE", 6: "SSD_ERROR_INVALID_ALIGNMENT",
    7: "SSD_ERROR_NULL_POINTER", 8: "SSD_ERROR_UNSUPPORTED", 9: "SSD_ERROR_NO_DRIVER", 10: "SSD_ERROR_NO_DEVICE",
    11: "SSD_ERROR_CUDA", 12: "SSD_ERROR_COMPILE", 13: "SSD_ERROR_CACHE_MISS", 14: "SSD_ERROR_CACHE",
    15: "SSD_ERROR_OUT_OF_MEMORY", 16: "SSD_ERROR_WORKSPACE_TOO_SMALL", 17: "SSD_ERROR_INTERNAL",
}

# ssd_dtype
DTYPE_BF16, DTYPE_FP16, DTYPE_FP32, DTYPE_INT32 = 1, 2, 3, 4
# ssd_mode
MODE_DETERMINISTIC, MODE_FAST = 0, 1

c_enum = ctypes.c_int  # C enums are int-sized on the ABIs the library supports


class Tile(ctypes.Structure):
    _fields_ = [("m", ctypes.c_int32), ("n", ctypes.c_int32), ("k", ctypes.c_int32), ("warps", ctypes.c_int32),
                ("stages", ctypes.c_int32)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", c_enum), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS)]


def tensor_view(data, dtype, shape, strides):
    """An ssd_tensor: the address (0 or None: absent), the ssd_dtype, the axes' sizes and strides in
    elements (for ssdgen.torch and the scripts that drive the library from torch tensors)."""
    out = Tensor()
    out.data = data
    out.dtype = dtype
    out.ndim = len(shape)
    for i, (size, stride) in enumerate(zip(shape, strides)):
        out.shape[i] = size
        out.strides[i] = stride
    return out


class RuntimeOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("mode", c_enum), ("arch", ctypes.c_int32),
                ("cache_dir", ctypes.c_char_p), ("cache_mode", ctypes.c_int32), ("launch_graphs", ctypes.c_int32)]


class LaunchOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("tile", Tile), ("reduce_tile", Tile),
                ("max_blocks", ctypes.c_int32), ("mode", ctypes.c_int32)]


FORWARD_TENSORS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx", "out", "out_x",
                   "final_states")


class ForwardArgs(ctypes.Structure):
    _fields_ = ([("struct_size", ctypes.c_size_t), ("chunk_size", ctypes.c_int32), ("dt_softplus", ctypes.c_int32),
                 ("dt_limit_lo", ctypes.c_float), ("dt_limit_hi", ctypes.c_float)]
                + [(name, Tensor) for name in FORWARD_TENSORS]
                + [("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t)])


class ForwardLayout(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("total_bytes", ctypes.c_size_t),
                ("dt_out_offset", ctypes.c_size_t), ("dA_cumsum_offset", ctypes.c_size_t),
                ("CB_offset", ctypes.c_size_t), ("states_offset", ctypes.c_size_t)]


BACKWARD_TENSORS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx", "out_x", "dout",
                    "dfinal_states", "dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_states")


class BackwardArgs(ctypes.Structure):
    _fields_ = ([("struct_size", ctypes.c_size_t), ("chunk_size", ctypes.c_int32), ("dt_softplus", ctypes.c_int32),
                 ("dt_limit_lo", ctypes.c_float), ("dt_limit_hi", ctypes.c_float), ("mode", ctypes.c_int32)]
                + [(name, Tensor) for name in BACKWARD_TENSORS])


class PrepareOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("arch", ctypes.c_int32), ("mode", ctypes.c_int32),
                ("jobs", ctypes.c_int32)]


class PrepareReport(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("kernels", ctypes.c_int32), ("compiled", ctypes.c_int32),
                ("from_disk", ctypes.c_int32), ("from_memory", ctypes.c_int32), ("seconds", ctypes.c_double)]


# The structs the bindings pass, by C name (the layout test walks this table).
STRUCTS = {
    "ssd_tile": Tile,
    "ssd_tensor": Tensor,
    "ssd_runtime_options": RuntimeOptions,
    "ssd_launch_options": LaunchOptions,
    "ssd_forward_args": ForwardArgs,
    "ssd_forward_layout": ForwardLayout,
    "ssd_backward_args": BackwardArgs,
}
# Declared by newer headers only (ssd_forward_prepare / ssd_backward_prepare).
OPTIONAL_STRUCTS = {
    "ssd_prepare_options": PrepareOptions,
    "ssd_prepare_report": PrepareReport,
}

_P = ctypes.c_void_p
_STATUS = ctypes.c_int
# name: (restype, argtypes)
_SIGNATURES = {
    "ssd_status_string": (ctypes.c_char_p, [_STATUS]),
    "ssd_last_error_detail": (ctypes.c_char_p, []),
    "ssd_version_string": (ctypes.c_char_p, []),
    "ssd_runtime_options_init": (None, [ctypes.POINTER(RuntimeOptions)]),
    "ssd_runtime_create": (_STATUS, [ctypes.POINTER(RuntimeOptions), ctypes.POINTER(_P)]),
    "ssd_runtime_destroy": (None, [_P]),
    "ssd_launch_options_init": (None, [ctypes.POINTER(LaunchOptions)]),
    "ssd_forward_args_init": (None, [ctypes.POINTER(ForwardArgs)]),
    "ssd_forward_workspace_layout": (_STATUS, [ctypes.POINTER(ForwardArgs), ctypes.POINTER(ForwardLayout)]),
    "ssd_forward": (_STATUS, [_P, ctypes.POINTER(ForwardArgs), ctypes.POINTER(LaunchOptions), _P]),
    "ssd_backward_args_init": (None, [ctypes.POINTER(BackwardArgs)]),
    "ssd_backward_workspace_size": (_STATUS, [ctypes.POINTER(BackwardArgs), ctypes.POINTER(ctypes.c_size_t)]),
    "ssd_backward": (_STATUS, [_P, ctypes.POINTER(BackwardArgs), _P, ctypes.c_size_t, _P]),
}

# Optional entry points (newer libraries): name -> (restype, argtypes). Looked up with hasattr, so a
# library without them still loads; callers check `has(name)`.
_OPTIONAL_SIGNATURES = {
    "ssd_prepare_options_init": (None, [ctypes.POINTER(PrepareOptions)]),
    "ssd_forward_prepare": (_STATUS, [_P, ctypes.POINTER(ForwardArgs), ctypes.POINTER(PrepareOptions),
                                      ctypes.POINTER(PrepareReport)]),
    "ssd_backward_prepare": (_STATUS, [_P, ctypes.POINTER(BackwardArgs), ctypes.POINTER(PrepareOptions),
                                       ctypes.POINTER(PrepareReport)]),
}


def has_prepare(lib):
    """Whether the library builds a call's kernels ahead of it (ssd_forward_prepare & co)."""
    return all(hasattr(lib, name) for name in _OPTIONAL_SIGNATURES)


def _struct_size_of(init):
    """The library's sizeof(struct_type), as its init function writes it into struct_size. The init
    writes a whole struct of the library's size, so it gets a buffer far larger than any version."""
    buf = (ctypes.c_char * 65536)()
    init(ctypes.cast(buf, init.argtypes[0]))
    return ctypes.c_size_t.from_buffer(buf).value, buf


def check_layout(lib):
    """Raises ImportError unless every struct with an init function has the library's size and the
    library's defaults sit at the offsets declared here."""
    problems = []

    def check(init_name, struct_type, defaults):
        size, buf = _struct_size_of(getattr(lib, init_name))
        if size != ctypes.sizeof(struct_type):
            problems.append(f"{struct_type.__name__}: the library's struct_size is {size}, the bindings declare "
                            f"{ctypes.sizeof(struct_type)}")
            return
        view = struct_type.from_buffer_copy(bytes(buf[:size]))
        for field, want in defaults.items():
            got = getattr(view, field)
            if got != want:
                problems.append(f"{struct_type.__name__}.{field}: the library's default is {got!r}, expected {want!r} "
                                f"at the declared offset")

    check("ssd_runtime_options_init", RuntimeOptions, {"mode": MODE_DETERMINISTIC, "arch": 0, "cache_mode": -1,
                                                        "launch_graphs": 0})
    check("ssd_launch_options_init", LaunchOptions, {"max_blocks": 0, "mode": -1})
    check("ssd_forward_args_init", ForwardArgs,
          {"chunk_size": 256, "dt_softplus": 0, "dt_limit_lo": 0.0, "dt_limit_hi": math.inf, "workspace": None,
           "workspace_bytes": 0})
    check("ssd_backward_args_init", BackwardArgs,
          {"chunk_size": 256, "dt_softplus": 0, "dt_limit_lo": 0.0, "dt_limit_hi": math.inf, "mode": -1})
    if has_prepare(lib):
        check("ssd_prepare_options_init", PrepareOptions, {"arch": 0, "mode": -1, "jobs": 0})
    if problems:
        raise ImportError("ssdgen: the Python bindings (ssdgen/_capi.py) do not match the loaded library "
                          f"{getattr(lib, '_name', '?')}: " + "; ".join(problems) +
                          ". Reinstall the package from one checkout (pip install ./python), or point "
                          "SSDGEN_LIBRARY at a library built from the same sources.")


def _nvrtc_candidates():
    """libnvrtc.so.13 from pip's NVIDIA wheels (what a PyTorch environment has), for a library
    whose RUNPATH (the toolkit it was built against) is not on this machine."""
    for base in sys.path:
        for rel in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            path = os.path.join(base, rel, "libnvrtc.so.13")
            if os.path.isfile(path):
                yield path


def load_library(path):
    """dlopen the library (RTLD_LOCAL: its C++ runtime symbols stay private), declare the entry
    points, check the struct layout. Raises ImportError with the reason."""
    if not os.path.isfile(path):
        raise ImportError(f"ssdgen: no library at {path} (build it with `pip install ./python`, or set "
                          f"SSDGEN_LIBRARY to a libssdgen.so)")
    try:
        lib = ctypes.CDLL(path)
    except OSError as first:
        if "libnvrtc" not in str(first):
            raise ImportError(f"ssdgen: cannot load {path}: {first}") from first
        lib = None
        for nvrtc in _nvrtc_candidates():
            try:
                ctypes.CDLL(nvrtc, mode=ctypes.RTLD_GLOBAL)
                lib = ctypes.CDLL(path)
                break
            except OSError:
                continue
        if lib is None:
            raise ImportError(f"ssdgen: cannot load {path}: {first} (NVRTC of CUDA 13 is needed: the CUDA toolkit's "
                              f"lib64 on the loader path, or pip's nvidia-cuda-nvrtc)") from first
    missing = [name for name in _SIGNATURES if not hasattr(lib, name)]
    if missing:
        raise ImportError(f"ssdgen: {path} lacks the entry points {', '.join(missing)} (an older library?)")
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in _OPTIONAL_SIGNATURES.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
    check_layout(lib)
    return lib
