#include "config/config.h"

#include <cstddef>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "common/struct_io.h"
#include "common/text.h"
#include "ssd/backward_params.cuh"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

struct Named {
  int value;
  const char* name;
};

constexpr Named kKernels[] = {{SSD_KERNEL_CHUNK_CUMSUM_FWD, "chunk_cumsum_fwd"},
                              {SSD_KERNEL_CHUNK_CUMSUM_BWD, "chunk_cumsum_bwd"},
                              {SSD_KERNEL_REDUCE_HEAD_PARTIALS, "reduce_head_partials"},
                              {SSD_KERNEL_BMM_CHUNK_FWD, "bmm_chunk_fwd"},
                              {SSD_KERNEL_CHUNK_STATE_FWD, "chunk_state_fwd"},
                              {SSD_KERNEL_STATE_PASSING_FWD, "state_passing_fwd"},
                              {SSD_KERNEL_CHUNK_SCAN_FWD, "chunk_scan_fwd"},
                              {SSD_KERNEL_GATE_BWD, "gate_bwd"},
                              {SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES, "chunk_scan_bwd_dstates"},
                              {SSD_KERNEL_STATE_PASSING_BWD, "state_passing_bwd"},
                              {SSD_KERNEL_CHUNK_SCAN_BWD_DX, "chunk_scan_bwd_dx"},
                              {SSD_KERNEL_CHUNK_SCAN_BWD_DCB, "chunk_scan_bwd_dcb"},
                              {SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA, "chunk_scan_bwd_ddA_intra"},
                              {SSD_KERNEL_CHUNK_STATE_BWD_DB, "chunk_state_bwd_db"},
                              {SSD_KERNEL_CHUNK_SCAN_BWD_DC, "chunk_scan_bwd_dc"},
                              {SSD_KERNEL_CHUNK_SCAN_BWD_DDA, "chunk_scan_bwd_ddA"}};
constexpr Named kDtypes[] = {{SSD_DTYPE_BF16, "bf16"}, {SSD_DTYPE_FP16, "fp16"}, {SSD_DTYPE_FP32, "fp32"},
                             {SSD_DTYPE_INT32, "int32"}};
constexpr Named kModes[] = {{SSD_MODE_DETERMINISTIC, "deterministic"}, {SSD_MODE_FAST, "fast"}};
constexpr Named kArchs[] = {{SSD_ARCH_SM80, "sm_80"}, {SSD_ARCH_SM90, "sm_90"}, {SSD_ARCH_SM90A, "sm_90a"}};
constexpr Named kFlags[] = {{SSD_FLAG_DT_BIAS, "dt_bias"},       {SSD_FLAG_DT_SOFTPLUS, "dt_softplus"},
                             {SSD_FLAG_SEQ_IDX, "seq_idx"},       {SSD_FLAG_D, "D"},
                             {SSD_FLAG_D_PER_HEADDIM, "D_per_headdim"}, {SSD_FLAG_Z, "z"},
                             {SSD_FLAG_INITIAL_STATES, "initial_states"}, {SSD_FLAG_DDA_INCREMENTS, "ddA_increments"}};

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

bool is_cumsum(ssd_kernel_id k) {
  return k == SSD_KERNEL_CHUNK_CUMSUM_FWD || k == SSD_KERNEL_CHUNK_CUMSUM_BWD;
}

bool one_of(int v, std::initializer_list<int> legal) {
  for (int l : legal)
    if (v == l) return true;
  return false;
}

std::string list(std::initializer_list<int> legal) {
  std::string s;
  for (int l : legal) s += (s.empty() ? "" : ", ") + std::to_string(l);
  return s;
}

Status field_error(const ssd_kernel_config& c, const char* field, const std::string& value,
                   const std::string& legal) {
  return make_error(SSD_ERROR_INVALID_CONFIG, fmt::format("{}: {} is not legal for {} (legal: {})", field,
                                                          value, kernel_name(c.kernel), legal));
}

// A dtype in a message: its name (`int32`), or the number when it has none.
std::string dtype_text(ssd_dtype dtype) {
  return is_named(kDtypes, dtype) ? std::string(name_of(kDtypes, dtype)) : std::to_string(int(dtype));
}

Status require_zero(const ssd_kernel_config& c, const char* field, int value) {
  if (value == 0) return Status::Ok();
  return field_error(c, field, std::to_string(value), "0, the kernel does not use it");
}

