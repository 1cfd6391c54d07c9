// ssd_forward_prepare / ssd_backward_prepare: the kernels a call needs, built ahead of the call on
// the host (memory, disk cache or NVRTC, in parallel). No device, no driver, no launch.
#pragma once

#include <vector>

#include "common/status.h"
#include "compile/kernel_builder.h"
#include "runtime/runtime.h"

namespace ssd {

ssd_prepare_options default_prepare_options();

// The kernel specializations ssd_forward / ssd_backward use for these arguments, validated as the
// calls validate them but with tensor pointers replaced by placeholders (a required tensor may be
// NULL; a non-NULL optional one counts as given). Duplicates removed, in launch order.
Result<std::vector<ssd_kernel_config>> forward_prepare_configs(const ssd_forward_args* args, ssd_arch arch,
                                                               ssd_mode mode);
Result<std::vector<ssd_kernel_config>> backward_prepare_configs(const ssd_backward_args* args, ssd_arch arch,
                                                                ssd_mode mode);

// Builds `configs` on up to `jobs` threads (0: one per CPU this process may run on). Every config is
// attempted; the first failure (in input order) is returned, its detail prefixed with the kernel's
// label.
Result<ssd_prepare_report> build_prepared(KernelBuilder& builder, const std::vector<ssd_kernel_config>& configs,
                                          int32_t jobs);

// The whole entry points (runtime may be null: a temporary one with the default cache settings).
Result<ssd_prepare_report> forward_prepare(ssd_runtime* runtime, const ssd_forward_args* args,
                                           const ssd_prepare_options* options);
Result<ssd_prepare_report> backward_prepare(ssd_runtime* runtime, const ssd_backward_args* args,
                                            const ssd_prepare_options* options);

// The most compile threads a caller may ask for (options.jobs, `ssdgen compile -j`).
constexpr int kMaxCompileJobs = 256;

// Threads for `jobs` = 0: the CPUs in this process's affinity mask, at most kMaxCompileJobs.
int default_compile_jobs();

}  // namespace ssd
