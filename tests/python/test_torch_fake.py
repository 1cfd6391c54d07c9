"""ssdgen.torch without a GPU: the fake implementations (shapes, dtypes, strides under
FakeTensorMode with CUDA tensors), the autograd formula traced on meta tensors (the gradients'
shapes and dtypes are the inputs'), and torch.compile(fullgraph=True) tracing it with no graph break."""
import itertools

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from ssdgen.torch import mamba_chunk_scan_combined

b, L, h, p, g, n = 2, 300, 8, 64, 2, 128  # L not a multiple of any chunk size: a partial last chunk
bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32


def make(device, dtype=bf16, dt_dtype=f32, D=None, z=False, dt_bias=False, init_dtype=None, seq_idx=False,
         requires_grad=False):
    def t(*shape, dt=dtype):
        return torch.empty(*shape, dtype=dt, device=device, requires_grad=requires_grad)

    args = [t(b, L, h, p), t(b, L, h, dt=dt_dtype), t(h, dt=f32), t(b, L, g, n), t(b, L, g, n)]
    kw = {}
    if D == "h":
        kw["D"] = t(h, dt=f32)
    elif D == "hp":
        kw["D"] = t(h, p, dt=f32)
    if z:
        kw["z"] = t(b, L, h, p)
    if dt_bias:
        kw["dt_bias"] = t(h, dt=f32)
    if init_dtype is not None:
        kw["initial_states"] = t(b, h, p, n, dt=init_dtype)
    if seq_idx:
        kw["seq_idx"] = torch.zeros(b, L, dtype=torch.int32, device=device)
    return args, kw


OPTIONS = list(itertools.product([None, "h", "hp"], [False, True], [False, True], [None, f32], [False, True]))


@pytest.mark.parametrize("dtype", [bf16, f16])
@pytest.mark.parametrize("return_final_states", [False, True])
def test_fake_forward_outputs(dtype, return_final_states):
    with FakeTensorMode():
        for D, z, dt_bias, init, seq in OPTIONS:
            args, kw = make("cuda", dtype=dtype, D=D, z=z, dt_bias=dt_bias, init_dtype=init, seq_idx=seq)
            res = mamba_chunk_scan_combined(*args, 128, **kw, dt_softplus=True,
                                            return_final_states=return_final_states)
            out, final = res if return_final_states else (res, None)
            assert out.shape == (b, L, h, p) and out.dtype == dtype and out.device.type == "cuda"
            assert out.is_contiguous()
            if return_final_states:
                assert final.shape == (b, h, p, n) and final.dtype == f32 and final.is_contiguous()
            else:
                assert isinstance(res, torch.Tensor)


def test_fake_op_outputs_directly():
    # The operators themselves: out_x exists only with z; final_states only when asked for.
    with FakeTensorMode():
        args, kw = make("cuda", z=True, D="hp", dt_bias=True, init_dtype=f32)
        x, dt, A, B, C = args
        out, out_x, final = torch.ops.ssdgen.chunk_scan_combined_fwd(
            x, dt, A, B, C, kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"], None, 256, True, 0.0,
            float("inf"), False, False, True)
        assert out_x.shape == (b, L, h, p) and final.shape == (0,) and final.dtype == f32
        grads = torch.ops.ssdgen.chunk_scan_combined_bwd(
            out, None, x, dt, A, B, C, kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"], None, out_x, 256, True,
            0.0, float("inf"), False)
        shapes = [tuple(t.shape) for t in grads]
        assert shapes == [(b, L, h, p), (b, L, h), (h,), (b, L, g, n), (b, L, g, n), (h, p), (b, L, h, p), (h,),
                          (b, h, p, n)]
        assert [t.dtype for t in grads] == [bf16, f32, f32, bf16, bf16, f32, bf16, f32, f32]
        _, _, _, _, _, dD, dz, ddt_bias, dinit = torch.ops.ssdgen.chunk_scan_combined_bwd(
            out, None, x, dt, A, B, C, None, None, None, None, None, None, 256, True, 0.0, float("inf"), True)
        assert dD.numel() == dz.numel() == ddt_bias.numel() == dinit.numel() == 0


