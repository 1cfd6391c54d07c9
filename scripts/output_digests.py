#!/usr/bin/env python3
"""Bit-level fingerprints of ssdgen's outputs, to prove that a refactor changes no bits (issue 8).

For a fixed list of cases (shapes and options) and fixed-seed inputs, runs through libssdgen.so
(ctypes) every operation of the C API in both modes and hashes the bytes of every output:

  ssd_forward        out, out_x, final_states, and the workspace intermediates the layout names
                     (dt_out, dA_cumsum, CB's lower triangle s <= l, states); deterministic and fast
  ssd_backward       deterministic mode: every gradient; fast mode: the gradients it computes
                     without atomics (dx, dB, dC, dz, dinitial_states) -- see below
  ssd_chunk_cumsum_fwd / _bwd (standalone; its backward runs reduce_head_partials) in both modes

Fast mode adds dA, dD, ddt_bias (and ddA, hence ddt) with atomics (docs/determinism.md), so their
bits may vary from run to run. For those the script records no digest but the max relative
difference to deterministic mode, max|fast - det| / max|det| over the tensor, and checks it
against 1e-3 (in both --record and --compare).

Inputs are made on the CPU from torch.Generator(manual_seed) integers, turned into floats by exact
arithmetic (k + 0.5) / 2^20 (so their bits are the same on any machine and torch build), never zero,
then copied to the GPU. Outputs are poisoned with NaN and the workspace with 0xFF bytes before every
call; an output element left NaN is a failure. Each digest is the SHA-256 of dtype, shape and the
bytes of the (contiguous) tensor; the inputs are hashed too, so a change of the generator shows as
"inputs differ" and is not mistaken for a library change.

  python3 scripts/output_digests.py --lib build-gpu/libssdgen.so --record digests.json
      runs everything twice (the second run must reproduce the first: run-to-run) and writes
      {"cases": {case: {tensor: sha256}}, "fast_vs_deterministic": {...}, library, commit, GPU}
  python3 scripts/output_digests.py --lib build-gpu/libssdgen.so --compare digests.json
      recomputes, prints equal/different per tensor, exits 1 on any difference
  python3 scripts/output_digests.py --lib build/libssdgen.so --self-test      (no GPU needed)
      checks the case list (well-formed, covers every option) and the ctypes structs against the
      library (struct_size and defaults written by the *_init functions; every case's arguments
      accepted by the library's workspace-size checks, with fake pointers); inputs are reproducible
      and nonzero; then runs the whole record/compare path on the CPU with stand-in launches that
      fill the outputs (the expected set of digests, run-to-run, an unwritten output is caught).

Every mode ends with one line: `digests: N equal, M different`. Exit status: 0 all equal and
within bounds, 1 a difference / NaN left / bound exceeded, 2 usage or setup error.
"""
import argparse
import ctypes as C
import datetime
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_bench import DTYPE, BackwardArgs, ForwardArgs, Layout, Tensor  # noqa: E402  (the C structs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMAT = 1
DEFAULT_SEED = 8  # issue 8
FAST_BOUND = 1e-3
MODES = (("det", 0), ("fast", 1))
DEVICE = "cuda"
# Fast-mode outputs summed with atomics (docs/determinism.md, SSD_MODE_FAST): no digest, a bound.
FAST_ATOMIC = {"bwd": ("ddt", "dA", "dD", "ddt_bias"), "cumsum_bwd": ("dA", "ddt_bias")}


# ---- the C structs peer_bench.py does not define (mirror include/ssd/ssd.h) -------------------------

class Tile(C.Structure):
    _fields_ = [("m", C.c_int32), ("n", C.c_int32), ("k", C.c_int32), ("warps", C.c_int32), ("stages", C.c_int32)]


class LaunchOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("tile", Tile), ("reduce_tile", Tile), ("max_blocks", C.c_int32),
                ("mode", C.c_int32)]


class CumsumFwdArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("chunk_size", C.c_int32), ("dt_softplus", C.c_int32),
                ("dt_limit_lo", C.c_float), ("dt_limit_hi", C.c_float)] + [
        (n, Tensor) for n in ("dt", "A", "dt_bias", "dt_out", "dA_cumsum")]


class CumsumBwdArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("chunk_size", C.c_int32), ("dt_softplus", C.c_int32),
                ("dt_limit_lo", C.c_float), ("dt_limit_hi", C.c_float)] + [
        (n, Tensor) for n in ("dt", "A", "dt_bias", "ddA_cumsum", "ddt_out", "ddt", "dA", "ddt_bias")] + [
        ("workspace", C.c_void_p), ("workspace_bytes", C.c_size_t)]


# (struct, its *_init function) for the struct_size check
INIT_CHECKED = ((ForwardArgs, "ssd_forward_args_init"), (BackwardArgs, "ssd_backward_args_init"),
                (CumsumFwdArgs, "ssd_chunk_cumsum_fwd_args_init"), (CumsumBwdArgs, "ssd_chunk_cumsum_bwd_args_init"),
                (LaunchOptions, "ssd_launch_options_init"))


def describe_tensor(shape, dtype, ptr):
    """An ssd_tensor for a contiguous tensor of this shape and torch dtype at address ptr (0: absent)."""
    t = Tensor()
    if not ptr:
        return t
    t.data, t.dtype, t.ndim = ptr, DTYPE[dtype], len(shape)
    stride = 1
    for i in reversed(range(len(shape))):
        t.shape[i], t.strides[i] = shape[i], stride
        stride *= shape[i]
    return t


