#!/usr/bin/env python3
"""Side-by-side forward and backward: ssdgen's ssd_forward / ssd_backward (through libssdgen.so via
ctypes) and mamba_ssm's Triton mamba_chunk_scan_combined (and its autograd backward), on the same
bf16 tensors, on the same GPU, in one process.

Speed: CUDA events, warm-up, median of many runs. Accuracy: relative L2 of each against a float64
evaluation of the same inputs (reference_fp64 below: the chunked algorithm in float64 torch).

  python3 scripts/peer_bench.py --lib build-gpu/libssdgen.so --peer .peer/mamba [--out DIR]

mamba_ssm is not part of this project: .peer/mamba holds a git-ignored copy of its
mamba_ssm/ops/triton and mamba_ssm/utils (see docs/perf.md).
"""
import argparse
import ctypes as C
import importlib.util
import json
import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import ssd_reference  # noqa: E402  (the float64 reference)


def package_bindings():
    """python/ssdgen/_capi.py, the package's ctypes declarations of include/ssd/ssd.h (tested against
    the header; load_library checks them against the library), as a module of its own: importing
    the ssdgen package would load the library it finds, and this script loads the one given."""
    spec = importlib.util.spec_from_file_location("ssdgen_capi", os.path.join(ROOT, "python", "ssdgen", "_capi.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


capi = package_bindings()
# The C structs (scripts/accuracy_side_by_side.py and scripts/output_digests.py take them from here).
Tensor, ForwardArgs, BackwardArgs, Layout = capi.Tensor, capi.ForwardArgs, capi.BackwardArgs, capi.ForwardLayout
DTYPE = {torch.bfloat16: capi.DTYPE_BF16, torch.float16: capi.DTYPE_FP16, torch.float32: capi.DTYPE_FP32,
         torch.int32: capi.DTYPE_INT32}


def tensor(t):
    return Tensor() if t is None else capi.tensor_view(t.data_ptr(), DTYPE[t.dtype], t.shape, t.stride())


class Ssdgen:
    def __init__(self, path):
        self.lib = capi.load_library(path)
        self.rt = C.c_void_p()
        self.check(self.lib.ssd_runtime_create(None, C.byref(self.rt)), "ssd_runtime_create")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.ssd_status_string(status).decode()}: "
                               f"{self.lib.ssd_last_error_detail().decode()}")

    def prepare(self, x, dt, A, B, Cm, chunk, D, dt_bias, out, final):
        a = ForwardArgs()
        self.lib.ssd_forward_args_init(C.byref(a))
        a.chunk_size = chunk
        a.dt_softplus = 1
        a.x, a.dt, a.A, a.B, a.C = tensor(x), tensor(dt), tensor(A), tensor(B), tensor(Cm)
        a.D, a.dt_bias, a.out, a.final_states = tensor(D), tensor(dt_bias), tensor(out), tensor(final)
        lay = Layout()
        lay.struct_size = C.sizeof(Layout)
        self.check(self.lib.ssd_forward_workspace_layout(C.byref(a), C.byref(lay)), "workspace_layout")
        ws = torch.empty(lay.total_bytes, dtype=torch.uint8, device="cuda")
        a.workspace = ws.data_ptr()
        a.workspace_bytes = lay.total_bytes
        return a, ws

    def forward(self, args):
        stream = C.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.lib.ssd_forward(self.rt, C.byref(args), None, stream), "ssd_forward")

    def prepare_backward(self, x, dt, A, B, Cm, chunk, D, dt_bias, dout, grads, mode):
        a = BackwardArgs()
        self.lib.ssd_backward_args_init(C.byref(a))
        a.chunk_size = chunk
        a.dt_softplus = 1
        a.mode = mode
        a.x, a.dt, a.A, a.B, a.C = tensor(x), tensor(dt), tensor(A), tensor(B), tensor(Cm)
        a.D, a.dt_bias, a.dout = tensor(D), tensor(dt_bias), tensor(dout)
        for name in ("dx", "ddt", "dA", "dB", "dC", "dD", "ddt_bias"):
            setattr(a, name, tensor(grads[name]))
        size = C.c_size_t()
        self.check(self.lib.ssd_backward_workspace_size(C.byref(a), C.byref(size)), "ssd_backward_workspace_size")
        ws = torch.empty(size.value, dtype=torch.uint8, device="cuda")
        return a, ws

    def backward(self, args, ws):
        stream = C.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.lib.ssd_backward(self.rt, C.byref(args), C.c_void_p(ws.data_ptr()), C.c_size_t(ws.numel()),
                                         stream), "ssd_backward")


