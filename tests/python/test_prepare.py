"""ssdgen.torch.prepare: every kernel of a call built ahead of it, in parallel, without a GPU, in a
Python process that has imported PyTorch (the in-process JIT: NVRTC runs inside this process).
Needs a library with ssd_forward_prepare; without one the tests are skipped with that reason."""
import pytest
import torch

import ssdgen
from ssdgen import _capi
import ssdgen.torch as st

needs_prepare = pytest.mark.skipif(not _capi.has_prepare(ssdgen.library),
                                   reason="the library has no ssd_forward_prepare / ssd_backward_prepare")

def prepare_small():
    b, L, h, g, p, n = 1, 100, 4, 2, 32, 16
    m = dict(device="meta")
    x = torch.empty(b, L, h, p, dtype=torch.bfloat16, **m)
    B = torch.empty(b, L, g, n, dtype=torch.bfloat16, **m)
    return st.prepare(x, torch.empty(b, L, h, **m), torch.empty(h, **m), B, B, 64, D=torch.empty(h, **m),
                      z=torch.empty_like(x), dt_bias=torch.empty(h, **m), dt_softplus=True, arch="sm_90a")


@pytest.fixture
def fresh_runtimes(tmp_path, monkeypatch):
    """A new process runtime on an empty cache of its own (the package's runtime is created on first
    use from SSD_CACHE_DIR); the test's own runtime is put back afterwards."""
    monkeypatch.setenv("SSD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SSD_CACHE_MODE", "readwrite")
    saved = ssdgen._runtime
    ssdgen._runtime = None
    yield
    ssdgen._runtime = saved


@needs_prepare
def test_prepare_compiles_in_process_then_reads_the_cache(fresh_runtimes):
    # This pytest process has imported PyTorch: NVRTC compiles inside it (the crash of issue 13).
    first = prepare_small()
    ssdgen._runtime = None  # a new runtime, as in a restarted process: it knows only the disk cache
    second = prepare_small()
    for kind in ("forward", "backward"):
        f = first[kind]
        assert f["kernels"] > 0
        # An empty cache: NVRTC in this process. The two lists are built at once and share kernels:
        # each shared one is compiled by one list and found in memory by the other.
        assert f["from_disk"] == 0 and f["compiled"] + f["from_memory"] == f["kernels"], f
    compiled = first["forward"]["compiled"] + first["backward"]["compiled"]
    assert compiled >= max(first["forward"]["kernels"], first["backward"]["kernels"])
    for kind in ("forward", "backward"):  # the new runtime: everything from the disk cache
        s = second[kind]
        assert s["compiled"] == 0 and s["from_disk"] + s["from_memory"] == s["kernels"], s
    # Each kernel was compiled once and stored once: the new runtime reads exactly those.
    assert second["forward"]["from_disk"] + second["backward"]["from_disk"] == compiled, (first, second)


@needs_prepare
def test_prepare_argument_errors():
    x = torch.empty(1, 64, 2, 32, dtype=torch.bfloat16, device="meta")
    B = torch.empty(1, 64, 1, 16, dtype=torch.bfloat16, device="meta")
    dt, A = torch.empty(1, 64, 2, device="meta"), torch.empty(2, device="meta")
    with pytest.raises(ValueError, match=r"^arch: required for tensors on meta"):
        st.prepare(x, dt, A, B, B, 64)
    with pytest.raises(ValueError, match=r"^arch: 'sm_75'"):
        st.prepare(x, dt, A, B, B, 64, arch="sm_75")
    with pytest.raises(ValueError, match=r"^jobs: -1"):
        st.prepare(x, dt, A, B, B, 64, arch="sm_80", jobs=-1)
    with pytest.raises(NotImplementedError, match=r"^chunk_size: 32"):
        st.prepare(x, dt, A, B, B, 32, arch="sm_80")


def test_prepare_without_library_support(monkeypatch):
    monkeypatch.setattr(st, "_HAS_PREPARE", False)
    x = torch.empty(1, 64, 2, 32, dtype=torch.bfloat16, device="meta")
    B = torch.empty(1, 64, 1, 16, dtype=torch.bfloat16, device="meta")
    with pytest.raises(NotImplementedError, match=r"^prepare: the loaded library .* has no ssd_forward_prepare"):
        st.prepare(x, torch.empty(1, 64, 2, device="meta"), torch.empty(2, device="meta"), B, B, 64, arch="sm_80")
