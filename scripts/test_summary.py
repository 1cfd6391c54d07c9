#!/usr/bin/env python3
"""The real counts behind a ctest run, from the JUnit file ctest wrote (--output-junit).

ctest counts whole tests ("unit", "lit", ...). This reads each test's recorded output instead:
doctest's summary (`[doctest] test cases: T | P passed | F failed | S skipped`, and its
assertions), lit's (`Passed: N`, `Unsupported: N`, ...), pytest's last line (`N passed, N skipped
in 1.2s`); any other test counts as one check. Prints a
line per ctest test and ends with `tests: N passed, N failed, N skipped`, which .ci/run repeats.
Exits 1 when a test failed or its output could not be read.

Usage: test_summary.py CTEST_JUNIT_XML
"""
import re
import sys
import xml.etree.ElementTree as ET

DOCTEST_CASES = re.compile(r"\[doctest\] test cases: *(\d+) \| *(\d+) passed \| *(\d+) failed \|(?: *(\d+) skipped)?")
DOCTEST_ASSERTS = re.compile(r"\[doctest\] assertions: *(\d+) \|")
LIT_COUNT = re.compile(r"^  ([A-Za-z ]+?) *: *(\d+)$", re.M)
# lit's result labels (lit/Test.py), by what they mean here.
LIT_PASSED = {"Passed", "Passed With Retry", "Expectedly Failed"}
LIT_SKIPPED = {"Unsupported", "Skipped", "Excluded"}
# pytest's closing line, with or without the ===== frame (-q / -v).
PYTEST_LINE = re.compile(r"^=* *((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s(?: \([^)]*\))? *=*$", re.M)
PYTEST_PASSED = {"passed", "xpassed"}
PYTEST_FAILED = {"failed", "error", "errors"}
PYTEST_SKIPPED = {"skipped", "xfailed"}


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def counts_of(status, skip_message, out):
    """(passed, failed, skipped, description) of one ctest test."""
    cases = DOCTEST_CASES.search(out)
    if cases:
        _, passed, failed, skipped = (int(g) if g else 0 for g in cases.groups())
        asserts = DOCTEST_ASSERTS.search(out)
        if passed == 0 and skipped and not failed:
            text = f"{plural(skipped, 'doctest case')} skipped"
        else:
            text = f"{plural(passed, 'doctest case')} passed"
            if failed:
                text += f", {failed} failed"
            if skipped:
                text += f", {skipped} skipped"
        if asserts:
            text += f" ({plural(int(asserts.group(1)), 'assertion')})"
        reason = re.search(r"^GPU tests SKIPPED[^:]*: *(.*)$", out, re.M)
        if reason and skipped:
            text += f"; skipped: {reason.group(1).strip()}"
        # A test that crashed after its summary, or failed before it, is one failure more.
        if status == "fail" and not failed:
            failed, text = 1, text + "; the test itself failed"
        return passed, failed, skipped, text
    runs = PYTEST_LINE.findall(out)
    if runs:
        labels = {}
        for n, label in re.findall(r"(\d+) ([a-z]+)", runs[-1]):
            labels[label] = labels.get(label, 0) + int(n)
        passed = sum(n for label, n in labels.items() if label in PYTEST_PASSED)
        failed = sum(n for label, n in labels.items() if label in PYTEST_FAILED)
        skipped = sum(n for label, n in labels.items() if label in PYTEST_SKIPPED)
        text = f"{plural(passed, 'pytest case')} passed"
        if failed:
            text += f", {failed} failed"
        if skipped:
            text += f", {skipped} skipped"
        if status == "fail" and not failed:
            failed, text = 1, text + "; pytest itself failed"
        return passed, failed, skipped, text
    if "Testing Time:" in out:
        tail = out[out.rindex("Testing Time:"):]
        labels = {label: int(n) for label, n in LIT_COUNT.findall(tail)}
        passed = sum(n for label, n in labels.items() if label in LIT_PASSED)
        skipped = sum(n for label, n in labels.items() if label in LIT_SKIPPED)
        failed = sum(n for label, n in labels.items() if label not in LIT_PASSED | LIT_SKIPPED)
        text = f"{plural(passed, 'lit test')} passed"
        text += "".join(f", {n} {label.lower()}" for label, n in labels.items() if label not in LIT_PASSED)
        if status == "fail" and not failed:
            failed, text = 1, text + "; lit itself failed"
        return passed, failed, skipped, text
    if status == "run":
        return 1, 0, 0, "1 check passed"
    # ctest's "notrun" is a skip only when the test asked for it (a skip pattern or exit code, or
    # DISABLED); a missing executable is "notrun" too, and a failure.
    # (ctest writes "SKIP_RETURN_CODE=77" for a skip by exit code.)
    if status == "notrun" and (skip_message in ("SKIP_REGULAR_EXPRESSION_MATCHED", "Disabled")
                               or skip_message.startswith("SKIP_RETURN_CODE")):
        return 0, 0, 1, "1 check skipped"
    return 0, 1, 0, "1 check failed" + (f" ({skip_message})" if skip_message else "")


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        root = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"test summary: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 1
    rows = []
    totals = [0, 0, 0]
    for case in root.iter("testcase"):
        out = case.findtext("system-out") or ""
        skip = case.find("skipped")
        skip_message = skip.get("message", "") if skip is not None else ""
        passed, failed, skipped, text = counts_of(case.get("status"), skip_message, out)
        for i, n in enumerate((passed, failed, skipped)):
            totals[i] += n
        rows.append((case.get("name"), float(case.get("time") or 0), text))
    if not rows:
        print("test summary: ctest ran no tests", file=sys.stderr)
        return 1
    width = max(len(name) for name, _, _ in rows)
    for name, seconds, text in rows:
        print(f"  {name:<{width}}  {seconds:6.1f} s  {text}")
    print(f"tests: {totals[0]} passed, {totals[1]} failed, {totals[2]} skipped")
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