def median_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def inputs(b, L, h, p, g, n, gen):
    dev = "cuda"
    x = torch.randn(b, L, h, p, device=dev, generator=gen).to(torch.bfloat16)
    dt = (torch.rand(b, L, h, device=dev, generator=gen) * 3.5 - 3.0).to(torch.bfloat16)
    A = -(torch.rand(h, device=dev, generator=gen) * 3.5 + 0.5)
    B = torch.randn(b, L, g, n, device=dev, generator=gen).to(torch.bfloat16)
    Cm = torch.randn(b, L, g, n, device=dev, generator=gen).to(torch.bfloat16)
    D = torch.rand(h, device=dev, generator=gen) + 0.5
    dt_bias = -(torch.rand(h, device=dev, generator=gen) * 2 + 1)
    return x, dt, A, B, Cm, D, dt_bias


def reference_fp64(x, dt, A, B, Cm, D, dt_bias, Q):
    """The chunked SSD forward (math §2.3) in float64: tests/python/ssd_reference.py's, with softplus."""
    return ssd_reference.chunked(x, dt, A, B, Cm, Q, D=D, dt_bias=dt_bias, dt_softplus=True)


def grad_buffers(x, dt, A, B, Cm, D, dt_bias):
    nan = float("nan")
    return {"dx": torch.full_like(x, nan), "ddt": torch.full_like(dt, nan), "dA": torch.full_like(A, nan),
            "dB": torch.full_like(B, nan), "dC": torch.full_like(Cm, nan), "dD": torch.full_like(D, nan),
            "ddt_bias": torch.full_like(dt_bias, nan)}


def forward_ms(ours, mamba_chunk_scan_combined, x, dt, A, B, Cm, Q, D, dt_bias, iters, warmup):
    """Median ms of ssd_forward and of mamba_ssm's forward on the same tensors, both returning the final
    states."""
    b, _, h, p = x.shape
    out = torch.empty_like(x)
    final = torch.empty(b, h, p, B.shape[-1], device="cuda")
    a, ws = ours.prepare(x, dt, A, B, Cm, Q, D, dt_bias, out, final)
    t_ours = median_ms(lambda: ours.forward(a), iters, warmup)
    t_peer = median_ms(lambda: mamba_chunk_scan_combined(x, dt, A, B, Cm, Q, D=D, z=None, dt_bias=dt_bias,
                                                         dt_softplus=True, return_final_states=True),
                       iters, warmup)
    return t_ours, t_peer


def ssdgen_backward_ms(ours, x, dt, A, B, Cm, Q, D, dt_bias, dout, grads, mode, iters, warmup):
    """Median ms of ssd_backward in `mode` (its recompute included) and its workspace in MiB."""
    a, ws = ours.prepare_backward(x, dt, A, B, Cm, Q, D, dt_bias, dout, grads, mode)
    return median_ms(lambda: ours.backward(a, ws), iters, warmup), ws.numel() / 2**20


def mamba_backward_ms(mamba_chunk_scan_combined, x, dt, A, B, Cm, Q, D, dt_bias, dout, iters, warmup):
    """Median ms of the autograd backward of mamba_ssm's mamba_chunk_scan_combined (the forward graph
    retained) on the same tensors."""
    peer_in = [t.detach().clone().requires_grad_(True) for t in (x, dt, A, B, Cm, D, dt_bias)]
    out = mamba_chunk_scan_combined(*peer_in[:5], Q, D=peer_in[5], z=None, dt_bias=peer_in[6], dt_softplus=True)
    return median_ms(lambda: torch.autograd.grad(out, peer_in, dout, retain_graph=True), iters, warmup)