struct NamedField {
  const char* name;
  int value;
};
// The fields a kernel does not read must be 0, so that one kernel has one key.
Status require_zeros(const ssd_kernel_config& c, std::initializer_list<NamedField> fields) {
  for (const NamedField& f : fields) SSD_RETURN_IF_ERROR(require_zero(c, f.name, f.value));
  return Status::Ok();
}

std::string flags_text(uint32_t flags) {
  std::string s;
  uint32_t known = 0;
  for (const Named& n : kFlags) {
    known |= uint32_t(n.value);
    if (flags & uint32_t(n.value)) s += (s.empty() ? "" : "|") + std::string(n.name);
  }
  if (flags & ~known) s += (s.empty() ? "" : "|") + fmt::format("{:#x}", flags & ~known);
  return s.empty() ? "none" : s;
}

// The flags each kernel reads; any other bit is a config error (it would only split the cache).
uint32_t allowed_flags(ssd_kernel_id k) {
  switch (k) {
    case SSD_KERNEL_CHUNK_CUMSUM_FWD: return SSD_FLAG_DT_BIAS | SSD_FLAG_DT_SOFTPLUS;
    case SSD_KERNEL_CHUNK_CUMSUM_BWD: return SSD_FLAG_DT_BIAS | SSD_FLAG_DT_SOFTPLUS | SSD_FLAG_DDA_INCREMENTS;
    case SSD_KERNEL_BMM_CHUNK_FWD:
    case SSD_KERNEL_CHUNK_STATE_FWD: return SSD_FLAG_SEQ_IDX;
    case SSD_KERNEL_STATE_PASSING_FWD: return SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES;
    case SSD_KERNEL_CHUNK_SCAN_FWD: return SSD_FLAG_SEQ_IDX | SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z;
    case SSD_KERNEL_GATE_BWD: return SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z;
    case SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES:
    case SSD_KERNEL_STATE_PASSING_BWD:
    case SSD_KERNEL_CHUNK_SCAN_BWD_DCB:
    case SSD_KERNEL_CHUNK_STATE_BWD_DB:
    case SSD_KERNEL_CHUNK_SCAN_BWD_DC:
    case SSD_KERNEL_CHUNK_SCAN_BWD_DDA: return SSD_FLAG_SEQ_IDX;
    case SSD_KERNEL_CHUNK_SCAN_BWD_DX: return SSD_FLAG_SEQ_IDX | SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM;
    default: return 0;
  }
}

