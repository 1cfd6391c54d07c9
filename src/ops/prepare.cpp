#include "ops/prepare.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "common/struct_io.h"
#include "config/config.h"
#include "ops/ssd_backward.h"
#include "ops/ssd_forward.h"

namespace ssd {
namespace {

// Stands in for device pointers during validation. Never dereferenced (the host never reads
// tensor data); aligned for every element size and the 256-byte workspace rule.
void* placeholder() { return reinterpret_cast<void*>(uintptr_t{1} << 12); }

// Given (non-NULL) tensors keep counting as given, with a placeholder pointer; NULL ones that the
// call requires get one too, so that prepare needs no memory yet.
void stand_in(ssd_tensor& t, bool required) {
  if (t.data || required) t.data = placeholder();
}

ssd_forward_args forward_stand_ins(ssd_forward_args a) {
  const bool z = a.z.data != nullptr;
  for (ssd_tensor* t : {&a.x, &a.dt, &a.A, &a.B, &a.C, &a.out}) stand_in(*t, true);
  stand_in(a.out_x, z);
  for (ssd_tensor* t : {&a.D, &a.z, &a.dt_bias, &a.initial_states, &a.seq_idx, &a.final_states}) stand_in(*t, false);
  a.workspace = nullptr;
  a.workspace_bytes = 0;
  return a;
}

ssd_backward_args backward_stand_ins(ssd_backward_args a) {
  const bool z = a.z.data != nullptr, D = a.D.data != nullptr, bias = a.dt_bias.data != nullptr,
             init = a.initial_states.data != nullptr;
  for (ssd_tensor* t : {&a.x, &a.dt, &a.A, &a.B, &a.C, &a.dout, &a.dx, &a.ddt, &a.dA, &a.dB, &a.dC})
    stand_in(*t, true);
  stand_in(a.out_x, z);
  stand_in(a.dz, z);
  stand_in(a.dD, D);
  stand_in(a.ddt_bias, bias);
  stand_in(a.dinitial_states, init);
  for (ssd_tensor* t : {&a.D, &a.z, &a.dt_bias, &a.initial_states, &a.seq_idx, &a.dfinal_states})
    stand_in(*t, false);
  return a;
}

// Normalized and de-duplicated (the backward's list names a reduction twice for some flags).
Result<std::vector<ssd_kernel_config>> unique_normalized(const std::vector<ssd_kernel_config>& configs) {
  std::vector<ssd_kernel_config> out;
  std::set<std::string> seen;
  for (const ssd_kernel_config& c : configs) {
    auto n = normalize_config(c);
    if (!n.ok()) return n.status();
    if (seen.insert(config_record(n.value())).second) out.push_back(n.value());
  }
  return out;
}

Result<ssd_prepare_options> read_options(const ssd_prepare_options* user) {
  if (!user) return default_prepare_options();
  auto o = read_sized_struct(user, default_prepare_options(), "options",
                             offsetof(ssd_prepare_options, jobs) + sizeof(int32_t));
  if (!o.ok()) return o.status();
  const ssd_prepare_options& v = o.value();
  if (v.arch != 0 && v.arch != SSD_ARCH_SM80 && v.arch != SSD_ARCH_SM90 && v.arch != SSD_ARCH_SM90A)
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("options.arch: {} (legal: 0 the runtime's, 80, 90, 901)", v.arch));
  if (v.mode != -1 && v.mode != SSD_MODE_DETERMINISTIC && v.mode != SSD_MODE_FAST)
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("options.mode: {} (legal: -1 the call's, 0 deterministic, 1 fast)", v.mode));
  if (v.jobs < 0 || v.jobs > kMaxCompileJobs)
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("options.jobs: {} (legal: 0 one per CPU, 1..{})", v.jobs, kMaxCompileJobs));
  return v;
}

// The runtime to build into: the caller's, or a temporary one with the default settings.
struct Target {
  std::unique_ptr<ssd_runtime> owned;
  ssd_runtime* rt = nullptr;
};

