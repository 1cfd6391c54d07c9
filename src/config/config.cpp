#include "config/config.h"

#include <cstddef>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "common/struct_io.h"
#include "common/text.h"
#include "kernels/family.h"

namespace ssd {
namespace {

struct Named {
  int value;
  const char* name;
};

constexpr Named kDtypes[] = {{SSD_DTYPE_BF16, "bf16"}, {SSD_DTYPE_FP16, "fp16"}, {SSD_DTYPE_FP32, "fp32"},
                             {SSD_DTYPE_INT32, "int32"}};
constexpr Named kModes[] = {{SSD_MODE_DETERMINISTIC, "deterministic"}, {SSD_MODE_FAST, "fast"}};
constexpr Named kArchs[] = {{SSD_ARCH_SM80, "sm_80"}, {SSD_ARCH_SM90, "sm_90"}, {SSD_ARCH_SM90A, "sm_90a"}};
constexpr Named kFlags[] = {{SSD_FLAG_DT_BIAS, "dt_bias"},       {SSD_FLAG_DT_SOFTPLUS, "dt_softplus"},
                             {SSD_FLAG_SEQ_IDX, "seq_idx"},       {SSD_FLAG_D, "D"},
                             {SSD_FLAG_D_PER_HEADDIM, "D_per_headdim"}, {SSD_FLAG_Z, "z"},
                             {SSD_FLAG_INITIAL_STATES, "initial_states"}, {SSD_FLAG_DDA_INCREMENTS, "ddA_increments"},
                             {SSD_FLAG_STATES_IN_DTYPE, "states_in_dtype"},
                             {SSD_FLAG_TWO_TERM_STATES, "two_term_states"}, {SSD_FLAG_TMA, "tma"}};

template <size_t N>
const char* name_of(const Named (&table)[N], int64_t value) {
  for (const Named& n : table)
    if (n.value == value) return n.name;
  return "?";
}

template <size_t N>
std::string legal_names(const Named (&table)[N]) {
  std::string s;
  for (const Named& n : table) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

template <class E, size_t N>
Result<E> parse_named(const Named (&table)[N], std::string_view text, const char* what) {
  for (const Named& n : table)
    if (text == n.name) return static_cast<E>(n.value);
  return make_error(SSD_ERROR_INVALID_CONFIG,
                    fmt::format("{}: unknown value '{}' (legal: {})", what, printable(text), legal_names(table)));
}

// "1 bf16, 2 fp16, ..." for messages about numeric enum values.
template <size_t N>
std::string legal_values(const Named (&table)[N]) {
  std::string s;
  for (const Named& n : table) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n.value, n.name);
  return s;
}

template <size_t N>
bool is_named(const Named (&table)[N], int64_t value) {
  return std::strcmp(name_of(table, value), "?") != 0;
}

// "0x..." for bits without a name.
std::string flags_text_impl(uint32_t flags) {
  std::string s;
  uint32_t known = 0;
  for (const Named& n : kFlags) {
    known |= uint32_t(n.value);
    if (flags & uint32_t(n.value)) s += (s.empty() ? "" : "|") + std::string(n.name);
  }
  if (flags & ~known) s += (s.empty() ? "" : "|") + fmt::format("{:#x}", flags & ~known);
  return s.empty() ? "none" : s;
}

// The kernel names, from the families (src/kernels), in enum order.
std::string kernel_names() {
  std::string s;
  for (const KernelFamily* f : kernel_families()) s += (s.empty() ? "" : ", ") + std::string(f->name);
  return s;
}
std::string kernel_values() {
  std::string s;
  for (const KernelFamily* f : kernel_families()) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", int(f->id), f->name);
  return s;
}

}  // namespace

const char* kernel_name(ssd_kernel_id kernel) {
  const KernelFamily* f = find_family(kernel);
  return f ? f->name : "?";
}
Result<ssd_kernel_id> parse_kernel_name(std::string_view name) {
  for (const KernelFamily* f : kernel_families())
    if (name == f->name) return f->id;
  return make_error(SSD_ERROR_INVALID_CONFIG,
                    fmt::format("kernel: unknown value '{}' (legal: {})", printable(name), kernel_names()));
}
std::string flags_text(uint32_t flags) { return flags_text_impl(flags); }
const char* dtype_name(ssd_dtype dtype) { return name_of(kDtypes, dtype); }
bool is_kernel_value(int64_t value) { return find_family(value) != nullptr; }
bool is_dtype_value(int64_t value) { return is_named(kDtypes, value); }
Result<ssd_dtype> parse_dtype(std::string_view name) { return parse_named<ssd_dtype>(kDtypes, name, "dtype"); }
const char* mode_name(ssd_mode mode) { return name_of(kModes, mode); }
Result<ssd_mode> parse_mode(std::string_view name) { return parse_named<ssd_mode>(kModes, name, "mode"); }
const char* arch_name(ssd_arch arch) { return name_of(kArchs, arch); }
Result<ssd_arch> parse_arch(std::string_view name) { return parse_named<ssd_arch>(kArchs, name, "arch"); }
int arch_compute_capability(ssd_arch arch) { return arch == SSD_ARCH_SM80 ? 80 : 90; }

ssd_kernel_config default_config(ssd_kernel_id kernel) {
  ssd_kernel_config c{};
  c.struct_size = sizeof(ssd_kernel_config);
  c.kernel = kernel;
  c.mode = SSD_MODE_DETERMINISTIC;
  c.arch = SSD_ARCH_SM90;
  // A value that names no kernel takes the first kernel's defaults (validation then names it).
  const KernelFamily* f = find_family(kernel);
  (f ? f : kernel_families().front())->set_defaults(c);
  return c;
}

namespace {

// The enum fields of a config, read as the integers a C caller may have stored: each must name an
// enumerator before anything uses it as the enum type.
Status check_enum_fields(const ssd_kernel_config& c) {
  if (!find_family(enum_value(c.kernel)))
    return make_error(SSD_ERROR_INVALID_CONFIG,
                      fmt::format("kernel: unknown id {} (legal: {})", enum_value(c.kernel), kernel_values()));
  if (!is_named(kDtypes, enum_value(c.dtype)))
    return make_error(SSD_ERROR_INVALID_CONFIG,
                      fmt::format("dtype: unknown value {} (legal: {})", enum_value(c.dtype), legal_values(kDtypes)));
  if (!is_named(kModes, enum_value(c.mode)))
    return make_error(SSD_ERROR_INVALID_CONFIG,
                      fmt::format("mode: unknown value {} (legal: {})", enum_value(c.mode), legal_values(kModes)));
  if (!is_named(kArchs, enum_value(c.arch)))
    return make_error(SSD_ERROR_INVALID_CONFIG,
                      fmt::format("arch: unknown value {} (legal: {})", enum_value(c.arch), legal_values(kArchs)));
  return Status::Ok();
}

}  // namespace

Result<ssd_kernel_config> read_config(const ssd_kernel_config* user) {
  if (!user) return make_error(SSD_ERROR_INVALID_ARGUMENT, "config: NULL pointer");
  constexpr size_t kMinimum = offsetof(ssd_kernel_config, partials);
  if (user->struct_size < kMinimum || user->struct_size > (size_t(1) << 16))
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("config.struct_size: {} (set it to sizeof(ssd_kernel_config) = {})",
                                  user->struct_size, sizeof(ssd_kernel_config)));
  // The enum fields are range-checked as integers before anything reads them as enums; an unknown
  // kernel takes some kernel's defaults until check_enum_fields names it.
  const int64_t kernel = enum_value(user->kernel);
  ssd_kernel_config c =
      default_config(find_family(kernel) ? static_cast<ssd_kernel_id>(kernel) : ssd_kernel_id{});
  std::memcpy(&c, user, std::min(user->struct_size, sizeof(ssd_kernel_config)));
  c.struct_size = sizeof(ssd_kernel_config);
  SSD_RETURN_IF_ERROR(check_enum_fields(c));
  return c;
}

