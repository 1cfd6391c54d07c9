#!/usr/bin/env python3
"""Where one call's GPU time goes between its kernels: ssd_forward (a launch graph) and mamba_ssm's
forward on the same tensors, each replayed under torch.profiler (CUPTI kernel records, graph nodes
included). Per kernel, median over the replays: its start and end after the call's first kernel
started, and its duration; then the call's span (first start to last end) and the idle time inside it.

  python3 scripts/timeline.py --lib .gl/libssdgen.so --peer .peer/mamba [--batch 4 --seqlen 2048]

Why: `bench fwd` times each stage alone (eager, events between them); peer_bench times whole calls.
Neither says whether the graph's parallel branch (bmm_chunk_fwd beside the cumsum and the state pass)
is off the critical path, nor how long the gaps and tails between kernels are.
"""
import argparse
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_bench  # noqa: E402  (its ctypes wrapper and input generator)


def kernel_events(prof):
    evs = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0:
            evs.append((e.time_range.start, e.time_range.end, e.name))
    evs.sort()
    return evs


def split_calls(evs, per_call):
    """The kernels of consecutive calls, per_call kernels each (the calls are separated by a sync)."""
    return [evs[i:i + per_call] for i in range(0, len(evs) - per_call + 1, per_call)]


def report(label, calls):
    if not calls:
        print(f"{label}: no kernel records")
        return
    n = len(calls[0])
    print(f"{label}: {len(calls)} calls, {n} kernels each (µs after the call's first kernel start; median)")
    print(f"  {'kernel':<44} {'start':>8} {'end':>8} {'dur':>8}")
    for k in range(n):
        name = calls[0][k][2]
        start = statistics.median(c[k][0] - c[0][0] for c in calls)
        end = statistics.median(c[k][1] - c[0][0] for c in calls)
        dur = statistics.median(c[k][1] - c[k][0] for c in calls)
        print(f"  {name[:44]:<44} {start:>8.1f} {end:>8.1f} {dur:>8.1f}")
    spans = [max(e[1] for e in c) - c[0][0] for c in calls]
    busy = []
    for c in calls:
        # Union of the kernels' intervals: the time some kernel of the call ran.
        iv = sorted((e[0], e[1]) for e in c)
        tot, cs, ce = 0.0, iv[0][0], iv[0][1]
        for s, e in iv[1:]:
            if s > ce:
                tot += ce - cs
                cs, ce = s, e
            else:
                ce = max(ce, e)
        busy.append(tot + ce - cs)
    print(f"  span {statistics.median(spans):.1f} µs, some kernel running {statistics.median(busy):.1f} µs, "
          f"idle inside the span {statistics.median(s - b for s, b in zip(spans, busy)):.1f} µs")


def trace(fn, calls, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
            torch.cuda.synchronize()
    return kernel_events(prof)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--backward", action="store_true", help="also ssd_backward (deterministic, its recompute included)")
    args = ap.parse_args()
    sys.path.insert(0, args.peer)
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    ours = peer_bench.Ssdgen(args.lib)
    h, p, g, n, Q = 256, 64, 8, 256, 256  # nemotronh-56b
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    x, dt, A, B, Cm, D, dt_bias = peer_bench.inputs(args.batch, args.seqlen, h, p, g, n, gen)
    out = torch.empty_like(x)
    final = torch.empty(args.batch, h, p, n, device="cuda")
    a, ws = ours.prepare(x, dt, A, B, Cm, Q, D, dt_bias, out, final)

    print(f"nemotronh-56b b={args.batch} L={args.seqlen}, bf16, D, dt_bias, softplus")
    for label, fn in (("ssd_forward", lambda: ours.forward(a)),
                      ("mamba_ssm forward", lambda: mamba_chunk_scan_combined(
                          x, dt, A, B, Cm, Q, D=D, z=None, dt_bias=dt_bias, dt_softplus=True,
                          return_final_states=True))):
        one = trace(fn, 1, 3)
        evs = trace(fn, args.calls, 3)
        report(label, split_calls(evs, len(one)))
    if args.backward:
        dout = torch.randn_like(x)
        grads = peer_bench.grad_buffers(x, dt, A, B, Cm, D, dt_bias)
        ba, bws = ours.prepare_backward(x, dt, A, B, Cm, Q, D, dt_bias, dout, grads, 0)
        fn = lambda: ours.backward(ba, bws)  # noqa: E731
        one = trace(fn, 1, 3)
        report("ssd_backward (deterministic)", split_calls(trace(fn, args.calls, 3), len(one)))


if __name__ == "__main__":
    main()
