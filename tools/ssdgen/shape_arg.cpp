// A SHAPE of `ssdgen compile --shape` (docs/cli.md; parsed by config_arg.cpp) and of the presets:
// the arguments of an ssd_forward/ssd_backward call, without tensors, expanded into the kernels the
// call uses through the library's own ssd_forward_prepare/ssd_backward_prepare code (same
// validation, same keys). Needs nothing else of the CLI (the unit tests link it).
#include <fmt/format.h>

#include "cli.h"
#include "config/config.h"
#include "ops/prepare.h"
#include "ops/ssd_backward.h"
#include "ops/ssd_forward.h"
#include "ops/tensor_check.h"

namespace ssdgen {
namespace {

ssd::Status shape_error(const std::string& detail) { return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, detail); }

const char* const kKeys[] = {"nheads", "headdim", "dstate", "ngroups", "chunk_size", "dtype", "dt_dtype", "D",
                             "z", "dt_bias", "dt_softplus", "initial_states", "seq_idx", "pass"};

ssd::Result<int64_t> int_field(const nlohmann::json& j, const char* key, int64_t fallback, bool required) {
  if (!j.contains(key)) {
    if (required) return shape_error(fmt::format("shape.{}: missing", key));
    return fallback;
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) return shape_error(fmt::format("shape.{}: expected an integer", key));
  const int64_t n = v.get<int64_t>();
  if (n < 1 || n > (int64_t(1) << 31)) return shape_error(fmt::format("shape.{}: {} (must be positive)", key, n));
  return n;
}

ssd::Result<bool> bool_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return false;
  const nlohmann::json& v = j.at(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) return v.get<int64_t>() == 1;
  if (v.is_string() && (v == "true" || v == "false")) return v == "true";
  return shape_error(fmt::format("shape.{}: expected true/false or 1/0", key));
}

ssd::Result<std::string> string_field(const nlohmann::json& j, const char* key, const char* fallback,
                                      std::initializer_list<const char*> legal) {
  std::string value = fallback;
  if (j.contains(key)) {
    if (!j.at(key).is_string()) return shape_error(fmt::format("shape.{}: expected a string", key));
    value = j.at(key).get<std::string>();
  }
  std::string names;
  for (const char* l : legal) {
    if (value == l) return value;
    names += (names.empty() ? "" : ", ") + std::string(l);
  }
  return shape_error(fmt::format("shape.{}: '{}' (legal: {})", key, value, names));
}

// A fake device address: marks an optional tensor as given (prepare never dereferences it).
void* const kGiven = reinterpret_cast<void*>(uintptr_t{256});

}  // namespace

