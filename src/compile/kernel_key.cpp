#include "compile/kernel_key.h"

#include <fmt/format.h>

#include "common/sha256.h"
#include "config/config.h"

namespace ssd {

std::string unit_hash(const GeneratedUnit& unit) {
  // Length-prefixed fields so that no two different inputs hash the same byte stream.
  Sha256 h;
  auto field = [&h](std::string_view s) {
    std::string len = std::to_string(s.size()) + ":";
    h.update(len);
    h.update(s);
  };
  field(unit.file_name);
  field(unit.source);
  field(unit.symbol);
  for (const std::string& path : unit.headers) {
    const EmbeddedFile* f = find_template(path);
    field(path);
    field(f ? f->content : "<missing>");
  }
  return h.hex_digest();
}

KernelKey make_key(const ssd_kernel_config& c, const GeneratedUnit& unit, const std::vector<std::string>& options,
                   const std::string& nvrtc) {
  std::string opts;
  for (const std::string& o : options) opts += (opts.empty() ? "" : " ") + o;
  KernelKey key;
  key.record = fmt::format(
      "ssdgen-kernel-key\nschema={}\ngenerator={}+r{}\nunit_sha256={}\nsymbol={}\nnvrtc={}\noptions={}\n"
      "target_arch={}\n",
      kKeySchemaVersion, SSD_VERSION_STRING, kGeneratorRevision, unit_hash(unit), unit.symbol, nvrtc, opts,
      arch_name(c.arch));
  key.record += config_record(c);
  key.hex = sha256_hex(key.record);
  return key;
}

}  // namespace ssd
