// chunk_cumsum_fwd / chunk_cumsum_bwd (templates/ssd/chunk_cumsum.cuh): Δ and its chunk-local
// cumulative sum A·Δ, and their gradient with the chunk partials of dA and ddt_bias.
#include <algorithm>

#include "kernels/family.h"
#include "ssd/kernel_params.cuh"

namespace ssd {
namespace {

void cumsum_defaults(ssd_kernel_config& c) { block_kernel_defaults(c, SSD_DTYPE_BF16); }

// The fields both directions share: no shape fields, chunk size, dt's dtype.
Status cumsum_common_validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"dstate", c.dstate},
                                        {"heads_per_group", c.heads_per_group}, {"tile.k", c.tile.k},
                                        {"partials", c.partials}}));
  if (!in_list(c.chunk_size, {16, 32, 64, 128, 256}))
    return field_error(c, "chunk_size", std::to_string(c.chunk_size), int_list({16, 32, 64, 128, 256}));
  if (!in_list(c.dtype, {SSD_DTYPE_BF16, SSD_DTYPE_FP16, SSD_DTYPE_FP32}))
    return field_error(c, "dtype", dtype_text(c.dtype), "bf16, fp16, fp32");
  return Status::Ok();
}

// ---- chunk_cumsum_fwd: m heads per block, n threads (kernel_params.cuh, cumsum_geom).
// 16 heads x 256 threads: b * nchunks * h / 16 blocks, and 16 positions per thread in the parallel phase.
ssd_tile fwd_default_tile(const ssd_kernel_config&) { return ssd_tile{16, 256, 0, 0, 0}; }

Status fwd_validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(cumsum_common_validate(c));
  const ssd_tile d = fwd_default_tile(c);
  const int m = c.tile.m ? c.tile.m : d.m, n = c.tile.n ? c.tile.n : d.n;
  if (const char* why = ssd_kernels::cumsum_geom::fwd_tile_problem(c.chunk_size, m, n))
    return field_error(c, "tile", std::to_string(m) + "x" + std::to_string(n), why);
  return Status::Ok();
}

std::vector<ssd_tile> fwd_legal_tiles(const ssd_kernel_config& c) {
  std::vector<ssd_tile> tiles;
  for (int m : {8, 16, 32})
    for (int n : {64, 128, 256})
      if (!ssd_kernels::cumsum_geom::fwd_tile_problem(c.chunk_size, m, n)) tiles.push_back(ssd_tile{m, n, 0, 0, 0});
  return tiles;
}

// The Spec members both directions share: the tile's m is kBlockH; its n is the forward's
// kThreads and the backward's kBlockL.
SpecWriter cumsum_members(const ssd_kernel_config& c, const char* m_comment, const char* n_name,
                          const char* n_comment) {
  SpecWriter s;
  s.integer("kChunk", c.chunk_size)
      .integer("kBlockH", c.tile.m, m_comment)
      .integer(n_name, c.tile.n, n_comment)
      .element("Element", c.dtype)
      .boolean("kHasBias", c.flags & SSD_FLAG_DT_BIAS)
      .boolean("kSoftplus", c.flags & SSD_FLAG_DT_SOFTPLUS);
  return s;
}

KernelSpec fwd_spec(const ssd_kernel_config& c) {
  return {cumsum_members(c, "heads per block, one scanning thread each", "kThreads", "threads per block").members(),
          c.tile.n, 0};
}

// ---- chunk_cumsum_bwd: m heads per block (one thread each), n positions staged per step.
Status cumsum_validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(cumsum_common_validate(c));
  if (!in_list(c.tile.m, {0, 8, 16, 32, 64, 128}))
    return field_error(c, "tile.m", std::to_string(c.tile.m), "0 (default), 8, 16, 32, 64, 128");
  if (!in_list(c.tile.n, {0, 8, 16, 32, 64}) || c.tile.n > c.chunk_size)
    return field_error(c, "tile.n", std::to_string(c.tile.n), "0 (default), 8, 16, 32, 64; at most chunk_size");
  // Four fp32 staging tiles of m x (n + 1) and m x n flag bytes must fit in 48 KiB of static shared memory.
  if (c.tile.m * c.tile.n > 2048)
    return field_error(c, "tile", std::to_string(c.tile.m) + "x" + std::to_string(c.tile.n), "m * n <= 2048");
  return Status::Ok();
}

// One thread scans one head; cumsum_geom::bwd_threads threads per block load and compute Δ (16 per
// head at 32 heads: 512 threads, two blocks per SM at nemotronh-56b b=4 L=2048, where Δ's softplus
// and sigmoid bound the kernel); 32 heads keep the (b, L, h) loads 64 B wide for bf16. 32 positions
// are staged through shared memory per step. (docs/perf.md, backward log: "chunk_cumsum_bwd".)
ssd_tile cumsum_default_tile(const ssd_kernel_config& c) { return ssd_tile{32, std::min(32, c.chunk_size), 0, 0, 0}; }

std::vector<ssd_tile> cumsum_legal_tiles(const ssd_kernel_config& c) {
  std::vector<ssd_tile> tiles;
  for (int m : {8, 16, 32, 64, 128})
    for (int n : {8, 16, 32, 64})
      if (n <= c.chunk_size && m * n <= 2048) tiles.push_back(ssd_tile{m, n, 0, 0, 0});
  return tiles;
}

KernelSpec bwd_spec(const ssd_kernel_config& c) {
  SpecWriter s = cumsum_members(c, "heads per block, one thread each", "kBlockL", "positions staged per step");
  s.boolean("kDeterministic", c.mode == SSD_MODE_DETERMINISTIC)
      .boolean("kIncrements", c.flags & SSD_FLAG_DDA_INCREMENTS);  // ddA is w.r.t. the increments a_l
  return {s.members(), ssd_kernels::cumsum_geom::bwd_threads(c.tile.m), 0};
}

}  // namespace

extern const KernelFamily kChunkCumsumFwdFamily = {
    SSD_KERNEL_CHUNK_CUMSUM_FWD, "chunk_cumsum_fwd", "ssd/chunk_cumsum.cuh", "ChunkCumsumFwdParams",
    "chunk_cumsum_fwd", SSD_FLAG_DT_BIAS | SSD_FLAG_DT_SOFTPLUS, cumsum_defaults, fwd_validate, fwd_default_tile,
    fwd_legal_tiles, fwd_spec};

extern const KernelFamily kChunkCumsumBwdFamily = {
    SSD_KERNEL_CHUNK_CUMSUM_BWD, "chunk_cumsum_bwd", "ssd/chunk_cumsum.cuh", "ChunkCumsumBwdParams",
    "chunk_cumsum_bwd", SSD_FLAG_DT_BIAS | SSD_FLAG_DT_SOFTPLUS | SSD_FLAG_DDA_INCREMENTS, cumsum_defaults,
    cumsum_validate, cumsum_default_tile, cumsum_legal_tiles, bwd_spec};

}  // namespace ssd