ssd::Result<std::vector<ssd_kernel_config>> shape_kernel_configs(const nlohmann::json& j, ssd_arch arch,
                                                                  ssd_mode mode) {
  if (!j.is_object()) return shape_error("shape: expected an object of key=value fields");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKeys) known |= it.key() == k;
    if (!known) {
      std::string names;
      for (const char* k : kKeys) names += (names.empty() ? "" : ", ") + std::string(k);
      return shape_error(fmt::format("shape: unknown field '{}' (fields: {})", it.key(), names));
    }
  }
  int64_t h = 0, p = 0, n = 0, g = 0, q = 0;
  SSD_ASSIGN_OR_RETURN(h, int_field(j, "nheads", 0, true));
  SSD_ASSIGN_OR_RETURN(p, int_field(j, "headdim", 0, true));
  SSD_ASSIGN_OR_RETURN(n, int_field(j, "dstate", 0, true));
  SSD_ASSIGN_OR_RETURN(g, int_field(j, "ngroups", 1, false));
  SSD_ASSIGN_OR_RETURN(q, int_field(j, "chunk_size", 256, false));
  std::string dtype_text, dt_text, D, pass;
  SSD_ASSIGN_OR_RETURN(dtype_text, string_field(j, "dtype", "bf16", {"bf16", "fp16"}));
  SSD_ASSIGN_OR_RETURN(dt_text, string_field(j, "dt_dtype", dtype_text.c_str(), {"bf16", "fp16", "fp32"}));
  SSD_ASSIGN_OR_RETURN(D, string_field(j, "D", "none", {"none", "h", "hp"}));
  SSD_ASSIGN_OR_RETURN(pass, string_field(j, "pass", "both", {"forward", "backward", "both"}));
  bool flags[5];
  const char* flag_keys[5] = {"z", "dt_bias", "dt_softplus", "initial_states", "seq_idx"};
  for (int i = 0; i < 5; ++i) SSD_ASSIGN_OR_RETURN(flags[i], bool_field(j, flag_keys[i]));
  const bool z = flags[0], bias = flags[1], softplus = flags[2], init = flags[3], seq = flags[4];
  const ssd_dtype T = *ssd::parse_dtype(dtype_text), DT = *ssd::parse_dtype(dt_text);

  // batch and sequence length select no kernel: one sequence of one chunk stands in.
  const int64_t b = 1, L = q;
  using ssd::contiguous_tensor;
  auto given = [](bool on) { return on ? kGiven : nullptr; };
  const ssd_tensor D_tensor = D == "hp" ? contiguous_tensor(kGiven, SSD_DTYPE_FP32, {h, p})
                                        : contiguous_tensor(given(D == "h"), SSD_DTYPE_FP32, {h});
  std::vector<ssd_kernel_config> out;
  auto append = [&](ssd::Result<std::vector<ssd_kernel_config>> r) -> ssd::Status {
    if (!r.ok()) return r.status();
    out.insert(out.end(), r->begin(), r->end());
    return ssd::Status::Ok();
  };
  // The inputs both directions take, with the same shapes and the options' tensors marked given.
  auto inputs = [&](auto& args) {
    args.chunk_size = int32_t(q);
    args.dt_softplus = softplus;
    args.x = contiguous_tensor(nullptr, T, {b, L, h, p});
    args.dt = contiguous_tensor(nullptr, DT, {b, L, h});
    args.A = contiguous_tensor(nullptr, SSD_DTYPE_FP32, {h});
    args.B = contiguous_tensor(nullptr, T, {b, L, g, n});
    args.C = contiguous_tensor(nullptr, T, {b, L, g, n});
    args.D = D_tensor;
    args.z = contiguous_tensor(given(z), T, {b, L, h, p});
    args.out_x = contiguous_tensor(nullptr, T, {b, L, h, p});
    args.dt_bias = contiguous_tensor(given(bias), SSD_DTYPE_FP32, {h});
    args.initial_states = contiguous_tensor(given(init), SSD_DTYPE_FP32, {b, h, p, n});
    args.seq_idx = contiguous_tensor(given(seq), SSD_DTYPE_INT32, {b, L});
  };
  if (pass != "backward") {
    ssd_forward_args f = ssd::default_forward_args();
    inputs(f);
    f.out = contiguous_tensor(nullptr, T, {b, L, h, p});
    SSD_RETURN_IF_ERROR(append(ssd::forward_prepare_configs(&f, arch, mode)));
  }
  if (pass != "forward") {
    ssd_backward_args a = ssd::default_backward_args();
    inputs(a);
    a.dout = contiguous_tensor(nullptr, T, {b, L, h, p});
    a.dx = contiguous_tensor(nullptr, T, {b, L, h, p});
    a.ddt = contiguous_tensor(nullptr, DT, {b, L, h});
    a.dA = contiguous_tensor(nullptr, SSD_DTYPE_FP32, {h});
    a.dB = contiguous_tensor(nullptr, T, {b, L, g, n});
    a.dC = contiguous_tensor(nullptr, T, {b, L, g, n});
    a.dD = D == "hp" ? contiguous_tensor(nullptr, SSD_DTYPE_FP32, {h, p})
                     : contiguous_tensor(nullptr, SSD_DTYPE_FP32, {h});
    a.dz = contiguous_tensor(nullptr, T, {b, L, h, p});
    a.ddt_bias = contiguous_tensor(nullptr, SSD_DTYPE_FP32, {h});
    a.dinitial_states = contiguous_tensor(nullptr, SSD_DTYPE_FP32, {b, h, p, n});
    a.mode = mode;
    SSD_RETURN_IF_ERROR(append(ssd::backward_prepare_configs(&a, arch, mode)));
  }
  return out;
}

}  // namespace ssdgen