Status validate_config(const ssd_kernel_config& c) {
  // Enum fields as integers first (the struct may come from C); past these checks they are valid.
  SSD_RETURN_IF_ERROR(check_enum_fields(c));
  const KernelFamily& family = *find_family(c.kernel);
  if (c.flags & ~family.allowed_flags) {
    std::string legal;
    for (const Named& n : kFlags)
      if (family.allowed_flags & uint32_t(n.value)) legal += (legal.empty() ? "" : ", ") + std::string(n.name);
    return field_error(c, "flags", flags_text(c.flags), legal.empty() ? "none" : legal);
  }
  // Warps and stages are derived from the tile by every kernel today.
  SSD_RETURN_IF_ERROR(require_zeros(c, {{"tile.warps", c.tile.warps}, {"tile.stages", c.tile.stages}}));
  return family.validate(c);
}

ssd_tile default_tile(const ssd_kernel_config& c) { return find_family(c.kernel)->default_tile(c); }

std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) { return find_family(c.kernel)->legal_tiles(c); }

bool tile_is_legal(const ssd_kernel_config& c, const ssd_tile& t) {
  for (const ssd_tile& l : legal_tiles(c))
    if (l.m == t.m && l.n == t.n && l.k == t.k) return true;
  return false;
}

Result<ssd_kernel_config> normalize_config(const ssd_kernel_config& config) {
  SSD_RETURN_IF_ERROR(validate_config(config));
  ssd_kernel_config c = config;
  c.struct_size = sizeof(ssd_kernel_config);
  ssd_tile d = default_tile(c);
  if (c.tile.m == 0) c.tile.m = d.m;
  if (c.tile.n == 0) c.tile.n = d.n;
  if (c.tile.k == 0) c.tile.k = d.k;
  return c;
}

