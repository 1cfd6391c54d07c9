// Model presets for `ssdgen compile --preset` and the GPU commands: a Mamba2 layer's shape, whose
// kernels are those of an ssd_forward + ssd_backward call of that shape (as `--shape` gives them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ssd/ssd.h"

namespace ssdgen {

struct ModelPreset {
  std::string name;
  int32_t nheads, headdim, dstate, ngroups, chunk_size;
  ssd_dtype dtype;
  std::string description;
};
const std::vector<ModelPreset>& model_presets();
ssd::Result<ModelPreset> find_preset(std::string_view name);
// Every kernel specialization a training step of that model needs, for one arch and mode: the
// kernels of ssd_forward and ssd_backward for the layer's arguments (D per head, dt_bias,
// dt_softplus, no z: the layer gates in its RMSNorm; no seq_idx, no initial states).
std::vector<ssd_kernel_config> preset_configs(const ModelPreset& preset, ssd_arch arch, ssd_mode mode);

}  // namespace ssdgen
