// Kernel specializations: names, validation, default tiles, canonical record, JSON form. What is
// particular to one kernel lives in its family descriptor (src/kernels); this is the table's loop.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "ssd/ssd.h"

namespace ssd {

const char* kernel_name(ssd_kernel_id kernel);  // "chunk_cumsum_fwd"; "?" when unknown (src/kernels)
// Whether an integer from a caller is one of the enumerators (check before converting to the enum).
bool is_kernel_value(int64_t value);
bool is_dtype_value(int64_t value);
Result<ssd_kernel_id> parse_kernel_name(std::string_view name);
const char* dtype_name(ssd_dtype dtype);        // "bf16", "fp16", "fp32", "int32"
Result<ssd_dtype> parse_dtype(std::string_view name);
const char* mode_name(ssd_mode mode);           // "deterministic", "fast"
Result<ssd_mode> parse_mode(std::string_view name);
const char* arch_name(ssd_arch arch);           // "sm_80", "sm_90", "sm_90a"
Result<ssd_arch> parse_arch(std::string_view name);
int arch_compute_capability(ssd_arch arch);     // 80, 90, 90
std::string flags_text(uint32_t flags);         // "dt_bias|dt_softplus", "none", unnamed bits as 0x...

// What ssd_kernel_config_init gives: deterministic, sm_90, zero tile (the default), and the
// family's own defaults (bf16, chunk 256, ...; reduce_head_partials: fp32 outputs, 1 partial). A
// value that names no kernel gets the first kernel's defaults.
ssd_kernel_config default_config(ssd_kernel_id kernel);

// Copies a caller's struct honouring struct_size (missing trailing fields take defaults).
Result<ssd_kernel_config> read_config(const ssd_kernel_config* user);

// Checks every field; the detail names the field and its legal values. Zero tile fields are legal
// (they mean "default").
Status validate_config(const ssd_kernel_config& config);

// The default tile: a pure function of (arch, specialization). Never chosen by timing.
ssd_tile default_tile(const ssd_kernel_config& config);

// Every tile shape this kernel accepts for the specialization (used by the D2 tests).
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& config);
// Whether `tile` (m, n, k) is among legal_tiles(config).
bool tile_is_legal(const ssd_kernel_config& config, const ssd_tile& tile);

// validate + default tile filled in. The result is what keys, codegen and launchers see.
Result<ssd_kernel_config> normalize_config(const ssd_kernel_config& config);

// Canonical text of the specialization, one "field=value" per line in a fixed order.
std::string config_record(const ssd_kernel_config& normalized);

// Short human label, e.g. "chunk_cumsum_fwd bf16 Q=256 flags=bias|softplus tile=64x32 det sm_90a".
std::string config_label(const ssd_kernel_config& config);

nlohmann::json config_to_json(const ssd_kernel_config& config);
// Missing fields take ssd_kernel_config_init defaults; unknown fields are an error naming them.
Result<ssd_kernel_config> config_from_json(const nlohmann::json& json);
// A file holding one config object, or an array of them, or {"configs": [...]}.
Result<std::vector<ssd_kernel_config>> configs_from_json_text(const std::string& text);
// JSON text as configs are read: a syntax error is "invalid JSON: <where and why>", and an object
// key given twice is "<path>: given twice" (e.g. "configs[1].chunk_size"), as in the key=value form,
// instead of the last value silently winning. Both SSD_ERROR_INVALID_CONFIG.
Result<nlohmann::json> parse_config_json(const std::string& text);

}  // namespace ssd