std::string config_record(const ssd_kernel_config& c) {
  return fmt::format(
      "kernel={}\nheaddim={}\ndstate={}\nchunk_size={}\nheads_per_group={}\ndtype={}\nflags={}\n"
      "tile={}x{}x{}:w{}:s{}\nmode={}\narch={}\npartials={}\n",
      kernel_name(c.kernel), c.headdim, c.dstate, c.chunk_size, c.heads_per_group, dtype_name(c.dtype),
      flags_text(c.flags), c.tile.m, c.tile.n, c.tile.k, c.tile.warps, c.tile.stages, mode_name(c.mode),
      arch_name(c.arch), c.partials);
}

std::string config_label(const ssd_kernel_config& c) {
  std::string s = fmt::format("{} {}", kernel_name(c.kernel), dtype_name(c.dtype));
  if (c.headdim) s += fmt::format(" p={}", c.headdim);
  if (c.dstate) s += fmt::format(" n={}", c.dstate);
  if (c.chunk_size) s += fmt::format(" Q={}", c.chunk_size);
  if (c.heads_per_group) s += fmt::format(" r={}", c.heads_per_group);
  if (c.partials) s += fmt::format(" k={}", c.partials);
  if (c.flags) s += " flags=" + flags_text(c.flags);
  s += fmt::format(" tile={}x{} {} {}", c.tile.m, c.tile.n, c.mode == SSD_MODE_FAST ? "fast" : "det",
                   arch_name(c.arch));
  return s;
}

nlohmann::json config_to_json(const ssd_kernel_config& c) {
  nlohmann::json flags = nlohmann::json::array();
  for (const Named& n : kFlags)
    if (c.flags & uint32_t(n.value)) flags.push_back(n.name);
  return nlohmann::json{{"kernel", kernel_name(c.kernel)},
                        {"headdim", c.headdim},
                        {"dstate", c.dstate},
                        {"chunk_size", c.chunk_size},
                        {"heads_per_group", c.heads_per_group},
                        {"dtype", dtype_name(c.dtype)},
                        {"flags", flags},
                        {"tile", {{"m", c.tile.m}, {"n", c.tile.n}, {"k", c.tile.k}, {"warps", c.tile.warps},
                                  {"stages", c.tile.stages}}},
                        {"mode", mode_name(c.mode)},
                        {"arch", arch_name(c.arch)},
                        {"partials", c.partials}};
}

