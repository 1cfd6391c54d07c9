"""PyTorch drop-in for mamba_ssm's `mamba_chunk_scan_combined` (docs/python.md).

    from ssdgen.torch import mamba_chunk_scan_combined
    out = mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=256, D=D, z=z, dt_bias=dt_bias,
                                    dt_softplus=True)

Two operators, `ssdgen::chunk_scan_combined_fwd` and `ssdgen::chunk_scan_combined_bwd`, registered
with torch.library.custom_op (fake implementations for tracing, autograd through
register_autograd), so torch.compile(fullgraph=True) traces them without a graph break. Each call
runs on the current stream of the inputs' device, takes its workspace from PyTorch's caching
allocator and never synchronizes, so it can be captured in a CUDA graph (after one eager call has
compiled and loaded its kernels).
"""
import contextlib
import ctypes
import os
import threading
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _capi, check, library, library_path, runtime

__all__ = ["mamba_chunk_scan_combined", "prepare", "SUPPORTED_CHUNK_SIZES", "SUPPORTED_HEADDIMS", "SUPPORTED_DSTATES",
           "MAX_HEADS_PER_GROUP"]

# What the library serves (src/ops/ssd_forward.cpp check_forward_inputs, src/config/config.cpp).
SUPPORTED_CHUNK_SIZES = (64, 128, 256)
SUPPORTED_HEADDIMS = (32, 64, 128)
SUPPORTED_DSTATES = (16, 32, 64, 128, 256)
MAX_HEADS_PER_GROUP = 1024
_ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)  # x, B, C, z (tensor-core operands)
_DT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # dt as the kernels read it
_SSD_DTYPE = {torch.bfloat16: _capi.DTYPE_BF16, torch.float16: _capi.DTYPE_FP16, torch.float32: _capi.DTYPE_FP32,
              torch.int32: _capi.DTYPE_INT32}
_WORKSPACE_ALIGN = 256


def _parse_deterministic_env():
    value = os.environ.get("SSDGEN_DETERMINISTIC", "").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return False
    if value in ("0", "false", "no", "off"):
        return True
    raise ImportError(f"SSDGEN_DETERMINISTIC={value!r}: expected 1 (deterministic, the default) or 0 (fast mode)")


# Read once at import so that compiled graphs do not depend on the environment at call time.
_FAST_FROM_ENV = _parse_deterministic_env()


# ---- the library calls ----------------------------------------------------------------------------

# Stands in for a given tensor's pointer where nothing is launched (prepare: meta tensors have none).
_PLACEHOLDER = 1 << 12


def _ssd_tensor(t, placeholder=False):
    if t is None:
        return _capi.Tensor()
    return _capi.tensor_view(_PLACEHOLDER if placeholder else t.data_ptr(), _SSD_DTYPE[t.dtype], t.shape, t.stride())


def _workspace(nbytes, device):
    """(tensor keeping the memory alive, 256-byte aligned address) from the caching allocator, on
    the current stream of `device`: freed back to that stream's pool after the call, which is safe
    because the kernels run on that same stream."""
    if nbytes == 0:
        return None, None
    buf = torch.empty(nbytes + _WORKSPACE_ALIGN - 1, dtype=torch.uint8, device=device)
    ptr = buf.data_ptr()
    return buf, ptr + (-ptr) % _WORKSPACE_ALIGN


def _empty(like, dtype=None):
    return like.new_empty((0,), dtype=dtype)


def _forward_outputs(x, B, z, return_final_states):
    b, L, h, p = x.shape
    n = B.shape[3]
    out = x.new_empty((b, L, h, p))
    out_x = x.new_empty((b, L, h, p)) if z is not None else _empty(x)
    final = x.new_empty((b, h, p, n), dtype=torch.float32) if return_final_states else _empty(x, torch.float32)
    return out, out_x, final


def _call_args(args, chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi, tensors, placeholders):
    """The settings and tensors the forward's and the backward's argument structs share."""
    args.chunk_size = chunk_size
    args.dt_softplus = int(dt_softplus)
    args.dt_limit_lo = dt_limit_lo
    args.dt_limit_hi = dt_limit_hi
    for name, t in tensors:
        setattr(args, name, _ssd_tensor(t, placeholders))
    return args


def _forward_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit_lo,
                  dt_limit_hi, out=None, out_x=None, final_states=None, placeholders=False):
    args = _capi.ForwardArgs()
    library.ssd_forward_args_init(ctypes.byref(args))
    return _call_args(args, chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi,
                      (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("z", z), ("dt_bias", dt_bias),
                       ("initial_states", initial_states), ("seq_idx", seq_idx), ("out", out), ("out_x", out_x),
                       ("final_states", final_states)), placeholders)