// Tile constraints of the forward templates (their static_asserts, evaluated on the host).
bool divides(int a, int b) { return a > 0 && b % a == 0; }
std::string forward_tile_problem(const ssd_kernel_config& c) {
  using namespace ssd_kernels::fwd_geom;
  const ssd_tile& t = c.tile;
  const int Q = c.chunk_size, P = c.headdim, N = c.dstate;
  switch (c.kernel) {
    case SSD_KERNEL_BMM_CHUNK_FWD:
      if (!one_of(t.m, {16, 32, 64, 128}) || !one_of(t.n, {16, 32, 64, 128})) return "m, n in 16, 32, 64, 128";
      if (!divides(t.m, Q) || !divides(t.n, Q)) return "m and n must divide chunk_size";
      if (t.k) return "k must be 0 (derived)";
      if (bmm_chunk_smem_bytes(N, t.m, t.n) > kMaxStaticSmem) return "the tiles' shared memory must fit in 48 KiB";
      return "";
    case SSD_KERNEL_CHUNK_STATE_FWD:
    case SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES:
      if (!one_of(t.m, {16, 32, 64, 128}) || !one_of(t.n, {16, 32, 64, 128, 256}) || !one_of(t.k, {16, 32, 64}))
        return "m in 16, 32, 64, 128; n in 16, 32, 64, 128, 256; k in 16, 32, 64";
      if (!divides(t.m, P) || !divides(t.n, N) || !divides(t.k, Q)) return "m | headdim, n | dstate, k | chunk_size";
      if (chunk_state_smem_bytes(Q, t.m, t.n, t.k) > kMaxStaticSmem) return "the tiles' shared memory must fit in 48 KiB";
      return "";
    case SSD_KERNEL_CHUNK_SCAN_FWD: {
      if (!one_of(t.m, {64, 128}) || !one_of(t.n, {16, 32, 64, 128}) || !one_of(t.k, {16, 32, 64}))
        return "m in 64, 128; n in 16, 32, 64, 128; k in 16, 32, 64";
      if (!divides(t.m, Q) || !divides(t.n, P) || !divides(t.k, Q)) return "m | chunk_size, n | headdim, k | chunk_size";
      if ((t.m / 64) * (t.n / 8) * 4 > 64) return "m * n <= 8192 (accumulator registers)";
      if (N % chunk_scan_block_kn(N, t.k) != 0) return "k must divide dstate or exceed it";
      if (chunk_scan_smem_bytes(Q, N, t.m, t.n, t.k, c.flags & SSD_FLAG_SEQ_IDX) > kMaxStaticSmem)
        return "the tiles' shared memory must fit in 48 KiB";
      return "";
    }
    case SSD_KERNEL_STATE_PASSING_FWD:
    case SSD_KERNEL_STATE_PASSING_BWD:
      if (!one_of(t.m, {64, 128, 256, 512}) || t.n || t.k) return "m in 64, 128, 256, 512; n = k = 0";
      return "";
    case SSD_KERNEL_CHUNK_SCAN_BWD_DX: {
      using namespace ssd_kernels::bwd_geom;
      if (!one_of(t.m, {64, 128}) || t.n || !one_of(t.k, {16, 32, 64})) return "m in 64, 128; n = 0; k in 16, 32, 64";
      if (!divides(t.m, Q) || !divides(t.k, Q)) return "m and k must divide chunk_size";
      if (t.m * P > 8192) return "m * headdim <= 8192 (accumulator registers)";
      if (N % dx_block_kn(N, t.k) != 0) return "k must divide dstate or exceed it";
      if (dx_smem_bytes(Q, P, N, t.m, t.k, c.flags & SSD_FLAG_SEQ_IDX) > kMaxStaticSmem)
        return "the tiles' shared memory must fit in 48 KiB";
      return "";
    }
    case SSD_KERNEL_CHUNK_SCAN_BWD_DCB: {
      using namespace ssd_kernels::bwd_geom;
      if (!one_of(t.m, {16, 32, 64, 128}) || !one_of(t.n, {16, 32, 64, 128}) || !one_of(t.k, {16, 32, 64}))
        return "m, n in 16, 32, 64, 128; k in 16, 32, 64";
      if (!divides(t.m, Q) || !divides(t.n, Q)) return "m and n must divide chunk_size";
      if (P % dcb_block_kp(P, t.k) != 0) return "k must divide headdim or exceed it";
      if (dcb_smem_bytes(Q, P, t.m, t.n, t.k, c.flags & SSD_FLAG_SEQ_IDX) > kMaxStaticSmem)
        return "the tiles' shared memory must fit in 48 KiB";
      return "";
    }
    case SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA: {
      using namespace ssd_kernels::bwd_geom;
      if (!one_of(t.m, {64, 128}) || !one_of(t.n, {16, 32, 64}) || !one_of(t.k, {16, 32, 64}))
        return "m in 64, 128; n in 16, 32, 64; k in 16, 32, 64";
      if (!divides(t.m, Q)) return "m must divide chunk_size";
      if (P % dcb_block_kp(P, t.k) != 0) return "k must divide headdim or exceed it";
      if (intra_smem_bytes(Q, P, t.m, t.n, t.k) > kMaxStaticSmem) return "the tiles' shared memory must fit in 48 KiB";
      return "";
    }
    case SSD_KERNEL_CHUNK_STATE_BWD_DB:
    case SSD_KERNEL_CHUNK_SCAN_BWD_DC: {
      using namespace ssd_kernels::bwd_geom;
      if (!one_of(t.m, {16, 32, 64, 128}) || !one_of(t.n, {16, 32, 64, 128, 256}) || !one_of(t.k, {16, 32, 64}))
        return "m in 16, 32, 64, 128; n in 16, 32, 64, 128, 256; k in 16, 32, 64";
      if (!divides(t.m, Q) || !divides(t.n, N) || !divides(t.k, Q)) return "m | chunk_size, n | dstate, k | chunk_size";
      if (P % bc_block_kp(P, t.k) != 0) return "k must divide headdim or exceed it";
      if (bc_threads(t.m, t.n) > bc_max_threads()) return "m x n too large (two live accumulator tiles)";
      if (bc_smem_bytes(Q, P, t.m, t.n, t.k, c.flags & SSD_FLAG_SEQ_IDX) > kMaxStaticSmem)
        return "the tiles' shared memory must fit in 48 KiB";
      return "";
    }
    case SSD_KERNEL_CHUNK_SCAN_BWD_DDA:
      if (!one_of(t.m, {64, 128, 256}) || t.n || t.k) return "m in 64, 128, 256; n = k = 0";
      return "";
    default: return "";
  }
}

}  // namespace