def ref(t):
    return Tensor() if t is None else describe_tensor(tuple(t.shape), t.dtype, t.data_ptr())


# ---- the cases -----------------------------------------------------------------------------------

INF = float("inf")
# name: b, L, h, p, g, n, Q, dtype; D: None | "h" | "hp"; dt_limit: (lo, hi), default (0, inf).
CASES = {
    "bf16_b2_L1000_h16_p64_g1_n128_Q64_Dh_z_bias": dict(
        b=2, L=1000, h=16, p=64, g=1, n=128, Q=64, dtype="bf16", D="h", z=True, bias=True, softplus=True),
    "fp16_b1_L700_h8_p32_g8_n16_Q128_Dhp_init_dfinal_limit": dict(
        b=1, L=700, h=8, p=32, g=8, n=16, Q=128, dtype="fp16", D="hp", bias=True, softplus=True, init=True,
        dfinal=True, dt_limit=(0.01, 0.3)),
    "bf16_b3_L777_h8_p128_g2_n64_Q256_Dhp_seq_init_nosoftplus_limit": dict(
        b=3, L=777, h=8, p=128, g=2, n=64, Q=256, dtype="bf16", D="hp", bias=True, softplus=False, init=True,
        seq=True, dt_limit=(0.02, 0.5)),
    "fp16_b2_L512_h12_p64_g4_n256_Q256_z_seq_dfinal": dict(
        b=2, L=512, h=12, p=64, g=4, n=256, Q=256, dtype="fp16", z=True, bias=True, softplus=True, seq=True,
        dfinal=True),
    "bf16_b1_L300_h4_p32_g2_n32_Q64_plain_nofinal": dict(
        b=1, L=300, h=4, p=32, g=2, n=32, Q=64, dtype="bf16", softplus=True, final=False),
    "fp16_b2_L130_h4_p128_g1_n128_Q128_all": dict(
        b=2, L=130, h=4, p=128, g=1, n=128, Q=128, dtype="fp16", D="h", z=True, bias=True, softplus=True, init=True,
        seq=True, dfinal=True, dt_limit=(0.005, 0.4)),
}
CASE_DEFAULTS = dict(D=None, z=False, bias=False, softplus=True, init=False, final=True, seq=False, dfinal=False,
                     dt_limit=(0.0, INF))
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def case_list(only=None):
    return [(name, dict(CASE_DEFAULTS, **c)) for name, c in CASES.items() if not only or only in name]


def nchunks(c):
    return (c["L"] + c["Q"] - 1) // c["Q"]


def input_shapes(c):
    """name -> (shape, torch dtype) of every input tensor of the case (absent options left out)."""
    b, L, h, p, g, n, Q, T = c["b"], c["L"], c["h"], c["p"], c["g"], c["n"], c["Q"], TORCH_DTYPE[c["dtype"]]
    f32 = torch.float32
    s = {"x": ((b, L, h, p), T), "dt": ((b, L, h), T), "A": ((h,), f32), "B": ((b, L, g, n), T),
         "C": ((b, L, g, n), T), "dout": ((b, L, h, p), T),
         # the standalone chunk_cumsum_bwd's incoming gradients
         "ddA_cumsum": ((b, h, nchunks(c), Q), f32), "ddt_out": ((b, h, nchunks(c), Q), f32)}
    if c["D"]:
        s["D"] = ((h, p) if c["D"] == "hp" else (h,), f32)
    if c["z"]:
        s["z"] = ((b, L, h, p), T)
    if c["bias"]:
        s["dt_bias"] = ((h,), f32)
    if c["init"]:
        s["initial_states"] = ((b, h, p, n), f32)
    if c["seq"]:
        s["seq_idx"] = ((b, L), torch.int32)
    if c["dfinal"]:
        s["dfinal_states"] = ((b, h, p, n), f32)
    return s


def case_problems(name, c):
    """What is wrong with one case (empty if nothing): the C API's documented ranges."""
    bad = []
    if set(c) != set(CASE_DEFAULTS) | {"b", "L", "h", "p", "g", "n", "Q", "dtype"}:
        bad.append(f"unknown or missing keys {sorted(set(c) ^ (set(CASE_DEFAULTS) | set('bLhpgnQ') | {'dtype'}))}")
    if c["Q"] not in (64, 128, 256):
        bad.append(f"chunk {c['Q']} not in 64, 128, 256")
    if c["p"] not in (32, 64, 128):
        bad.append(f"headdim {c['p']} not in 32, 64, 128")
    if c["n"] not in (16, 32, 64, 128, 256):
        bad.append(f"dstate {c['n']} not in 16..256")
    if c["h"] % c["g"]:
        bad.append(f"nheads {c['h']} not a multiple of ngroups {c['g']}")
    if c["dtype"] not in TORCH_DTYPE:
        bad.append(f"dtype {c['dtype']} not bf16/fp16")
    if c["D"] not in (None, "h", "hp"):
        bad.append(f"D {c['D']!r} not None, 'h', 'hp'")
    lo, hi = c["dt_limit"]
    if not 0 <= lo < hi:
        bad.append(f"dt_limit {c['dt_limit']}")
    if c["b"] * c["L"] * c["h"] * c["p"] > 1 << 22:
        bad.append("too large for a quick run")
    return [f"case {name}: {m}" for m in bad]