namespace {

// A short, non-recursive description of a JSON value for error messages. Values may be hostile:
// strings are not dumped as JSON (invalid UTF-8 from a key=value argument would make dump() throw)
// but escaped for printing.
std::string describe(const nlohmann::json& j) {
  if (j.is_string()) return "\"" + printable(shortened(j.get_ref<const std::string&>(), 40)) + "\"";
  if (j.is_number() || j.is_boolean() || j.is_null()) return shortened(j.dump(), 40);  // ASCII
  return std::string("an ") + j.type_name();
}

Result<int32_t> json_int(const nlohmann::json& j, const std::string& field) {
  if (!j.is_number_integer())
    return make_error(SSD_ERROR_INVALID_CONFIG, fmt::format("{}: expected an integer, got {}", field, describe(j)));
  // 2^63 and above are stored unsigned; get<int64_t>() would wrap them to negative numbers.
  if (j.is_number_unsigned() && j.get<uint64_t>() >= (uint64_t(1) << 31))
    return make_error(SSD_ERROR_INVALID_CONFIG, fmt::format("{}: {} is out of range", field, j.get<uint64_t>()));
  int64_t v = j.get<int64_t>();
  if (v < -(int64_t(1) << 31) || v >= (int64_t(1) << 31))
    return make_error(SSD_ERROR_INVALID_CONFIG, fmt::format("{}: {} is out of range", field, v));
  return int32_t(v);
}

Result<std::string> json_string(const nlohmann::json& j, const std::string& field) {
  if (!j.is_string())
    return make_error(SSD_ERROR_INVALID_CONFIG, fmt::format("{}: expected a string, got {}", field, describe(j)));
  return j.get<std::string>();
}

}  // namespace

Result<ssd_kernel_config> config_from_json(const nlohmann::json& j) {
  if (!j.is_object())
    return make_error(SSD_ERROR_INVALID_CONFIG, "config: expected a JSON object");
  if (!j.contains("kernel")) return make_error(SSD_ERROR_INVALID_CONFIG, "kernel: missing (legal: " + kernel_names() + ")");
  std::string kname;
  SSD_ASSIGN_OR_RETURN(kname, json_string(j.at("kernel"), "kernel"));
  ssd_kernel_id kid;
  SSD_ASSIGN_OR_RETURN(kid, parse_kernel_name(kname));
  ssd_kernel_config c = default_config(kid);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "kernel") continue;
    if (k == "headdim") SSD_ASSIGN_OR_RETURN(c.headdim, json_int(v, k));
    else if (k == "dstate") SSD_ASSIGN_OR_RETURN(c.dstate, json_int(v, k));
    else if (k == "chunk_size") SSD_ASSIGN_OR_RETURN(c.chunk_size, json_int(v, k));
    else if (k == "heads_per_group") SSD_ASSIGN_OR_RETURN(c.heads_per_group, json_int(v, k));
    else if (k == "partials") SSD_ASSIGN_OR_RETURN(c.partials, json_int(v, k));
    else if (k == "dtype") {
      std::string s;
      SSD_ASSIGN_OR_RETURN(s, json_string(v, k));
      SSD_ASSIGN_OR_RETURN(c.dtype, parse_dtype(s));
    } else if (k == "mode") {
      std::string s;
      SSD_ASSIGN_OR_RETURN(s, json_string(v, k));
      SSD_ASSIGN_OR_RETURN(c.mode, parse_mode(s));
    } else if (k == "arch") {
      std::string s;
      SSD_ASSIGN_OR_RETURN(s, json_string(v, k));
      SSD_ASSIGN_OR_RETURN(c.arch, parse_arch(s));
    } else if (k == "flags") {
      if (!v.is_array()) return make_error(SSD_ERROR_INVALID_CONFIG, "flags: expected an array of flag names");
      c.flags = 0;
      for (const auto& f : v) {
        std::string s;
        SSD_ASSIGN_OR_RETURN(s, json_string(f, "flags[]"));
        int bit = 0;
        for (const Named& n : kFlags)
          if (s == n.name) bit = n.value;
        if (!bit)
          return make_error(SSD_ERROR_INVALID_CONFIG,
                            fmt::format("flags: unknown flag '{}' (legal: {})", printable(s), legal_names(kFlags)));
        c.flags |= uint32_t(bit);
      }
    } else if (k == "tile") {
      if (!v.is_object()) return make_error(SSD_ERROR_INVALID_CONFIG, "tile: expected an object {m, n, k, warps, stages}");
      for (auto t = v.begin(); t != v.end(); ++t) {
        const std::string f = "tile." + printable(t.key());
        if (t.key() == "m") SSD_ASSIGN_OR_RETURN(c.tile.m, json_int(t.value(), f));
        else if (t.key() == "n") SSD_ASSIGN_OR_RETURN(c.tile.n, json_int(t.value(), f));
        else if (t.key() == "k") SSD_ASSIGN_OR_RETURN(c.tile.k, json_int(t.value(), f));
        else if (t.key() == "warps") SSD_ASSIGN_OR_RETURN(c.tile.warps, json_int(t.value(), f));
        else if (t.key() == "stages") SSD_ASSIGN_OR_RETURN(c.tile.stages, json_int(t.value(), f));
        else return make_error(SSD_ERROR_INVALID_CONFIG, fmt::format("{}: unknown field (legal: m, n, k, warps, stages)", f));
      }
    } else {
      return make_error(SSD_ERROR_INVALID_CONFIG,
                        fmt::format("{}: unknown field (legal: kernel, headdim, dstate, chunk_size, heads_per_group, "
                                    "dtype, flags, tile, mode, arch, partials)", printable(k)));
    }
  }
  SSD_RETURN_IF_ERROR(validate_config(c));
  return c;
}