const char* kernel_name(ssd_kernel_id kernel) { return name_of(kKernels, kernel); }
Result<ssd_kernel_id> parse_kernel_name(std::string_view name) {
  return parse_named<ssd_kernel_id>(kKernels, name, "kernel");
}
const char* dtype_name(ssd_dtype dtype) { return name_of(kDtypes, dtype); }
bool is_kernel_value(int64_t value) { return is_named(kKernels, value); }
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
  if (kernel == SSD_KERNEL_REDUCE_HEAD_PARTIALS) {
    c.dtype = SSD_DTYPE_FP32;
    c.partials = 1;
  } else if (kernel == SSD_KERNEL_STATE_PASSING_FWD || kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DDA) {
    c.dtype = SSD_DTYPE_FP32;
    c.chunk_size = 256;
  } else if (kernel == SSD_KERNEL_STATE_PASSING_BWD) {
    c.dtype = SSD_DTYPE_BF16;
    c.chunk_size = 256;
  } else if (kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DCB || kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA) {
    c.dtype = SSD_DTYPE_BF16;
    c.chunk_size = 256;
    c.headdim = 64;
    c.heads_per_group = 1;
  } else if (kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES || kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DX ||
             kernel == SSD_KERNEL_CHUNK_STATE_BWD_DB || kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DC) {
    c.dtype = SSD_DTYPE_BF16;
    c.chunk_size = 256;
    c.headdim = 64;
    c.dstate = 64;
    c.heads_per_group = 1;
  } else if (kernel == SSD_KERNEL_GATE_BWD) {
    c.dtype = SSD_DTYPE_BF16;
    c.chunk_size = 256;
    c.headdim = 64;
    c.flags = SSD_FLAG_D;
  } else if (kernel == SSD_KERNEL_BMM_CHUNK_FWD) {
    c.dtype = SSD_DTYPE_BF16;
    c.chunk_size = 256;
    c.dstate = 64;
  } else if (kernel == SSD_KERNEL_CHUNK_STATE_FWD || kernel == SSD_KERNEL_CHUNK_SCAN_FWD) {
    c.dtype = SSD_DTYPE_BF16;
    c.chunk_size = 256;
    c.headdim = 64;
    c.dstate = 64;
    c.heads_per_group = 1;
  } else {
    c.dtype = SSD_DTYPE_BF16;
    c.chunk_size = 256;
  }
  return c;
}

