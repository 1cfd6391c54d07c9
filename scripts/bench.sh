#!/usr/bin/env bash
# Benchmarks on the device machine (called by gpu-test.sh --bench): ssdgen's own per-stage timings
# of the forward, then the side-by-side run against mamba_ssm's Triton forward when .peer/mamba
# (a git-ignored copy of mamba_ssm/ops/triton + utils) was carried along.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/build-gpu/out}}
# The CLI and the library (gpu-test.sh --prebuilt passes its own; default the device build's).
cli=${SSDGEN:-$root/build-gpu/ssdgen}
lib=${SSD_LIB:-$root/build-gpu/libssdgen.so}
status=0
# The shapes of issues 9 and 10: b=4 L=2048, b=4 L=4096, b=1 L=16384; the staged states path
# (chunk_state + state_passing, the same bits) beside the fused one at the first shape.
for bl in "4 2048" "4 4096" "1 16384"; do
  set -- $bl
  "$cli" bench fwd --preset nemotronh-56b --batch $1 --seqlen $2 --iters 100 | tee -a "$out/bench.txt" || status=1
done
"$cli" bench fwd --preset nemotronh-56b --batch 4 --seqlen 2048 --iters 100 --staged | tee -a "$out/bench.txt" || status=1
for bl in "4 2048" "4 4096" "1 16384"; do
  set -- $bl
  "$cli" bench bwd --preset nemotronh-56b --batch $1 --seqlen $2 --iters 50 | tee -a "$out/bench.txt" || status=1
done
"$cli" check --preset nemotronh-56b --batch 1 --seqlen 512 | tee -a "$out/bench.txt" || status=1
if [ -d "$root/.peer/mamba/mamba_ssm" ]; then
  # Warm the cache with the CLI first (in parallel, every core), so that the timed Python process
  # loads cubins instead of compiling (in-process compiling works: docs/perf.md, the std::regex fix).
  export SSD_CACHE_DIR=${SSD_CACHE_DIR:-$(mktemp -d)}
  "$cli" compile --preset nemotronh-56b --arch sm_90a --mode both | tail -1
  PYTHONUNBUFFERED=1 python3 "$root/scripts/peer_bench.py" --lib "$lib" \
    --peer "$root/.peer/mamba" --out "$out" 2>&1 | tee -a "$out/bench.txt" || status=1
else
  echo "bench: no .peer/mamba, skipping the side-by-side with mamba_ssm"
fi
exit $status
