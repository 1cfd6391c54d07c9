// The cache key: SHA-256 of a canonical, versioned record. No paths, no environment strings.
#pragma once

#include <string>
#include <vector>

#include "codegen/codegen.h"

namespace ssd {

constexpr int kKeySchemaVersion = 1;
// Bump when the generator changes what it emits for the same inputs in a way hashes do not see.
constexpr int kGeneratorRevision = 1;

struct KernelKey {
  std::string record;  // "ssdgen-key\nschema=1\n..." one field per line
  std::string hex;     // sha256(record)
};

// Hash of the translation unit and every template header it includes (path and content).
std::string unit_hash(const GeneratedUnit& unit);

KernelKey make_key(const ssd_kernel_config& normalized, const GeneratedUnit& unit,
                   const std::vector<std::string>& options, const std::string& nvrtc_version);

}  // namespace ssd