namespace {

// The enum fields of a config, read as the integers a C caller may have stored: each must name an
// enumerator before anything uses it as the enum type.
Status check_enum_fields(const ssd_kernel_config& c) {
  if (!is_named(kKernels, enum_value(c.kernel)))
    return make_error(SSD_ERROR_INVALID_CONFIG,
                      fmt::format("kernel: unknown id {} (legal: {})", enum_value(c.kernel), legal_values(kKernels)));
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
      default_config(is_named(kKernels, kernel) ? static_cast<ssd_kernel_id>(kernel) : SSD_KERNEL_CHUNK_CUMSUM_FWD);
  std::memcpy(&c, user, std::min(user->struct_size, sizeof(ssd_kernel_config)));
  c.struct_size = sizeof(ssd_kernel_config);
  SSD_RETURN_IF_ERROR(check_enum_fields(c));
  return c;
}

Status validate_config(const ssd_kernel_config& c) {
  // Enum fields as integers first (the struct may come from C); past these checks they are valid.
  SSD_RETURN_IF_ERROR(check_enum_fields(c));
  if (c.flags & ~allowed_flags(c.kernel)) {
    std::string legal;
    for (const Named& n : kFlags)
      if (allowed_flags(c.kernel) & uint32_t(n.value)) legal += (legal.empty() ? "" : ", ") + std::string(n.name);
    return field_error(c, "flags", flags_text(c.flags), legal.empty() ? "none" : legal);
  }
  // Warps and stages are derived from the tile by every kernel today.
  SSD_RETURN_IF_ERROR(require_zeros(c, {{"tile.warps", c.tile.warps}, {"tile.stages", c.tile.stages}}));
  if (is_cumsum(c.kernel)) {
    SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"dstate", c.dstate},
                                          {"heads_per_group", c.heads_per_group}, {"tile.k", c.tile.k},
                                          {"partials", c.partials}}));
    if (!one_of(c.chunk_size, {16, 32, 64, 128, 256}))
      return field_error(c, "chunk_size", std::to_string(c.chunk_size), list({16, 32, 64, 128, 256}));
    if (!one_of(c.dtype, {SSD_DTYPE_BF16, SSD_DTYPE_FP16, SSD_DTYPE_FP32}))
      return field_error(c, "dtype", dtype_text(c.dtype), "bf16, fp16, fp32");
    if (!one_of(c.tile.m, {0, 32, 64, 128}))
      return field_error(c, "tile.m", std::to_string(c.tile.m), "0 (default), 32, 64, 128");
    if (!one_of(c.tile.n, {0, 8, 16, 32, 64}) || c.tile.n > c.chunk_size)
      return field_error(c, "tile.n", std::to_string(c.tile.n), "0 (default), 8, 16, 32, 64; at most chunk_size");
    // Two fp32 staging tiles of m x (n + 1) must fit in 48 KiB of static shared memory.
    if (c.tile.m * c.tile.n > 4096)
      return field_error(c, "tile", fmt::format("{}x{}", c.tile.m, c.tile.n), "m * n <= 4096");
  } else if (c.kernel == SSD_KERNEL_REDUCE_HEAD_PARTIALS) {
    SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"dstate", c.dstate},
                                          {"heads_per_group", c.heads_per_group}, {"chunk_size", c.chunk_size},
                                          {"tile.k", c.tile.k}}));
    if (c.dtype != SSD_DTYPE_FP32) return field_error(c, "dtype", dtype_text(c.dtype), "fp32");
    if (!one_of(c.tile.m, {0, 32, 64, 128, 256}))
      return field_error(c, "tile.m", std::to_string(c.tile.m), "0 (default), 32, 64, 128, 256");
    SSD_RETURN_IF_ERROR(require_zero(c, "tile.n", c.tile.n));
    if (c.partials < 1 || c.partials > 8)
      return field_error(c, "partials", std::to_string(c.partials), "1..8");
  } else if (c.kernel == SSD_KERNEL_GATE_BWD) {
    SSD_RETURN_IF_ERROR(require_zeros(c, {{"dstate", c.dstate}, {"heads_per_group", c.heads_per_group},
                                          {"partials", c.partials}, {"tile.m", c.tile.m}, {"tile.n", c.tile.n},
                                          {"tile.k", c.tile.k}}));
    if (!one_of(c.chunk_size, {64, 128, 256}))
      return field_error(c, "chunk_size", std::to_string(c.chunk_size), "64, 128, 256");
    if (!one_of(c.headdim, {32, 64, 128})) return field_error(c, "headdim", std::to_string(c.headdim), "32, 64, 128");
    if (!one_of(c.dtype, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}))
      return field_error(c, "dtype", dtype_text(c.dtype), "bf16, fp16");
    if (!(c.flags & (SSD_FLAG_Z | SSD_FLAG_D)))
      return field_error(c, "flags", flags_text(c.flags), "z and/or D (without both there is nothing to compute)");
    if ((c.flags & SSD_FLAG_D_PER_HEADDIM) && !(c.flags & SSD_FLAG_D))
      return field_error(c, "flags", flags_text(c.flags), "D_per_headdim only together with D");
  } else {  // the SSD forward kernels
    SSD_RETURN_IF_ERROR(require_zero(c, "partials", c.partials));
    if (!one_of(c.chunk_size, {64, 128, 256}))
      return field_error(c, "chunk_size", std::to_string(c.chunk_size), "64, 128, 256");
    if (c.kernel == SSD_KERNEL_STATE_PASSING_FWD || c.kernel == SSD_KERNEL_STATE_PASSING_BWD ||
        c.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DDA) {
      SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"dstate", c.dstate},
                                            {"heads_per_group", c.heads_per_group}}));
      if (c.kernel == SSD_KERNEL_STATE_PASSING_BWD) {
        if (!one_of(c.dtype, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}))
          return field_error(c, "dtype", dtype_text(c.dtype), "bf16, fp16 (the dtype ds is stored in)");
      } else if (c.dtype != SSD_DTYPE_FP32) {
        return field_error(c, "dtype", dtype_text(c.dtype), "fp32");
      }
    } else {
      if (!one_of(c.dtype, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}))
        return field_error(c, "dtype", dtype_text(c.dtype), "bf16, fp16 (tensor cores)");
      const bool uses_dstate =
          c.kernel != SSD_KERNEL_CHUNK_SCAN_BWD_DCB && c.kernel != SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA;
      if (!uses_dstate) {
        SSD_RETURN_IF_ERROR(require_zero(c, "dstate", c.dstate));
      } else if (!one_of(c.dstate, {16, 32, 64, 128, 256})) {
        return field_error(c, "dstate", std::to_string(c.dstate), "16, 32, 64, 128, 256");
      }
      if (c.kernel == SSD_KERNEL_BMM_CHUNK_FWD) {
        SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"heads_per_group", c.heads_per_group}}));
      } else {
        if (!one_of(c.headdim, {32, 64, 128}))
          return field_error(c, "headdim", std::to_string(c.headdim), "32, 64, 128");
        if (c.heads_per_group < 1 || c.heads_per_group > 1024)
          return field_error(c, "heads_per_group", std::to_string(c.heads_per_group), "1..1024 (nheads / ngroups)");
      }
    }
    if ((c.flags & SSD_FLAG_D_PER_HEADDIM) && !(c.flags & SSD_FLAG_D))
      return field_error(c, "flags", flags_text(c.flags), "D_per_headdim only together with D");
    if (c.tile.m || c.tile.n || c.tile.k) {  // partially given tiles are completed by normalize_config
      ssd_kernel_config filled = c;
      ssd_tile d = default_tile(c);
      if (!filled.tile.m) filled.tile.m = d.m;
      if (!filled.tile.n) filled.tile.n = d.n;
      if (!filled.tile.k) filled.tile.k = d.k;
      std::string problem = forward_tile_problem(filled);
      if (!problem.empty())
        return field_error(c, "tile", fmt::format("{}x{}x{}", filled.tile.m, filled.tile.n, filled.tile.k), problem);
    }
  }
  return Status::Ok();
}