def _backward_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit_lo,
                   dt_limit_hi, fast, out_x=None, dout=None, dfinal_states=None, grads=None, placeholders=False):
    args = _capi.BackwardArgs()
    library.ssd_backward_args_init(ctypes.byref(args))
    args.mode = _capi.MODE_FAST if fast else _capi.MODE_DETERMINISTIC
    _call_args(args, chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi,
               (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("z", z), ("dt_bias", dt_bias),
                ("initial_states", initial_states), ("seq_idx", seq_idx), ("out_x", out_x), ("dout", dout),
                ("dfinal_states", dfinal_states)), placeholders)
    if grads is not None:
        dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinit = grads
        for name, t, given in (("dx", dx, True), ("ddt", ddt, True), ("dA", dA, True), ("dB", dB, True),
                               ("dC", dC, True), ("dD", dD, D is not None), ("dz", dz, z is not None),
                               ("ddt_bias", ddt_bias, dt_bias is not None),
                               ("dinitial_states", dinit, initial_states is not None)):
            if given:
                setattr(args, name, _ssd_tensor(t, placeholders))
    return args


# ---- building a specialization's kernels ahead of its first call --------------------------------

_HAS_PREPARE = _capi.has_prepare(library)
_prepared = set()


def _spec_key(x, dt, B, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, fast):
    """What selects the kernels of a call (besides the device): dtypes, sizes, options, mode."""
    return (x.device, x.dtype, dt.dtype, chunk_size, x.shape[3], B.shape[3], x.shape[2] // B.shape[2],
            D.dim() if D is not None else 0, z is not None, dt_bias is not None, initial_states is not None,
            seq_idx is not None, bool(dt_softplus), bool(fast))


def _concurrently(calls):
    """Runs the zero-argument callables at the same time (the library's prepare calls release the
    GIL: one pool of compiles instead of one after another); their results in order. An exception
    is raised in this thread after all have finished."""
    results, errors = [None] * len(calls), [None] * len(calls)

    def run(i):
        try:
            results[i] = calls[i]()
        except BaseException as e:  # noqa: BLE001  re-raised below, in the caller's thread
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,), name="ssdgen-prepare") for i in range(1, len(calls))]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


def _backward_prepare_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, lo, hi,
                           fast):
    """The backward's arguments as far as they select kernels, before it runs: outputs and dout are
    described by meta tensors (nothing allocated), their pointers by placeholders."""
    meta = [t.to("meta") if t is not None else None for t in (x, dt, A, B, C, D, z, dt_bias, initial_states)]
    out, out_x, _ = _forward_outputs(meta[0], meta[3], z, False)
    return _backward_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, lo, hi,
                          fast, out_x if z is not None else None, out, None, _backward_outputs(*meta),
                          placeholders=True)


def _prepare_once(kind, args, fast, key, backward_args=None):
    """The first call of a specialization builds all of its kernels at once, in parallel
    (ssd_forward_prepare / ssd_backward_prepare, where the library has them), instead of one after
    another inside the call. backward_args (the forward of a call whose gradient will be taken):
    the backward's kernels are built in the same go, so a new shape's forward and backward cost one
    round of parallel compiles. Failures are left to the calls, which report them themselves."""
    if not _HAS_PREPARE or (kind, key) in _prepared:
        return
    options = _capi.PrepareOptions()
    library.ssd_prepare_options_init(ctypes.byref(options))
    options.mode = _capi.MODE_FAST if fast else _capi.MODE_DETERMINISTIC
    rt = runtime()
    fn = library.ssd_forward_prepare if kind == "forward" else library.ssd_backward_prepare
    calls = [lambda: fn(rt, ctypes.byref(args), ctypes.byref(options), None)]
    if backward_args is not None and ("backward", key) not in _prepared:
        calls.append(lambda: library.ssd_backward_prepare(rt, ctypes.byref(backward_args), ctypes.byref(options),
                                                          None))
    # Only the call's own list is marked done: the backward's real arguments (dfinal_states) may
    # name a kernel more, which its own first call then builds.
    if _concurrently(calls)[0] == 0:
        _prepared.add((kind, key))


