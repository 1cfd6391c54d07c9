// An operation as a plan: its stages in launch order. A stage is one kernel launch — its name,
// whether it runs for this call, its kernel's config for the call (the caller's tile override
// applied), and how it binds its parameter block and grid. The plan is also the operation's
// kernel list (prepare, `ssdgen compile --shape`, the presets build plan_configs). fetch_plan gets
// every kernel before anything is allocated or launched; launch_plan then launches the stages in
// order (run_plan does both). Each stage names the stages whose outputs it reads (`after`); eager
// launches keep the stream order anyway, and a launch graph (runtime/launch_graph.h) gives a stage's
// node edges to those stages' nodes only, so independent stages run side by side in a replay.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "common/status.h"
#include "runtime/launch_graph.h"
#include "runtime/runtime.h"

namespace ssd {

// Stage::after: every earlier stage (the stream order), or a mask of earlier stages' indices in the
// plan (bit i: stage i; a stage that does not run for the call is passed over). A stage may name
// fewer only if it reads no output of the others and writes nothing they read or write.
inline constexpr uint32_t kAfterEveryStage = ~uint32_t(0);
constexpr uint32_t after_stages(std::initializer_list<int> stages) {
  uint32_t m = 0;
  for (int s : stages) m |= uint32_t(1) << s;
  return m;
}

template <class Call>
struct Stage {
  const char* name;
  int report;                                    // after_stage(report) once enqueued (or skipped); -1: none
  bool (*runs)(const Call& call);                // nullptr: always
  ssd_kernel_config (*config)(const Call& call);
  Status (*launch)(const Call& call, const ssd_kernel& kernel, CUstream stream);
  uint32_t after = kAfterEveryStage;             // the stages whose outputs it reads
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
// While the launches are recorded, each stage's `after` becomes its launch's mask of the earlier
// launches (CallRecording::next_launch_after); a stage records one launch.
// launch_of_stage (optional): each stage's launch in the recording's current segment (-1: none).
template <class Call>
Status launch_plan(const Call& call, const std::vector<Stage<Call>>& stages,
                   const std::vector<const ssd_kernel*>& kernels, CUstream stream,
                   const std::function<void(int)>& after_stage, std::vector<int>* launch_of_stage = nullptr) {
  std::vector<int> local;
  std::vector<int>& launch_of = launch_of_stage ? *launch_of_stage : local;
  launch_of.assign(stages.size(), -1);  // the recorded launch of each stage that ran
  bool one_each = true;  // every stage so far recorded exactly one launch (else masks fall back to all)
  for (size_t i = 0; i < stages.size(); ++i) {
    if (kernels[i]) {
      const int before = CallRecording::recorded_launches();
      if (before >= 0 && one_each && stages[i].after != kAfterEveryStage) {
        uint64_t mask = 0;
        for (size_t j = 0; j < i && j < 32; ++j)
          if ((stages[i].after >> j & 1) && launch_of[j] >= 0 && launch_of[j] < 64) mask |= uint64_t(1) << launch_of[j];
        CallRecording::next_launch_after(mask);
      }
      const Status launched = stages[i].launch(call, *kernels[i], stream);
      // A mask not taken by a launch (the stage launched nothing) must not reach the next stage's.
      if (before >= 0) CallRecording::next_launch_after(RecordedLaunch::kAfterAll);
      SSD_RETURN_IF_ERROR(launched);
      if (before >= 0) {
        if (CallRecording::recorded_launches() == before + 1) {
          launch_of[i] = before;
        } else {
          one_each = false;
        }
      }
    }
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
