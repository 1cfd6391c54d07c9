#include "presets.h"

#include <fmt/format.h>

#include "cli.h"
#include "common/text.h"
#include "config/config.h"

namespace ssdgen {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"small", 32, 64, 64, 1, 256, SSD_DTYPE_BF16, "h=32 p=64 n=64 g=1, chunk 256, bf16"},
      {"nemotronh-56b", 256, 64, 256, 8, 256, SSD_DTYPE_BF16,
       "Nemotron-H 56B mixer: h=256 p=64 n=256 g=8, chunk 256, bf16"},
  };
  return presets;
}

ssd::Result<ModelPreset> find_preset(std::string_view name) {
  std::string names;
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                         fmt::format("preset: unknown '{}' (legal: {})", ssd::printable(name), names));
}

std::vector<ssd_kernel_config> preset_configs(const ModelPreset& p, ssd_arch arch, ssd_mode mode) {
  const nlohmann::json shape = {{"nheads", p.nheads},   {"headdim", p.headdim},       {"dstate", p.dstate},
                                {"ngroups", p.ngroups}, {"chunk_size", p.chunk_size}, {"dtype", ssd::dtype_name(p.dtype)},
                                {"D", "h"},             {"dt_bias", true},            {"dt_softplus", true}};
  auto configs = shape_kernel_configs(shape, arch, mode);
  // The presets are constants of this file: a shape the library refuses is a bug here.
  if (!configs.ok()) throw std::logic_error("preset " + p.name + ": " + configs.status().detail);
  return configs.value();
}

}  // namespace ssdgen
