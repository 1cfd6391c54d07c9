#!/usr/bin/env python3
"""Issue 13 on the device machine: a plain Python process (ctypes only; PyTorch not imported
unless --torch) loads the built libssdgen.so, JIT-compiles a forward + backward with an EMPTY
cache through ssd_forward_prepare / ssd_backward_prepare, then runs ssd_forward and ssd_backward
on tiny CUDA buffers allocated through libcuda and checks the results are finite. Before the fix
this process died with SIGSEGV in std::regex (docs/perf.md, "The in-process JIT crash").

    python3 scripts/repro_python_jit.py [--library build-gpu/libssdgen.so] [--torch] [--diagnose]

--diagnose also records what decides the crash's mechanism in this process: the interpreter, the
C++ runtimes mapped after loading the library, where the library's locale symbols bind
(LD_DEBUG=bindings), and whether a minimal -fvisibility=hidden library that runs only the old
std::regex crashes when loaded the same way (built with this machine's c++; needs no GPU).
Exit status 0: everything ran and the results are finite.
"""
import argparse
import ctypes
import glob
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import ssd_ctypes as ssd  # noqa: E402

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4}
INPUTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "dout")


def default_library():
    for candidate in ("build-gpu/libssdgen.so", "build/libssdgen.so"):
        path = os.path.join(ROOT, candidate)
        if os.path.exists(path):
            return path
    return os.path.join(ROOT, "build-gpu", "libssdgen.so")


class Cuda:
    """The few driver calls this script needs, through ctypes (as a framework-free host would)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.buffers = []

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError("%s failed: CUresult %d" % (what, rc))

    def alloc(self, nbytes):
        p = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 256))), "cuMemAlloc")
        self.check(self.lib.cuMemsetD8_v2(p, ctypes.c_ubyte(0), ctypes.c_size_t(max(nbytes, 256))), "cuMemsetD8")
        self.buffers.append(p.value)
        return p.value

    def upload(self, ptr, data):
        self.check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), data, ctypes.c_size_t(len(data))), "cuMemcpyHtoD")

    def download(self, ptr, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self.check(self.lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes)), "cuMemcpyDtoH")
        return buf.raw

    def sync(self):
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


def encode(values, dtype):
    if dtype == "fp32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "int32":
        return struct.pack("<%di" % len(values), *values)
    if dtype == "bf16":
        return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in values)
    return struct.pack("<%de" % len(values), *values)


def decode(raw, dtype):
    if dtype == "fp32":
        return struct.unpack("<%df" % (len(raw) // 4), raw)
    if dtype == "bf16":
        return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    return struct.unpack("<%de" % (len(raw) // 2), raw)


def run(args):
    if args.torch:
        import torch  # noqa: F401  (the PyTorch-loaded variant of the process)
        torch.cuda.init()
    cache = tempfile.mkdtemp(prefix="ssdgen-repro-cache-")
    os.environ["SSD_CACHE_DIR"] = cache
    os.environ.pop("SSD_CACHE_MODE", None)
    print("python %s (%s)" % (sys.version.split()[0], os.path.realpath(sys.executable)))
    print("library %s, empty cache %s" % (args.library, cache))
    lib = ssd.load(args.library)
    cuda = Cuda()

    rt = ctypes.c_void_p()
    ssd.check(lib, lib.ssd_runtime_create(None, ctypes.byref(rt)), "ssd_runtime_create")
    shape = dict(b=2, L=200, h=4, p=64, g=2, n=64, chunk_size=64, D=True, z=True, dt_bias=True, dt_softplus=True)
    fwd, bwd = ssd.shape_args(lib, **shape)  # shapes only: what prepare needs
    po = ssd.PrepareOptions()
    lib.ssd_prepare_options_init(ctypes.byref(po))  # arch 0: this device's
    for name, which, a in (("forward", lib.ssd_forward_prepare, fwd), ("backward", lib.ssd_backward_prepare, bwd)):
        report = ssd.PrepareReport()
        report.struct_size = ctypes.sizeof(report)
        ssd.check(lib, which(rt, ctypes.byref(a), ctypes.byref(po), ctypes.byref(report)), "ssd_%s_prepare" % name)
        print("ssd_%s_prepare: %d kernels, %d compiled, %d from disk, %d from memory, %.2f s" % (
            name, report.kernels, report.compiled, report.from_disk, report.from_memory, report.seconds))

    rng = random.Random(13)
    host = {}

    def pointer(name, dims, dtype):
        if name in host:  # one buffer per name: the backward reads the forward's inputs and out_x
            return host[name][0]
        count = 1
        for d in dims:
            count *= d
        ptr = cuda.alloc(count * ELEMENT_BYTES[dtype])
        if name in INPUTS:
            if name == "A":
                values = [-0.5 - rng.random() for _ in range(count)]
            elif name in ("dt",):
                values = [0.05 + 0.1 * rng.random() for _ in range(count)]
            else:
                values = [rng.uniform(-0.5, 0.5) for _ in range(count)]
            cuda.upload(ptr, encode(values, dtype))
        host[name] = (ptr, count, dtype)
        return ptr

    fwd, bwd = ssd.shape_args(lib, pointers=pointer, **shape)
    start = time.time()
    ssd.check(lib, lib.ssd_forward(rt, ctypes.byref(fwd), None, None), "ssd_forward")
    cuda.sync()
    # The backward reads the forward's inputs and out_x; its own buffers were allocated above.
    size = ctypes.c_size_t()
    ssd.check(lib, lib.ssd_backward_workspace_size(ctypes.byref(bwd), ctypes.byref(size)), "ssd_backward_workspace_size")
    ws = cuda.alloc(size.value)
    ssd.check(lib, lib.ssd_backward(rt, ctypes.byref(bwd), ctypes.c_void_p(ws), size, None), "ssd_backward")
    cuda.sync()
    print("ssd_forward + ssd_backward ran in %.3f s (kernels from the runtime's memory)" % (time.time() - start))
    bad = []
    for name in ("out", "dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias"):
        ptr, count, dtype = host[name]
        values = decode(cuda.download(ptr, count * ELEMENT_BYTES[dtype]), dtype)
        finite = all(math.isfinite(v) for v in values)
        nonzero = any(v != 0 for v in values)
        print("  %-9s %6d values, finite=%s, max|v|=%.4g" % (name, count, finite, max(abs(v) for v in values)))
        if not finite or not nonzero:
            bad.append(name)
    lib.ssd_runtime_destroy(rt)
    shutil.rmtree(cache, ignore_errors=True)
    if bad:
        print("FAILED: not finite or all zero: %s" % ", ".join(bad))
        return 1
    print("OK: compiled in-process with an empty cache, ran forward and backward, no crash")
    return 0


PROBE = r"""
#include <regex>
#include <string>
extern "C" __attribute__((visibility("default"))) int probe(const char* log) {
  std::smatch m;
  std::string s(log);
  if (std::regex_search(s, m, std::regex(R"((\d+) bytes smem)"))) return std::stoi(m[1].str());
  return -1;
}
"""
HOST = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 2; }
  int (*probe)(const char*) = (int (*)(const char*))dlsym(h, "probe");
  printf("%d\n", probe("Used 1 registers, 45056 bytes smem"));
  return 0;
}
"""


