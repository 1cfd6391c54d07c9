#!/usr/bin/env python3
"""scripts/test_summary.py on a made-up ctest JUnit file: every kind of test output it reads."""
import io
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import test_summary  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="x" tests="8" failures="2" disabled="0" skipped="1" hostname="" time="9">
  <testcase name="unit" classname="unit" time="2.5" status="run"><system-out>
[doctest] test cases: 60 | 60 passed | 0 failed |
[doctest] assertions: 44633 | 44633 passed | 0 failed |
[doctest] Status: SUCCESS!
</system-out></testcase>
  <testcase name="unit_bad" classname="unit_bad" time="1" status="fail"><failure message=""/><system-out>
[doctest] test cases: 3 | 1 passed | 2 failed |
[doctest] assertions: 10 | 8 passed | 2 failed |
</system-out></testcase>
  <testcase name="gpu" classname="gpu" time="0.1" status="notrun"><skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/><system-out>GPU tests SKIPPED (every case below is counted as skipped): no CUDA driver: cannot load libcuda.so.1
[doctest] test cases: 0 | 0 passed | 0 failed | 25 skipped
[doctest] assertions: 0 | 0 passed | 0 failed |
</system-out></testcase>
  <testcase name="lit" classname="lit" time="30" status="run"><system-out>PASS: ssdgen :: a.test (1 of 14)

Testing Time: 30.00s
  Passed     : 13
  Unsupported:  1
</system-out></testcase>
  <testcase name="lit_bad" classname="lit_bad" time="3" status="fail"><failure message=""/><system-out>
Testing Time: 3.00s
  Passed: 2
  Failed: 1
</system-out></testcase>
  <testcase name="python" classname="python" time="12" status="run"><system-out>........s.
75 passed, 2 skipped in 12.34s
</system-out></testcase>
  <testcase name="python_bad" classname="python_bad" time="3" status="fail"><failure message=""/><system-out>
=================== 1 failed, 4 passed, 1 error in 3.21s ===================
</system-out></testcase>
  <testcase name="install_consumer" classname="install_consumer" time="0.7" status="run"><system-out>ok
</system-out></testcase>
  <testcase name="crashed" classname="crashed" time="0.1" status="fail"><failure message=""/><system-out>Segmentation fault
</system-out></testcase>
  <testcase name="disabled" classname="disabled" time="0" status="notrun"><skipped message="Disabled"/><system-out></system-out></testcase>
  <testcase name="by_exit_code" classname="by_exit_code" time="0" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/><system-out>skipped
</system-out></testcase>
  <testcase name="not_built" classname="not_built" time="0" status="notrun"><skipped message="Unable to find executable: /x/y"/><system-out></system-out></testcase>
</testsuite>
"""

with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
    f.write(JUNIT)
try:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = test_summary.main(["test_summary.py", f.name])
finally:
    os.unlink(f.name)
text = out.getvalue()
print(text, end="")
lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
expect = {
    "unit": "60 doctest cases passed (44633 assertions)",
    "unit_bad": "1 doctest case passed, 2 failed (10 assertions)",
    "gpu": "25 doctest cases skipped (0 assertions); skipped: no CUDA driver: cannot load libcuda.so.1",
    "lit": "13 lit tests passed, 1 unsupported",
    "lit_bad": "2 lit tests passed, 1 failed",
    "python": "75 pytest cases passed, 2 skipped",
    "python_bad": "4 pytest cases passed, 2 failed",
    "install_consumer": "1 check passed",
    "crashed": "1 check failed",
    "disabled": "1 check skipped",
    "by_exit_code": "1 check skipped",
    "not_built": "1 check failed (Unable to find executable: /x/y)",
}
for name, want in expect.items():
    assert lines[name].endswith(want), (name, lines[name], want)
# 60 + 1 + 13 + 2 + 75 + 4 + 1 passed; 2 + 1 + 2 + 1 + 1 failed; 25 + 1 + 2 + 1 + 1 skipped.
assert text.splitlines()[-1] == "tests: 156 passed, 7 failed, 30 skipped", text.splitlines()[-1]
assert rc == 1
print("test_summary: ok")
