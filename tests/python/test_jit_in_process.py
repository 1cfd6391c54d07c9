"""The in-process JIT regression test (issue 13): a Python process loads build/libssdgen.so with
ctypes and JIT-compiles kernels through the library (ssd_forward_prepare / ssd_backward_prepare,
NVRTC, empty caches), with no GPU. Before the fix, the library's std::regex (the ptxas report
parser) crashed such a process on the device machine; see docs/perf.md, "The in-process JIT crash".

Run by ctest (test `python_jit`) and so by scripts/test.sh and CI:
    python3 -m pytest tests/python/test_jit_in_process.py      (SSD_LIBRARY=... to pick the .so)
"""
import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ssd_ctypes as ssd  # noqa: E402

SM90A = ssd.ARCHS["sm_90a"]
SM80 = ssd.ARCHS["sm_80"]
SSD_ERROR_INVALID_ARGUMENT = 1
SSD_ERROR_INVALID_SHAPE = 3
# Small shapes keep NVRTC quick; the kernels are the real ones (every stage, every option).
SMALL = dict(b=1, L=96, h=4, p=32, g=1, n=16, chunk_size=64)


@pytest.fixture(scope="module")
def lib():
    path = ssd.default_library_path()
    assert os.path.exists(path), "libssdgen.so not built: %s (cmake --build build)" % path
    return ssd.load(path)


def runtime(lib, cache_dir, mode=0):
    o = ssd.RuntimeOptions()
    lib.ssd_runtime_options_init(ctypes.byref(o))
    o.mode = mode
    o.cache_dir = str(cache_dir).encode()
    o.cache_mode = 0  # readwrite, whatever SSD_CACHE_MODE says
    rt = ctypes.c_void_p()
    ssd.check(lib, lib.ssd_runtime_create(ctypes.byref(o), ctypes.byref(rt)), "ssd_runtime_create")
    return rt


def options(lib, arch=SM90A, mode=-1, jobs=0):
    o = ssd.PrepareOptions()
    lib.ssd_prepare_options_init(ctypes.byref(o))
    o.arch, o.mode, o.jobs = arch, mode, jobs
    return o


def prepare(lib, which, rt, args, opts):
    report = ssd.PrepareReport()
    report.struct_size = ctypes.sizeof(report)
    fn = lib.ssd_forward_prepare if which == "forward" else lib.ssd_backward_prepare
    ssd.check(lib, fn(rt, ctypes.byref(args), ctypes.byref(opts), ctypes.byref(report)), "ssd_%s_prepare" % which)
    return report


def entries(cache_dir):
    return sum(len(files) for _, _, files in os.walk(cache_dir))


def test_library_exports_only_the_c_api():
    """No libstdc++ instantiation (std::regex and its locale users before the fix) leaves the
    library, and it imports no ctype/collate facet: nothing for a host process to interpose."""
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to read the dynamic symbol table"
    path = ssd.default_library_path()
    defined = subprocess.run([nm, "-D", "--defined-only", path], check=True, capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in defined.splitlines() if line.strip()]
    assert names, "no dynamic symbols read from %s" % path
    assert [n for n in names if not n.startswith("ssd_")] == []
    for api in ("ssd_forward_prepare", "ssd_backward_prepare", "ssd_prepare_options_init", "ssd_forward"):
        assert api in names
    undefined = subprocess.run([nm, "-D", "--undefined-only", "-C", path], check=True, capture_output=True,
                               text=True).stdout
    for needle in ("regex", "ctype<char>", "collate<char>"):
        assert needle not in undefined, needle


