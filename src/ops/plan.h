// An operation as a plan: its stages in launch order. A stage is one kernel launch — its name,
// whether it runs for this call, its kernel's config for the call (the caller's tile override
// applied), and how it binds its parameter block and grid. The plan is also the operation's
// kernel list (prepare, `ssdgen compile --shape`, the presets build plan_configs). fetch_plan gets
// every kernel before anything is allocated or launched; launch_plan then launches the stages in
// order (run_plan does both).
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"
#include "runtime/runtime.h"

namespace ssd {

template <class Call>
struct Stage {
  const char* name;
  int report;                                    // after_stage(report) once enqueued (or skipped); -1: none
  bool (*runs)(const Call& call);                // nullptr: always
  ssd_kernel_config (*config)(const Call& call);
  Status (*launch)(const Call& call, const ssd_kernel& kernel, CUstream stream);
};

template <class Call>
bool stage_runs(const Stage<Call>& s, const Call& call) {
  return !s.runs || s.runs(call);
}

// The configs of the stages that run for this call, in launch order.
template <class Call>
std::vector<ssd_kernel_config> plan_configs(const Call& call, const std::vector<Stage<Call>>& stages) {
  std::vector<ssd_kernel_config> out;
  for (const Stage<Call>& s : stages)
    if (stage_runs(s, call)) out.push_back(s.config(call));
  return out;
}

// The kernel of every stage that runs (null for the others), in stage order.
template <class Call>
Result<std::vector<const ssd_kernel*>> fetch_plan(ssd_runtime& rt, const Call& call,
                                                  const std::vector<Stage<Call>>& stages) {
  std::vector<const ssd_kernel*> kernels(stages.size(), nullptr);
  for (size_t i = 0; i < stages.size(); ++i)
    if (stage_runs(stages[i], call)) SSD_ASSIGN_OR_RETURN(kernels[i], get_kernel(rt, stages[i].config(call)));
  return kernels;
}

// Launches the stages with the kernels fetch_plan gave for this call.
template <class Call>
Status launch_plan(const Call& call, const std::vector<Stage<Call>>& stages,
                   const std::vector<const ssd_kernel*>& kernels, CUstream stream,
                   const std::function<void(int)>& after_stage) {
  for (size_t i = 0; i < stages.size(); ++i) {
    if (kernels[i]) SSD_RETURN_IF_ERROR(stages[i].launch(call, *kernels[i], stream));
    // Reported whether or not the stage ran: a benchmark's events stay in step.
    if (after_stage && stages[i].report >= 0) after_stage(stages[i].report);
  }
  return Status::Ok();
}

// Every kernel first (nothing is launched unless all of them are available), then each stage.
template <class Call>
Status run_plan(ssd_runtime& rt, const Call& call, const std::vector<Stage<Call>>& stages, CUstream stream,
                const std::function<void(int)>& after_stage) {
  std::vector<const ssd_kernel*> kernels;
  SSD_ASSIGN_OR_RETURN(kernels, fetch_plan(rt, call, stages));
  return launch_plan(call, stages, kernels, stream, after_stage);
}

}  // namespace ssd
