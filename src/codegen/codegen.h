// Code generation: a normalized specialization -> a small CUDA translation unit that includes a
// template header and instantiates it with constexpr tile parameters.
#pragma once

#include <string>
#include <vector>

#include "codegen/embedded.h"
#include "common/status.h"
#include "ssd/ssd.h"

namespace ssd {

struct GeneratedUnit {
  std::string file_name;             // e.g. "chunk_cumsum_fwd.cu" (NVRTC program name)
  std::string source;                // the translation unit
  std::string symbol;                // extern "C" __global__ entry point
  std::vector<std::string> headers;  // template headers it includes, transitively, sorted
  int32_t block_threads = 0;
  int32_t dynamic_shared_bytes = 0;
  int32_t param_count = 1;  // the entry point's parameters (family_unit: one block, `params`)
};

// `config` must be normalized (normalize_config).
Result<GeneratedUnit> generate_unit(const ssd_kernel_config& config);

const EmbeddedFile* find_template(const std::string& path);
// Template headers reachable from `source` through #include "..." (sorted, unique).
Result<std::vector<std::string>> template_closure(const std::string& source);

}  // namespace ssd