Result<Target> target_runtime(ssd_runtime* runtime) {
  Target t;
  if (runtime) {
    t.rt = runtime;
    return t;
  }
  ssd_runtime_options o{};
  o.struct_size = sizeof(o);
  o.mode = SSD_MODE_DETERMINISTIC;
  o.cache_mode = -1;
  auto rt = create_runtime(o);
  if (!rt.ok()) return rt.status();
  t.owned = std::move(rt).value();
  t.rt = t.owned.get();
  return t;
}

Result<ssd_arch> resolve_arch(ssd_runtime& rt, const ssd_prepare_options& o) {
  if (o.arch != 0) return ssd_arch(o.arch);
  auto arch = runtime_arch(rt);
  if (!arch.ok())
    return make_error(arch.status().code, arch.status().detail +
                                              " (options.arch is 0 and the runtime has no arch: give options.arch "
                                              "to prepare without a device)");
  return arch;
}

// The call's configs, normalized and de-duplicated. On sm_90a a call whose x, B, C (or dout) do not fit the
// tensor maps (a view aligned only to its elements, strides off the 16-byte grid) runs the cp.async
// kernels instead of the TMA ones (SSD_FLAG_TMA, ssd_forward.cpp and ssd_backward.cpp): the shapes alone cannot tell, so
// the configs with `cp_async` tuning (the TMA paths off) join them there.
template <class Configs, class Tuning>
Result<std::vector<ssd_kernel_config>> with_cp_async_twins(ssd_arch arch, Configs configs_with, const Tuning* cp_async) {
  auto configs = configs_with(nullptr);
  if (!configs.ok()) return configs.status();
  std::vector<ssd_kernel_config> all = configs.value();
  if (arch == SSD_ARCH_SM90A) {
    auto twins = configs_with(cp_async);
    if (!twins.ok()) return twins.status();
    all.insert(all.end(), twins->begin(), twins->end());
    // Both bmm_chunk_fwd kernels where sm_90a has two (the family's default, mma.sync, and the wgmma
    // kernel's tile): the forward picks one by its grid (batch x chunks x groups, ssd_forward.cpp's
    // bmm_config), which a shape list (b = 1, L = chunk) does not have.
    for (size_t i = 0, n = all.size(); i < n; ++i) {
      if (all[i].kernel != SSD_KERNEL_BMM_CHUNK_FWD || !tile_is_legal(all[i], kBmmWgmmaTile)) continue;
      for (const ssd_tile& t : {default_tile(all[i]), kBmmWgmmaTile}) {
        ssd_kernel_config v = all[i];
        v.tile = t;
        all.push_back(v);
      }
    }
  }
  return unique_normalized(all);
}

}  // namespace

ssd_prepare_options default_prepare_options() {
  ssd_prepare_options o{};
  o.struct_size = sizeof(o);
  o.arch = 0;
  o.mode = -1;
  o.jobs = 0;
  return o;
}

int default_compile_jobs() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = int(std::thread::hardware_concurrency());
  return std::clamp(n, 1, kMaxCompileJobs);
}

Result<std::vector<ssd_kernel_config>> forward_prepare_configs(const ssd_forward_args* user_args, ssd_arch arch,
                                                               ssd_mode mode) {
  auto args = read_sized_struct(user_args, default_forward_args(), "args", sizeof(ssd_forward_args));
  if (!args.ok()) return args.status();
  const ssd_forward_args a = forward_stand_ins(args.value());
  // The workspace layout too: a shape the call would refuse (its workspace size overflows) fails here.
  SSD_RETURN_IF_ERROR(forward_layout(&a).status());
  ForwardTuning cp_async;
  cp_async.cp_async = true;
  return with_cp_async_twins(arch, [&](const ForwardTuning* t) { return forward_kernel_configs(&a, arch, mode, t); },
                             &cp_async);
}

