#include "kernels/family.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/config.h"

namespace ssd {

// The families, one descriptor each, defined in their own files.
extern const KernelFamily kChunkCumsumFwdFamily, kChunkCumsumBwdFamily, kReduceHeadPartialsFamily, kBmmChunkFwdFamily,
    kChunkStateFwdFamily, kStatePassingFwdFamily, kChunkScanFwdFamily, kGateBwdFamily, kChunkScanBwdDstatesFamily,
    kStatePassingBwdFamily, kChunkScanBwdDxFamily, kChunkScanBwdDcbFamily, kChunkScanBwdDdaIntraFamily,
    kChunkStateBwdDbFamily, kChunkScanBwdDcFamily, kChunkScanBwdDdaFamily, kChunkStatePassingFwdFamily,
    kChunkStatePassingBwdFamily, kChunkScanBwdDcbDdaIntraFamily;

const std::vector<const KernelFamily*>& kernel_families() {
  static const std::vector<const KernelFamily*> families = [] {
    std::vector<const KernelFamily*> all = {
        &kChunkCumsumFwdFamily,       &kChunkCumsumBwdFamily,   &kReduceHeadPartialsFamily, &kBmmChunkFwdFamily,
        &kChunkStateFwdFamily,        &kStatePassingFwdFamily,  &kChunkScanFwdFamily,       &kGateBwdFamily,
        &kChunkScanBwdDstatesFamily,  &kStatePassingBwdFamily,  &kChunkScanBwdDxFamily,     &kChunkScanBwdDcbFamily,
        &kChunkScanBwdDdaIntraFamily, &kChunkStateBwdDbFamily,  &kChunkScanBwdDcFamily,     &kChunkScanBwdDdaFamily,
        &kChunkStatePassingFwdFamily, &kChunkStatePassingBwdFamily, &kChunkScanBwdDcbDdaIntraFamily};
    std::sort(all.begin(), all.end(), [](const KernelFamily* a, const KernelFamily* b) { return a->id < b->id; });
    return all;
  }();
  return families;
}

const KernelFamily* find_family(int64_t kernel) {
  for (const KernelFamily* f : kernel_families())
    if (int64_t(f->id) == kernel) return f;
  return nullptr;
}

ssd_kernel_config config_for_shape(ssd_kernel_id kernel, const SsdShape& shape, uint32_t flags, ssd_mode mode,
                                   ssd_arch arch) {
  ssd_kernel_config c = default_config(kernel);
  const KernelFamily& f = *find_family(kernel);
  c.chunk_size = shape.chunk_size;
  if (c.dtype != SSD_DTYPE_FP32) c.dtype = shape.dtype;
  if (c.headdim) c.headdim = shape.headdim;
  if (c.dstate) c.dstate = shape.dstate;
  if (c.heads_per_group) c.heads_per_group = shape.heads_per_group;
  c.flags = flags & f.allowed_flags;
  c.mode = mode;
  c.arch = arch;
  return c;
}

SpecWriter& SpecWriter::integer(const char* name, int value, const char* comment) {
  members_ += fmt::format("  static constexpr int {} = {};", name, value);
  if (comment) members_ += fmt::format("  // {}", comment);
  members_ += "\n";
  return *this;
}

SpecWriter& SpecWriter::boolean(const char* name, bool value) {
  members_ += fmt::format("  static constexpr bool {} = {};\n", name, value ? "true" : "false");
  return *this;
}

SpecWriter& SpecWriter::type(const char* name, const std::string& type) {
  members_ += fmt::format("  using {} = {};\n", name, type);
  return *this;
}

SpecWriter& SpecWriter::element(const char* name, ssd_dtype dtype) {
  switch (dtype) {
    case SSD_DTYPE_BF16: return type(name, "ssd_kernels::bf16");
    case SSD_DTYPE_FP16: return type(name, "ssd_kernels::fp16");
    default: return type(name, "float");
  }
}

Status field_error(const ssd_kernel_config& c, const char* field, const std::string& value, const std::string& legal) {
  return make_error(SSD_ERROR_INVALID_CONFIG, fmt::format("{}: {} is not legal for {} (legal: {})", field, value,
                                                          kernel_name(c.kernel), legal));
}

bool in_list(int v, std::initializer_list<int> legal) {
  for (int l : legal)
    if (v == l) return true;
  return false;
}

std::string int_list(std::initializer_list<int> legal) {
  std::string s;
  for (int l : legal) s += (s.empty() ? "" : ", ") + std::to_string(l);
  return s;
}

std::string dtype_text(ssd_dtype dtype) {
  return is_dtype_value(dtype) ? std::string(dtype_name(dtype)) : std::to_string(int(dtype));
}

Status require_zeros(const ssd_kernel_config& c, std::initializer_list<NamedField> fields) {
  for (const NamedField& f : fields)
    if (f.value != 0) return field_error(c, f.name, std::to_string(f.value), "0, the kernel does not use it");
  return Status::Ok();
}

Status validate_ssd_kernel(const ssd_kernel_config& c, SsdFieldUse uses, std::initializer_list<int> dtypes,
                           const char* dtypes_legal, const char* (*tile_problem)(const ssd_kernel_config&)) {
  SSD_RETURN_IF_ERROR(require_zeros(c, {{"partials", c.partials}}));
  if (!in_list(c.chunk_size, {64, 128, 256}))
    return field_error(c, "chunk_size", std::to_string(c.chunk_size), "64, 128, 256");
  const bool any_shape = uses.headdim || uses.dstate || uses.heads_per_group;
  if (!any_shape)
    SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"dstate", c.dstate},
                                          {"heads_per_group", c.heads_per_group}}));
  if (!in_list(c.dtype, dtypes)) return field_error(c, "dtype", dtype_text(c.dtype), dtypes_legal);
  if (any_shape) {
    if (!uses.dstate) SSD_RETURN_IF_ERROR(require_zeros(c, {{"dstate", c.dstate}}));
    else if (!in_list(c.dstate, {16, 32, 64, 128, 256}))
      return field_error(c, "dstate", std::to_string(c.dstate), "16, 32, 64, 128, 256");
    if (!uses.headdim) {
      SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"heads_per_group", c.heads_per_group}}));
    } else {
      if (!in_list(c.headdim, {32, 64, 128})) return field_error(c, "headdim", std::to_string(c.headdim), "32, 64, 128");
      if (c.heads_per_group < 1 || c.heads_per_group > 1024)
        return field_error(c, "heads_per_group", std::to_string(c.heads_per_group), "1..1024 (nheads / ngroups)");
    }
  }
  if ((c.flags & SSD_FLAG_D_PER_HEADDIM) && !(c.flags & SSD_FLAG_D))
    return field_error(c, "flags", flags_text(c.flags), "D_per_headdim only together with D");
  if (tile_problem && (c.tile.m || c.tile.n || c.tile.k)) {  // partial tiles are completed by normalize_config
    ssd_kernel_config filled = c;
    const ssd_tile d = find_family(c.kernel)->default_tile(c);
    if (!filled.tile.m) filled.tile.m = d.m;
    if (!filled.tile.n) filled.tile.n = d.n;
    if (!filled.tile.k) filled.tile.k = d.k;
    if (const char* problem = tile_problem(filled))
      return field_error(c, "tile", fmt::format("{}x{}x{}", filled.tile.m, filled.tile.n, filled.tile.k), problem);
  }
  return Status::Ok();
}

