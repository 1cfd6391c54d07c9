#!/usr/bin/env bash
# Hardware counters of the SSD kernels on the device machine (METHOD.md: ncu with --clock-control
# none), one launch of each kernel of `ssdgen bench fwd|bwd` (the bench's own problem: nemotronh-56b,
# b=4, L=2048 unless the extra arguments say otherwise). For each kernel: duration, DRAM and L2
# throughput, SM and tensor-pipe utilization, achieved occupancy and the warp stall reasons — what
# decides whether a stage is bound by memory, by the tensor cores or by latency (docs/perf.md).
#
#   device: run(command="bash scripts/ncu-stages.sh fwd [--arch sm_90] [--batch B --seqlen L]", carry=[".deps"])
#   needs build-gpu/ssdgen (scripts/gpu-test.sh builds it); writes $OUT/ncu-<what>[-arch].txt
#   KERNELS (env): a regex of kernel names to profile (default: every ssd_ kernel); LAUNCHES (env):
#   the kernels of one call when KERNELS or the arguments change it.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/build-gpu/out}
what=${1:?usage: ncu-stages.sh fwd|bwd [ssdgen bench arguments]}
shift
case "$what" in fwd|bwd) ;; *) echo "usage: ncu-stages.sh fwd|bwd [ssdgen bench arguments]" >&2; exit 2 ;; esac
[ -x "$root/build-gpu/ssdgen" ] || { echo "no build-gpu/ssdgen: run scripts/gpu-test.sh first" >&2; exit 2; }
command -v ncu >/dev/null || { echo "ncu not on PATH" >&2; exit 2; }
mkdir -p "$out"
tag=$what$(printf '%s' "$*" | tr -c 'A-Za-z0-9_' '-' | sed 's/^-*//; s/-*$//; s/^./-&/')
# One warm-up call, then the timed one: skip the warm-up's launches and profile the timed call's
# (LAUNCHES per call: 4 for the forward, 15 for the deterministic backward, which the bench runs
# first; the host-path loops after it are not profiled).
launches=${LAUNCHES:-$([ "$what" = fwd ] && echo 4 || echo 15)}
ncu --clock-control none --target-processes all \
  -k "regex:${KERNELS:-ssd_}" --launch-skip "$launches" --launch-count "$launches" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section LaunchStats \
  "$root/build-gpu/ssdgen" bench "$what" --iters 1 --warmup 1 "$@" >"$out/ncu-$tag.txt" 2>&1
status=$?
# The one-line summary per kernel: name, duration, DRAM / L2 / SM throughput (% of peak), occupancy.
grep -E "^  ssd_|Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Dynamic Shared Memory Per Block" \
  "$out/ncu-$tag.txt" | sed 's/  */ /g' | head -400
echo "ncu-stages.sh: $out/ncu-$tag.txt (exit $status)"
exit $status