def backward_section(ours, mamba_chunk_scan_combined, gen, iters, warmup, h, p, g, n, Q):
    """Accuracy of every gradient against float64 autograd of reference_fp64 (b=1, L=2048), then the
    speed of the whole backward at b=4 for L = 2048, 4096, 16384: ssdgen deterministic and fast,
    mamba_ssm's default (atomics) backward with the forward graph retained."""
    res = {"accuracy": {}, "speed": []}
    b, L = 1, 2048
    x, dt, A, B, Cm, D, dt_bias = inputs(b, L, h, p, g, n, gen)
    dout = torch.randn(b, L, h, p, device="cuda", generator=gen).to(torch.bfloat16)
    leaves = [t.detach().double().requires_grad_(True) for t in (x, dt, A, B, Cm, D, dt_bias)]
    y, _ = reference_fp64(*leaves, Q)
    ref = torch.autograd.grad(y, leaves, dout.double())
    names = ("dx", "ddt", "dA", "dB", "dC", "dD", "ddt_bias")
    del y, leaves
    torch.cuda.empty_cache()
    peer_in = [t.detach().clone().requires_grad_(True) for t in (x, dt, A, B, Cm, D, dt_bias)]
    out = mamba_chunk_scan_combined(*peer_in[:5], Q, D=peer_in[5], z=None, dt_bias=peer_in[6], dt_softplus=True)
    peer = torch.autograd.grad(out, peer_in, dout)
    grads = grad_buffers(x, dt, A, B, Cm, D, dt_bias)
    a, ws = ours.prepare_backward(x, dt, A, B, Cm, Q, D, dt_bias, dout, grads, 0)
    ours.backward(a, ws)
    torch.cuda.synchronize()
    for i, name in enumerate(names):
        res["accuracy"][name] = {"ssdgen": rel_l2(grads[name], ref[i]), "mamba_ssm": rel_l2(peer[i], ref[i]),
                                 "ssdgen_unwritten": int(torch.isnan(grads[name]).sum())}
    del ref, peer, out, peer_in, grads, ws, x, dt, B, Cm, dout
    torch.cuda.empty_cache()
    for b, L in ((4, 2048), (4, 4096), (1, 16384)):  # the shapes of issues 9 and 10
        x, dt, A, B, Cm, D, dt_bias = inputs(b, L, h, p, g, n, gen)
        dout = torch.randn(b, L, h, p, device="cuda", generator=gen).to(torch.bfloat16)
        grads = grad_buffers(x, dt, A, B, Cm, D, dt_bias)
        row = {"batch": b, "seqlen": L}
        for mode, key in ((0, "ssdgen_det_ms"), (1, "ssdgen_fast_ms")):
            row[key], row[key.replace("_ms", "_workspace_mib")] = ssdgen_backward_ms(
                ours, x, dt, A, B, Cm, Q, D, dt_bias, dout, grads, mode, iters, warmup)
        row["mamba_ssm_ms"] = mamba_backward_ms(mamba_chunk_scan_combined, x, dt, A, B, Cm, Q, D, dt_bias, dout,
                                                iters, warmup)
        res["speed"].append(row)
        del x, dt, B, Cm, dout, grads
        torch.cuda.empty_cache()
    return res


SMALL_PROBLEMS = (("small", 32, 64, 1, 64, 1, 512), ("small", 32, 64, 1, 64, 4, 2048),
                  ("nemotronh-56b", 256, 64, 8, 256, 1, 512))  # (preset, h, p, g, n, b, L); chunk 256


