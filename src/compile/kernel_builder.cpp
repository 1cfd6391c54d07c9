#include "compile/kernel_builder.h"

#include <atomic>
#include <chrono>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "common/sha256.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"

namespace ssd {

const char* source_name(BuiltKernel::Source source) {
  switch (source) {
    case BuiltKernel::Source::Memory: return "memory";
    case BuiltKernel::Source::Disk: return "disk";
    default: return "compiled";
  }
}

KernelBuilder::KernelBuilder(cache::DiskCache* cache, bool keep_ptx) : cache_(cache), keep_ptx_(keep_ptx) {}

Result<KernelBuilder::Plan> KernelBuilder::plan(const ssd_kernel_config& config) const {
  Plan p;
  SSD_ASSIGN_OR_RETURN(p.config, normalize_config(config));
  SSD_ASSIGN_OR_RETURN(p.unit, generate_unit(p.config));
  p.key = make_key(p.config, p.unit, compile_options(p.config.arch), nvrtc_version());
  return p;
}

Result<std::shared_ptr<const BuiltKernel>> KernelBuilder::build(const ssd_kernel_config& config) {
  Plan p;
  SSD_ASSIGN_OR_RETURN(p, plan(config));

  // A copy of the kernel built before in this process, marked as found in memory (mutex_ held).
  auto from_memory = [&]() -> std::shared_ptr<const BuiltKernel> {
    auto it = memory_.find(p.key.hex);
    if (it == memory_.end()) return nullptr;
    auto copy = std::make_shared<BuiltKernel>(*it->second);
    copy->source = BuiltKernel::Source::Memory;
    return copy;
  };
  std::shared_ptr<std::mutex> key_lock;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto hit = from_memory()) return hit;
    auto& slot = key_locks_[p.key.hex];
    if (!slot) slot = std::make_shared<std::mutex>();
    key_lock = slot;
  }
  // One compile per key per process: later callers wait here, then find it in memory.
  std::lock_guard<std::mutex> compile_lock(*key_lock);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto hit = from_memory()) return hit;
  }

  bool compiled_here = false;
  std::string compile_log;
  int32_t spill_bytes = -1;
  std::string ptx;
  auto compile = [&]() -> Result<cache::Entry> {
    compiled_here = true;
    CompiledCubin cubin;
    SSD_ASSIGN_OR_RETURN(cubin, compile_cubin(p.unit, p.config.arch, keep_ptx_));
    compile_log = cubin.log;
    spill_bytes = cubin.report.spill_bytes;
    ptx = std::move(cubin.ptx);
    cache::Entry e;
    e.info.key = p.key.hex;
    e.info.key_record = p.key.record;
    e.info.kernel = kernel_name(p.config.kernel);
    e.info.spec_json = config_to_json(p.config).dump();
    e.info.symbol = p.unit.symbol;
    e.info.arch = arch_name(p.config.arch);
    e.info.toolchain = "nvrtc " + nvrtc_version();
    e.info.registers = cubin.report.registers;
    e.info.shared_bytes = cubin.report.shared_bytes;
    e.cubin = std::move(cubin.cubin);
    e.cubin_sha256 = sha256_hex(e.cubin.data(), e.cubin.size());
    e.created_unix = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    return e;
  };

  cache::Entry entry;
  SSD_ASSIGN_OR_RETURN(entry, cache_ ? cache_->get_or_compile(p.key.hex, p.key.record, compile) : compile());
  if (entry.info.symbol != p.unit.symbol)
    return make_error(SSD_ERROR_INTERNAL, fmt::format("cache entry {} names symbol '{}', expected '{}'", p.key.hex,
                                                      entry.info.symbol, p.unit.symbol));

  auto built = std::make_shared<BuiltKernel>();
  built->config = p.config;
  built->unit = std::move(p.unit);
  built->key = std::move(p.key);
  built->entry = std::move(entry);
  built->source = compiled_here ? BuiltKernel::Source::Compiled : BuiltKernel::Source::Disk;
  built->compile_log = std::move(compile_log);
  built->spill_bytes = spill_bytes;
  built->ptx = std::move(ptx);
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.emplace(built->key.hex, built);
  return std::shared_ptr<const BuiltKernel>(built);
}

std::vector<Result<std::shared_ptr<const BuiltKernel>>> KernelBuilder::build_many(
    const std::vector<ssd_kernel_config>& configs, int jobs, const std::function<void(size_t, size_t)>& progress) {
  std::vector<Result<std::shared_ptr<const BuiltKernel>>> results(
      configs.size(), Result<std::shared_ptr<const BuiltKernel>>(make_error(SSD_ERROR_INTERNAL, "not built")));
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex progress_mutex;
  auto worker = [&]() {
    for (size_t i = next++; i < configs.size(); i = next++) {
      // An exception must not leave a worker thread (std::terminate): it becomes that kernel's error.
      try {
        results[i] = build(configs[i]);
      } catch (const std::bad_alloc&) {
        results[i] = Status(make_error(SSD_ERROR_OUT_OF_MEMORY, "host allocation failed"));
      } catch (const std::exception& e) {
        results[i] = Status(make_error(SSD_ERROR_INTERNAL, std::string("unexpected exception: ") + e.what()));
      } catch (...) {
        results[i] = Status(make_error(SSD_ERROR_INTERNAL, "unexpected exception"));
      }
      try {
        std::lock_guard<std::mutex> lock(progress_mutex);
        ++done;
        if (progress) progress(done, configs.size());
      } catch (...) {  // a throwing progress callback must not terminate the process
      }
    }
  };
  jobs = std::max(1, std::min<int>(jobs, int(configs.size())));
  std::vector<std::thread> threads;
  // The process may refuse more threads (std::system_error) while this runs inside a host
  // application (prepare): then the threads made so far and this one share the work.
  try {
    for (int t = 1; t < jobs; ++t) threads.emplace_back(worker);
  } catch (...) {
  }
  worker();
  for (std::thread& t : threads) t.join();
  return results;
}

}  // namespace ssd
