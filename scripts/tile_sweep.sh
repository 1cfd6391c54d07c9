#!/usr/bin/env bash
# Times candidate tiles of the forward's matmul stages at the preset shape (device machine), to pick
# defaults offline. Usage: bash scripts/tile_sweep.sh [OUTDIR]   (after gpu-test.sh has built)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/build-gpu/out}}
for tiles in "" "scan=128x32x32" "scan=64x32x32" "scan=64x64x16" \
             "state=64x128x32" "state=64x256x16" "state=64x64x64" "state=32x128x32" "state=64x128x16" "bmm=128x64" "bmm=64x128"; do
  "$root/build-gpu/ssdgen" bench fwd --preset nemotronh-56b --batch 4 --seqlen 2048 --iters 50 ${tiles:+--tiles $tiles} \
    | grep -E "^bench|chunk_scan|chunk_state|bmm_chunk|total" | tee -a "$out/tile_sweep.txt"
done
