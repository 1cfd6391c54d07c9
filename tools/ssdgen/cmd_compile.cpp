// `ssdgen compile` (warm the disk cache) and `ssdgen presets`.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "cache/disk_cache.h"
#include "cli.h"
#include "presets.h"
#include "compile/kernel_builder.h"
#include "config/config.h"
#include "ops/prepare.h"

namespace ssdgen {
namespace {

// Presets are compiled for this arch unless --arch is given (the H100/H200 clusters).
constexpr ssd_arch kDefaultPresetArch = SSD_ARCH_SM90A;

using BuildResult = ssd::Result<std::shared_ptr<const ssd::BuiltKernel>>;

// --arch A[,B...] (repeatable) and --mode deterministic|fast|both, shared by compile and presets.
struct Targets {
  std::vector<ssd_arch> archs;  // empty: not given
  std::vector<ssd_mode> modes;  // empty: not given
};

ssd::Status add_archs(Targets* t, const std::string& text) {
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    auto arch = ssd::parse_arch(text.substr(start, comma - start));
    if (!arch.ok()) return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, "--" + arch.status().detail);
    if (std::find(t->archs.begin(), t->archs.end(), arch.value()) == t->archs.end())
      t->archs.push_back(arch.value());
    start = comma + 1;
  }
  return ssd::Status::Ok();
}

ssd::Status set_modes(Targets* t, const std::string& text) {
  if (text == "both") {
    t->modes = {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST};
    return ssd::Status::Ok();
  }
  auto mode = ssd::parse_mode(text);
  if (!mode.ok())
    return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                           fmt::format("--mode: unknown value '{}' (legal: deterministic, fast, both)", text));
  t->modes = {mode.value()};
  return ssd::Status::Ok();
}

std::vector<ssd_arch> preset_archs(const Targets& t) {
  return t.archs.empty() ? std::vector<ssd_arch>{kDefaultPresetArch} : t.archs;
}
std::vector<ssd_mode> preset_modes(const Targets& t) {
  return t.modes.empty() ? std::vector<ssd_mode>{SSD_MODE_DETERMINISTIC, SSD_MODE_FAST} : t.modes;
}

std::vector<ssd_kernel_config> expand_preset(const ModelPreset& p, const Targets& t) {
  std::vector<ssd_kernel_config> out;
  for (ssd_arch arch : preset_archs(t))
    for (ssd_mode mode : preset_modes(t))
      for (const ssd_kernel_config& c : preset_configs(p, arch, mode)) out.push_back(c);
  return out;
}

// Configs from --configs/--config keep their own arch and mode unless --arch/--mode were given.
std::vector<ssd_kernel_config> apply_overrides(const ssd_kernel_config& c, const Targets& t) {
  std::vector<ssd_kernel_config> out;
  const std::vector<ssd_arch> archs = t.archs.empty() ? std::vector<ssd_arch>{c.arch} : t.archs;
  const std::vector<ssd_mode> modes = t.modes.empty() ? std::vector<ssd_mode>{c.mode} : t.modes;
  for (ssd_arch arch : archs)
    for (ssd_mode mode : modes) {
      ssd_kernel_config x = c;
      x.arch = arch;
      x.mode = mode;
      out.push_back(x);
    }
  return out;
}

// `[k/N] label` on stderr (the kernel just finished): rewritten in place on a terminal; otherwise a
// line every ~10% for runs of more than 8 kernels.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) == 1) {}

  void tick(size_t done, const std::string& label) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tty_) {
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s", done, total_, label.c_str());
      std::fflush(stderr);
      drawn_ = true;
    } else if (total_ > 4) {
      const size_t decile = done * 10 / total_;
      if (decile > last_decile_) {
        last_decile_ = decile;
        std::fprintf(stderr, "[%zu/%zu] %s\n", done, total_, label.c_str());
        std::fflush(stderr);
      }
    }
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tty_ && drawn_) {
      std::fputs("\r\033[K", stderr);
      std::fflush(stderr);
    }
  }

 private:
  std::mutex mutex_;
  size_t total_;
  bool tty_;
  bool drawn_ = false;
  size_t last_decile_ = 0;
};

struct Outcome {
  std::optional<BuildResult> result;
  double ms = 0;
};