@torch.library.custom_op("ssdgen::chunk_scan_combined_fwd", mutates_args=(), device_types="cuda")
def _chunk_scan_combined_fwd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Optional[Tensor],
                             z: Optional[Tensor], dt_bias: Optional[Tensor], initial_states: Optional[Tensor],
                             seq_idx: Optional[Tensor], chunk_size: int, dt_softplus: bool, dt_limit_lo: float,
                             dt_limit_hi: float, return_final_states: bool, fast: bool,
                             prepare_backward: bool) -> Tuple[Tensor, Tensor, Tensor]:
    out, out_x, final = _forward_outputs(x, B, z, return_final_states)
    args = _forward_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus,
                         dt_limit_lo, dt_limit_hi, out, out_x if z is not None else None,
                         final if return_final_states else None)
    layout = _capi.ForwardLayout()
    layout.struct_size = ctypes.sizeof(layout)
    check(library.ssd_forward_workspace_layout(ctypes.byref(args), ctypes.byref(layout)),
          "ssd_forward_workspace_layout")
    options = _capi.LaunchOptions()
    library.ssd_launch_options_init(ctypes.byref(options))
    options.mode = _capi.MODE_FAST if fast else _capi.MODE_DETERMINISTIC
    # The device's primary context becomes current (PyTorch's), so the runtime loads and launches
    # the kernels in the context that owns the tensors and the stream.
    with torch.cuda.device(x.device):
        key = _spec_key(x, dt, B, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, fast)
        backward_args = None
        if prepare_backward and _HAS_PREPARE and ("forward", key) not in _prepared:
            backward_args = _backward_prepare_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
                                                   chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi, fast)
        _prepare_once("forward", args, fast, key, backward_args)
        keep, ws = _workspace(layout.total_bytes, x.device)
        args.workspace = ws
        args.workspace_bytes = layout.total_bytes
        stream = torch.cuda.current_stream(x.device).cuda_stream
        check(library.ssd_forward(runtime(), ctypes.byref(args), ctypes.byref(options), stream), "ssd_forward")
    del keep
    return out, out_x, final


@_chunk_scan_combined_fwd.register_fake
def _(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi,
      return_final_states, fast, prepare_backward):
    return _forward_outputs(x, B, z, return_final_states)


def _backward_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states):
    b, L, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    f32 = torch.float32
    dx = x.new_empty((b, L, h, p))
    ddt = dt.new_empty((b, L, h))
    dA = A.new_empty((h,), dtype=f32)
    dB = x.new_empty((b, L, g, n))
    dC = x.new_empty((b, L, g, n))
    dD = x.new_empty(tuple(D.shape), dtype=f32) if D is not None else _empty(x, f32)
    dz = x.new_empty((b, L, h, p)) if z is not None else _empty(x)
    ddt_bias = x.new_empty((h,), dtype=f32) if dt_bias is not None else _empty(x, f32)
    dinit = x.new_empty((b, h, p, n), dtype=f32) if initial_states is not None else _empty(x, f32)
    return dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinit


@torch.library.custom_op("ssdgen::chunk_scan_combined_bwd", mutates_args=(), device_types="cuda")
def _chunk_scan_combined_bwd(dout: Tensor, dfinal_states: Optional[Tensor], x: Tensor, dt: Tensor, A: Tensor,
                             B: Tensor, C: Tensor, D: Optional[Tensor], z: Optional[Tensor],
                             dt_bias: Optional[Tensor], initial_states: Optional[Tensor], seq_idx: Optional[Tensor],
                             out_x: Optional[Tensor], chunk_size: int, dt_softplus: bool, dt_limit_lo: float,
                             dt_limit_hi: float, fast: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                                                      Tensor, Tensor, Tensor]:
    grads = _backward_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states)
    dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinit = grads
    if dout.dtype != x.dtype:
        dout = dout.to(x.dtype)
    if dfinal_states is not None:
        n = B.shape[3]
        if dfinal_states.dtype != torch.float32:
            dfinal_states = dfinal_states.float()
        if dfinal_states.stride(3) != 1 or dfinal_states.stride(2) != n:
            dfinal_states = dfinal_states.contiguous()  # the p*n axis is read with one stride
    args = _backward_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus,
                          dt_limit_lo, dt_limit_hi, fast, out_x, dout, dfinal_states, grads)
    size = ctypes.c_size_t()
    check(library.ssd_backward_workspace_size(ctypes.byref(args), ctypes.byref(size)), "ssd_backward_workspace_size")
    with torch.cuda.device(x.device):
        _prepare_once("backward", args, fast, _spec_key(x, dt, B, D, z, dt_bias, initial_states, seq_idx, chunk_size,
                                                        dt_softplus, fast))
        keep, ws = _workspace(size.value, x.device)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        check(library.ssd_backward(runtime(), ctypes.byref(args), ws, size.value, stream), "ssd_backward")
    del keep
    return grads


