#!/usr/bin/env bash
# Builds ssdgen on the device machine and runs all tests there in one call: the CPU unit tests and
# the GPU tests (accuracy vs the float64 oracle, poison checks, D1-D4 determinism), optionally
# under compute-sanitizer, optionally the benchmarks.
#
#   here:   bash scripts/fetch-gpu-deps.sh          (once; fills .deps/debs)
#   device: run(command="bash scripts/gpu-test.sh [--sanitize] [--bench] [--accuracy] [--digests] [--only=PATTERN]",
#               carry=[".deps", ".peer"])
#   --accuracy: scripts/accuracy_side_by_side.py, every gradient vs float64 side by side with mamba_ssm
#               (issue 11's test; needs .peer/mamba for the side-by-side, else reports ssdgen alone).
#   --digests[=LABEL]: scripts/output_digests.py --record $OUT/digests.json [--label LABEL]: SHA-256
#               of every output of a fixed-seed run (forward, backward in both modes, chunk_cumsum),
#               for proving a refactor changes no bits (docs/determinism.md, "Proving a refactor
#               changes no bits"); LABEL (e.g. the commit) is stored in the record.
#   --digests-compare=FILE: recompute and compare with FILE (a record in the working tree, path
#               relative to the repository root); fails on any difference.
#   --gpu-only: skip the CPU unit tests (CI runs them) to save device time.
#   --ab=DIR: an A/B against a baseline source tree DIR (relative to the root; e.g. the commit before
#               a change: `git archive BASE | tar -x -C .base/BASE`, carried with .base): builds it into
#               build-base, records its output digests and compares this tree's with them (the same
#               bits?), then alternates `ssdgen bench` of the two builds AB_ROUNDS times (default 2) for
#               each argument list in AB_BENCH (';'-separated, default the three forward shapes), the
#               baseline's lines marked "base" in $OUT/ab.txt.
#   --python[=ARGS]: then the PyTorch package's GPU tests, scripts/python-gpu-test.sh (pip install
#               ./python, scripts/python_gpu_test.py), ARGS passed on, e.g. --python=--kwargs-budget=120.
#   --prebuilt=DIR: no build on the device (it takes minutes of the session's device time): DIR
#               (relative to the root, carried) holds the binaries built here by
#               `bash scripts/prebuilt.sh DIR` (ssd_gpu_tests, ssdgen, libssdgen.so); with it
#               .deps is not needed, the CPU unit tests are skipped (CI runs them) and --ab is refused
#               (it builds its baseline).
#   --exclude=PATTERN: GPU test names to leave out (doctest -tce), e.g. to split the suite over two
#               calls: --only='ssd_backward over the shape matrix*' and --exclude= the same.
#
# Logs go to $OUT (the device tool brings them back), else build-gpu/out. The device tool returns at
# most 8 files: the build logs stay in build-gpu/logs (their tails are printed on failure), so that
# $OUT holds the test and benchmark logs; failed checks are also printed with their test case.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/build-gpu/out}
sanitize=0
bench=0
accuracy=0
python=0
python_args=
digests=0
digests_label=
digests_compare=
only=
ab=
unit=1
prebuilt=
exclude=
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    --bench) bench=1 ;;
    --accuracy) accuracy=1 ;;
    --python) python=1 ;;
    --python=*) python=1; python_args=${arg#--python=} ;;
    --digests) digests=1 ;;
    --digests=*) digests=1; digests_label=${arg#--digests=} ;;
    --digests-compare=*) digests_compare=${arg#--digests-compare=} ;;
    --only=*) only=${arg#--only=} ;;
    --ab=*) ab=${arg#--ab=} ;;
    --gpu-only) unit=0 ;;
    --prebuilt=*) prebuilt=${arg#--prebuilt=} ;;
    --exclude=*) exclude=${arg#--exclude=} ;;
    *) echo "usage: $0 [--sanitize] [--bench] [--accuracy] [--digests[=LABEL]] [--digests-compare=FILE] [--python[=ARGS]]" \
            "[--only=GPU_TEST_NAME_PATTERN] [--exclude=GPU_TEST_NAME_PATTERN] [--ab=BASELINE_TREE] [--gpu-only]" \
            "[--prebuilt=DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out" "$root/build-gpu/logs"