ssd_tile default_tile(const ssd_kernel_config& c) {
  ssd_tile t{};
  if (is_cumsum(c.kernel)) {
    // One thread scans one head; 64 heads per block keeps the (b, L, h) loads 128 B wide for bf16
    // and gives b * nchunks * h / 64 blocks. 32 positions are staged through shared memory per step.
    t.m = 64;
    t.n = std::min(32, c.chunk_size);
  } else if (c.kernel == SSD_KERNEL_REDUCE_HEAD_PARTIALS) {
    t.m = 128;
  } else if (c.kernel == SSD_KERNEL_GATE_BWD) {
    // no tile: one block per (batch, chunk, head), one thread per headdim element
  } else if (c.kernel == SSD_KERNEL_BMM_CHUNK_FWD) {
    t.m = 64;
    t.n = 64;
  } else if (c.kernel == SSD_KERNEL_CHUNK_STATE_FWD) {
    // 64 x 128 x 32 measured best of seven candidates at the nemotronh-56b shape (docs/perf.md).
    t.m = std::min(64, c.headdim);
    t.n = std::min(128, c.dstate);
    t.k = 32;
  } else if (c.kernel == SSD_KERNEL_CHUNK_SCAN_FWD) {
    t.m = 64;
    t.n = std::min(64, c.headdim);
    t.k = 32;
  } else if (c.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES) {
    t.m = std::min(64, c.headdim);
    t.n = std::min(128, c.dstate);
    t.k = 32;
  } else if (c.kernel >= SSD_KERNEL_CHUNK_SCAN_BWD_DX && c.kernel <= SSD_KERNEL_CHUNK_SCAN_BWD_DC) {
    // The backward's tensor-core kernels: the fastest of the candidates measured at the
    // nemotronh-56b shape (scripts/tile_sweep.sh, docs/perf.md), else the fallback that is legal for
    // every shape. Every legal tile gives the same bits (D2), so this is only about speed.
    ssd_tile best{}, fallback{};
    switch (c.kernel) {
      case SSD_KERNEL_CHUNK_SCAN_BWD_DX: best = {128, 0, 32, 0, 0}; fallback = {64, 0, 32, 0, 0}; break;
      case SSD_KERNEL_CHUNK_SCAN_BWD_DCB: best = {32, 64, 64, 0, 0}; fallback = {64, 64, 32, 0, 0}; break;
      case SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA: best = {64, 32, 64, 0, 0}; fallback = {64, 32, 32, 0, 0}; break;
      case SSD_KERNEL_CHUNK_STATE_BWD_DB: best = {64, std::min(128, c.dstate), 32, 0, 0}; fallback = {64, std::min(64, c.dstate), 32, 0, 0}; break;
      default: best = {std::min(128, c.chunk_size), std::min(64, c.dstate), 32, 0, 0}; fallback = {64, std::min(64, c.dstate), 32, 0, 0}; break;
    }
    ssd_kernel_config probe = c;
    probe.tile = best;
    t = forward_tile_problem(probe).empty() ? best : fallback;
  } else if (c.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DDA) {
    t.m = 128;
  } else if (c.kernel == SSD_KERNEL_STATE_PASSING_BWD) {
    t.m = 128;  // 0.72 vs 0.77 ms for 256 at the preset (docs/perf.md)
  } else {  // state_passing_fwd
    t.m = 256;
  }
  return t;
}