// Builds every config on `jobs` threads. This is KernelBuilder::build_many's loop, kept here
// because the report needs each kernel's own wall time, which build_many does not give.
std::vector<Outcome> build_all(ssd::KernelBuilder& builder, const std::vector<ssd_kernel_config>& configs,
                               int jobs) {
  std::vector<Outcome> outcomes(configs.size());
  Progress progress(configs.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  auto worker = [&] {
    for (size_t i = next++; i < configs.size(); i = next++) {
      const auto start = std::chrono::steady_clock::now();
      try {
        outcomes[i].result = builder.build(configs[i]);
      } catch (const std::exception& e) {
        outcomes[i].result = BuildResult(ssd::make_error(SSD_ERROR_INTERNAL, e.what()));
      } catch (...) {
        outcomes[i].result = BuildResult(ssd::make_error(SSD_ERROR_INTERNAL, "unknown exception"));
      }
      outcomes[i].ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      progress.tick(++done, ssd::config_label(configs[i]));
    }
  };
  const size_t threads = std::min<size_t>(size_t(std::max(jobs, 1)), configs.size());
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }
  progress.finish();
  return outcomes;
}

// Where the kernels went, for the summary line: the cache root, or that nothing was stored (the
// note before the table said why).
std::string cache_summary(const ssd::cache::Options& options, const ssd::cache::DiskCache& cache) {
  using ssd::cache::Mode;
  if (options.mode == Mode::Off) return "cache: off (nothing stored)";
  if (!cache.disk_enabled()) return fmt::format("cache: none usable at {} (nothing stored)", options.root);
  if (options.mode == Mode::ReadOnly) return fmt::format("cache: {} (readonly: nothing stored)", options.root);
  if (options.mode == Mode::RequireCached) return fmt::format("cache: {} (require-cached)", options.root);
  return fmt::format("cache: {}", options.root);
}

}  // namespace