Result<std::vector<ssd_kernel_config>> backward_prepare_configs(const ssd_backward_args* user_args, ssd_arch arch,
                                                                ssd_mode mode) {
  auto args = read_sized_struct(user_args, default_backward_args(), "args", sizeof(ssd_backward_args));
  if (!args.ok()) return args.status();
  const ssd_backward_args a = backward_stand_ins(args.value());
  // The workspace layout too (with the gate's and chunk_cumsum's own checks), as the call does.
  SSD_RETURN_IF_ERROR(backward_layout(&a, mode).status());
  BackwardTuning cp_async;  // the recompute's state pass, the backward's fused one and dx
  cp_async.forward.cp_async = true;
  cp_async.cp_async = true;
  return with_cp_async_twins(arch, [&](const BackwardTuning* t) { return backward_kernel_configs(&a, arch, mode, t); },
                             &cp_async);
}

Result<ssd_prepare_report> build_prepared(KernelBuilder& builder, const std::vector<ssd_kernel_config>& configs,
                                          int32_t jobs) {
  const auto start = std::chrono::steady_clock::now();
  const int threads = jobs > 0 ? jobs : default_compile_jobs();
  auto results = builder.build_many(configs, threads);
  ssd_prepare_report r{};
  r.struct_size = sizeof(r);
  r.kernels = int32_t(configs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) {
      const Status& s = results[i].status();
      return make_error(s.code, fmt::format("{}: {}", config_label(configs[i]), s.detail));
    }
    switch (results[i].value()->source) {
      case BuiltKernel::Source::Compiled: ++r.compiled; break;
      case BuiltKernel::Source::Disk: ++r.from_disk; break;
      case BuiltKernel::Source::Memory: ++r.from_memory; break;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

namespace {

// What both entry points do: options; the arguments' own errors first, before anything needs a
// runtime or a driver; the runtime, arch and mode; then the build. `configs_of(arch, mode)` lists
// the call's kernels; `call_mode(runtime_mode)` is the mode the call itself would use. `seconds`
// covers the whole call.
template <class ConfigsOf, class CallMode>
Result<ssd_prepare_report> prepare_call(ssd_runtime* runtime, const ssd_prepare_options* user_options,
                                        ConfigsOf configs_of, CallMode call_mode) {
  const auto start = std::chrono::steady_clock::now();
  auto o = read_options(user_options);
  if (!o.ok()) return o.status();
  SSD_RETURN_IF_ERROR(configs_of(SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC).status());
  auto target = target_runtime(runtime);
  if (!target.ok()) return target.status();
  ssd_runtime& rt = *target->rt;
  auto arch = resolve_arch(rt, o.value());
  if (!arch.ok()) return arch.status();
  Result<ssd_mode> mode = o->mode >= 0 ? Result<ssd_mode>(ssd_mode(o->mode)) : call_mode(ssd_mode(rt.mode));
  if (!mode.ok()) return mode.status();
  auto configs = configs_of(arch.value(), mode.value());
  if (!configs.ok()) return configs.status();
  auto report = build_prepared(*rt.builder, configs.value(), o->jobs);
  if (report.ok())
    report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

Result<ssd_prepare_report> forward_prepare(ssd_runtime* runtime, const ssd_forward_args* args,
                                           const ssd_prepare_options* user_options) {
  return prepare_call(
      runtime, user_options, [&](ssd_arch arch, ssd_mode mode) { return forward_prepare_configs(args, arch, mode); },
      [](ssd_mode runtime_mode) -> Result<ssd_mode> { return runtime_mode; });
}

Result<ssd_prepare_report> backward_prepare(ssd_runtime* runtime, const ssd_backward_args* args,
                                            const ssd_prepare_options* user_options) {
  return prepare_call(
      runtime, user_options, [&](ssd_arch arch, ssd_mode mode) { return backward_prepare_configs(args, arch, mode); },
      [&](ssd_mode runtime_mode) -> Result<ssd_mode> {
        // The call's own rule: args.mode when set (its struct_size covers it), else the runtime's.
        auto a = read_sized_struct(args, default_backward_args(), "args", sizeof(ssd_backward_args));
        if (!a.ok()) return a.status();
        if (a->mode == SSD_MODE_DETERMINISTIC || a->mode == SSD_MODE_FAST) return ssd_mode(a->mode);
        return runtime_mode;
      });
}

}  // namespace ssd