def test_forward_and_backward_compile_in_process_with_an_empty_cache(lib, tmp_path):
    cache = tmp_path / "cache"
    fwd, bwd = ssd.shape_args(lib, D=True, z=True, dt_bias=True, dt_softplus=True, **SMALL)
    rt = runtime(lib, cache)
    try:
        first = prepare(lib, "forward", rt, fwd, options(lib))
        assert (first.kernels, first.compiled, first.from_disk, first.from_memory) == (4, 4, 0, 0)
        assert first.seconds > 0
        back = prepare(lib, "backward", rt, bwd, options(lib))
        # The recompute's cumsum and bmm are the forward's: already in memory (its state pass keeps
        # P in fp32, another specialization than the forward's).
        assert back.from_memory == 2
        assert back.compiled == back.kernels - 2 >= 10
        again = prepare(lib, "backward", rt, bwd, options(lib))
        assert (again.compiled, again.from_memory) == (0, back.kernels)
    finally:
        lib.ssd_runtime_destroy(rt)
    assert entries(cache) >= first.kernels + back.compiled
    # A new runtime (a restarted process) finds everything on disk.
    rt = runtime(lib, cache)
    try:
        warm = prepare(lib, "backward", rt, bwd, options(lib))
        assert (warm.compiled, warm.from_disk) == (0, warm.kernels)
    finally:
        lib.ssd_runtime_destroy(rt)


def test_prepare_without_a_runtime_uses_the_environments_cache(lib, tmp_path, monkeypatch):
    monkeypatch.setenv("SSD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SSD_CACHE_MODE", raising=False)
    fwd, _ = ssd.shape_args(lib, seq_idx=True, initial_states=True, **SMALL)
    cold = prepare(lib, "forward", None, fwd, options(lib, arch=SM80, mode=1, jobs=2))
    assert (cold.kernels, cold.compiled) == (4, 4)
    warm = prepare(lib, "forward", None, fwd, options(lib, arch=SM80, mode=1, jobs=2))
    assert (warm.compiled, warm.from_disk) == (0, 4)


def test_compiles_from_python_threads(lib, tmp_path):
    """Host frameworks call from their own threads; every thread's compile must work."""
    errors = []
    reports = []

    def work(p):
        try:
            rt = runtime(lib, tmp_path / ("t%d" % p))
            try:
                fwd, _ = ssd.shape_args(lib, **dict(SMALL, p=p))
                reports.append(prepare(lib, "forward", rt, fwd, options(lib, jobs=1)))
            finally:
                lib.ssd_runtime_destroy(rt)
        except Exception as e:  # reported below, with the thread's message
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(p,)) for p in (64, 128)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [r.compiled for r in reports] == [4, 4]


def test_errors_name_the_field(lib, tmp_path):
    rt = runtime(lib, tmp_path)
    try:
        fwd, _ = ssd.shape_args(lib, **dict(SMALL, n=24))
        report = ssd.PrepareReport()
        report.struct_size = ctypes.sizeof(report)
        status = lib.ssd_forward_prepare(rt, ctypes.byref(fwd), ctypes.byref(options(lib)), ctypes.byref(report))
        assert status == SSD_ERROR_INVALID_SHAPE
        assert lib.ssd_last_error_detail().decode().startswith("B: dstate 24")
        fwd, _ = ssd.shape_args(lib, **SMALL)
        status = lib.ssd_forward_prepare(rt, ctypes.byref(fwd), ctypes.byref(options(lib, arch=75)), None)
        assert status == SSD_ERROR_INVALID_ARGUMENT
        assert lib.ssd_last_error_detail().decode().startswith("options.arch: 75")
        report.struct_size = 8
        status = lib.ssd_forward_prepare(rt, ctypes.byref(fwd), ctypes.byref(options(lib)), ctypes.byref(report))
        assert status == SSD_ERROR_INVALID_ARGUMENT
        assert lib.ssd_last_error_detail().decode().startswith("report.struct_size: 8")
        fwd.struct_size = 16  # (options NULL: arch 0 would need a device, but the arguments come first)
        status = lib.ssd_forward_prepare(rt, ctypes.byref(fwd), None, None)
        assert status == SSD_ERROR_INVALID_ARGUMENT
        assert lib.ssd_last_error_detail().decode().startswith("args.struct_size: 16")
    finally:
        lib.ssd_runtime_destroy(rt)


