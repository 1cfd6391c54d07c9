#!/usr/bin/env bash
# ctest's `python` test: pytest over tests/python against this build's libssdgen.so (no install).
# Any non-zero pytest exit fails the test, 5 (no tests collected) included. The summary line goes
# to $3 for scripts/test.sh, the JUnit report next to it (.xml).
#   run.sh PYTHON LIBSSDGEN SUMMARY_FILE
set -uo pipefail
python=$1 lib=$2 summary=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rm -f "$summary"
if ! "$python" -c "import pytest, torch" 2>/dev/null; then
  echo "python tests: $python lacks pytest or torch (run scripts/setup-python.sh)" | tee "$summary"
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# SSD_LIBRARY: the library for tests that bind it without the package (their own ctypes mirror).
SSDGEN_LIBRARY=$lib SSD_LIBRARY=$lib PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$python" -m pytest -q -p no:cacheprovider -rs --junitxml="${summary%.txt}.xml" \
    --ignore="$here/test_jit_in_process.py" "$here" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 5 ] && echo "python tests: pytest collected no tests (exit 5)"
echo "python tests (pytest): $(tail -1 "$log" | tr -d '=' | sed 's/^ *//')" >"$summary"
exit "$rc"
