"""The float64 oracle of the GPU tests (ssd_reference.chunked) against the naive recurrence, on the
CPU: outputs, final states and every gradient, for the option combinations the GPU tests use."""
import pytest
import torch

import ssd_reference

# b=2, L=10, Q=4 (last chunk has 2 valid tokens), h=4, g=2, p=3, n=5: the shape of math §9.
SHAPE = dict(b=2, L=10, Q=4, h=4, g=2, p=3, n=5)
# Row 0: a boundary inside chunk 1 (t=6); row 1: at a chunk edge (t=4) and inside the partial chunk (t=9).
SEQ_IDX = [[0, 0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1, 1, 2]]

CASES = {
    "plain": dict(),
    "all_options": dict(D="h", z=True, dt_bias=True, dt_softplus=True, initial_states=True, seq_idx=SEQ_IDX),
    "D_per_headdim": dict(D="hp", z=True, dt_bias=True, dt_softplus=True),
    "dt_limit_no_softplus": dict(dt_bias=True, dt_limit=(0.05, 0.9)),
    "initial_states_not_id0": dict(initial_states=True, seq_idx=[[1] * 10, [0, 0, 0, 2, 2, 2, 2, 2, 2, 2]],
                                   dt_softplus=True),
}


def make_inputs(case, gen):
    s = SHAPE
    b, L, h, g, p, n = s["b"], s["L"], s["h"], s["g"], s["p"], s["n"]
    f = torch.float64

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, dtype=f) * scale).requires_grad_(True)

    args = dict(x=rnd(b, L, h, p), dt=(torch.rand(b, L, h, generator=gen, dtype=f) * 1.5 - 0.5).requires_grad_(True),
                A=(-(torch.rand(h, generator=gen, dtype=f) * 2 + 0.5)).requires_grad_(True), B=rnd(b, L, g, n),
                C=rnd(b, L, g, n))
    kwargs = {}
    if case.get("D") == "h":
        kwargs["D"] = rnd(h)
    elif case.get("D") == "hp":
        kwargs["D"] = rnd(h, p)
    if case.get("z"):
        kwargs["z"] = rnd(b, L, h, p)
    if case.get("dt_bias"):
        kwargs["dt_bias"] = rnd(h, scale=0.5)
    if case.get("initial_states"):
        kwargs["initial_states"] = rnd(b, h, p, n)
    if "seq_idx" in case:
        kwargs["seq_idx"] = torch.tensor(case["seq_idx"], dtype=torch.int32)
    kwargs["dt_softplus"] = case.get("dt_softplus", False)
    kwargs["dt_limit"] = case.get("dt_limit", (0.0, float("inf")))
    return args, kwargs


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunked_matches_naive_recurrence(name):
    gen = torch.Generator().manual_seed(7)
    args, kwargs = make_inputs(CASES[name], gen)
    leaves = [t for t in list(args.values()) + list(kwargs.values()) if isinstance(t, torch.Tensor) and t.requires_grad]
    out_c, fin_c = ssd_reference.chunked(*args.values(), SHAPE["Q"], **kwargs)
    out_n, fin_n = ssd_reference.naive(*args.values(), SHAPE["Q"], **kwargs)
    torch.testing.assert_close(out_c, out_n, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(fin_c, fin_n, rtol=1e-10, atol=1e-10)
    dout = torch.randn(out_c.shape, generator=gen, dtype=torch.float64)
    dfin = torch.randn(fin_c.shape, generator=gen, dtype=torch.float64)
    g_c = torch.autograd.grad((out_c, fin_c), leaves, (dout, dfin))
    g_n = torch.autograd.grad((out_n, fin_n), leaves, (dout, dfin))
    for a, b in zip(g_c, g_n):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_initial_states_only_feed_sequence_id_zero():
    # With every token of row 0 in sequence 1, the initial state must not reach the output.
    gen = torch.Generator().manual_seed(3)
    args, kwargs = make_inputs(CASES["initial_states_not_id0"], gen)
    out, _ = ssd_reference.chunked(*args.values(), SHAPE["Q"], **kwargs)
    kwargs["initial_states"] = kwargs["initial_states"] * 2
    out2, _ = ssd_reference.chunked(*args.values(), SHAPE["Q"], **kwargs)
    torch.testing.assert_close(out[0], out2[0], rtol=0, atol=0)
    assert not torch.equal(out[1, :3], out2[1, :3])  # row 1 starts in sequence 0


def test_chunked_gradcheck():
    gen = torch.Generator().manual_seed(11)
    f = torch.float64
    b, L, h, g, p, n, Q = 1, 6, 2, 1, 2, 3, 4
    x = torch.randn(b, L, h, p, generator=gen, dtype=f, requires_grad=True)
    dt = (torch.rand(b, L, h, generator=gen, dtype=f) + 0.1).requires_grad_(True)
    A = (-torch.rand(h, generator=gen, dtype=f) - 0.5).requires_grad_(True)
    B = torch.randn(b, L, g, n, generator=gen, dtype=f, requires_grad=True)
    C = torch.randn(b, L, g, n, generator=gen, dtype=f, requires_grad=True)
    D = torch.randn(h, generator=gen, dtype=f, requires_grad=True)
    init = torch.randn(b, h, p, n, generator=gen, dtype=f, requires_grad=True)

    def fn(x, dt, A, B, C, D, init):
        return ssd_reference.chunked(x, dt, A, B, C, Q, D=D, initial_states=init, dt_softplus=True)

    assert torch.autograd.gradcheck(fn, (x, dt, A, B, C, D, init))