@pytest.mark.parametrize("dt_dtype,init_dtype", [(f32, f32), (bf16, bf16), (f16, torch.float64), (torch.float64, f16)])
def test_gradients_have_the_inputs_dtypes(dt_dtype, init_dtype):
    # Meta tensors run the fake implementations, autograd included, on the CPU.
    args, kw = make("meta", dt_dtype=dt_dtype, D="h", z=True, dt_bias=True, init_dtype=init_dtype, requires_grad=True)
    args[2] = args[2].detach().to(f16).requires_grad_(True)  # A in half: converted, its gradient back in half
    out, final = mamba_chunk_scan_combined(*args, 64, **kw, dt_softplus=True, return_final_states=True)
    leaves = args + [kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"]]
    grads = torch.autograd.grad((out, final), leaves, (torch.ones_like(out), torch.ones_like(final)))
    for leaf, grad in zip(leaves, grads):
        assert grad.shape == leaf.shape and grad.dtype == leaf.dtype


def test_trace_has_the_two_operators_only():
    args, kw = make("meta", D="hp", z=True, dt_bias=True, init_dtype=bf16, seq_idx=True, requires_grad=True)
    kw["seq_idx"] = kw["seq_idx"].long()

    def step(x, dt, A, B, C, D, z, dt_bias, init, seq_idx, dout, dfinal):
        out, final = mamba_chunk_scan_combined(x, dt, A, B, C, 128, D=D, z=z, dt_bias=dt_bias, initial_states=init,
                                               seq_idx=seq_idx, dt_softplus=True, return_final_states=True)
        return (out, final) + torch.autograd.grad((out, final), (x, dt, A, B, C, D, z, dt_bias, init), (dout, dfinal))

    inputs = args + [kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"], kw["seq_idx"],
                     torch.empty(b, L, h, p, dtype=bf16, device="meta"), torch.empty(b, h, p, n, device="meta")]
    gm = make_fx(step, tracing_mode="fake")(*inputs)
    targets = [str(node.target) for node in gm.graph.nodes if node.op == "call_function"]
    assert targets.count("ssdgen.chunk_scan_combined_fwd.default") == 1
    assert targets.count("ssdgen.chunk_scan_combined_bwd.default") == 1
    # seq_idx int64 -> int32 and the bf16 initial_states -> fp32 (and its gradient back) are the only copies.
    assert targets.count("aten._to_copy.default") == 3


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_no_graph_break(backend):
    torch._dynamo.reset()
    args, kw = make("meta", D="h", z=True, dt_bias=True, init_dtype=f32, seq_idx=True, requires_grad=True)

    def loss_fn(x, dt, A, B, C, D, z, dt_bias, init, seq_idx):
        out, final = mamba_chunk_scan_combined(x, dt, A, B, C, 256, D=D, z=z, dt_bias=dt_bias, initial_states=init,
                                               seq_idx=seq_idx, dt_softplus=True, dt_limit=(0.0, 8.0),
                                               return_final_states=True, deterministic=False)
        return out.float().square().sum() + final.sum()

    inputs = args + [kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"], kw["seq_idx"]]
    compiled = torch.compile(loss_fn, fullgraph=True, backend=backend)
    loss = compiled(*inputs)
    loss.backward()
    for leaf in inputs[:9]:
        assert leaf.grad is not None and leaf.grad.shape == leaf.shape
    explanation = torch._dynamo.explain(loss_fn)(*inputs)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


def test_opcheck_on_meta():
    # torch.library.opcheck runs both operators through their fake implementations (meta tensors):
    # schema (no mutation, no aliasing), autograd registration, fake tensors, AOT dispatch with
    # dynamic shapes (the backward formula traced).
    args, kw = make("meta", D="hp", z=True, dt_bias=True, init_dtype=f32, seq_idx=True, requires_grad=True)
    x, dt, A, B, C = args
    fwd = (x, dt, A, B, C, kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"], kw["seq_idx"], 64, True, 0.0,
           float("inf"), True, False, True)
    result = torch.library.opcheck(torch.ops.ssdgen.chunk_scan_combined_fwd.default, fwd)
    assert set(result.values()) == {"SUCCESS"}, result
    d = [t.detach() for t in (x, dt, A, B, C, kw["D"], kw["z"], kw["dt_bias"], kw["initial_states"])]
    bwd = (torch.empty(b, L, h, p, dtype=bf16, device="meta"), torch.empty(b, h, p, n, device="meta"), *d,
           kw["seq_idx"], torch.empty(b, L, h, p, dtype=bf16, device="meta"), 64, True, 0.0, float("inf"), False)
    result = torch.library.opcheck(torch.ops.ssdgen.chunk_scan_combined_bwd.default, bwd)
    assert set(result.values()) == {"SUCCESS"}, result