std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) {
  std::vector<ssd_tile> tiles;
  if (is_cumsum(c.kernel)) {
    for (int m : {32, 64, 128})
      for (int n : {8, 16, 32, 64})
        if (n <= c.chunk_size && m * n <= 4096) tiles.push_back(ssd_tile{m, n, 0, 0, 0});
  } else if (c.kernel == SSD_KERNEL_REDUCE_HEAD_PARTIALS) {
    for (int m : {32, 64, 128, 256}) tiles.push_back(ssd_tile{m, 0, 0, 0, 0});
  } else if (c.kernel == SSD_KERNEL_STATE_PASSING_FWD || c.kernel == SSD_KERNEL_STATE_PASSING_BWD) {
    for (int m : {64, 128, 256, 512}) tiles.push_back(ssd_tile{m, 0, 0, 0, 0});
  } else if (c.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DDA) {
    for (int m : {64, 128, 256}) tiles.push_back(ssd_tile{m, 0, 0, 0, 0});
  } else if (c.kernel == SSD_KERNEL_GATE_BWD) {
    tiles.push_back(ssd_tile{});
  } else {
    for (int m : {16, 32, 64, 128})
      for (int n : {0, 16, 32, 64, 128, 256})
        for (int k : {0, 16, 32, 64}) {
          if ((c.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DX) != (n == 0)) continue;
          if ((c.kernel == SSD_KERNEL_BMM_CHUNK_FWD) != (k == 0)) continue;
          ssd_kernel_config t = c;
          t.tile = ssd_tile{m, n, k, 0, 0};
          if (forward_tile_problem(t).empty()) tiles.push_back(t.tile);
        }
  }
  return tiles;
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

#define SSD_ASSIGN_OR_RETURN(lhs, expr) \
  do {                                  \
    auto r_ = (expr);                   \
    if (!r_.ok()) return r_.status();   \
    lhs = std::move(r_).value();        \
  } while (0)

}  // namespace

Result<ssd_kernel_config> config_from_json(const nlohmann::json& j) {
  if (!j.is_object())
    return make_error(SSD_ERROR_INVALID_CONFIG, "config: expected a JSON object");
  if (!j.contains("kernel")) return make_error(SSD_ERROR_INVALID_CONFIG, "kernel: missing (legal: " + legal_names(kKernels) + ")");
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

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"small", 32, 64, 64, 1, 256, SSD_DTYPE_BF16, "h=32 p=64 n=64 g=1, chunk 256, bf16"},
      {"nemotronh-56b", 256, 64, 256, 8, 256, SSD_DTYPE_BF16,
       "Nemotron-H 56B mixer: h=256 p=64 n=256 g=8, chunk 256, bf16"},
  };
  return presets;
}

Result<ModelPreset> find_preset(std::string_view name) {
  std::string names;
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("preset: unknown '{}' (legal: {})", printable(name), names));
}

std::vector<ssd_kernel_config> forward_configs(const ForwardShape& shape, uint32_t flags, ssd_mode mode,
                                               ssd_arch arch) {
  std::vector<ssd_kernel_config> out;
  for (ssd_kernel_id k : {SSD_KERNEL_BMM_CHUNK_FWD, SSD_KERNEL_CHUNK_STATE_FWD, SSD_KERNEL_STATE_PASSING_FWD,
                          SSD_KERNEL_CHUNK_SCAN_FWD}) {
    ssd_kernel_config c = default_config(k);
    c.chunk_size = shape.chunk_size;
    c.mode = mode;
    c.arch = arch;
    if (k != SSD_KERNEL_STATE_PASSING_FWD) {
      c.dtype = shape.dtype;
      c.dstate = shape.dstate;
    }
    if (k == SSD_KERNEL_CHUNK_STATE_FWD || k == SSD_KERNEL_CHUNK_SCAN_FWD) {
      c.headdim = shape.headdim;
      c.heads_per_group = shape.heads_per_group;
    }
    c.flags = flags & allowed_flags(k);
    out.push_back(c);
  }
  return out;
}