@_chunk_scan_combined_bwd.register_fake
def _(dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out_x, chunk_size, dt_softplus,
      dt_limit_lo, dt_limit_hi, fast):
    return _backward_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states)


def _setup_context(ctx, inputs, output):
    (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi,
     return_final_states, fast, _prepare_backward) = inputs
    out, out_x, final = output
    ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out_x if z is not None else None)
    ctx.params = (chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi, fast)
    ctx.mark_non_differentiable(out_x)  # internal: y before gating, kept for the backward


def _backward(ctx, dout, dout_x, dfinal_states):
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out_x = ctx.saved_tensors
    chunk_size, dt_softplus, dt_limit_lo, dt_limit_hi, fast = ctx.params
    if dout is None:  # only final_states reached the loss
        dout = torch.zeros_like(x)
    if dfinal_states is not None and dfinal_states.numel() == 0:  # final_states was not returned
        dfinal_states = None
    dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinit = torch.ops.ssdgen.chunk_scan_combined_bwd(
        dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out_x, chunk_size, dt_softplus,
        dt_limit_lo, dt_limit_hi, fast)
    return (dx, ddt, dA, dB, dC, dD if D is not None else None, dz if z is not None else None,
            ddt_bias if dt_bias is not None else None, dinit if initial_states is not None else None,
            None, None, None, None, None, None, None, None)


torch.library.register_autograd("ssdgen::chunk_scan_combined_fwd", _backward, setup_context=_setup_context)


# ---- the public function: mamba_ssm's signature, refusals named by argument -----------------------

def _require_tensor(name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _require_shape(name, t, shape, text):
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {tuple(t.shape)} does not match {text} = {tuple(shape)}")


def _require_supported(what, value, supported):
    """NotImplementedError "<what> <value> is not supported by ssdgen (supported: ...)" unless value is."""
    if value not in supported:
        raise NotImplementedError(f"{what}{value} is not supported by ssdgen (supported: "
                                  f"{', '.join(map(str, supported))})")


def _require_float(name, t):
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name}: dtype {t.dtype} is not a floating-point dtype")


def _to_fp32(t):
    return t if t.dtype == torch.float32 else t.to(torch.float32)


