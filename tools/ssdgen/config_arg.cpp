// CONFIG arguments: a JSON file, inline JSON, or compact `key=value,...` pairs (docs/cli.md).
// Every form becomes JSON and goes through ssd::config_from_json, so the field checks and their
// messages are the library's; this file only reports what is not JSON-shaped at all. SHAPE
// arguments (`compile --shape`) are read here too; shape_arg.cpp expands them into kernels.
#include <sys/stat.h>

#include <fmt/format.h>

#include "cli.h"
#include "config/config.h"

namespace ssdgen {
namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, const std::string& seps) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : s) {
    if (seps.find(c) != std::string::npos) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

bool is_integer_text(const std::string& v) {
  size_t i = (!v.empty() && (v[0] == '-' || v[0] == '+')) ? 1 : 0;
  if (i == v.size()) return false;
  for (; i < v.size(); ++i)
    if (v[i] < '0' || v[i] > '9') return false;
  return true;
}

// Integers become JSON numbers (huge ones too: the library reports them out of range); anything
// else stays a string, and the library says which type it wanted.
nlohmann::json scalar(const std::string& v) {
  if (is_integer_text(v)) {
    nlohmann::json j = nlohmann::json::parse(v[0] == '+' ? v.substr(1) : v, nullptr, false);
    if (!j.is_discarded()) return j;
  }
  return v;
}

ssd::Status config_error(const std::string& detail) { return ssd::make_error(SSD_ERROR_INVALID_CONFIG, detail); }

bool looks_like_json(const std::string& text) {
  const std::string t = trim(text);
  return !t.empty() && (t[0] == '{' || t[0] == '[');
}

// Configs nest four levels at most ({"configs": [{"tile": {...}}]}). Deeper input is refused here,
// iteratively, because the library's messages dump offending values recursively (a hostile file
// nested a million levels deep would overflow the stack).
constexpr int kMaxJsonDepth = 16;

ssd::Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& where) {
  auto j = ssd::parse_config_json(text);  // syntax errors with line and column; duplicate keys
  if (!j.ok()) return config_error(fmt::format("{}: {}", where, j.status().detail));
  if (json_nested_deeper_than(j.value(), kMaxJsonDepth))
    return config_error(fmt::format("{}: JSON nested deeper than {} levels is not a config", where, kMaxJsonDepth));
  return j;
}

// One config out of parsed JSON: an object, or an array / {"configs": [...]} holding exactly one.
// (No re-serialization here: dumping hostile, deeply nested JSON would recurse without bound.)
ssd::Result<ssd_kernel_config> single_config(const nlohmann::json& j, const std::string& where) {
  const nlohmann::json* list = &j;
  if (j.is_object() && j.contains("configs")) list = &j.at("configs");
  const nlohmann::json* one = nullptr;
  if (list->is_object()) {
    one = list;
  } else if (list->is_array()) {
    if (list->size() != 1)
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                             fmt::format("{} holds {} configs; this command takes exactly one (use "
                                         "'ssdgen compile --configs FILE' for several)",
                                         where, list->size()));
    one = &list->front();
  } else {
    return config_error("configs: expected an object or an array of objects");
  }
  return ssd::config_from_json(*one);
}

}  // namespace

ssd::Result<nlohmann::json> compact_config_to_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::object();
  for (const std::string& raw : split(text, ",")) {
    const std::string item = trim(raw);
    if (item.empty()) continue;  // tolerate "a=1,,b=2" and a trailing comma
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return config_error(fmt::format("config: expected key=value, got '{}'", item));
    const std::string key = trim(item.substr(0, eq));
    const std::string value = trim(item.substr(eq + 1));
    if (key.empty()) return config_error(fmt::format("config: missing key before '=' in '{}'", item));

    if (key == "flags") {
      if (j.contains("flags")) return config_error("flags: given twice");
      nlohmann::json flags = nlohmann::json::array();
      if (!value.empty() && value != "none")
        for (const std::string& f : split(value, "+|")) flags.push_back(trim(f));
      j["flags"] = flags;
    } else if (key == "tile") {
      if (j.contains("tile")) return config_error("tile: given twice");
      // MxN, optionally MxNxK, MxNxKxWARPSxSTAGES.
      static const char* kTileFields[] = {"m", "n", "k", "warps", "stages"};
      const std::vector<std::string> parts = split(value, "xX");
      if (parts.size() > 5)
        return config_error(fmt::format("tile: expected MxN (e.g. 64x32), got '{}'", value));
      nlohmann::json tile = nlohmann::json::object();
      for (size_t i = 0; i < parts.size(); ++i) {
        const std::string p = trim(parts[i]);
        if (!is_integer_text(p))
          return config_error(fmt::format("tile: expected MxN (e.g. 64x32), got '{}'", value));
        tile[kTileFields[i]] = scalar(p);
      }
      j["tile"] = tile;
    } else if (key.rfind("tile.", 0) == 0) {
      // tile.m=64 etc.; the library rejects unknown tile fields by name.
      const std::string sub = key.substr(5);
      if (sub.empty()) return config_error(fmt::format("config: bad key '{}'", key));
      if (j.contains("tile") && !j["tile"].is_object()) return config_error("tile: given twice");
      nlohmann::json& tile = j["tile"];
      if (tile.is_null()) tile = nlohmann::json::object();
      if (tile.contains(sub)) return config_error(fmt::format("{}: given twice", key));
      tile[sub] = scalar(value);
    } else {
      if (j.contains(key)) return config_error(fmt::format("{}: given twice", key));
      j[key] = scalar(value);
    }
  }
  if (j.empty()) return config_error("config: empty (expected e.g. kernel=chunk_cumsum_fwd,dtype=bf16)");
  return j;
}