Result<nlohmann::json> parse_config_json(const std::string& text) {
  using nlohmann::json;
  // Where the parser is: one frame per open object or array, holding the keys seen so far.
  struct Frame {
    bool array = false;
    size_t index = 0;
    std::string key;
    std::set<std::string> keys;
  };
  std::vector<Frame> open;
  std::string duplicate;
  auto path = [&open] {
    std::string p;
    for (const Frame& f : open) {
      if (f.array) p += fmt::format("[{}]", f.index);
      else p += (p.empty() ? "" : ".") + printable(f.key);
    }
    return p;
  };
  json::parser_callback_t track = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        open.emplace_back();
        open.back().array = event == json::parse_event_t::array_start;
        break;
      case json::parse_event_t::key:
        if (!open.empty()) {
          Frame& f = open.back();
          f.key = parsed.get<std::string>();
          if (!f.keys.insert(f.key).second && duplicate.empty()) duplicate = path();
        }
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        [[fallthrough]];
      case json::parse_event_t::value:
        if (!open.empty() && open.back().array) ++open.back().index;
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, track);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." without the tag; the
    // parser quotes the offending input, which may hold any bytes.
    std::string what = e.what();
    const size_t close = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && close != std::string::npos) what = what.substr(close + 2);
    return make_error(SSD_ERROR_INVALID_CONFIG, "invalid JSON: " + printable(what));
  }
  if (!duplicate.empty()) return make_error(SSD_ERROR_INVALID_CONFIG, duplicate + ": given twice");
  return j;
}

Result<std::vector<ssd_kernel_config>> configs_from_json_text(const std::string& text) {
  auto parsed = parse_config_json(text);
  if (!parsed.ok()) {  // "configs: invalid JSON: ...", "configs[1].chunk_size: given twice"
    const std::string& detail = parsed.status().detail;
    return make_error(parsed.status().code, (detail[0] == '[' ? "configs" : "configs: ") + detail);
  }
  nlohmann::json j = std::move(parsed).value();
  if (j.is_object() && j.contains("configs")) j = j.at("configs");
  if (j.is_object()) j = nlohmann::json::array({j});
  if (!j.is_array()) return make_error(SSD_ERROR_INVALID_CONFIG, "configs: expected an object or an array of objects");
  std::vector<ssd_kernel_config> out;
  for (size_t i = 0; i < j.size(); ++i) {
    auto c = config_from_json(j[i]);
    if (!c.ok()) return make_error(c.status().code, fmt::format("configs[{}].{}", i, c.status().detail));
    out.push_back(c.value());
  }
  return out;
}

}  // namespace ssd