def _checked_inputs(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_limit,
                    return_varlen_states, state_dtype):
    """The arguments as the operators take them (dtypes and layouts of the library), or the error
    that names the argument."""
    # Refusals of what upstream accepts but ssdgen does not serve (NotImplementedError), then the
    # arguments' own consistency (TypeError / ValueError); each message starts with the argument.
    if return_varlen_states:
        raise NotImplementedError("return_varlen_states: not supported by ssdgen (the per-sequence final states "
                                  "of cu_seqlens are not computed); pass return_varlen_states=False")
    for name, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        _require_tensor(name, t)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size: expected an int, got {type(chunk_size).__name__}")
    _require_supported("chunk_size: ", chunk_size, SUPPORTED_CHUNK_SIZES)
    if x.dim() != 4:
        raise ValueError(f"x: expected 4 dimensions (batch, seqlen, nheads, headdim), got shape {tuple(x.shape)}")
    if x.dtype == torch.float32:
        raise NotImplementedError("x: float32 inputs are not supported by ssdgen (its kernels take bfloat16 or "
                                  "float16 x, B, C, z)")
    if x.dtype not in _ACTIVATION_DTYPES:
        raise TypeError(f"x: dtype {x.dtype} is not supported (torch.bfloat16, torch.float16)")
    if x.device.type not in ("cuda", "meta"):  # meta: shape propagation through the fake implementations
        raise ValueError(f"x: on {x.device}; ssdgen runs on CUDA devices")
    b, L, h, p = x.shape
    if min(b, L, h, p) < 1:
        raise ValueError(f"x: every dimension must be at least 1, got shape {tuple(x.shape)}")
    _require_supported("x: headdim ", p, SUPPORTED_HEADDIMS)
    if B.dim() != 4:
        raise ValueError(f"B: expected 4 dimensions (batch, seqlen, ngroups, dstate), got shape {tuple(B.shape)}")
    g, n = B.shape[2], B.shape[3]
    _require_shape("B", B, (b, L, g, n), "(batch, seqlen, ngroups, dstate) of x")
    if g < 1 or n < 1 or h % g != 0:
        raise ValueError(f"B: ngroups {g} must divide nheads {h}")
    _require_supported("B: dstate ", n, SUPPORTED_DSTATES)
    if h // g > MAX_HEADS_PER_GROUP:
        raise NotImplementedError(f"B: nheads / ngroups = {h // g} heads per group is not supported by ssdgen "
                                  f"(at most {MAX_HEADS_PER_GROUP})")
    _require_shape("C", C, (b, L, g, n), "B's shape")
    _require_shape("dt", dt, (b, L, h), "(batch, seqlen, nheads)")
    _require_shape("A", A, (h,), "(nheads,)")
    for name, t in (("B", B), ("C", C)):
        if t.dtype != x.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from x's {x.dtype} (ssdgen takes x, B, C and z in one "
                            f"dtype)")
    _require_float("dt", dt)
    _require_float("A", A)
    if D is not None:
        _require_tensor("D", D)
        if tuple(D.shape) not in ((h,), (h, p)):
            raise ValueError(f"D: shape {tuple(D.shape)} is neither (nheads,) = {(h,)} nor (nheads, headdim) = "
                             f"{(h, p)}")
        _require_float("D", D)
    if z is not None:
        _require_tensor("z", z)
        _require_shape("z", z, (b, L, h, p), "x's shape")
        if z.dtype != x.dtype:
            raise TypeError(f"z: dtype {z.dtype} differs from x's {x.dtype} (ssdgen takes x, B, C and z in one dtype)")
    if dt_bias is not None:
        _require_tensor("dt_bias", dt_bias)
        _require_shape("dt_bias", dt_bias, (h,), "(nheads,)")
        _require_float("dt_bias", dt_bias)
    if initial_states is not None:
        _require_tensor("initial_states", initial_states)
        _require_shape("initial_states", initial_states, (b, h, p, n), "(batch, nheads, headdim, dstate)")
        _require_float("initial_states", initial_states)
    if seq_idx is not None:
        _require_tensor("seq_idx", seq_idx)
        _require_shape("seq_idx", seq_idx, (b, L), "(batch, seqlen)")
        if seq_idx.dtype.is_floating_point or seq_idx.dtype.is_complex or seq_idx.dtype == torch.bool:
            raise TypeError(f"seq_idx: dtype {seq_idx.dtype} is not an integer dtype")
    if cu_seqlens is not None:
        _require_tensor("cu_seqlens", cu_seqlens)  # only feeds return_varlen_states, refused above
    for name, t in (("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("z", z), ("dt_bias", dt_bias),
                    ("initial_states", initial_states), ("seq_idx", seq_idx)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name}: on {t.device}, x on {x.device} (all tensors must be on one device)")
    try:
        lo, hi = (float(v) for v in dt_limit)
    except (TypeError, ValueError):
        raise TypeError(f"dt_limit: expected a pair of numbers (lo, hi), got {dt_limit!r}") from None
    if not lo <= hi:  # also refuses NaN
        raise ValueError(f"dt_limit: ({lo}, {hi}) must be ordered numbers, lo <= hi")
    if state_dtype is not None and state_dtype != x.dtype:
        raise NotImplementedError(f"state_dtype: {state_dtype} is not supported by ssdgen (None or x's dtype "
                                  f"{x.dtype}: the forward keeps the entering states in float32, the backward its "
                                  f"state gradients in x's dtype)")

    # What the kernels read in float32 is converted as upstream's kernels convert it on load; the
    # conversions are autograd ops, so the gradients come back in the callers' dtypes.
    if dt.dtype not in _DT_DTYPES:
        dt = _to_fp32(dt)
    A = _to_fp32(A)
    if D is not None:
        D = _to_fp32(D)
    if dt_bias is not None:
        dt_bias = _to_fp32(dt_bias)
    if initial_states is not None:
        initial_states = _to_fp32(initial_states)
        if initial_states.stride(3) != 1 or initial_states.stride(2) != n:
            initial_states = initial_states.contiguous()  # the p*n axis is read with one stride
    if seq_idx is not None and seq_idx.dtype != torch.int32:
        seq_idx = seq_idx.to(torch.int32)
    return x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, lo, hi


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False, state_dtype=None,
                              deterministic=True):
    """mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined on ssdgen's kernels.

    Shapes as upstream: x (b, L, h, p), dt (b, L, h), A (h), B and C (b, L, g, n), D (h) or (h, p),
    z (b, L, h, p), dt_bias (h), initial_states (b, h, p, n), seq_idx (b, L). Returns out
    (b, L, h, p, x's dtype), or (out, final_states) with final_states (b, h, p, n, float32) when
    return_final_states. Gradients flow to x, dt, A, B, C, D, z, dt_bias and initial_states, and
    from final_states.

    deterministic=True (default): every gradient bitwise reproducible (same bits for any batch
    composition and run); deterministic=False or SSDGEN_DETERMINISTIC=0 at import: fast mode
    (atomics in the backward's reductions). Supported set and refusals: docs/python.md.
    """
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, lo, hi = _checked_inputs(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_limit,
        return_varlen_states, state_dtype)
    fast = (not deterministic) or _FAST_FROM_ENV
    # A gradient will follow: the first call of a shape builds the backward's kernels with the
    # forward's, in one round of parallel compiles.
    prepare_backward = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, dt, A, B, C, D, z, dt_bias, initial_states))
    out, _, final_states = torch.ops.ssdgen.chunk_scan_combined_fwd(
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, bool(dt_softplus), lo, hi,
        bool(return_final_states), fast, bool(prepare_backward))
    return (out, final_states) if return_final_states else out