def small_section(ours, mamba_chunk_scan_combined, gen, iters, warmup, with_backward):
    """Issue 9's small problems (the `small` preset, nemotronh-56b at b=1 L=512), where the launches and
    the host path weigh most: the forward (return_final_states, as in the large shapes) and, unless
    forward-only, the backward, each against mamba_ssm on the same tensors."""
    rows = []
    Q = 256
    for preset, h, p, g, n, b, L in SMALL_PROBLEMS:
        x, dt, A, B, Cm, D, dt_bias = inputs(b, L, h, p, g, n, gen)
        row = {"preset": preset, "batch": b, "seqlen": L}
        row["fwd_ssdgen_ms"], row["fwd_mamba_ssm_ms"] = forward_ms(ours, mamba_chunk_scan_combined, x, dt, A, B, Cm,
                                                                   Q, D, dt_bias, iters, warmup)
        if with_backward:
            dout = torch.randn(b, L, h, p, device="cuda", generator=gen).to(torch.bfloat16)
            grads = grad_buffers(x, dt, A, B, Cm, D, dt_bias)
            row["bwd_ssdgen_ms"], _ = ssdgen_backward_ms(ours, x, dt, A, B, Cm, Q, D, dt_bias, dout, grads, 0, iters,
                                                         warmup)
            row["bwd_mamba_ssm_ms"] = mamba_backward_ms(mamba_chunk_scan_combined, x, dt, A, B, Cm, Q, D, dt_bias,
                                                        dout, iters, warmup)
            del grads, dout
        rows.append(row)
        del x, dt, B, Cm
        torch.cuda.empty_cache()
    return rows


