"""What ssdgen.torch.mamba_chunk_scan_combined refuses, and that each error names the argument.
NotImplementedError: valid for mamba_ssm, not served by ssdgen; TypeError / ValueError: the
arguments contradict each other. Checked on meta tensors (no GPU)."""
import os
import subprocess
import sys

import pytest
import torch

import ssdgen.torch as st
from ssdgen.torch import mamba_chunk_scan_combined

b, L, h, p, g, n = 2, 100, 4, 64, 2, 64
bf16 = torch.bfloat16


def inputs(dtype=bf16, p_=p, n_=n, g_=g, h_=h, device="meta"):
    return dict(x=torch.empty(b, L, h_, p_, dtype=dtype, device=device),
                dt=torch.empty(b, L, h_, device=device), A=torch.empty(h_, device=device),
                B=torch.empty(b, L, g_, n_, dtype=dtype, device=device),
                C=torch.empty(b, L, g_, n_, dtype=dtype, device=device), chunk_size=128)


def call(**overrides):
    kw = inputs()
    kw.update(overrides)
    return mamba_chunk_scan_combined(**kw)


def refuses(error, pattern, **overrides):
    with pytest.raises(error, match=pattern):
        call(**overrides)


def test_valid_call_passes():
    assert call().shape == (b, L, h, p)


