// chunk_scan_bwd_ddA (templates/ssd/chunk_scan_bwd_ddA.cuh) on the CPU: one warp per (b, c, h)
// item, BLOCK / 32 items per block; its legal tiles, the shared rows per warp, and NVRTC compiles of
// every legal tile at the smallest and largest chunk in both modes: the static shared memory the
// geometry names, no block barrier, no spills.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ssd/backward_params.cuh"

using namespace ssd;
namespace geom = ssd_kernels::bwd_geom;

namespace {

ssd_kernel_config dda_config(int chunk, int block, ssd_mode mode) {
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_SCAN_BWD_DDA);
  c.chunk_size = chunk;
  c.flags = SSD_FLAG_SEQ_IDX;
  c.mode = mode;
  c.arch = SSD_ARCH_SM90A;
  c.tile = ssd_tile{block, 0, 0, 0, 0};
  return c;
}

}  // namespace

TEST_CASE("chunk_scan_bwd_ddA: BLOCK is 2, 4 or 8 warps, one (b, c, h) item each; the shared rows fit") {
  const ssd_kernel_config c = dda_config(256, 128, SSD_MODE_DETERMINISTIC);
  std::vector<int> blocks;
  for (const ssd_tile& t : legal_tiles(c)) blocks.push_back(t.m);
  CHECK(blocks == std::vector<int>{64, 128, 256});
  CHECK(default_tile(c).m == 128);
  CHECK(geom::ddA_items_per_block(64) == 2);
  CHECK(geom::ddA_items_per_block(256) == 8);
  // w and v rows of Q + 2 fp64 and a 128-slot ρ buffer per warp; 8 warps at Q = 256: 41 216 bytes.
  CHECK(geom::ddA_warp_doubles(256) == 2 * 258 + 128);
  CHECK(geom::ddA_smem_bytes(256, 256) == 41216);
  for (int q : {64, 128, 256})
    for (int block : blocks) CHECK(geom::ddA_smem_bytes(q, block) <= geom::kMaxStaticSmem);
  ssd_kernel_config bad = c;
  bad.tile.m = 32;
  const Status refused = validate_config(bad);  // one warp is not a legal block
  CHECK(refused.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(refused.detail.find("m in 64, 128, 256") != std::string::npos);
}

TEST_CASE("chunk_scan_bwd_ddA: NVRTC compiles every legal tile (Q = 64, 256, both modes): warp-synchronous, "
          "the geometry's shared rows, no spills") {
  for (ssd_mode mode : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST})
    for (int chunk : {64, 256})
      for (int block : {64, 128, 256}) {
        CAPTURE(mode);
        CAPTURE(chunk);
        CAPTURE(block);
        auto n = normalize_config(dda_config(chunk, block, mode));
        REQUIRE_MESSAGE(n.ok(), n.status().detail);
        auto u = generate_unit(*n);
        REQUIRE_MESSAGE(u.ok(), u.status().detail);
        CHECK(u->block_threads == block);
        auto cubin = compile_cubin(*u, SSD_ARCH_SM90A, /*with_ptx=*/true);
        REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
        INFO(cubin->log);
        // The warps never wait for each other: no bar.sync, only the warp's own bar.warp.sync.
        CHECK(cubin->ptx.find("bar.sync") == std::string::npos);
        CHECK(cubin->ptx.find("barrier.sync") == std::string::npos);
        CHECK(cubin->ptx.find("bar.warp.sync") != std::string::npos);
        if (cubin->report.registers > 0) {
          CHECK(cubin->report.shared_bytes == geom::ddA_smem_bytes(chunk, block));
          CHECK(cubin->report.spill_bytes == 0);
        }
      }
}
