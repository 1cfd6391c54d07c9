"""The ctypes bindings against the C header and the loaded library: every declared field offset and
struct size equals the C compiler's (a program built from include/ssd/ssd.h prints them), the enum
values match, and the import-time check refuses bindings that drift from the library."""
import ctypes
import os
import shutil
import subprocess
import sys

import pytest

import ssdgen
from ssdgen import _capi

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

ENUMS = {
    "SSD_MAX_DIMS": _capi.MAX_DIMS,
    "SSD_DTYPE_BF16": _capi.DTYPE_BF16, "SSD_DTYPE_FP16": _capi.DTYPE_FP16, "SSD_DTYPE_FP32": _capi.DTYPE_FP32,
    "SSD_DTYPE_INT32": _capi.DTYPE_INT32, "SSD_MODE_DETERMINISTIC": _capi.MODE_DETERMINISTIC,
    "SSD_MODE_FAST": _capi.MODE_FAST,
}
ENUMS.update({name: code for code, name in _capi.STATUS_NAMES.items()})


def structs_in_header():
    """The bindings' structs the header declares (the optional ones only where it has them)."""
    with open(os.path.join(ROOT, "include", "ssd", "ssd.h")) as f:
        header = f.read()
    structs = dict(_capi.STRUCTS)
    structs.update({name: s for name, s in _capi.OPTIONAL_STRUCTS.items() if f"}} {name};" in header})
    return structs


def c_layout(tmp_path):
    """{(struct, field): offset, (struct, None): sizeof, (enum, ""): value} from the C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc/gcc) to check the bindings against include/ssd/ssd.h"
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <ssd/ssd.h>", "int main(void) {"]
    for cname, struct in structs_in_header().items():
        lines.append(f'  printf("{cname} - %zu\\n", sizeof({cname}));')
        for field, _ in struct._fields_:
            lines.append(f'  printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    for name in ENUMS:
        lines.append(f'  printf("{name} = %lld\\n", (long long){name});')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    out = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        a, b, value = line.split()
        out[(a, b)] = int(value)
    return out


def test_struct_layout_matches_header(tmp_path):
    layout = c_layout(tmp_path)
    for cname, struct in structs_in_header().items():
        assert ctypes.sizeof(struct) == layout[(cname, "-")], f"sizeof({cname})"
        for field, _ in struct._fields_:
            assert getattr(struct, field).offset == layout[(cname, field)], f"offsetof({cname}, {field})"


def test_enum_values_match_header(tmp_path):
    layout = c_layout(tmp_path)
    for name, value in ENUMS.items():
        assert layout[(name, "=")] == value, name


def test_import_checked_struct_sizes_against_library():
    # What check_layout read from the library's init functions equals the declared sizes.
    for init, struct in (("ssd_runtime_options_init", _capi.RuntimeOptions),
                         ("ssd_launch_options_init", _capi.LaunchOptions),
                         ("ssd_forward_args_init", _capi.ForwardArgs),
                         ("ssd_backward_args_init", _capi.BackwardArgs)):
        size, _ = _capi._struct_size_of(getattr(ssdgen.library, init))
        assert size == ctypes.sizeof(struct), init


def test_size_mismatch_raises_import_error(monkeypatch):
    class Grown(ctypes.Structure):
        _fields_ = _capi.ForwardArgs._fields_ + [("appended", ctypes.c_int64)]

    Grown.__name__ = "ForwardArgs"
    monkeypatch.setattr(_capi, "ForwardArgs", Grown)
    with pytest.raises(ImportError, match=r"ForwardArgs: the library's struct_size is \d+, the bindings declare \d+"):
        _capi.check_layout(ssdgen.library)


def test_field_order_mismatch_raises_import_error(monkeypatch):
    # Same size, two fields swapped: the library's defaults land on the wrong names.
    fields = list(_capi.ForwardArgs._fields_)
    lo, hi = fields.index(("dt_limit_lo", ctypes.c_float)), fields.index(("dt_limit_hi", ctypes.c_float))
    fields[lo], fields[hi] = fields[hi], fields[lo]
    Swapped = type("ForwardArgs", (ctypes.Structure,), {"_fields_": fields})
    monkeypatch.setattr(_capi, "ForwardArgs", Swapped)
    with pytest.raises(ImportError, match=r"ForwardArgs\.dt_limit_lo: the library's default is inf"):
        _capi.check_layout(ssdgen.library)


def run_python(code, **env):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full)


def test_missing_library_is_an_import_error(tmp_path):
    r = run_python("import ssdgen", SSDGEN_LIBRARY=str(tmp_path / "nowhere" / "libssdgen.so"))
    assert r.returncode != 0
    assert "ImportError: ssdgen: no library at" in r.stderr


def test_foreign_library_is_an_import_error(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    src = tmp_path / "other.c"
    src.write_text("int not_ssdgen(void) { return 1; }\n")
    lib = tmp_path / "libother.so"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    r = run_python("import ssdgen", SSDGEN_LIBRARY=str(lib))
    assert r.returncode != 0
    assert "lacks the entry points ssd_status_string" in r.stderr


def test_version_and_library():
    assert ssdgen.__version__ == ssdgen.library_version
    assert ssdgen.__version__.count(".") == 2
    assert os.path.isfile(ssdgen.library_path)


def test_status_error_names_the_field():
    # A library call with a bad argument: the error carries the status name and the detail.
    args = _capi.ForwardArgs()
    ssdgen.library.ssd_forward_args_init(ctypes.byref(args))
    args.chunk_size = 48
    layout = _capi.ForwardLayout()
    layout.struct_size = ctypes.sizeof(layout)
    with pytest.raises(ssdgen.SsdError) as info:
        ssdgen.check(ssdgen.library.ssd_forward_workspace_layout(ctypes.byref(args), ctypes.byref(layout)),
                     "ssd_forward_workspace_layout")
    assert info.value.status == "SSD_ERROR_INVALID_SHAPE"
    assert "args.chunk_size: 48" in info.value.detail


def test_runtime_needs_no_gpu():
    assert ssdgen.runtime().value  # created without a driver; kernels load on first use
