// What the fused state passes' unit tests (test_state_pass_bwd.cpp, test_state_pass_wgmma.cpp,
// test_state_pass_bwd_wgmma.cpp) and db / dc's (test_bc_bwd_wgmma.cpp) share: the nemotronh-56b config
// of a kernel they vary, tiles as "MxNxK" text to compare tile sets, and substring checks on generated
// source, PTX and ptxas logs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"

namespace statepass_test {

// The nemotronh-56b state pass (h=256, g=8: 32 heads per group, p=64, n=256, chunk 256, bf16) of
// `kernel`: config(arch, flags[, tile]).
struct NemotronhStatePass {
  ssd_kernel_id kernel;

  ssd_kernel_config operator()(ssd_arch arch, uint32_t flags, ssd_tile tile = {}) const {
    ssd_kernel_config c = ssd::default_config(kernel);
    c.arch = arch;
    c.headdim = 64;
    c.dstate = 256;
    c.heads_per_group = 32;
    c.chunk_size = 256;
    c.flags = flags;
    c.tile = tile;
    return c;
  }
};

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
// Occurrences of `what` in `text` (overlapping ones too).
inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

inline std::string tile_text(const ssd_tile& t) {
  return std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k);
}

inline std::set<std::string> tile_texts(const std::vector<ssd_tile>& tiles) {
  std::set<std::string> out;
  for (const ssd_tile& t : tiles) out.insert(tile_text(t));
  return out;
}

}  // namespace statepass_test
