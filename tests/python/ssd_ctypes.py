"""ctypes mirror of the parts of include/ssd/ssd.h the in-process tests use (and
scripts/repro_python_jit.py). Struct layouts follow the header; the tests check them against
the library through struct_size."""
import ctypes
import os

SSD_MAX_DIMS = 6
DTYPES = {"bf16": 1, "fp16": 2, "fp32": 3, "int32": 4}
ARCHS = {"sm_80": 80, "sm_90": 90, "sm_90a": 901}
SSD_OK = 0


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * SSD_MAX_DIMS), ("strides", ctypes.c_int64 * SSD_MAX_DIMS)]


def tensor(shape, dtype, data=None):
    """A contiguous tensor description; data is an int address or None (NULL)."""
    t = Tensor()
    t.data = data
    t.dtype = DTYPES[dtype]
    t.ndim = len(shape)
    stride = 1
    for i in reversed(range(len(shape))):
        t.shape[i] = shape[i]
        t.strides[i] = stride
        stride *= shape[i]
    return t


class RuntimeOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("mode", ctypes.c_int), ("arch", ctypes.c_int32),
                ("cache_dir", ctypes.c_char_p), ("cache_mode", ctypes.c_int32)]


class ForwardArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("chunk_size", ctypes.c_int32), ("dt_softplus", ctypes.c_int32),
                ("dt_limit_lo", ctypes.c_float), ("dt_limit_hi", ctypes.c_float)] + \
               [(n, Tensor) for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx",
                                       "out", "out_x", "final_states")] + \
               [("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t)]


class BackwardArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("chunk_size", ctypes.c_int32), ("dt_softplus", ctypes.c_int32),
                ("dt_limit_lo", ctypes.c_float), ("dt_limit_hi", ctypes.c_float), ("mode", ctypes.c_int32)] + \
               [(n, Tensor) for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx",
                                       "out_x", "dout", "dfinal_states", "dx", "ddt", "dA", "dB", "dC", "dD", "dz",
                                       "ddt_bias", "dinitial_states")]


class PrepareOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("arch", ctypes.c_int32), ("mode", ctypes.c_int32),
                ("jobs", ctypes.c_int32)]


class PrepareReport(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("kernels", ctypes.c_int32), ("compiled", ctypes.c_int32),
                ("from_disk", ctypes.c_int32), ("from_memory", ctypes.c_int32), ("seconds", ctypes.c_double)]


def default_library_path():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.environ.get("SSD_LIBRARY", os.path.join(root, "build", "libssdgen.so"))


def load(path=None):
    """Loads libssdgen.so (RTLD_LOCAL, as ctypes and Python extension modules do) and declares
    the signatures used here."""
    lib = ctypes.CDLL(path or default_library_path())
    P = ctypes.POINTER
    lib.ssd_status_string.restype = ctypes.c_char_p
    lib.ssd_status_string.argtypes = [ctypes.c_int]
    lib.ssd_last_error_detail.restype = ctypes.c_char_p
    lib.ssd_version_string.restype = ctypes.c_char_p
    lib.ssd_runtime_options_init.argtypes = [P(RuntimeOptions)]
    lib.ssd_runtime_create.argtypes = [P(RuntimeOptions), P(ctypes.c_void_p)]
    lib.ssd_runtime_destroy.argtypes = [ctypes.c_void_p]
    lib.ssd_forward_args_init.argtypes = [P(ForwardArgs)]
    lib.ssd_backward_args_init.argtypes = [P(BackwardArgs)]
    lib.ssd_prepare_options_init.argtypes = [P(PrepareOptions)]
    lib.ssd_forward_prepare.argtypes = [ctypes.c_void_p, P(ForwardArgs), P(PrepareOptions), P(PrepareReport)]
    lib.ssd_backward_prepare.argtypes = [ctypes.c_void_p, P(BackwardArgs), P(PrepareOptions), P(PrepareReport)]
    lib.ssd_forward.argtypes = [ctypes.c_void_p, P(ForwardArgs), ctypes.c_void_p, ctypes.c_void_p]
    lib.ssd_backward.argtypes = [ctypes.c_void_p, P(BackwardArgs), ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_void_p]
    lib.ssd_backward_workspace_size.argtypes = [P(BackwardArgs), P(ctypes.c_size_t)]
    for f in ("ssd_runtime_create", "ssd_forward_prepare", "ssd_backward_prepare", "ssd_forward", "ssd_backward",
              "ssd_backward_workspace_size"):
        getattr(lib, f).restype = ctypes.c_int
    return lib


def check(lib, status, what):
    if status != SSD_OK:
        raise RuntimeError("%s: %s: %s" % (what, lib.ssd_status_string(status).decode(),
                                           lib.ssd_last_error_detail().decode(errors="replace")))


def shape_args(lib, b, L, h, p, g, n, chunk_size=64, dtype="bf16", dt_dtype="fp32", D=False, z=False,
               dt_bias=False, dt_softplus=False, initial_states=False, seq_idx=False, pointers=None):
    """ForwardArgs and BackwardArgs for a shape. `pointers(name, shape, dtype)` returns a device
    address for each tensor; None leaves every pointer NULL except a fake one marking each optional
    tensor as given (what prepare accepts)."""
    FAKE = 256

    def t(name, shape, dt, optional=False, given=True):
        if not given:
            return tensor(shape, dt)
        data = pointers(name, shape, dt) if pointers else (FAKE if optional else None)
        return tensor(shape, dt, data)

    fwd = ForwardArgs()
    lib.ssd_forward_args_init(ctypes.byref(fwd))
    bwd = BackwardArgs()
    lib.ssd_backward_args_init(ctypes.byref(bwd))
    def put(a, rows):  # rows: (name, shape, dtype[, optional, given])
        for name, shape, dt, *option in rows:
            setattr(a, name, t(name, shape, dt, *option))

    x_shape, bc_shape, state_shape = (b, L, h, p), (b, L, g, n), (b, h, p, n)
    for a in (fwd, bwd):
        a.chunk_size = chunk_size
        a.dt_softplus = int(dt_softplus)
        put(a, [("x", x_shape, dtype), ("dt", (b, L, h), dt_dtype), ("A", (h,), "fp32"), ("B", bc_shape, dtype),
                ("C", bc_shape, dtype), ("D", (h,), "fp32", True, D), ("z", x_shape, dtype, True, z),
                ("dt_bias", (h,), "fp32", True, dt_bias),
                ("initial_states", state_shape, "fp32", True, initial_states),
                ("seq_idx", (b, L), "int32", True, seq_idx), ("out_x", x_shape, dtype, False, z)])
    put(fwd, [("out", x_shape, dtype), ("final_states", state_shape, "fp32", True, initial_states)])
    put(bwd, [("dout", x_shape, dtype), ("dx", x_shape, dtype), ("ddt", (b, L, h), dt_dtype), ("dA", (h,), "fp32"),
              ("dB", bc_shape, dtype), ("dC", bc_shape, dtype), ("dD", (h,), "fp32", False, D),
              ("dz", x_shape, dtype, False, z), ("ddt_bias", (h,), "fp32", False, dt_bias),
              ("dinitial_states", state_shape, "fp32", False, initial_states)])
    return fwd, bwd