Status validate_tensor_core(const ssd_kernel_config& c, SsdFieldUse uses,
                            const char* (*tile_problem)(const ssd_kernel_config&)) {
  return validate_ssd_kernel(c, uses, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}, "bf16, fp16 (tensor cores)", tile_problem);
}

void tensor_core_defaults(ssd_kernel_config& c, SsdFieldUse uses) {
  c.dtype = SSD_DTYPE_BF16;
  c.chunk_size = 256;
  c.headdim = uses.headdim ? 64 : 0;
  c.dstate = uses.dstate ? 64 : 0;
  c.heads_per_group = uses.heads_per_group ? 1 : 0;
}

SpecWriter shape_spec(const ssd_kernel_config& c, SsdFieldUse uses) {
  SpecWriter s;
  s.integer("kChunk", c.chunk_size);
  if (uses.headdim) s.integer("kHeaddim", c.headdim);
  if (uses.dstate) s.integer("kDstate", c.dstate);
  if (uses.heads_per_group) s.integer("kHeadsPerGroup", c.heads_per_group);
  s.element("Element", c.dtype);
  return s;
}

SpecWriter tile_spec(const ssd_kernel_config& c, SsdFieldUse uses, const char* m_comment, const char* n_comment,
                     const char* k_comment) {
  SpecWriter s = shape_spec(c, uses);
  s.integer("kBlockM", c.tile.m, m_comment);
  if (c.tile.n) s.integer("kBlockN", c.tile.n, n_comment);
  if (c.tile.k) s.integer("kBlockK", c.tile.k, k_comment);
  return s;
}

void block_kernel_defaults(ssd_kernel_config& c, ssd_dtype dtype) {
  c.dtype = dtype;
  c.chunk_size = 256;
}

SpecWriter block_spec(const ssd_kernel_config& c, const char* comment) {
  SpecWriter s;
  s.integer("kChunk", c.chunk_size).integer("kBlock", c.tile.m, comment);
  return s;
}

std::vector<ssd_tile> tiles_accepted(const ssd_kernel_config& c, bool with_n, bool with_k,
                                     const char* (*tile_problem)(const ssd_kernel_config&)) {
  std::vector<ssd_tile> tiles;
  for (int m : {16, 32, 64, 128})
    for (int n : {0, 16, 32, 64, 128, 256})
      for (int k : {0, 16, 32, 64}) {
        if (with_n == (n == 0) || with_k == (k == 0)) continue;
        ssd_kernel_config t = c;
        t.tile = ssd_tile{m, n, k, 0, 0};
        if (!tile_problem(t)) tiles.push_back(t.tile);
      }
  return tiles;
}

ssd_tile best_legal_tile(const ssd_kernel_config& c, ssd_tile best, ssd_tile fallback,
                         const char* (*tile_problem)(const ssd_kernel_config&)) {
  ssd_kernel_config probe = c;
  probe.tile = best;
  return tile_problem(probe) ? fallback : best;
}

std::vector<ssd_tile> tiles_m(std::initializer_list<int> ms) {
  std::vector<ssd_tile> tiles;
  for (int m : ms) tiles.push_back(ssd_tile{m, 0, 0, 0, 0});
  return tiles;
}

}  // namespace ssd
