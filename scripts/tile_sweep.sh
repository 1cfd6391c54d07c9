#!/usr/bin/env bash
# Times candidate tiles of the forward's and the backward's matmul stages at the preset shape (device
# machine), to pick defaults offline. Every legal tile gives the same bits (the D2 tests), so this is
# only about speed. Usage: bash scripts/tile_sweep.sh [OUTDIR] [fwd|bwd|both]   (after gpu-test.sh has built)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/build-gpu/out}}
which=${2:-both}
export SSD_CACHE_DIR=${SSD_CACHE_DIR:-$(mktemp -d)}
[ "$which" = bwd ] || for tiles in "" "scan=128x32x32" "scan=64x32x32" "scan=64x64x16" \
             "state_pass=128x128x64" "state_pass=64x128x32" "state_pass=64x128x64" "state_pass=64x64x64" "state_pass=128x64x32" "bmm=128x64" "bmm=64x128" "bmm=64x64" "bmm=64x64x64"; do
  "$root/build-gpu/ssdgen" bench fwd --preset nemotronh-56b --batch 4 --seqlen 2048 --iters 50 ${tiles:+--tiles $tiles} \
    | grep -E "^bench|chunk_scan|chunk_state_passing|bmm_chunk|total" | tee -a "$out/tile_sweep.txt"
done
[ "$which" = fwd ] || for tiles in "" "dx=64x0x16" "dx=128x0x16" "dx=128x0x32" \
    "dcb=128x64x32" "dcb=64x128x32" "dcb=32x64x64" "dcb=64x64x16" "dcb=128x128x32" \
    "intra=64x16x32" "intra=128x16x32" "intra=128x32x32" "intra=64x32x64" "intra=64x32x16" \
    "db=64x128x32" "db=128x64x32" "db=32x128x32" "db=128x128x16" "dc=64x128x32" "dc=128x64x32" "dc=32x128x32" \
    "state_pass=64x64x64" "state_pass=64x128x32" "state_pass=32x64x64" "state_pass=64x64x32" "state_pass=64x256x32" \
    "staged:" "staged:dstates=64x256x16" "staged:dstates=32x128x32" "staged:dstates=64x64x32" "staged:passing=128" \
    "staged:passing=512"; do
  # staged: the pair chunk_scan_bwd_dstates + state_passing_bwd (bench bwd --staged) instead of the fused
  # chunk_state_passing_bwd (whose tile is state_pass=).
  staged=
  case $tiles in staged:*) staged=--staged; tiles=${tiles#staged:} ;; esac
  "$root/build-gpu/ssdgen" bench bwd --preset nemotronh-56b --batch 4 --seqlen 2048 --iters 20 --warmup 3 $staged \
    ${tiles:+--tiles $tiles} 2>&1 | sed -n '1,13p' | grep -E "^bench|ssdgen:|${tiles:+${tiles%%=*}|}dstates|state_passing|total" \
    | tee -a "$out/tile_sweep.txt"
done