logs=$root/build-gpu/logs
prefix=$root/.deps/prefix
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ -n "$prebuilt" ]; then
  [ -z "$ab" ] || { echo "--ab builds its baseline: not with --prebuilt" >&2; exit 2; }
  [ $python = 0 ] || { echo "--python builds the package: not with --prebuilt" >&2; exit 2; }
  bin=$root/$prebuilt
  for f in ssd_gpu_tests ssdgen libssdgen.so; do
    [ -f "$bin/$f" ] || { echo "--prebuilt=$prebuilt: no $f there (bash scripts/prebuilt.sh $prebuilt, then carry it)" >&2; exit 2; }
  done
  gpu_tests=$bin/ssd_gpu_tests cli=$bin/ssdgen lib=$bin/libssdgen.so
  unit=0
else
  ls "$root"/.deps/debs/*.deb >/dev/null 2>&1 || { echo "no .deps/debs: run scripts/fetch-gpu-deps.sh here and carry .deps" >&2; exit 2; }
  for deb in "$root"/.deps/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
  set -e
  cmake -S "$root" -B "$root/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" \
    >"$logs/cmake.log" 2>&1 || { cat "$logs/cmake.log"; exit 1; }
  ninja -C "$root/build-gpu" -j"$(nproc)" >"$logs/build.log" 2>&1 || { tail -50 "$logs/build.log"; exit 1; }
  set +e
  gpu_tests=$root/build-gpu/tests/ssd_gpu_tests cli=$root/build-gpu/ssdgen lib=$root/build-gpu/libssdgen.so
fi

export SSD_CACHE_DIR=$(mktemp -d)
status=0
if [ $unit = 1 ]; then
  echo "== unit tests"
  "$root/build-gpu/tests/ssd_unit_tests" >"$out/unit.log" 2>&1 || status=1
  tail -3 "$out/unit.log"
fi
echo "== GPU tests"
"$gpu_tests" -ni ${only:+-tc="$only"} ${exclude:+-tce="$exclude"} >"$out/gpu-full.log" 2>&1 || status=1
grep -E "^GPU tests|MESSAGE:|: ERROR:|test cases:|assertions:|Status:" "$out/gpu-full.log" | sed 's/^.*MESSAGE: //' | tail -80
if grep -q -E ": (ERROR|FATAL ERROR):" "$out/gpu-full.log"; then
  # Each failed check under its test case (the tail above may have cut them off).
  echo "== failed checks"
  awk '/^TEST CASE:/ {tc = $0; shown = 0} / (ERROR|FATAL ERROR): / {if (!shown) print tc; shown = 1; print; more = 1; next}
       more && /^  / {print; next} {more = 0}' "$out/gpu-full.log" | head -80
fi
if [ $sanitize = 1 ]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    compute-sanitizer --tool $tool --error-exitcode 9 "$gpu_tests" \
      -tc="chunk_cumsum_bwd matches*,chunk_cumsum_fwd matches*,ssd_forward matches*,ssd_backward sanitizer*" \
      >"$out/sanitize-$tool.log" 2>&1 || status=1
    tail -4 "$out/sanitize-$tool.log"
  done
fi
if [ $python = 1 ]; then
  echo "== the PyTorch package (scripts/python-gpu-test.sh $python_args)"
  # shellcheck disable=SC2086  # ARGS are words for python_gpu_test.py
  bash "$root/scripts/python-gpu-test.sh" --peer "$root/.peer/mamba" $python_args 2>&1 | grep -E "^\[|^(PASS|FAIL|SKIP|INFO) |python GPU tests" \
    || status=1  # pipefail: a failing test run fails this too
fi
if [ $accuracy = 1 ]; then
  echo "== accuracy side by side with mamba_ssm (issue 11)"
  PYTHONUNBUFFERED=1 python3 "$root/scripts/accuracy_side_by_side.py" --lib "$lib" \
    --peer "$root/.peer/mamba" --out "$out" >"$out/accuracy.log" 2>&1 || status=1
  grep -E "^(ok|FAIL|accuracy|worst)" "$out/accuracy.log"
fi
if [ $digests = 1 ]; then
  echo "== output digests (record)"
  PYTHONUNBUFFERED=1 python3 "$root/scripts/output_digests.py" --lib "$lib" \
    --record "$out/digests.json" ${digests_label:+--label "$digests_label"} >"$out/digests.log" 2>&1 || status=1
  grep -E "^(output_digests|FAIL|digests:|wrote)|[1-9][0-9]* different$|DIFFERENT|OVER" "$out/digests.log"
fi
if [ -n "$digests_compare" ]; then
  echo "== output digests (compare with $digests_compare)"
  (cd "$root" && PYTHONUNBUFFERED=1 python3 scripts/output_digests.py --lib "$lib" \
    --compare "$digests_compare") >"$out/digests-compare.log" 2>&1 || status=1
  grep -E "^(output_digests|record:|warning|note|FAIL|digests:)|[1-9][0-9]* different$|DIFFERENT|OVER|only in" \
    "$out/digests-compare.log"
fi
if [ -n "$ab" ]; then
  echo "== A/B against the baseline tree $ab"
  base_build=$root/build-base
  if cmake -S "$root/$ab" -B "$base_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" \
       >"$logs/cmake-base.log" 2>&1 && ninja -C "$base_build" -j"$(nproc)" libssdgen.so ssdgen >"$logs/build-base.log" 2>&1; then
    (cd "$root" && PYTHONUNBUFFERED=1 python3 scripts/output_digests.py --lib "$base_build/libssdgen.so" \
      --record "$out/digests-base.json" --label "baseline $ab") >"$out/digests-ab.log" 2>&1 &&
    (cd "$root" && PYTHONUNBUFFERED=1 python3 scripts/output_digests.py --lib "$lib" \
      --compare "$out/digests-base.json") >>"$out/digests-ab.log" 2>&1 || status=1
    grep -E "^(FAIL|digests:)|[1-9][0-9]* different$|DIFFERENT|OVER|only in" "$out/digests-ab.log"
    IFS=';' read -ra ab_benches <<<"${AB_BENCH:-fwd --batch 4 --seqlen 2048;fwd --batch 4 --seqlen 4096;fwd --batch 1 --seqlen 16384}"
    for round in $(seq "${AB_ROUNDS:-2}"); do
      for args in "${ab_benches[@]}"; do
        # shellcheck disable=SC2086  # the argument list is words
        { echo "-- base, round $round: bench $args"; "$base_build/ssdgen" bench $args; } >>"$out/ab.txt" 2>&1 || status=1
        # shellcheck disable=SC2086
        { echo "-- this tree, round $round: bench $args"; "$cli" bench $args; } >>"$out/ab.txt" 2>&1 || status=1
      done
    done
    grep -E "^-- |chunk_scan_fwd|chunk_state_passing|total|host path:" "$out/ab.txt"
  else
    tail -20 "$logs/cmake-base.log" "$logs/build-base.log" 2>/dev/null; status=1
  fi
fi
if [ $bench = 1 ] && [ -x "$root/scripts/bench.sh" ]; then
  echo "== benchmarks"
  SSDGEN=$cli SSD_LIB=$lib bash "$root/scripts/bench.sh" "$out" || status=1
fi
echo "gpu-test.sh: exit $status"
exit $status