def diagnose(args):
    print("== interpreter: %s %s" % (sys.version.split()[0], os.path.realpath(sys.executable)))
    print("   LD_LIBRARY_PATH=%s" % os.environ.get("LD_LIBRARY_PATH", ""))
    exe = os.path.realpath(sys.executable)
    if shutil.which("ldd"):
        print(subprocess.run(["ldd", exe], capture_output=True, text=True).stdout.rstrip())
    if shutil.which("nm"):
        out = subprocess.run(["nm", "-D", "--defined-only", exe], capture_output=True, text=True).stdout
        print("   std:: symbols the interpreter exports: %d" % sum("_ZNSt" in l or "_ZSt" in l for l in out.splitlines()))
    # The C++ runtimes mapped once the library is loaded (and libcuda, as the process had).
    code = textwrap.dedent("""
        import ctypes, sys
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            print("   (no libcuda.so.1 here)")
        ctypes.CDLL(sys.argv[1])
        seen = sorted({l.split()[-1] for l in open("/proc/self/maps") if "/" in l.split()[-1]})
        for p in seen:
            if any(k in p for k in ("stdc++", "c++", "gcc_s", "nvrtc", "cuda", "python")):
                print("   mapped:", p)
    """)
    subprocess.run([sys.executable, "-c", code, args.library])
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=os.path.join(tmp, "ld"))
        subprocess.run([sys.executable, "-c", code, args.library], env=env, capture_output=True)
        lines = set()
        for f in glob.glob(os.path.join(tmp, "ld*")):
            for line in open(f, errors="replace"):
                if "libssdgen" in line.split(" to ")[0] and any(k in line for k in ("locale", "facet", "ctype", "collate")):
                    lines.add(line.split(":", 1)[-1].strip())
        print("== libssdgen.so's locale bindings (LD_DEBUG=bindings; after the fix no ctype or collate facet):")
        for line in sorted(lines):
            print("   " + line)
        cxx = shutil.which("c++") or shutil.which("g++")
        if not cxx:
            print("== no c++ compiler: regex probe skipped")
            return 0
        src, so = os.path.join(tmp, "probe.cpp"), os.path.join(tmp, "libprobe.so")
        open(src, "w").write(PROBE)
        subprocess.run([cxx, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", src, "-o", so], check=True)
        print("== the old std::regex in a minimal -fvisibility=hidden library (%s):" %
              subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0])
        r = subprocess.run([sys.executable, "-c", "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); "
                            "print(l.probe(b'Used 1 registers, 45056 bytes smem'))", so],
                           capture_output=True, text=True)
        print("   python3 + ctypes: exit %d, output %r %s" % (r.returncode, r.stdout.strip(), r.stderr.strip()[-200:]))
        host_src, host = os.path.join(tmp, "host.c"), os.path.join(tmp, "host")
        open(host_src, "w").write(HOST)
        if subprocess.run([cxx, "-x", "c", host_src, "-o", host, "-ldl"]).returncode == 0:
            r = subprocess.run([host, so], capture_output=True, text=True)
            print("   C host, dlopen RTLD_LOCAL: exit %d, output %r" % (r.returncode, r.stdout.strip()))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", default=default_library())
    parser.add_argument("--torch", action="store_true", help="import torch (and init CUDA) first")
    parser.add_argument("--diagnose", action="store_true", help="also record the crash mechanism's evidence")
    args = parser.parse_args()
    args.library = os.path.abspath(args.library)
    if args.diagnose:
        diagnose(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