def coverage_problems(cases):
    """Each option the digests must cover (issue 8) appears in at least one case."""
    want = {
        "D (h)": lambda c: c["D"] == "h", "D (h, p)": lambda c: c["D"] == "hp", "no D": lambda c: not c["D"],
        "z": lambda c: c["z"], "dt_bias": lambda c: c["bias"], "softplus": lambda c: c["softplus"],
        "no softplus": lambda c: not c["softplus"], "dt_limit": lambda c: c["dt_limit"] != (0.0, INF),
        "initial_states": lambda c: c["init"], "final_states": lambda c: c["final"],
        "no final_states": lambda c: not c["final"], "seq_idx": lambda c: c["seq"],
        "dfinal_states": lambda c: c["dfinal"], "partial last chunk": lambda c: c["L"] % c["Q"] != 0,
        "chunk 64": lambda c: c["Q"] == 64, "chunk 128": lambda c: c["Q"] == 128, "chunk 256": lambda c: c["Q"] == 256,
        "ngroups 1": lambda c: c["g"] == 1, "ngroups h": lambda c: c["g"] == c["h"] > 1,
        "1 < ngroups < h": lambda c: 1 < c["g"] < c["h"], "headdim 32": lambda c: c["p"] == 32,
        "headdim 64": lambda c: c["p"] == 64, "headdim 128": lambda c: c["p"] == 128,
        "dstate 16": lambda c: c["n"] == 16, "dstate 256": lambda c: c["n"] == 256,
        "batch 1": lambda c: c["b"] == 1, "batch 3": lambda c: c["b"] == 3,
        "bf16": lambda c: c["dtype"] == "bf16", "fp16": lambda c: c["dtype"] == "fp16",
    }
    return [f"no case covers {what}" for what, test in want.items() if not any(test(c) for _, c in cases)]


# ---- inputs --------------------------------------------------------------------------------------

def case_seed(seed, name):
    return (seed * 1000003 + zlib.crc32(name.encode())) % (1 << 63)  # adding a case changes no other case