def rel_l2(a, ref):
    a, ref = a.double(), ref.double()
    return float(torch.linalg.vector_norm(a - ref) / torch.linalg.vector_norm(ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--forward-only", action="store_true",
                    help="skip the backward section (mamba_ssm's backward autotuning takes minutes on a fresh machine)")
    args = ap.parse_args()
    sys.path.insert(0, args.peer)
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    ours = Ssdgen(args.lib)
    h, p, g, n, Q = 256, 64, 8, 256, 256  # nemotronh-56b
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    results = {"device": torch.cuda.get_device_name(), "preset": "nemotronh-56b", "speed": [], "accuracy": {}}

    # Accuracy: both against float64 on the same inputs.
    b, L = 1, 2048
    x, dt, A, B, Cm, D, dt_bias = inputs(b, L, h, p, g, n, gen)
    ref, ref_final = reference_fp64(x, dt, A, B, Cm, D, dt_bias, Q)
    peer_out, peer_final = mamba_chunk_scan_combined(x, dt, A, B, Cm, Q, D=D, z=None, dt_bias=dt_bias, dt_softplus=True,
                                                     return_final_states=True)
    out = torch.full_like(x, float("nan"))
    final = torch.full((b, h, p, n), float("nan"), device="cuda")
    a, ws = ours.prepare(x, dt, A, B, Cm, Q, D, dt_bias, out, final)
    ours.forward(a)
    torch.cuda.synchronize()
    results["accuracy"] = {"batch": b, "seqlen": L, "ssdgen_rel_l2": rel_l2(out, ref),
                           "mamba_ssm_rel_l2": rel_l2(peer_out, ref),
                           "ssdgen_final_rel_l2": rel_l2(final, ref_final),
                           "mamba_ssm_final_rel_l2": rel_l2(peer_final, ref_final),
                           "ssdgen_unwritten": int(torch.isnan(out).sum())}
    del ref, ref_final, peer_out, peer_final, out, final, ws, x, dt, B, Cm
    torch.cuda.empty_cache()

    for b, L in ((4, 2048), (4, 4096), (1, 16384)):  # the shapes of issues 9 and 10
        x, dt, A, B, Cm, D, dt_bias = inputs(b, L, h, p, g, n, gen)
        t_ours, t_peer = forward_ms(ours, mamba_chunk_scan_combined, x, dt, A, B, Cm, Q, D, dt_bias, args.iters,
                                    args.warmup)
        results["speed"].append({"batch": b, "seqlen": L, "ssdgen_ms": t_ours, "mamba_ssm_ms": t_peer})
        del x, dt, B, Cm
        torch.cuda.empty_cache()

    acc = results["accuracy"]
    print(f"forward, {results['preset']}, bf16, D, dt_bias, softplus, on {results['device']}")
    print(f"accuracy b={acc['batch']} L={acc['seqlen']} vs float64, rel L2 of out: ssdgen {acc['ssdgen_rel_l2']:.3e}, "
          f"mamba_ssm {acc['mamba_ssm_rel_l2']:.3e}; of final states: ssdgen {acc['ssdgen_final_rel_l2']:.3e}, "
          f"mamba_ssm {acc['mamba_ssm_final_rel_l2']:.3e} (ssdgen unwritten: {acc['ssdgen_unwritten']})")
    print(f"{'b':>3} {'L':>6} {'ssdgen ms':>10} {'mamba_ssm ms':>13} {'speedup':>8}")
    for r in results["speed"]:
        print(f"{r['batch']:>3} {r['seqlen']:>6} {r['ssdgen_ms']:>10.3f} {r['mamba_ssm_ms']:>13.3f} "
              f"{r['mamba_ssm_ms'] / r['ssdgen_ms']:>7.2f}x")

    results["small"] = small_section(ours, mamba_chunk_scan_combined, gen, args.iters, args.warmup,
                                     not args.forward_only)
    print("small problems (bf16, D, dt_bias, softplus; ms, median):")
    print(f"{'preset':>14} {'b':>3} {'L':>6} {'fwd ssdgen':>11} {'fwd mamba':>10} {'speedup':>8}"
          f" {'bwd ssdgen':>11} {'bwd mamba':>10} {'speedup':>8}")
    for r in results["small"]:
        line = (f"{r['preset']:>14} {r['batch']:>3} {r['seqlen']:>6} {r['fwd_ssdgen_ms']:>11.3f} "
                f"{r['fwd_mamba_ssm_ms']:>10.3f} {r['fwd_mamba_ssm_ms'] / r['fwd_ssdgen_ms']:>7.2f}x")
        if "bwd_ssdgen_ms" in r:
            line += (f" {r['bwd_ssdgen_ms']:>11.3f} {r['bwd_mamba_ssm_ms']:>10.3f} "
                     f"{r['bwd_mamba_ssm_ms'] / r['bwd_ssdgen_ms']:>7.2f}x")
        print(line)

    if args.forward_only:
        with open(os.path.join(args.out, "peer_bench.json"), "w") as f:
            json.dump(results, f, indent=1)
        return
    bwd = backward_section(ours, mamba_chunk_scan_combined, gen, max(args.iters // 2, 20), args.warmup, h, p, g, n, Q)
    results["backward"] = bwd
    print(f"backward, {results['preset']}, bf16, D, dt_bias, softplus: rel L2 vs float64 autograd (b=1 L=2048)")
    print(f"{'grad':>9} {'ssdgen':>10} {'mamba_ssm':>10} {'unwritten':>9}")
    for name, r in bwd["accuracy"].items():
        print(f"{name:>9} {r['ssdgen']:>10.3e} {r['mamba_ssm']:>10.3e} {r['ssdgen_unwritten']:>9}")
    print(f"{'b':>3} {'L':>6} {'ssdgen det ms':>14} {'ssdgen fast ms':>15} {'mamba_ssm ms':>13} {'det speedup':>12}"
          f" {'det workspace MiB':>18}")
    for r in bwd["speed"]:
        print(f"{r['batch']:>3} {r['seqlen']:>6} {r['ssdgen_det_ms']:>14.3f} {r['ssdgen_fast_ms']:>15.3f} "
              f"{r['mamba_ssm_ms']:>13.3f} {r['mamba_ssm_ms'] / r['ssdgen_det_ms']:>11.2f}x"
              f" {r.get('ssdgen_det_workspace_mib', float('nan')):>18.1f}")
    with open(os.path.join(args.out, "peer_bench.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