ssd::Result<ssd_kernel_config> parse_config_arg(const std::string& text) {
  if (trim(text).empty()) return config_error("config: empty argument");
  if (looks_like_json(text)) {
    nlohmann::json j;
    SSD_ASSIGN_OR_RETURN(j, parse_json_text(text, "config"));
    return single_config(j, "inline JSON");
  }
  // An existing path wins over the compact form (a file name may contain '=').
  struct stat st {};
  const bool exists = ::stat(text.c_str(), &st) == 0;
  if (!exists && text.find('=') != std::string::npos) {
    nlohmann::json j;
    SSD_ASSIGN_OR_RETURN(j, compact_config_to_json(text));
    return ssd::config_from_json(j);
  }
  auto file = read_text_file(text);
  if (!file.ok()) {
    if (!exists)
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                             fmt::format("config: '{}' is not a file, inline JSON or key=value pairs", text));
    return file.status();
  }
  nlohmann::json j;
  SSD_ASSIGN_OR_RETURN(j, parse_json_text(file.value(), text));
  auto c = single_config(j, text);
  if (!c.ok() && c.status().code == SSD_ERROR_INVALID_CONFIG)
    return ssd::make_error(c.status().code, text + ": " + c.status().detail);
  return c;
}

ssd::Result<std::vector<ssd_kernel_config>> read_configs_file(const std::string& path) {
  std::string file;
  SSD_ASSIGN_OR_RETURN(file, read_text_file(path));
  const std::string shown = path == "-" ? "<stdin>" : path;
  // Parse here first for a message with line and column; the library then checks the content.
  SSD_RETURN_IF_ERROR(parse_json_text(file, shown).status());
  auto configs = ssd::configs_from_json_text(file);
  if (!configs.ok()) return ssd::make_error(configs.status().code, shown + ": " + configs.status().detail);
  return configs.value();
}

namespace {
ssd::Status shape_arg_error(const std::string& detail) { return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, detail); }
}  // namespace

ssd::Result<std::vector<nlohmann::json>> parse_shape_arg(const std::string& text) {
  std::string t = text;
  const size_t first = t.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return shape_arg_error("shape: empty argument");
  std::string body;
  struct stat st {};
  if (t[first] == '{' || t[first] == '[') {
    body = t;
  } else if (::stat(t.c_str(), &st) != 0 && t.find('=') != std::string::npos) {
    auto j = compact_config_to_json(t);
    if (!j.ok()) return shape_arg_error(j.status().detail);
    for (auto it = j->begin(); it != j->end(); ++it)  // compact numbers are JSON numbers already
      if (it.value().is_object() || it.value().is_array())
        return shape_arg_error(fmt::format("shape.{}: expected a single value", it.key()));
    return std::vector<nlohmann::json>{j.value()};
  } else {
    SSD_ASSIGN_OR_RETURN(body, read_text_file(t));
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) return shape_arg_error(fmt::format("shape: '{}' is not valid JSON", t.size() > 64 ? t.substr(0, 64) + "..." : t));
  if (json_nested_deeper_than(j, 8)) return shape_arg_error("shape: JSON nested too deeply");
  if (j.is_object() && j.contains("shapes")) j = j.at("shapes");
  if (j.is_object()) return std::vector<nlohmann::json>{j};
  if (!j.is_array()) return shape_arg_error("shape: expected an object, an array of them, or {\"shapes\": [...]}");
  return std::vector<nlohmann::json>(j.begin(), j.end());
}

}  // namespace ssdgen