def make_inputs(name, c, seed):
    """CPU tensors from integers: u = (k + 0.5) / 2^20, k uniform in [0, 2^20) (exact in fp32, never 0 or 1),
    then only exactly-rounded fp32 operations and one cast: the same bits on any machine."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(case_seed(seed, name))

    def unit(shape):
        k = torch.randint(0, 1 << 20, shape, generator=gen, dtype=torch.int64)
        return (k.to(torch.float32) + 0.5) / float(1 << 20)

    def sym(shape, scale=2.0):  # in (-scale, scale), never 0
        return (unit(shape) * 2.0 - 1.0) * scale

    out = {}
    for key, (shape, dtype) in input_shapes(c).items():
        if key == "A":
            v = -(unit(shape) * 3.5 + 0.5)
        elif key == "D":
            v = unit(shape) + 0.5
        elif key == "dt":
            v = unit(shape) * 3.5 - 3.0 if c["softplus"] else unit(shape) * 0.2
        elif key == "dt_bias":
            v = -(unit(shape) * 2.0 + 1.0) if c["softplus"] else unit(shape) * 0.5
        elif key == "seq_idx":  # ids non-decreasing from 0, three cuts; odd rows start at 1 (no initial state)
            b, L = shape
            cuts = sorted(set(int(v) for v in torch.randint(1, L, (3,), generator=gen).tolist()))
            v = torch.zeros(b, L, dtype=torch.int32)
            for i, cut in enumerate(cuts):
                v[:, cut:] = i + 1
            v[1::2] += 1
        else:
            v = sym(shape)
        out[key] = v.to(dtype).contiguous()
    return out


# ---- digests -------------------------------------------------------------------------------------

def digest(t):
    t = t.detach().contiguous().cpu()
    h = hashlib.sha256(f"{t.dtype} {tuple(t.shape)}\n".encode())
    h.update(C.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()


def max_rel_diff(fast, det):
    det, fast = det.double(), fast.double()
    scale = float(det.abs().max())
    return float((fast - det).abs().max()) / scale if scale > 0 else float((fast - det).abs().max())


# ---- the library ---------------------------------------------------------------------------------

class Lib:
    def __init__(self, path, runtime=True):
        self.lib = C.CDLL(path)
        self.lib.ssd_last_error_detail.restype = C.c_char_p
        self.lib.ssd_status_string.restype = C.c_char_p
        self.lib.ssd_version_string.restype = C.c_char_p
        self.version = self.lib.ssd_version_string().decode()
        self.rt = C.c_void_p()
        if runtime:
            problems = struct_size_problems(self)
            if problems:
                raise RuntimeError("; ".join(problems))
            self.check(self.lib.ssd_runtime_create(None, C.byref(self.rt)), "ssd_runtime_create")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.ssd_status_string(status).decode()}: "
                               f"{self.lib.ssd_last_error_detail().decode()}")

    def init(self, struct, fn):
        # into a roomy buffer: a library struct larger than the ctypes mirror must not overrun it
        buf = C.create_string_buffer(max(4096, C.sizeof(struct)))
        getattr(self.lib, fn)(buf)
        return struct.from_buffer_copy(buf)

    def options(self, mode):
        o = self.init(LaunchOptions, "ssd_launch_options_init")
        o.mode = mode
        return o


# Defaults the *_init functions write (src/ops): they land in the right ctypes fields only if the
# offsets agree, which the size alone (padding) cannot show.
INIT_DEFAULTS = {"chunk_size": 256, "dt_limit_lo": 0.0, "dt_limit_hi": INF, "mode": -1}


def struct_size_problems(lib):
    out = []
    for struct, fn in INIT_CHECKED:
        s = lib.init(struct, fn)
        if s.struct_size != C.sizeof(struct):
            out.append(f"{struct.__name__}: the library's {fn} writes struct_size {s.struct_size}, ctypes has "
                       f"{C.sizeof(struct)} (update the ctypes mirror of include/ssd/ssd.h)")
        for field, want in INIT_DEFAULTS.items():
            if field in (f[0] for f in struct._fields_) and getattr(s, field) != want:
                out.append(f"{struct.__name__}.{field}: {fn} leaves {getattr(s, field)} there, the library's default "
                           f"is {want} (a field offset differs from include/ssd/ssd.h)")
    return out


def forward_args(lib, c, t, outs, get):
    """ssd_forward_args for inputs t and outputs outs (dicts of tensors); get(x) makes an ssd_tensor."""
    a = lib.init(ForwardArgs, "ssd_forward_args_init")
    a.chunk_size, a.dt_softplus = c["Q"], int(c["softplus"])
    a.dt_limit_lo, a.dt_limit_hi = c["dt_limit"]
    for name in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx"):
        setattr(a, name, get(t.get(name)))
    for name in ("out", "out_x", "final_states"):
        setattr(a, name, get(outs.get(name)))
    return a


def backward_args(lib, c, t, grads, out_x, mode, get):
    a = lib.init(BackwardArgs, "ssd_backward_args_init")
    a.chunk_size, a.dt_softplus, a.mode = c["Q"], int(c["softplus"]), mode
    a.dt_limit_lo, a.dt_limit_hi = c["dt_limit"]
    for name in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx", "dout",
                 "dfinal_states"):
        setattr(a, name, get(t.get(name)))
    a.out_x = get(out_x)
    for name in GRADS:
        setattr(a, name, get(grads.get(name)))
    return a


def cumsum_fwd_args(lib, c, t, outs, get):
    a = lib.init(CumsumFwdArgs, "ssd_chunk_cumsum_fwd_args_init")
    a.chunk_size, a.dt_softplus = c["Q"], int(c["softplus"])
    a.dt_limit_lo, a.dt_limit_hi = c["dt_limit"]
    a.dt, a.A, a.dt_bias = get(t["dt"]), get(t["A"]), get(t.get("dt_bias"))
    a.dt_out, a.dA_cumsum = get(outs["dt_out"]), get(outs["dA_cumsum"])
    return a


def cumsum_bwd_args(lib, c, t, grads, get):
    a = lib.init(CumsumBwdArgs, "ssd_chunk_cumsum_bwd_args_init")
    a.chunk_size, a.dt_softplus = c["Q"], int(c["softplus"])
    a.dt_limit_lo, a.dt_limit_hi = c["dt_limit"]
    for name in ("dt", "A", "dt_bias", "ddA_cumsum", "ddt_out"):
        setattr(a, name, get(t.get(name)))
    for name in ("ddt", "dA", "ddt_bias"):
        setattr(a, name, get(grads.get(name)))
    return a


# gradient -> the input it belongs to (present iff that input is)
GRADS = {"dx": "x", "ddt": "dt", "dA": "A", "dB": "B", "dC": "C", "dD": "D", "dz": "z", "ddt_bias": "dt_bias",
         "dinitial_states": "initial_states"}


def output_shapes(c, t_shapes):
    b, L, h, p, n, Q = c["b"], c["L"], c["h"], c["p"], c["n"], c["Q"]
    T = TORCH_DTYPE[c["dtype"]]
    fwd = {"out": ((b, L, h, p), T)}
    if c["z"]:
        fwd["out_x"] = ((b, L, h, p), T)
    if c["final"]:
        fwd["final_states"] = ((b, h, p, n), torch.float32)
    bwd = {g: t_shapes[src] for g, src in GRADS.items() if src in t_shapes}
    chunked = ((b, h, nchunks(c), Q), torch.float32)
    cfwd = {"dt_out": chunked, "dA_cumsum": chunked}
    cbwd = {"ddt": t_shapes["dt"], "dA": t_shapes["A"]}
    if c["bias"]:
        cbwd["ddt_bias"] = t_shapes["dt_bias"]
    return fwd, bwd, cfwd, cbwd


# ---- the GPU run ---------------------------------------------------------------------------------

def current_stream():
    return C.c_void_p(torch.cuda.current_stream().cuda_stream)


def synchronize():
    torch.cuda.synchronize()


def poisoned(shapes):
    return {k: torch.full(shape, float("nan"), dtype=dtype, device=DEVICE) for k, (shape, dtype) in shapes.items()}


def poisoned_workspace(nbytes):
    return torch.full((max(int(nbytes), 1),), 0xFF, dtype=torch.uint8, device=DEVICE)


def workspace_region(ws, offset, shape, dtype=torch.float32):
    """The tensor of this shape and dtype (fp32 unless given) at byte offset of the (uint8) workspace."""
    size = torch.tensor([], dtype=dtype).element_size()
    return ws[offset:offset + size * math.prod(shape)].view(dtype).view(shape)


def check_written(what, tensors, failures):
    for k, v in tensors.items():
        left = int(torch.isnan(v).sum())
        if left:
            failures.append(f"{what}.{k}: {left} of {v.numel()} elements left NaN (unwritten)")


def run_case(lib, name, c, seed, failures, modes=MODES):
    """Returns ({tensor: sha256}, {fast tensor: max rel diff to deterministic}). With modes = one mode
    only (the warm-up), fast mode has no deterministic results to be compared with."""
    cpu = make_inputs(name, c, seed)
    t = {k: v.to(DEVICE) for k, v in cpu.items()}
    shapes = {k: (tuple(v.shape), v.dtype) for k, v in cpu.items()}
    fwd_shapes, bwd_shapes, cfwd_shapes, cbwd_shapes = output_shapes(c, shapes)
    stream = current_stream()
    digests = {f"inputs.{k}": digest(v) for k, v in cpu.items()}
    rel = {}
    out_x = None
    for mname, mode in modes:
        # ssd_forward, and its intermediates as the workspace layout names them
        outs = poisoned(fwd_shapes)
        a = forward_args(lib, c, t, outs, ref)
        lay = Layout()
        lay.struct_size = C.sizeof(Layout)
        lib.check(lib.lib.ssd_forward_workspace_layout(C.byref(a), C.byref(lay)),
                  f"{name}: ssd_forward_workspace_layout")
        ws = poisoned_workspace(lay.total_bytes)
        a.workspace, a.workspace_bytes = ws.data_ptr(), lay.total_bytes
        opt = lib.options(mode)
        lib.check(lib.lib.ssd_forward(lib.rt, C.byref(a), C.byref(opt), stream), f"{name}: ssd_forward ({mname})")
        synchronize()
        b, h, p, g, n, Q, nc = c["b"], c["h"], c["p"], c["g"], c["n"], c["Q"], nchunks(c)
        cb = workspace_region(ws, lay.CB_offset, (b, nc, g, Q, Q))
        outs.update({"ws.dt_out": workspace_region(ws, lay.dt_out_offset, (b, h, nc, Q)),
                     "ws.dA_cumsum": workspace_region(ws, lay.dA_cumsum_offset, (b, h, nc, Q)),
                     # only the causal lower triangle s <= l is defined (bmm_chunk.cuh)
                     "ws.CB_lower": cb[..., torch.ones(Q, Q, dtype=torch.bool, device=DEVICE).tril()],
                     # P in x's dtype (docs/api.md; fp32 before issue 9's fused state pass)
                     "ws.states": workspace_region(ws, lay.states_offset, (b, nc, h, p, n), TORCH_DTYPE[c["dtype"]])})
        check_written(f"{name}: fwd.{mname}", outs, failures)
        digests.update({f"fwd.{mname}.{k}": digest(v) for k, v in outs.items()})
        if mode == 0 or out_x is None:
            out_x = outs.get("out_x")

    det = {}
    for mname, mode in modes:
        grads = poisoned(bwd_shapes)
        a = backward_args(lib, c, t, grads, out_x, mode, ref)
        size = C.c_size_t()
        lib.check(lib.lib.ssd_backward_workspace_size(C.byref(a), C.byref(size)),
                  f"{name}: ssd_backward_workspace_size")
        ws = poisoned_workspace(size.value)
        lib.check(lib.lib.ssd_backward(lib.rt, C.byref(a), C.c_void_p(ws.data_ptr()), C.c_size_t(size.value), stream),
                  f"{name}: ssd_backward ({mname})")
        synchronize()
        check_written(f"{name}: bwd.{mname}", grads, failures)
        record_mode_outputs("bwd", mname, grads, det, digests, rel)

    cdet = {}
    for mname, mode in modes:
        outs = poisoned(cfwd_shapes)
        a = cumsum_fwd_args(lib, c, t, outs, ref)
        opt = lib.options(mode)
        lib.check(lib.lib.ssd_chunk_cumsum_fwd(lib.rt, C.byref(a), C.byref(opt), stream),
                  f"{name}: ssd_chunk_cumsum_fwd ({mname})")
        grads = poisoned(cbwd_shapes)
        a = cumsum_bwd_args(lib, c, t, grads, ref)
        size = C.c_size_t()
        lib.check(lib.lib.ssd_chunk_cumsum_bwd_workspace_size(C.byref(a), C.byref(size)),
                  f"{name}: ssd_chunk_cumsum_bwd_workspace_size")
        ws = poisoned_workspace(size.value)
        a.workspace, a.workspace_bytes = ws.data_ptr(), size.value
        lib.check(lib.lib.ssd_chunk_cumsum_bwd(lib.rt, C.byref(a), C.byref(opt), stream),
                  f"{name}: ssd_chunk_cumsum_bwd ({mname})")
        synchronize()
        check_written(f"{name}: cumsum_fwd.{mname}", outs, failures)
        check_written(f"{name}: cumsum_bwd.{mname}", grads, failures)
        digests.update({f"cumsum_fwd.{mname}.{k}": digest(v) for k, v in outs.items()})
        record_mode_outputs("cumsum_bwd", mname, grads, cdet, digests, rel)
    return digests, rel


def record_mode_outputs(op, mname, outs, det, digests, rel):
    """Deterministic mode: a digest of every output (kept in det). Fast mode: digests of the outputs computed
    without atomics, the max relative difference to det for the others."""
    for k, v in outs.items():
        if mname == "fast" and k in FAST_ATOMIC[op]:
            if k in det:
                rel[f"{op}.fast.{k}"] = max_rel_diff(v, det[k])
        else:
            digests[f"{op}.{mname}.{k}"] = digest(v)
            if mname == "det":
                det[k] = v


def warm_up(lib, cases, seed, jobs):
    """Runs every (case, mode) once on `jobs` threads, results discarded, so that the NVRTC compiles of
    all the kernels the cases need overlap (the library's builder is thread-safe, ctypes drops the GIL)
    instead of running one after the other in the measured runs."""
    from concurrent.futures import ThreadPoolExecutor
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(run_case, lib, name, c, seed, [], (m,)) for name, c in cases for m in MODES]:
            f.result()  # raises what the task raised
    synchronize()
    print(f"warm-up (JIT compilation on {jobs} threads): {time.time() - t0:.1f} s", flush=True)


def run_all(lib, cases, seed, failures):
    digests, rel = {}, {}
    for name, c in cases:
        t0 = time.time()
        digests[name], rel[name] = run_case(lib, name, c, seed, failures)
        print(f"  {name}: {len(digests[name])} digests, {len(rel[name])} fast-mode bounds, {time.time() - t0:.1f} s",
              flush=True)
    return digests, rel


# ---- record / compare ----------------------------------------------------------------------------

def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(lib, seed, label):
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"format": FORMAT, "seed": seed, "label": label, "library_version": lib.version,
            "git_commit": git("rev-parse", "HEAD"), "git_dirty": None if dirty is None else bool(dirty),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "python": platform.python_version(), "host": platform.node(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "fast_bound": FAST_BOUND,
            "fast_note": f"fast-mode outputs summed with atomics ({FAST_ATOMIC}) have no digest: "
                         f"fast_vs_deterministic holds max|fast-det|/max|det|, each must be <= {FAST_BOUND:g}"}


def compare_tables(old, new, header, every_row=True):
    """Prints a row per tensor (every_row) or per case with its differing tensors; returns (equal, different)."""
    equal = different = 0
    rows = []
    for case in sorted(set(old) | set(new)):
        o, n = old.get(case), new.get(case)
        if o is None or n is None:
            rows.append((case, "*", "only in the record" if n is None else "only in this run"))
            different += 1
            continue
        for k in sorted(set(o) | set(n)):
            if k not in o or k not in n:
                verdict = "only in the record" if k not in n else "only in this run"
            else:
                verdict = "equal" if o[k] == n[k] else "DIFFERENT"
            equal += verdict == "equal"
            different += verdict != "equal"
            rows.append((case, k, verdict))
    print(header)
    width = max((len(r[1]) for r in rows), default=10)
    for case in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == case]
        same = sum(r[2] == "equal" for r in mine)
        print(f"  {case}: {same} equal, {len(mine) - same} different")
        for _, k, verdict in mine:
            if every_row or verdict != "equal":
                print(f"    {k:<{width}}  {verdict}")
    inputs_differ = sorted({case for case, k, v in rows if k.startswith("inputs.") and v != "equal"})
    if inputs_differ:
        print(f"note: the inputs differ for {', '.join(inputs_differ)}: the input generator (or the case "
              "definition) changed, so these cases say nothing about the library")
    return equal, different


def print_bounds(rel, recorded=None):
    """One line per case: each fast-mode atomic output's max|fast - det| / max|det| (and the recorded value)."""
    print(f"fast mode, outputs summed with atomics (no digest; their bits may vary): max|fast - det| / max|det|, "
          f"bound {FAST_BOUND:g}" + ("; (recorded value)" if recorded else ""))
    over = 0
    for case in sorted(rel):
        parts = []
        for k, v in sorted(rel[case].items()):
            was = (recorded or {}).get(case, {}).get(k)
            ok = v <= FAST_BOUND  # False for NaN
            over += not ok
            parts.append(f"{k} {v:.2e}" + (f" ({was:.2e})" if was is not None else "") + ("" if ok else " OVER"))
        print(f"  {case}: " + ", ".join(parts))
    return over


def start(lib_path):
    torch.cuda.init()
    torch.empty(1, device=DEVICE)  # a current context for ssd_runtime_create
    return Lib(lib_path)


def not_run(message):
    print(f"output_digests: {message}", file=sys.stderr)
    print("digests: 0 equal, 0 different (not run)")
    return 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    default_lib = next((p for p in (os.path.join(ROOT, "build-gpu", "libssdgen.so"),
                                    os.path.join(ROOT, "build", "libssdgen.so")) if os.path.exists(p)), None)
    ap.add_argument("--lib", default=default_lib, help=f"libssdgen.so (default: {default_lib})")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--record", metavar="FILE.json", help="run twice, check run-to-run, write the digests")
    what.add_argument("--compare", metavar="FILE.json", help="recompute and compare with a recorded file")
    what.add_argument("--self-test", action="store_true", help="check cases and ctypes structs (no GPU needed)")
    ap.add_argument("--seed", type=int, default=None, help=f"input seed for --record (default {DEFAULT_SEED}); "
                                                            "--compare uses the record's")
    ap.add_argument("--label", default=None, help="free text stored in the record (e.g. 'before issue 8')")
    ap.add_argument("--jobs", type=int, default=12, metavar="N",
                    help="threads of the warm-up pass that compiles the kernels concurrently (1: no warm-up)")
    ap.add_argument("--only", default=None, metavar="SUBSTRING", help="only the cases whose name contains this")
    args = ap.parse_args()
    if not args.lib or not os.path.exists(args.lib):
        return not_run(f"no library at {args.lib!r} (give --lib)")
    cases = case_list(args.only)
    if not cases:
        return not_run(f"no case matches --only {args.only!r}")
    if args.self_test:
        return self_test(args.lib, cases, args.seed if args.seed is not None else DEFAULT_SEED)
    recorded = None
    seed = args.seed if args.seed is not None else DEFAULT_SEED
    if args.compare:
        try:
            with open(args.compare) as f:
                recorded = json.load(f)
        except (OSError, ValueError) as e:
            return not_run(f"cannot read the record {args.compare}: {e}")
        if not isinstance(recorded, dict) or not {"seed", "cases", "fast_vs_deterministic"} <= set(recorded):
            return not_run(f"{args.compare}: not a record of this script (no seed, cases, fast_vs_deterministic)")
        if recorded.get("format") != FORMAT:
            return not_run(f"{args.compare}: format {recorded.get('format')}, this script writes {FORMAT}")
        if args.seed is not None and args.seed != recorded["seed"]:
            return not_run(f"--seed {args.seed} differs from the record's {recorded['seed']}")
        seed = recorded["seed"]
        if args.only:
            recorded["cases"] = {k: v for k, v in recorded["cases"].items() if args.only in k}
            recorded["fast_vs_deterministic"] = {k: v for k, v in recorded["fast_vs_deterministic"].items()
                                                 if args.only in k}
    if not torch.cuda.is_available():
        return not_run("no CUDA device (torch.cuda.is_available() is False); --self-test runs without one")

    try:
        lib = start(args.lib)
    except (RuntimeError, OSError) as e:
        return not_run(str(e))
    info = provenance(lib, seed, args.label)
    print(f"output_digests: {lib.version}, commit {info['git_commit'] or 'unknown'}"
          f"{' (dirty)' if info['git_dirty'] else ''}, {info['gpu']}, seed {seed}, {len(cases)} cases")
    failures = []
    try:
        if args.jobs > 1:
            warm_up(lib, cases, seed, args.jobs)
        t0 = time.time()
        digests, rel = run_all(lib, cases, seed, failures)
        print(f"first run: {time.time() - t0:.1f} s" + (" (includes JIT compilation)" if args.jobs <= 1 else ""))
        if args.record:
            t1 = time.time()
            again, _ = run_all(lib, cases, seed, failures)
            print(f"second run: {time.time() - t1:.1f} s")
    except RuntimeError as e:  # a call the library refused or that failed: nothing to compare
        print(f"FAIL {e}")
        print("digests: 0 equal, 0 different (a call failed)")
        return 1

    if args.record:
        equal, different = compare_tables(digests, again, "run-to-run (second run vs first):", every_row=False)
        over = print_bounds(rel)
        with open(args.record, "w") as f:
            json.dump(dict(info, cases=digests, fast_vs_deterministic=rel), f, indent=1, sort_keys=True)
        print(f"wrote {args.record}")
    else:
        if recorded.get("gpu") != info["gpu"]:
            print(f"warning: recorded on {recorded.get('gpu')!r}, running on {info['gpu']!r}: bits across GPUs are "
                  "not promised (docs/determinism.md)")
        print(f"record: {recorded.get('library_version')}, commit {recorded.get('git_commit')}, "
              f"label {recorded.get('label')!r}, {recorded.get('date')}")
        equal, different = compare_tables(recorded["cases"], digests, "recorded vs now:")
        over = print_bounds(rel, recorded.get("fast_vs_deterministic"))
    failures = sorted(set(failures))  # the record's two runs may both report one
    for f in failures:
        print(f"FAIL {f}")
    print(f"digests: {equal} equal, {different} different" +
          (f"; {over} fast-mode bounds exceeded" if over else "") +
          (f"; {len(failures)} outputs left NaN" if failures else ""))
    return 1 if different or over or failures else 0


def self_test(lib_path, cases, seed):
    problems = []
    for name, c in cases:
        problems += case_problems(name, c)
    if len(cases) == len(CASES):
        problems += coverage_problems(cases)
    lib = Lib(lib_path, runtime=False)
    problems += struct_size_problems(lib)
    if C.sizeof(Layout) != 6 * C.sizeof(C.c_size_t):
        problems.append(f"Layout: ctypes size {C.sizeof(Layout)}, ssd_forward_layout has six size_t")
    checks = 0
    if not problems:  # the library's own argument checks (no GPU needed): fake, 256-aligned addresses
        next_address = [1 << 32]

        def fake(x):
            if x is None:
                return Tensor()
            shape, dtype = x
            next_address[0] += 1 << 28
            return describe_tensor(shape, dtype, next_address[0])

        for name, c in cases:
            shapes = input_shapes(c)
            fwd, bwd, cfwd, cbwd = output_shapes(c, shapes)
            try:
                a = forward_args(lib, c, shapes, fwd, fake)
                lay = Layout()
                lay.struct_size = C.sizeof(Layout)
                lib.check(lib.lib.ssd_forward_workspace_layout(C.byref(a), C.byref(lay)),
                          "ssd_forward_workspace_layout")
                if lay.states_offset + 2 * c["b"] * nchunks(c) * c["h"] * c["p"] * c["n"] > lay.total_bytes:
                    problems.append(f"case {name}: the forward layout does not hold the states")
                for mode in (0, 1):
                    a = backward_args(lib, c, shapes, bwd, fwd.get("out_x"), mode, fake)
                    size = C.c_size_t()
                    lib.check(lib.lib.ssd_backward_workspace_size(C.byref(a), C.byref(size)),
                              f"ssd_backward_workspace_size (mode {mode})")
                a = cumsum_bwd_args(lib, c, shapes, cbwd, fake)
                lib.check(lib.lib.ssd_chunk_cumsum_bwd_workspace_size(C.byref(a), C.byref(size)),
                          "ssd_chunk_cumsum_bwd_workspace_size")
                checks += 4
            except RuntimeError as e:
                problems.append(f"case {name}: the library rejects its arguments: {e}")
            first, again = make_inputs(name, c, seed), make_inputs(name, c, seed)
            for k, v in first.items():
                if digest(v) != digest(again[k]):
                    problems.append(f"case {name}: input {k} is not reproducible")
                if v.is_floating_point() and (bool((v == 0).any()) or not bool(torch.isfinite(v).all())):
                    problems.append(f"case {name}: input {k} has a zero or non-finite element")
                if tuple(v.shape) != input_shapes(c)[k][0] or v.dtype != input_shapes(c)[k][1]:
                    problems.append(f"case {name}: input {k} has shape {tuple(v.shape)} {v.dtype}")
            checks += 1
    equal = different = 0
    if not problems:
        equal, different = stand_in_run(lib, cases, seed, problems)
    for p in problems:
        print(f"FAIL {p}")
    print(f"self-test: {len(cases)} cases, {len(INIT_CHECKED)} struct sizes, {checks} library argument / input checks, "
          f"record/compare path on the CPU with stand-in launches; library {lib.version}: "
          f"{'ok' if not problems else f'{len(problems)} problems'}")
    print(f"digests: {equal} equal, {different} different (stand-in outputs, run-to-run)")
    return 1 if problems else 0


class StandInLaunches:
    """The real library for the *_init, layout and workspace-size calls (so its argument checks see the real
    CPU tensors); the four launching calls fill every output they are given with 0x3F bytes, except the
    field named `unwritten`. Lets --self-test run run_case, the digests and the comparison without a GPU."""
    ELEMENT_BYTES = {1: 2, 2: 2, 3: 4, 4: 4}

    def __init__(self, real, unwritten=None):
        self.real, self.unwritten = real, unwritten

    def __getattr__(self, name):
        return getattr(self.real, name)

    def fill(self, args, *fields):
        for f in fields:
            t = getattr(args, f)
            if t.data and f != self.unwritten:
                C.memset(t.data, 0x3F, math.prod(t.shape[:t.ndim]) * self.ELEMENT_BYTES[t.dtype])

    def ssd_forward(self, rt, a, options, stream):
        a = a._obj
        lay = Layout()
        lay.struct_size = C.sizeof(Layout)
        status = self.real.ssd_forward_workspace_layout(C.byref(a), C.byref(lay))
        if status == 0:
            C.memset(a.workspace, 0x3F, lay.total_bytes)
            self.fill(a, "out", "out_x", "final_states")
        return status

    def ssd_backward(self, rt, a, workspace, workspace_bytes, stream):
        self.fill(a._obj, *GRADS)
        return 0

    def ssd_chunk_cumsum_fwd(self, rt, a, options, stream):
        self.fill(a._obj, "dt_out", "dA_cumsum")
        return 0

    def ssd_chunk_cumsum_bwd(self, rt, a, options, stream):
        self.fill(a._obj, "ddt", "dA", "ddt_bias")
        return 0


def expected_digest_keys(c):
    """The tensors a case must have a digest of (the module docstring's list)."""
    shapes = input_shapes(c)
    fwd, bwd, cfwd, cbwd = output_shapes(c, shapes)
    keys = {f"inputs.{k}" for k in shapes}
    for m, _ in MODES:
        keys |= {f"fwd.{m}.{k}" for k in list(fwd) + ["ws.dt_out", "ws.dA_cumsum", "ws.CB_lower", "ws.states"]}
        keys |= {f"cumsum_fwd.{m}.{k}" for k in cfwd}
        keys |= {f"bwd.{m}.{k}" for k in bwd if m == "det" or k not in FAST_ATOMIC["bwd"]}
        keys |= {f"cumsum_bwd.{m}.{k}" for k in cbwd if m == "det" or k not in FAST_ATOMIC["cumsum_bwd"]}
    return keys


def stand_in_run(lib, cases, seed, problems):
    """run_case on the CPU with StandInLaunches: the digest set per case, run-to-run equality, a NaN left
    in an output is reported, a changed output is counted as different."""
    global DEVICE, current_stream, synchronize
    saved = DEVICE, current_stream, synchronize, lib.lib
    DEVICE, current_stream, synchronize = "cpu", (lambda: C.c_void_p(0)), (lambda: None)
    try:
        lib.lib = StandInLaunches(saved[3])
        runs = []
        for _ in range(2):
            failures = []
            digests = {name: run_case(lib, name, c, seed, failures)[0] for name, c in cases}
            problems += [f"stand-in run: {f}" for f in failures]
            runs.append(digests)
        for name, c in cases:
            want, got = expected_digest_keys(c), set(runs[0][name])
            if want != got:
                problems.append(f"case {name}: digests of {sorted(got - want)} not expected, of {sorted(want - got)} "
                                "missing")
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet
            try:
                equal, different = compare_tables(runs[0], runs[1], "")
                name, c = cases[0]
                lib.lib = StandInLaunches(saved[3], unwritten="dB")
                failures = []
                changed = {name: run_case(lib, name, c, seed, failures)[0]}
                _, changed_count = compare_tables({name: runs[0][name]}, changed, "")
            finally:
                sys.stdout = stdout
        if different:
            problems.append(f"stand-in run-to-run: {different} digests differ")
        if changed_count != 2 or len(failures) != 2 or not all(".dB: " in f for f in failures):
            problems.append(f"an unwritten dB (both modes) gave {changed_count} differences and failures {failures}")
        return equal, different
    finally:
        DEVICE, current_stream, synchronize, lib.lib = saved


if __name__ == "__main__":
    sys.exit(main())