def test_prepare_never_touches_the_driver(tmp_path):
    """Prepare with an explicit arch, then destroy the runtimes: libssdgen.so never even looks
    libcuda up (LD_DEBUG=files names the object behind every dlopen; NVRTC 13 opens libcuda.so.1
    itself while compiling, which is not ours to change)."""
    script = tmp_path / "nodriver.py"
    script.write_text(textwrap.dedent("""
        import ctypes, sys
        sys.path.insert(0, {here!r})
        import ssd_ctypes as ssd
        lib = ssd.load()
        fwd, _ = ssd.shape_args(lib, b=1, L=64, h=2, p=32, g=1, n=16, chunk_size=64)
        o = ssd.PrepareOptions(); lib.ssd_prepare_options_init(ctypes.byref(o)); o.arch = 901
        ssd.check(lib, lib.ssd_forward_prepare(None, ctypes.byref(fwd), ctypes.byref(o), None), "prepare")
        ro = ssd.RuntimeOptions(); lib.ssd_runtime_options_init(ctypes.byref(ro)); ro.cache_dir = sys.argv[1].encode()
        rt = ctypes.c_void_p()
        ssd.check(lib, lib.ssd_runtime_create(ctypes.byref(ro), ctypes.byref(rt)), "runtime")
        ssd.check(lib, lib.ssd_forward_prepare(rt, ctypes.byref(fwd), ctypes.byref(o), None), "prepare")
        lib.ssd_runtime_destroy(rt)
        print("prepared")
    """).format(here=HERE))
    env = dict(os.environ, SSD_CACHE_DIR=str(tmp_path / "env-cache"), SSD_LIBRARY=ssd.default_library_path(),
               LD_DEBUG="files", LD_DEBUG_OUTPUT=str(tmp_path / "ld"))
    env.pop("SSD_CACHE_MODE", None)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "rt-cache")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and "prepared" in proc.stdout, proc.stdout + proc.stderr
    logs = "".join(open(os.path.join(tmp_path, f), errors="replace").read() for f in os.listdir(tmp_path)
                   if f.startswith("ld."))
    assert "libssdgen" in logs, "LD_DEBUG wrote nothing usable"
    ours = [line for line in logs.splitlines() if "libcuda" in line and "loaded by" in line and "libssdgen" in line]
    assert ours == []


# A fresh interpreter per variant: the library loaded first thing, as a script would, under the
# settings a training job may bring (locale, UTF-8 mode, the C++ runtime already loaded globally,
# the library itself loaded RTLD_GLOBAL).
CHILD = textwrap.dedent("""
    import ctypes, os, sys
    sys.path.insert(0, {here!r})
    if os.environ.get("PRELOAD_LIBSTDCXX"):
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    import ssd_ctypes as ssd
    lib = ssd.load() if not os.environ.get("LOAD_GLOBAL") else None
    if lib is None:
        ctypes.CDLL(ssd.default_library_path(), mode=ctypes.RTLD_GLOBAL)
        lib = ssd.load()
    fwd, bwd = ssd.shape_args(lib, b=1, L=64, h=2, p=32, g=1, n=32, chunk_size=64, z=True)
    o = ssd.PrepareOptions(); lib.ssd_prepare_options_init(ctypes.byref(o)); o.arch = 901
    r = ssd.PrepareReport(); r.struct_size = ctypes.sizeof(r)
    ssd.check(lib, lib.ssd_forward_prepare(None, ctypes.byref(fwd), ctypes.byref(o), ctypes.byref(r)), "prepare")
    print("compiled", r.compiled, "of", r.kernels)
""")


VARIANTS = {
    "C locale": ({"LC_ALL": "C"}, []),
    "C.UTF-8, UTF-8 mode": ({"LC_ALL": "C.UTF-8"}, ["-X", "utf8"]),
    "libstdc++ and the library RTLD_GLOBAL": ({"PRELOAD_LIBSTDCXX": "1", "LOAD_GLOBAL": "1"}, []),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fresh_interpreter_compiles(variant, tmp_path):
    extra_env, flags = VARIANTS[variant]
    env = dict(os.environ, SSD_CACHE_DIR=str(tmp_path), SSD_LIBRARY=ssd.default_library_path(), **extra_env)
    env.pop("SSD_CACHE_MODE", None)
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(here=HERE))
    proc = subprocess.run([sys.executable] + flags + [str(script)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, "exit %d (a negative code is a signal)\n%s%s" % (proc.returncode, proc.stdout,
                                                                              proc.stderr)
    words = proc.stdout.split()
    assert words[0] == "compiled" and int(words[1]) == int(words[3]) > 0, proc.stdout
