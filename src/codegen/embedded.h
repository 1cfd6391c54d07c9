// The CUDA template headers, embedded at build time (cmake/embed_templates.cmake).
#pragma once

#include <string>
#include <vector>

namespace ssd {

struct EmbeddedFile {
  const char* path;     // relative to templates/, e.g. "ssd/chunk_cumsum.cuh"
  const char* content;
};

const std::vector<EmbeddedFile>& embedded_templates();

}  // namespace ssd