def test_float32_inputs_refused():
    refuses(NotImplementedError, r"^x: float32 inputs are not supported", **inputs(dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_other_x_dtypes_refused(dtype):
    refuses(TypeError, r"^x: dtype torch\.(float64|int32) is not supported", **inputs(dtype=dtype))


@pytest.mark.parametrize("chunk", [16, 32, 48, 512])
def test_chunk_size_refused(chunk):
    refuses(NotImplementedError, r"^chunk_size: %d is not supported by ssdgen \(supported: 64, 128, 256\)" % chunk,
            chunk_size=chunk)


def test_chunk_size_type():
    refuses(TypeError, r"^chunk_size: expected an int", chunk_size=128.0)
    refuses(TypeError, r"^chunk_size: expected an int", chunk_size=True)


@pytest.mark.parametrize("headdim", [16, 48, 80, 256])
def test_headdim_refused(headdim):
    refuses(NotImplementedError, r"^x: headdim %d is not supported by ssdgen \(supported: 32, 64, 128\)" % headdim,
            **inputs(p_=headdim))


@pytest.mark.parametrize("dstate", [8, 24, 96, 512])
def test_dstate_refused(dstate):
    refuses(NotImplementedError, r"^B: dstate %d is not supported by ssdgen \(supported: 16, 32, 64, 128, 256\)"
            % dstate, **inputs(n_=dstate))


def test_heads_per_group_limit():
    refuses(NotImplementedError, r"^B: nheads / ngroups = 2048 heads per group", **inputs(h_=2048, g_=1))


def test_ngroups_must_divide_nheads():
    refuses(ValueError, r"^B: ngroups 3 must divide nheads 4", **inputs(g_=3))


def test_return_varlen_states_refused():
    refuses(NotImplementedError, r"^return_varlen_states: not supported", return_varlen_states=True,
            cu_seqlens=torch.tensor([0, L], device="meta"))


def test_cu_seqlens_alone_is_accepted():
    # mamba_ssm's Mamba2 passes cu_seqlens in training without return_varlen_states; it changes nothing.
    assert call(cu_seqlens=torch.tensor([0, 40, L], device="meta")).shape == (b, L, h, p)


def test_state_dtype():
    assert call(state_dtype=bf16).shape == (b, L, h, p)
    refuses(NotImplementedError, r"^state_dtype: torch\.float32 is not supported", state_dtype=torch.float32)


@pytest.mark.parametrize("name,shape,pattern", [
    ("dt", (b, L, h + 1), r"^dt: shape"),
    ("A", (h, 1), r"^A: shape"),
    ("C", (b, L, g, n // 2), r"^C: shape"),
    ("D", (h, p, 1), r"^D: shape .* is neither"),
    ("z", (b, L, h, p // 2), r"^z: shape"),
    ("dt_bias", (h + 1,), r"^dt_bias: shape"),
    ("initial_states", (b, h + 1, p, n), r"^initial_states: shape"),
])
def test_shape_mismatch_names_the_argument(name, shape, pattern):
    dtype = bf16 if name in ("C", "z") else torch.float32
    refuses(ValueError, pattern, **{name: torch.empty(*shape, dtype=dtype, device="meta")})


def test_seq_idx_shape_and_dtype():
    refuses(ValueError, r"^seq_idx: shape", seq_idx=torch.zeros(b, L + 1, dtype=torch.int32, device="meta"))
    refuses(TypeError, r"^seq_idx: dtype torch\.float32 is not an integer dtype",
            seq_idx=torch.zeros(b, L, device="meta"))


@pytest.mark.parametrize("name", ["B", "C", "z"])
def test_activation_dtype_must_match_x(name):
    shape = (b, L, h, p) if name == "z" else (b, L, g, n)
    refuses(TypeError, r"^%s: dtype torch\.float16 differs from x's torch\.bfloat16" % name,
            **{name: torch.empty(*shape, dtype=torch.float16, device="meta")})


def test_integer_dt_refused():
    refuses(TypeError, r"^dt: dtype torch\.int32 is not a floating-point dtype",
            dt=torch.zeros(b, L, h, dtype=torch.int32, device="meta"))


def test_non_tensor_refused():
    refuses(TypeError, r"^B: expected a torch\.Tensor, got list", B=[1, 2])


def test_rank_refused():
    refuses(ValueError, r"^x: expected 4 dimensions", x=torch.empty(b, L, h * p, dtype=bf16, device="meta"))


def test_empty_dimension_refused():
    kw = inputs()
    kw["x"] = torch.empty(b, 0, h, p, dtype=bf16, device="meta")
    with pytest.raises(ValueError, match=r"^x: every dimension must be at least 1"):
        mamba_chunk_scan_combined(**kw)


def test_cpu_tensors_refused():
    kw = inputs(device="cpu")
    with pytest.raises(ValueError, match=r"^x: on cpu; ssdgen runs on CUDA devices"):
        mamba_chunk_scan_combined(**kw)


def test_mixed_devices_refused():
    refuses(ValueError, r"^A: on cpu, x on meta", A=torch.empty(h))


@pytest.mark.parametrize("limit,error,pattern", [
    ((1.0, 0.5), ValueError, r"^dt_limit: \(1\.0, 0\.5\) must be ordered"),
    ((float("nan"), 1.0), ValueError, r"^dt_limit: \(nan, 1\.0\) must be ordered"),
    (3.0, TypeError, r"^dt_limit: expected a pair of numbers"),
])
def test_dt_limit(limit, error, pattern):
    refuses(error, pattern, dt_limit=limit)


def test_deterministic_env_is_validated(monkeypatch):
    # Import fails on a bad value (one fresh interpreter: the variable is read at import) ...
    env = dict(os.environ, SSDGEN_DETERMINISTIC="maybe")
    r = subprocess.run([sys.executable, "-c", "import ssdgen.torch"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "SSDGEN_DETERMINISTIC='maybe': expected 1" in r.stderr
    # ... and the values it accepts, through the function that import calls.
    for value, fast in (("0", True), ("off", True), ("", False), ("1", False), (" TRUE ", False)):
        monkeypatch.setenv("SSDGEN_DETERMINISTIC", value)
        assert st._parse_deterministic_env() is fast, value
    monkeypatch.setenv("SSDGEN_DETERMINISTIC", "2")
    with pytest.raises(ImportError, match=r"^SSDGEN_DETERMINISTIC='2': expected 1"):
        st._parse_deterministic_env()


def test_mode_reaches_the_operator():
    # deterministic=False is the op's `fast` argument (the last but one), as is SSDGEN_DETERMINISTIC=0.
    # The last one, prepare_backward, says whether a gradient will follow (inputs that require it,
    # grad mode on): then the first call builds the backward's kernels too.
    from torch.fx.experimental.proxy_tensor import make_fx
    kw = inputs()
    x, dt, A, B, C = kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"]
    for deterministic, fast in ((True, False), (False, True)):
        gm = make_fx(lambda x, dt, A, B, C: mamba_chunk_scan_combined(x, dt, A, B, C, 64, deterministic=deterministic))(
            x, dt, A, B, C)
        node = next(nd for nd in gm.graph.nodes if str(nd.target) == "ssdgen.chunk_scan_combined_fwd.default")
        assert node.args[-2] is fast
        assert node.args[-1] is False  # nothing requires a gradient
    seen = []
    x_grad = x.detach().requires_grad_()
    for grad_mode, expected in ((True, True), (False, False)):
        with torch.set_grad_enabled(grad_mode):
            gm = make_fx(lambda x, dt, A, B, C: mamba_chunk_scan_combined(x, dt, A, B, C, 64))(x_grad, dt, A, B, C)
        node = next(nd for nd in gm.graph.nodes if str(nd.target) == "ssdgen.chunk_scan_combined_fwd.default")
        seen.append(node.args[-1])
    assert seen == [True, False], seen
    assert st._FAST_FROM_ENV is (os.environ.get("SSDGEN_DETERMINISTIC", "1") == "0")