_ARCHS = {"sm_80": 80, "sm_90": 90, "sm_90a": 901, 80: 80, 90: 90, 901: 901}


def prepare(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
            dt_softplus=False, dt_limit=(0.0, float("inf")), deterministic=True, backward=True, arch=None, jobs=0):
    """Build every kernel that mamba_chunk_scan_combined with these arguments (and, with backward,
    its gradient) will use, several compiles in parallel, without launching anything: call it at
    model load so that the first step does not compile. The tensors only give shapes and dtypes:
    meta tensors do (then `arch` is required: "sm_80", "sm_90a"); with CUDA tensors and arch=None
    the kernels are built for their device. Needs a library with ssd_forward_prepare; returns
    {"forward": report, "backward": report} with the counts of kernels compiled, read from the disk
    cache and found in memory, and the seconds taken."""
    if not _HAS_PREPARE:
        raise NotImplementedError(f"prepare: the loaded library ({library_path}) has no ssd_forward_prepare")
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, lo, hi = _checked_inputs(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, None, dt_limit, False, None)
    if arch is None and x.device.type != "cuda":
        raise ValueError(f"arch: required for tensors on {x.device} (\"sm_80\", \"sm_90\", \"sm_90a\")")
    if arch is not None and arch not in _ARCHS:
        raise ValueError(f"arch: {arch!r} (legal: \"sm_80\", \"sm_90\", \"sm_90a\", or None for the tensors' device)")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs: {jobs!r} (legal: 0 = one per CPU, or a positive count)")
    fast = (not deterministic) or _FAST_FROM_ENV
    options = _capi.PrepareOptions()
    library.ssd_prepare_options_init(ctypes.byref(options))
    options.arch = _ARCHS[arch] if arch is not None else 0
    options.mode = _capi.MODE_FAST if fast else _capi.MODE_DETERMINISTIC
    options.jobs = jobs
    # The outputs as the operators allocate them, described by meta tensors (nothing is allocated).
    meta = [t.to("meta") if t is not None else None for t in (x, dt, A, B, C, D, z, dt_bias, initial_states)]
    out, out_x, final = _forward_outputs(meta[0], meta[3], z, False)
    out_x = out_x if z is not None else None
    calls = [("forward", library.ssd_forward_prepare,
              _forward_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, lo, hi,
                            out, out_x, placeholders=True))]
    if backward:
        calls.append(("backward", library.ssd_backward_prepare,
                      _backward_prepare_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size,
                                             dt_softplus, lo, hi, fast)))
    with torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext():
        rt = runtime()
        reports = [_capi.PrepareReport() for _ in calls]
        for report in reports:
            report.struct_size = ctypes.sizeof(report)
        # Both lists at once (the library builds a kernel both name once): one round of compiles.
        # Each status is checked in the thread that made the call (the error detail is per thread).
        _concurrently([
            (lambda kind=kind, fn=fn, args=args, report=report:
             check(fn(rt, ctypes.byref(args), ctypes.byref(options), ctypes.byref(report)), f"ssd_{kind}_prepare"))
            for (kind, fn, args), report in zip(calls, reports)])
    return {kind: {name: getattr(report, name) for name, _ in _capi.PrepareReport._fields_[1:]}
            for (kind, _, _), report in zip(calls, reports)}