int cmd_compile(Context& ctx, const std::vector<std::string>& args) {
  struct Source {
    enum Kind { Preset, File, Inline, Shape } kind;
    std::string text;
  };
  std::vector<Source> sources;
  Targets targets;
  int jobs = ssd::default_compile_jobs();  // as ssd_*_prepare: the CPUs this process may use

  ArgCursor cur(args);
  while (!cur.done()) {
    if (auto v = cur.value("--preset")) {
      sources.push_back({Source::Preset, *v});
    } else if (auto v = cur.value("--configs")) {
      sources.push_back({Source::File, *v});
    } else if (auto v = cur.value("--config")) {
      sources.push_back({Source::Inline, *v});
    } else if (auto v = cur.value("--shape")) {
      sources.push_back({Source::Shape, *v});
    } else if (auto v = cur.value("--arch")) {
      if (auto s = add_archs(&targets, *v); !s.ok()) return fail(ctx, s);
    } else if (auto v = cur.value("--mode")) {
      if (auto s = set_modes(&targets, *v); !s.ok()) return fail(ctx, s);
    } else if (auto v = cur.value("--jobs", "-j")) {
      auto n = parse_positive_int(*v, "-j", ssd::kMaxCompileJobs);
      if (!n.ok()) return fail(ctx, n.status());
      jobs = n.value();
    } else if (cur.error()) {
      break;
    } else if (cur.at_option()) {
      return usage_error(ctx, fmt::format("unknown option '{}'", cur.peek()));
    } else {
      return usage_error(ctx, fmt::format("unexpected argument '{}' (use --preset, --configs or --config)",
                                          cur.peek()));
    }
  }
  if (cur.error()) return usage_error(ctx, *cur.error());
  if (sources.empty()) return usage_error(ctx, "nothing to compile: give --preset, --shape, --configs or --config");

  // Expand, validate and de-duplicate (by canonical record) before building anything.
  std::vector<ssd_kernel_config> configs;
  std::set<std::string> seen;
  auto add = [&](const ssd_kernel_config& c, const std::string& origin) -> ssd::Status {
    auto n = ssd::normalize_config(c);
    if (!n.ok()) return ssd::make_error(n.status().code, origin + ": " + n.status().detail);
    if (seen.insert(ssd::config_record(n.value())).second) configs.push_back(n.value());
    return ssd::Status::Ok();
  };
  for (const Source& s : sources) {
    if (s.kind == Source::Preset) {
      auto preset = find_preset(s.text);
      if (!preset.ok()) return fail(ctx, preset.status());
      for (const ssd_kernel_config& c : expand_preset(preset.value(), targets))
        if (auto st = add(c, "preset " + s.text); !st.ok()) return fail(ctx, st);
      continue;
    }
    if (s.kind == Source::Shape) {
      // The kernels of the forward/backward call with this shape, as ssd_*_prepare selects them.
      auto shapes = parse_shape_arg(s.text);
      if (!shapes.ok()) return fail(ctx, ssd::make_error(shapes.status().code, "--shape: " + shapes.status().detail));
      for (size_t i = 0; i < shapes->size(); ++i) {
        const std::string origin =
            shapes->size() == 1 ? std::string("--shape") : fmt::format("--shape {} (shape {})", s.text, i);
        for (ssd_arch arch : preset_archs(targets))
          for (ssd_mode mode : preset_modes(targets)) {
            auto configs = shape_kernel_configs((*shapes)[i], arch, mode);
            if (!configs.ok())
              return fail(ctx, ssd::make_error(configs.status().code, origin + ": " + configs.status().detail));
            for (const ssd_kernel_config& c : configs.value())
              if (auto st = add(c, origin); !st.ok()) return fail(ctx, st);
          }
      }
      continue;
    }
    std::vector<ssd_kernel_config> from;
    if (s.kind == Source::File) {
      auto r = read_configs_file(s.text);
      if (!r.ok()) return fail(ctx, r.status());
      from = std::move(r).value();
    } else {
      auto r = parse_config_arg(s.text);
      if (!r.ok()) return fail(ctx, r.status());
      from.push_back(r.value());
    }
    for (const ssd_kernel_config& c : from)
      for (const ssd_kernel_config& x : apply_overrides(c, targets))
        if (auto st = add(x, s.kind == Source::File ? s.text : std::string("--config")); !st.ok())
          return fail(ctx, st);
  }

  auto options = ssd::cache::options_from_env();
  if (!options.ok()) return fail(ctx, options.status());
  std::unique_ptr<ssd::cache::DiskCache> opened = open_disk_cache(options.value());
  ssd::cache::DiskCache& cache = *opened;

  if (options.value().mode == ssd::cache::Mode::Off) {
    note("SSD_CACHE_MODE=off: kernels are compiled but not stored");
  } else if (!cache.disk_enabled()) {
    const std::string why = cache.disabled_reason().empty() ? std::string("unknown reason") : cache.disabled_reason();
    if (options.value().mode == ssd::cache::Mode::RequireCached)
      note(fmt::format("disk cache unavailable ({}): under SSD_CACHE_MODE=require-cached every kernel is a miss", why));
    else
      note(fmt::format("disk cache disabled ({}): kernels are compiled but not stored", why));
  } else if (options.value().mode == ssd::cache::Mode::ReadOnly) {
    note("SSD_CACHE_MODE=readonly: newly compiled kernels are not stored");
  }

  ssd::KernelBuilder builder(&cache);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Outcome> outcomes = build_all(builder, configs, jobs);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  size_t compiled = 0, cached = 0, failed = 0;
  ssd_status first_failure = SSD_OK;
  size_t label_width = 0;
  for (const ssd_kernel_config& c : configs) label_width = std::max(label_width, ssd::config_label(c).size());

  nlohmann::json kernels = nlohmann::json::array();
  std::string text;
  for (size_t i = 0; i < configs.size(); ++i) {
    const BuildResult& r = *outcomes[i].result;
    const std::string label = ssd::config_label(configs[i]);
    if (!r.ok()) {
      ++failed;
      if (first_failure == SSD_OK) first_failure = r.status().code;
      text += fmt::format("{:<8}  {:<{}}  {}\n", "failed", label, label_width, status_name(r.status().code));
      kernels.push_back({{"status", "failed"},
                         {"label", label},
                         {"config", ssd::config_to_json(configs[i])},
                         {"error", {{"status", status_name(r.status().code)}, {"detail", r.status().detail}}},
                         {"ms", outcomes[i].ms}});
      continue;
    }
    const ssd::BuiltKernel& k = *r.value();
    if (k.source == ssd::BuiltKernel::Source::Compiled) ++compiled; else ++cached;
    const int regs = k.entry.info.registers;
    text += fmt::format("{:<8}  {:<{}}  key={}  regs={:>3}  {:8.1f} ms\n", ssd::source_name(k.source), label,
                        label_width, k.key.hex.substr(0, 12), regs >= 0 ? std::to_string(regs) : "?",
                        outcomes[i].ms);
    kernels.push_back({{"status", ssd::source_name(k.source)},
                       {"label", label},
                       {"config", ssd::config_to_json(k.config)},
                       {"key", k.key.hex},
                       {"symbol", k.unit.symbol},
                       {"registers", regs},
                       {"shared_bytes", k.entry.info.shared_bytes},
                       {"cubin_bytes", k.entry.cubin.size()},
                       {"cubin_sha256", k.entry.cubin_sha256},
                       {"ms", outcomes[i].ms}});
  }

  if (ctx.json) {
    print_json({{"cache",
                 {{"root", options.value().root},
                  {"mode", ssd::cache::mode_name(options.value().mode)},
                  {"enabled", cache.disk_enabled()},
                  {"disabled_reason", cache.disabled_reason()}}},
                {"kernels", kernels},
                {"summary",
                 {{"kernels", configs.size()},
                  {"compiled", compiled},
                  {"cached", cached},
                  {"failed", failed},
                  {"seconds", seconds}}}});
  } else {
    text += fmt::format("{} kernels: {} compiled, {} from cache, {} failed ({:.1f} s); {}\n", configs.size(), compiled,
                        cached, failed, seconds, cache_summary(options.value(), cache));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

  // The full detail of each failure (compile log, missing key) on stderr, after the table.
  for (size_t i = 0; i < configs.size(); ++i) {
    const BuildResult& r = *outcomes[i].result;
    if (!r.ok()) fail_stderr(r.status().code, ssd::config_label(configs[i]) + ": " + r.status().detail);
  }
  return first_failure == SSD_OK ? kExitOk : exit_code_for(first_failure);
}

int cmd_presets(Context& ctx, const std::vector<std::string>& args) {
  Targets targets;
  ArgCursor cur(args);
  while (!cur.done()) {
    if (auto v = cur.value("--arch")) {
      if (auto s = add_archs(&targets, *v); !s.ok()) return fail(ctx, s);
    } else if (auto v = cur.value("--mode")) {
      if (auto s = set_modes(&targets, *v); !s.ok()) return fail(ctx, s);
    } else if (cur.error()) {
      break;
    } else if (cur.at_option()) {
      return usage_error(ctx, fmt::format("unknown option '{}'", cur.peek()));
    } else {
      return usage_error(ctx, fmt::format("unexpected argument '{}'", cur.peek()));
    }
  }
  if (cur.error()) return usage_error(ctx, *cur.error());

  std::string archs, modes;
  for (ssd_arch a : preset_archs(targets)) archs += (archs.empty() ? "" : ",") + std::string(ssd::arch_name(a));
  for (ssd_mode m : preset_modes(targets)) modes += (modes.empty() ? "" : ",") + std::string(ssd::mode_name(m));

  if (ctx.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const ModelPreset& p : model_presets()) {
      nlohmann::json cfgs = nlohmann::json::array();
      for (const ssd_kernel_config& c : expand_preset(p, targets)) cfgs.push_back(ssd::config_to_json(c));
      list.push_back({{"name", p.name},
                      {"description", p.description},
                      {"nheads", p.nheads},
                      {"headdim", p.headdim},
                      {"dstate", p.dstate},
                      {"ngroups", p.ngroups},
                      {"chunk_size", p.chunk_size},
                      {"dtype", ssd::dtype_name(p.dtype)},
                      {"kernels", cfgs.size()},
                      {"configs", cfgs}});
    }
    print_json({{"arch", archs}, {"modes", modes}, {"presets", list}});
    return kExitOk;
  }

  size_t width = 4;
  for (const ModelPreset& p : model_presets()) width = std::max(width, p.name.size());
  std::string text = fmt::format("{:<{}}  {:>7}  {}\n", "NAME", width, "KERNELS", "DESCRIPTION");
  for (const ModelPreset& p : model_presets())
    text += fmt::format("{:<{}}  {:>7}  {}\n", p.name, width, expand_preset(p, targets).size(), p.description);
  text += fmt::format("(kernel counts for arch {}, mode {})\n", archs, modes);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

}  // namespace ssdgen
