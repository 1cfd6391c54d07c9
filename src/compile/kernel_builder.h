// The JIT pipeline on the host: specialization -> generated unit -> key -> memory / disk cache /
// NVRTC. Needs no GPU. The runtime loads what this returns into a CUDA context.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/disk_cache.h"
#include "codegen/codegen.h"
#include "compile/kernel_key.h"

namespace ssd {

struct BuiltKernel {
  ssd_kernel_config config;  // normalized
  GeneratedUnit unit;
  KernelKey key;
  cache::Entry entry;        // cubin + metadata
  enum class Source { Memory, Disk, Compiled } source = Source::Compiled;
  // From the NVRTC compile in this process (Compiled, and Memory copies of it): the NVRTC + ptxas
  // log and the spill bytes ptxas reported. A kernel loaded from disk has neither (log empty, -1):
  // the cache keeps only the cubin and its register / shared memory figures.
  std::string compile_log;
  int32_t spill_bytes = -1;
  std::string ptx;  // the compile's PTX, kept only by a builder made with keep_ptx (tests)
};

class KernelBuilder {
 public:
  // `cache` may be null (no disk cache). It must outlive the builder.
  // keep_ptx: kernels compiled here also keep their PTX (one compile gives both; for audits).
  explicit KernelBuilder(cache::DiskCache* cache, bool keep_ptx = false);

  // Everything up to the key, without compiling (for `ssdgen key` / `emit`).
  struct Plan {
    ssd_kernel_config config;
    GeneratedUnit unit;
    KernelKey key;
  };
  Result<Plan> plan(const ssd_kernel_config& config) const;

  // Memory, then disk, then NVRTC. Thread-safe; one compile per key per process.
  Result<std::shared_ptr<const BuiltKernel>> build(const ssd_kernel_config& config);

  // Builds a batch on `jobs` threads; results in input order. `progress(done, total)` is called
  // after each one (from worker threads, serialized).
  std::vector<Result<std::shared_ptr<const BuiltKernel>>> build_many(
      const std::vector<ssd_kernel_config>& configs, int jobs,
      const std::function<void(size_t, size_t)>& progress = {});

 private:
  cache::DiskCache* cache_;
  bool keep_ptx_ = false;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const BuiltKernel>> memory_;
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> key_locks_;
};

const char* source_name(BuiltKernel::Source source);  // "memory", "disk", "compiled"

}  // namespace ssd
