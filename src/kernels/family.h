// A kernel family: everything the library knows about one kernel id, in one descriptor. Each
// family lives in src/kernels/<template>.cpp next to its kind (the families that share a template
// share the file); kernel_families() lists them in enum order. Config validation, default tiles,
// the legal-tile lists and code generation are loops over this table (src/config, src/codegen).
// Adding a kernel family: docs/adding-a-kernel.md.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "ssd/ssd.h"

namespace ssd {

// The compile-time choices of one specialization, as the generated unit's `struct Spec` members:
// `static constexpr int kChunk = 256;`, `static constexpr bool kSeqIdx = false;`,
// `using Element = ssd_kernels::bf16;`. The template reads them by name (template <class Spec>),
// so their order is nobody's contract.
class SpecWriter {
 public:
  SpecWriter& integer(const char* name, int value, const char* comment = nullptr);
  SpecWriter& boolean(const char* name, bool value);
  SpecWriter& type(const char* name, const std::string& type);
  SpecWriter& element(const char* name, ssd_dtype dtype);  // ssd_kernels::bf16 / fp16 / float
  const std::string& members() const { return members_; }

 private:
  std::string members_;
};

// What a family's generator gives for a normalized config.
struct KernelSpec {
  std::string members;         // the body of `struct Spec { ... };`
  int block_threads = 0;       // threads per block (the launch uses the same figure)
  int min_blocks_per_sm = 0;   // __launch_bounds__'s second argument; 0: not given
  // The parameter block when not the family's (nullptr: KernelFamily::params): a specialization
  // that reads more fields takes a block that extends the family's at its end, so the others keep
  // their parameter layout (and machine code). The launcher may always pass the larger block.
  const char* params = nullptr;
  // Dynamic shared memory per block in bytes (the launch passes it; above 48 KiB the loader raises
  // the function's limit). 0 for kernels whose shared memory is all static.
  int dynamic_shared_bytes = 0;
};

struct KernelFamily {
  ssd_kernel_id id;
  const char* name;      // config name; the entry point is "ssd_<name>", the unit "<name>.cu"
  const char* header;    // the template header the unit includes
  const char* params;    // the parameter block (ssd_kernels::<params>)
  const char* function;  // the template function (ssd_kernels::<function><Spec>)
  uint32_t allowed_flags;  // any other flag bit is a config error (it would only split the cache)
  // What ssd_kernel_config_init gives besides kernel, mode and arch. It gives a nonzero value to
  // exactly the shape fields (headdim, dstate, heads_per_group) the family reads, and fp32 as the
  // dtype to families whose dtype is fixed at fp32: config_for_shape relies on both.
  void (*set_defaults)(ssd_kernel_config& c);
  // The family's own field rules (kernel, enums, flags, warps and stages are checked before);
  // zero tile fields mean "default". The detail names the field and its legal values.
  Status (*validate)(const ssd_kernel_config& c);
  // The default tile: a pure function of the specialization, never chosen by timing.
  ssd_tile (*default_tile)(const ssd_kernel_config& c);
  // Every tile the family accepts for the specialization (the D2 tests run them all).
  std::vector<ssd_tile> (*legal_tiles)(const ssd_kernel_config& c);
  KernelSpec (*spec)(const ssd_kernel_config& normalized);
};

// Every family, in ssd_kernel_id order.
const std::vector<const KernelFamily*>& kernel_families();
// The family of an id; nullptr when the value names none (read C enums as integers first).
const KernelFamily* find_family(int64_t kernel);

// The shape of one SSD call as the kernels see it.
struct SsdShape {
  int32_t chunk_size, headdim, dstate, heads_per_group;
  ssd_dtype dtype;  // x, B, C, z
};
// The config of kernel `kernel` for a call: the family's defaults, then the shape fields it reads,
// x's dtype (unless its dtype is fixed at fp32), and the flags it reads out of `flags`.
ssd_kernel_config config_for_shape(ssd_kernel_id kernel, const SsdShape& shape, uint32_t flags, ssd_mode mode,
                                   ssd_arch arch);

// ---- helpers for the families' validate / default_tile / legal_tiles -------------------------

// "<field>: <value> is not legal for <kernel> (legal: <legal>)", SSD_ERROR_INVALID_CONFIG.
Status field_error(const ssd_kernel_config& c, const char* field, const std::string& value, const std::string& legal);
bool in_list(int v, std::initializer_list<int> legal);
std::string int_list(std::initializer_list<int> legal);  // "64, 128, 256"
std::string dtype_text(ssd_dtype dtype);                 // its name, or the number when it has none

// The fields a kernel does not read must be 0, so that one kernel has one key.
struct NamedField {
  const char* name;
  int value;
};
Status require_zeros(const ssd_kernel_config& c, std::initializer_list<NamedField> fields);

// The tensor-core kernels' shared rules. `uses` says which shape fields the family reads: each of
// those must be legal, each other one 0. `dtypes` and `dtype_text` give the legal element types;
// `tile_problem` (nullptr: no tile fields) is the params header's constexpr legality function
// applied to the completed tile.
struct SsdFieldUse {
  bool headdim, dstate, heads_per_group;
};
Status validate_ssd_kernel(const ssd_kernel_config& c, SsdFieldUse uses, std::initializer_list<int> dtypes,
                           const char* dtypes_legal, const char* (*tile_problem)(const ssd_kernel_config&));
// The tensor-core families (x, B, C in bf16 or fp16): validate_ssd_kernel with those dtypes.
Status validate_tensor_core(const ssd_kernel_config& c, SsdFieldUse uses,
                            const char* (*tile_problem)(const ssd_kernel_config&));
// Their defaults: bf16, chunk 256, and headdim 64, dstate 64, one head per group for the fields
// in `uses` (the others 0, as set_defaults promises).
void tensor_core_defaults(ssd_kernel_config& c, SsdFieldUse uses);
// Their Spec's shape members: kChunk, the fields in `uses` (kHeaddim, kDstate, kHeadsPerGroup),
// Element.
SpecWriter shape_spec(const ssd_kernel_config& c, SsdFieldUse uses);
// Every m x n x k tile from the power-of-two candidates that `tile_problem` accepts; `with_n` /
// `with_k`: whether the family has that tile dimension (otherwise it is 0).
std::vector<ssd_tile> tiles_accepted(const ssd_kernel_config& c, bool with_n, bool with_k,
                                     const char* (*tile_problem)(const ssd_kernel_config&));
// The fastest of the candidates measured at the nemotronh-56b shape (scripts/tile_sweep.sh,
// docs/perf.md) when it is legal for this specialization, else the fallback that is legal for
// every shape. Every legal tile gives the same bits (D2), so this is only about speed.
ssd_tile best_legal_tile(const ssd_kernel_config& c, ssd_tile best, ssd_tile fallback,
                         const char* (*tile_problem)(const ssd_kernel_config&));
// A one-dimensional tile: every m in `ms`.
std::vector<ssd_tile> tiles_m(std::initializer_list<int> ms);

// The params headers' tile checks that take the whole shape, (chunk_size, headdim, dstate, m, n, k)
// and for some seq_idx, as a family's tile_problem: the one place that maps the config's fields
// onto those arguments, in that order.
template <auto kCheck>
const char* shape_tile_problem(const ssd_kernel_config& c) {
  if constexpr (std::is_invocable_v<decltype(kCheck), int, int, int, int, int, int, bool>)
    return kCheck(c.chunk_size, c.headdim, c.dstate, c.tile.m, c.tile.n, c.tile.k, c.flags & SSD_FLAG_SEQ_IDX);
  else
    return kCheck(c.chunk_size, c.headdim, c.dstate, c.tile.m, c.tile.n, c.tile.k);
}

// A tensor-core family's descriptor functions from its field use and tile check (tile_problem as
// above; kWithN / kWithK: whether the family has that tile dimension):
//   constexpr SsdFieldUse kUses{true, true, true};
//   constexpr auto tile_problem = shape_tile_problem<ssd_kernels::...::xxx_tile_problem>;  (or a function)
//   using Rules = TensorCoreRules<kUses, tile_problem, true, true>;
//   ... {id, name, ..., Rules::defaults, Rules::validate, default_tile, Rules::legal_tiles, spec}
template <const SsdFieldUse& kUses, const char* (*kTileProblem)(const ssd_kernel_config&), bool kWithN, bool kWithK>
struct TensorCoreRules {
  static void defaults(ssd_kernel_config& c) { tensor_core_defaults(c, kUses); }
  static Status validate(const ssd_kernel_config& c) { return validate_tensor_core(c, kUses, kTileProblem); }
  static std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) {
    return tiles_accepted(c, kWithN, kWithK, kTileProblem);
  }
};
// A tensor-core family's Spec up to its flags: shape_spec, then kBlockM, kBlockN and kBlockK with
// the comments given (nullptr: none); a tile dimension the family does not have (0 in every
// normalized config, validated) is not written.
SpecWriter tile_spec(const ssd_kernel_config& c, SsdFieldUse uses, const char* m_comment, const char* n_comment,
                     const char* k_comment);
// The one-dimensional families' defaults (state_passing, chunk_scan_bwd_ddA, chunk_cumsum): the
// dtype, chunk 256, every other field 0.
void block_kernel_defaults(ssd_kernel_config& c, ssd_dtype dtype);
// Their Spec's shape members: kChunk, and kBlock = tile.m (threads per block) with `comment`.
SpecWriter block_spec(const ssd_kernel_config& c, const char* comment);

}  // namespace ssd