std::vector<ssd_kernel_config> backward_configs(const ForwardShape& shape, uint32_t flags, ssd_mode mode,
                                                ssd_arch arch) {
  std::vector<ssd_kernel_config> out;
  if (flags & (SSD_FLAG_Z | SSD_FLAG_D)) {
    ssd_kernel_config c = default_config(SSD_KERNEL_GATE_BWD);
    c.chunk_size = shape.chunk_size;
    c.headdim = shape.headdim;
    c.dtype = shape.dtype;
    c.flags = flags & allowed_flags(SSD_KERNEL_GATE_BWD);
    c.mode = mode;
    c.arch = arch;
    out.push_back(c);
  }
  for (ssd_kernel_id k : {SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES, SSD_KERNEL_STATE_PASSING_BWD, SSD_KERNEL_CHUNK_SCAN_BWD_DX,
                          SSD_KERNEL_CHUNK_SCAN_BWD_DCB, SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA,
                          SSD_KERNEL_CHUNK_STATE_BWD_DB, SSD_KERNEL_CHUNK_SCAN_BWD_DC, SSD_KERNEL_CHUNK_SCAN_BWD_DDA}) {
    ssd_kernel_config c = default_config(k);
    c.chunk_size = shape.chunk_size;
    c.mode = mode;
    c.arch = arch;
    if (k != SSD_KERNEL_CHUNK_SCAN_BWD_DDA) c.dtype = shape.dtype;
    if (k != SSD_KERNEL_STATE_PASSING_BWD && k != SSD_KERNEL_CHUNK_SCAN_BWD_DDA) {
      c.headdim = shape.headdim;
      c.heads_per_group = shape.heads_per_group;
      if (k != SSD_KERNEL_CHUNK_SCAN_BWD_DCB && k != SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA) c.dstate = shape.dstate;
    }
    c.flags = flags & allowed_flags(k);
    out.push_back(c);
  }
  return out;
}

std::vector<ssd_kernel_config> preset_configs(const ModelPreset& p, ssd_arch arch, ssd_mode mode) {
  std::vector<ssd_kernel_config> out;
  // A Mamba2 layer passes dt_bias and dt_softplus=True; dt is a slice of the in_proj output.
  for (ssd_kernel_id k : {SSD_KERNEL_CHUNK_CUMSUM_FWD, SSD_KERNEL_CHUNK_CUMSUM_BWD}) {
    ssd_kernel_config c = default_config(k);
    c.chunk_size = p.chunk_size;
    c.dtype = p.dtype;
    c.flags = SSD_FLAG_DT_BIAS | SSD_FLAG_DT_SOFTPLUS;
    c.mode = mode;
    c.arch = arch;
    out.push_back(c);
  }
  // The forward: D per head, no z (the layer gates in its RMSNorm), no seq_idx, no initial states.
  for (const ssd_kernel_config& c :
       forward_configs({p.chunk_size, p.headdim, p.dstate, p.nheads / p.ngroups, p.dtype}, SSD_FLAG_D, mode, arch))
    out.push_back(c);
  // The backward of the same layer: ssd_backward's kernels after the forward recompute, then the
  // increments variant of chunk_cumsum_bwd.
  for (const ssd_kernel_config& c :
       backward_configs({p.chunk_size, p.headdim, p.dstate, p.nheads / p.ngroups, p.dtype}, SSD_FLAG_D, mode, arch))
    out.push_back(c);
  {
    ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
    c.chunk_size = p.chunk_size;
    c.dtype = p.dtype;
    c.flags = SSD_FLAG_DT_BIAS | SSD_FLAG_DT_SOFTPLUS | SSD_FLAG_DDA_INCREMENTS;
    c.mode = mode;
    c.arch = arch;
    out.push_back(c);
  }
  if (mode == SSD_MODE_DETERMINISTIC) {  // dA and ddt_bias: two partials per (b, c, h); dD (h): one
    for (int partials : {2, 1}) {
      ssd_kernel_config c = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
      c.partials = partials;
      c.mode = mode;
      c.arch = arch;
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace ssd
