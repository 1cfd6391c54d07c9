#include "ops/ssd_forward.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/struct_io.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ops/chunk_cumsum.h"
#include "ops/op_common.h"
#include "ops/operand_maps.h"
#include "ops/plan.h"
#include "ops/tensor_check.h"
#include "ops/tensor_ref.h"
#include "ops/workspace.h"
#include "ssd/forward_params.cuh"
#include "ssd/kernel_params.cuh"

namespace ssd {
int64_t states_bytes(bool with_output, const ForwardTuning& tuning) {
  return with_output && !tuning.staged_states ? 2 : 4;  // x is bf16 or fp16
}

namespace {

constexpr size_t kAlign = 256;

bool one_of(int64_t v, std::initializer_list<int64_t> legal) {
  return std::find(legal.begin(), legal.end(), v) != legal.end();
}

}  // namespace

std::string dims_text(const ForwardDims& d) {
  return fmt::format("b={} L={} h={} p={} g={} n={} chunk_size={}", d.b, d.L, d.h, d.p, d.g, d.n, d.Q);
}

Status check_state_tensor(const ssd_tensor& t, const char* name, const ForwardDims& d, bool output) {
  SSD_RETURN_IF_ERROR(check_tensor(t, {name, {d.b, d.h, d.p, d.n}, {SSD_DTYPE_FP32}, output, true}));
  if (t.strides[2] != d.n)
    return make_error(SSD_ERROR_INVALID_STRIDE, fmt::format("{}: headdim stride {} must equal dstate {} (p*n is "
                                                            "one flattened axis)", name, t.strides[2], d.n));
  return Status::Ok();
}

Status check_forward_inputs(const ssd_forward_args& a, ForwardDims& d) {
  if (!one_of(a.chunk_size, {64, 128, 256}))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("args.chunk_size: {} (legal: 64, 128, 256)", a.chunk_size));
  if (std::isnan(a.dt_limit_lo) || std::isnan(a.dt_limit_hi) || a.dt_limit_lo > a.dt_limit_hi)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "args.dt_limit_lo/dt_limit_hi: must be ordered numbers");
  SSD_RETURN_IF_ERROR(check_tensor(a.x, {"x", {-1, -1, -1, -1}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}}));
  d = ForwardDims{a.x.shape[0], a.x.shape[1], a.x.shape[2], a.x.shape[3], 0, 0, 0, a.chunk_size};
  if (!one_of(d.p, {32, 64, 128}))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("x: headdim {} (legal: 32, 64, 128)", d.p));
  SSD_RETURN_IF_ERROR(check_tensor(a.B, {"B", {d.b, d.L, -1, -1}, {a.x.dtype}}));
  d.g = a.B.shape[2];
  d.n = a.B.shape[3];
  d.nc = d.L / d.Q + (d.L % d.Q != 0);  // (L + Q - 1) / Q overflows for L near 2^63
  // The kernels count heads and (batch, chunk) work items in 32 bits, and chunk_state_passing_fwd its
  // (chunk, K step) sequence with K steps of at least 16 positions (offsets are 64-bit).
  constexpr int64_t kMax32 = 0x7fffffff;
  if (d.h > kMax32 || d.nc > kMax32 / std::max<int64_t>(d.b, 1) || d.nc > kMax32 / (d.Q / 16))
    return make_error(SSD_ERROR_INVALID_SHAPE,
                      fmt::format("x: batch {} x {} chunks of {} positions (seqlen {}), {} heads: the kernels' work "
                                  "indices are 32-bit (nheads, batch x nchunks and nchunks x chunk_size / 16 must be "
                                  "below 2^31)", d.b, d.nc, d.Q, d.L, d.h));
  if (!one_of(d.n, {16, 32, 64, 128, 256}))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("B: dstate {} (legal: 16, 32, 64, 128, 256)", d.n));
  if (d.h % d.g != 0)
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("B: ngroups {} does not divide nheads {}", d.g, d.h));
  SSD_RETURN_IF_ERROR(check_tensor(a.C, {"C", {d.b, d.L, d.g, d.n}, {a.x.dtype}}));
  SSD_RETURN_IF_ERROR(check_tensor(a.dt, {"dt", {d.b, d.L, d.h}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16, SSD_DTYPE_FP32}}));
  SSD_RETURN_IF_ERROR(check_tensor(a.A, {"A", {d.h}, {SSD_DTYPE_FP32}}));
  if (a.D.data) {
    if (a.D.ndim == 1) SSD_RETURN_IF_ERROR(check_tensor(a.D, {"D", {d.h}, {SSD_DTYPE_FP32}}));
    else SSD_RETURN_IF_ERROR(check_tensor(a.D, {"D", {d.h, d.p}, {SSD_DTYPE_FP32}}));
  }
  if (a.z.data) SSD_RETURN_IF_ERROR(check_tensor(a.z, {"z", {d.b, d.L, d.h, d.p}, {a.x.dtype}}));
  if (a.dt_bias.data) SSD_RETURN_IF_ERROR(check_tensor(a.dt_bias, {"dt_bias", {d.h}, {SSD_DTYPE_FP32}}));
  if (a.initial_states.data) SSD_RETURN_IF_ERROR(check_state_tensor(a.initial_states, "initial_states", d, false));
  if (a.final_states.data) SSD_RETURN_IF_ERROR(check_state_tensor(a.final_states, "final_states", d, true));
  if (a.seq_idx.data) SSD_RETURN_IF_ERROR(check_tensor(a.seq_idx, {"seq_idx", {d.b, d.L}, {SSD_DTYPE_INT32}}));
  return Status::Ok();
}

Status check_forward(const ssd_forward_args& a, ForwardDims& d) {
  SSD_RETURN_IF_ERROR(check_forward_inputs(a, d));
  SSD_RETURN_IF_ERROR(check_tensor(a.out, {"out", {d.b, d.L, d.h, d.p}, {a.x.dtype}, true}));
  if (a.z.data) SSD_RETURN_IF_ERROR(check_tensor(a.out_x, {"out_x", {d.b, d.L, d.h, d.p}, {a.x.dtype}, true}));
  else if (a.out_x.data)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "out_x: only written with z (pass z, or NULL out_x)");
  return Status::Ok();
}

namespace {

// state_bytes: the size of one element of P (states_bytes()).
Result<ssd_forward_layout> layout_for(const ForwardDims& d, int64_t state_bytes) {
  CheckedSize z;  // absurd shapes must not wrap into a small total with overlapping regions
  ssd_forward_layout l{};
  l.struct_size = sizeof(l);
  const size_t chunked = z.align_up(z.mul({d.b, d.h, d.nc, d.Q, 4}), kAlign);
  const size_t cb = z.align_up(z.mul({d.b, d.nc, d.g, d.Q, d.Q, 4}), kAlign);
  const size_t states = z.align_up(z.mul({d.b, d.nc, d.h, d.p, d.n, state_bytes}), kAlign);
  l.dt_out_offset = 0;
  l.dA_cumsum_offset = chunked;
  l.CB_offset = z.add(l.dA_cumsum_offset, chunked);
  l.states_offset = z.add(l.CB_offset, cb);
  l.total_bytes = z.add(l.states_offset, states);
  SSD_RETURN_IF_ERROR(z.status("ssd_forward", [&] { return dims_text(d); }));
  return l;
}

// ---- The forward's plan: chunk_cumsum_fwd -> bmm_chunk -> chunk_state_passing (or, staged,
// chunk_state -> state_passing) -> chunk_scan (the last one only when the output is wanted: the
// backward's recompute stops after the entering states). Each stage binds its parameter block from
// the call's validated arguments and the workspace buffers.

using F = ForwardCall;

SsdShape shape_of(const F& c) {
  return SsdShape{c.d.Q, int32_t(c.d.p), int32_t(c.d.n), int32_t(c.d.h / c.d.g), c.a.x.dtype};
}
ssd_kernel_config shaped(const F& c, ssd_kernel_id kernel, const ssd_tile& tile) {
  ssd_kernel_config k = config_for_shape(kernel, shape_of(c), specialization_flags(c.a), c.mode, c.arch);
  k.tile = tile;
  return k;
}
// Workspace intermediates, contiguous: the (b, h, nchunks, Q) vectors, CB (b, nchunks, g, Q, Q) and
// the states (b, nchunks, h, p, n), viewed over their leading axes.
template <class T, int N>
TensorRef<T, N> chunked(const F& c, float* p) {
  const int64_t heads = c.buf.chunk_heads > 0 ? c.buf.chunk_heads : c.d.h;  // the buffer's heads
  const long long shape[] = {c.d.b, heads, c.d.nc, c.d.Q};
  return contiguous_ref<T, N>(p + c.buf.chunk_head0 * c.d.nc * c.d.Q, shape);
}
template <class T, int N>
TensorRef<T, N> cb_ref(const F& c) {
  const long long shape[] = {c.d.b, c.d.nc, c.d.g, c.d.Q, c.d.Q};
  return contiguous_ref<T, N>(c.buf.CB, shape);
}
template <class T, int N>
TensorRef<T, N> states_ref(const F& c) {
  const long long shape[] = {c.d.b, c.d.nc, c.d.h, c.d.p, c.d.n};
  return contiguous_ref<T, N>(static_cast<T*>(c.buf.states), shape);
}
unsigned gy(const F& c) { return grid_yz(c.d.b * c.d.nc, c.max_blocks); }
// P in x's dtype: the forward's output path (chunk_scan_fwd rounds P to it before its mma, so out
// keeps its bits). fp32 for the backward's recompute (its kernels read fp32 P) and on the staged
// path (state_passing_fwd passes the states in place, in fp32).
bool states_in_dtype(const F& c) { return states_bytes(c.with_output, c.tiles) == 2; }
// The backward's recompute (no output) computes P with the two-term state product
// (SSD_FLAG_TWO_TERM_STATES) on either path: the backward's dA sums P's rounding (issue 11). The
// forward's own P keeps the single term (chunk_scan_fwd rounds it to x's dtype anyway).
uint32_t state_product_flags(const F& c) { return c.with_output ? 0u : uint32_t(SSD_FLAG_TWO_TERM_STATES); }

// F1: dt preprocessing and the within-chunk cumulative sum.
ssd_kernel_config cumsum_config(const F& c) {
  return chunk_cumsum_fwd_config(c.a.dt.dtype, c.d.Q, c.a.dt_bias.data != nullptr, c.a.dt_softplus != 0, ssd_tile{},
                                 c.mode, c.arch);
}
Status cumsum_launch(const F& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::ChunkCumsumFwdParams p{};
  bind_cumsum_inputs(p, c.a, c.d.b, c.d.L, c.d.h, c.d.nc);
  p.dt_out = chunked<float, 3>(c, c.buf.dt_out);
  p.dA_cumsum = chunked<float, 3>(c, c.buf.dA_cumsum);
  return launch_chunk_cumsum_fwd(k, p, c.max_blocks, stream);
}

// F4: CB = C B^T per (b, c, g). The family's default is the mma.sync kernel's 64 x 64 tile (Q/64 ·
// (Q/64 + 1) / 2 blocks per chunk and group, four per SM); on sm_90a, where the shape has the wgmma
// kernel, the tuning leaves the tile unset and that kernel's grid (one block per pair of row bands)
// has at least kWgmmaBmmMinBlocks blocks (about one per SM), its tile 64 x 64 x 64 instead. Measured
// (docs/perf.md, forward log entries 24-25, nemotronh-56b): faster from 128 blocks (b=1 L=2048 0.018
// -> 0.015 ms, b=4 0.049 -> 0.037), slower at 32 (b=1 L=512 0.010 -> 0.013) and 64 (the backward's
// group slices, b=4 L=2048). A pure function of the extents (prepare's lists hold both kernels); the
// same bits either way.
constexpr int64_t kWgmmaBmmMinBlocks = 128;
ssd_kernel_config bmm_config(const F& c) {
  ssd_kernel_config k = shaped(c, SSD_KERNEL_BMM_CHUNK_FWD, c.tiles.bmm);
  const ssd_tile& t = c.tiles.bmm;
  const int64_t blocks = c.d.b * c.d.nc * c.d.g * ssd_kernels::fwd_geom::bmm_chunk_wgmma_pairs(c.d.Q);
  if (!t.m && !t.n && !t.k && c.arch == SSD_ARCH_SM90A &&
      ssd_kernels::fwd_geom::bmm_chunk_wgmma_shape(c.d.Q, int(c.d.n)) && blocks >= kWgmmaBmmMinBlocks)
    k.tile = kBmmWgmmaTile;
  return k;
}
Status bmm_launch(const F& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::BmmChunkFwdParams p{};
  p.C = ref<const void, 4>(c.a.C);
  p.B = ref<const void, 4>(c.a.B);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.CB = cb_ref<float, 4>(c);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.ngroups = c.d.g;
  const ssd_kernel_config& kc = k.built->config;
  void* params[] = {&p};
  return launch_kernel(k, grid_x(ssd_kernels::fwd_geom::bmm_chunk_blocks_x(kc.arch == SSD_ARCH_SM90A, kc.chunk_size,
                                                                           kc.dstate, kc.tile.m, kc.tile.n, kc.tile.k),
                                 c.max_blocks),
                       gy(c),
                       grid_yz(c.d.g, c.max_blocks), params, stream);
}

// The inputs of the chunk states (F2), shared by chunk_state_fwd and chunk_state_passing_fwd.
template <class Params>
void bind_chunk_state_inputs(const F& c, Params& p) {
  p.x = ref<const void, 4>(c.a.x);
  p.B = ref<const void, 4>(c.a.B);
  p.dt = chunked<const float, 3>(c, c.buf.dt_out);
  p.dA_cumsum = chunked<const float, 3>(c, c.buf.dA_cumsum);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.nheads = c.d.h;
}

// F2: chunk states (staged path).
bool staged(const F& c) { return c.tiles.staged_states; }
ssd_kernel_config state_config(const F& c) {
  ssd_kernel_config k = shaped(c, SSD_KERNEL_CHUNK_STATE_FWD, c.tiles.state);
  k.flags |= state_product_flags(c);
  return k;
}
Status state_launch(const F& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::ChunkStateFwdParams p{};
  bind_chunk_state_inputs(c, p);
  p.states = states_ref<float, 4>(c);
  const ssd_tile& t = k.built->config.tile;
  void* params[] = {&p};
  return launch_kernel(
      k, grid_x(ssd_kernels::fwd_geom::chunk_state_tiles(int(c.d.p), int(c.d.n), t.m, t.n), c.max_blocks), gy(c),
      grid_yz(c.d.h, c.max_blocks), params, stream);
}

// F3: entering states (in place) and final states (staged path).
ssd_kernel_config passing_config(const F& c) { return shaped(c, SSD_KERNEL_STATE_PASSING_FWD, c.tiles.passing); }
Status passing_launch(const F& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::StatePassingFwdParams p{};
  p.states = states_ref<float, 3>(c);
  p.dA_cumsum = chunked<const float, 3>(c, c.buf.dA_cumsum);
  p.initial_states = ref<const float, 2>(c.a.initial_states);
  p.final_states = ref<float, 2>(c.a.final_states);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nheads = c.d.h; p.nchunks = c.d.nc; p.state_size = c.d.p * c.d.n;
  const int block = k.built->config.tile.m;
  const int64_t work = (p.state_size + block - 1) / block * c.d.b * c.d.h;
  void* params[] = {&p};
  return launch_kernel(k, grid_x(work, c.max_blocks), 1, 1, params, stream);
}

// ---- The sm_90a kernels' TMA operand tiles (SSD_FLAG_TMA): their 4-D tensor maps.

// Both TMA paths: sm_90a, not turned off by ForwardTuning::cp_async, and x fits a map.
bool tma_allowed(const F& c) { return c.arch == SSD_ARCH_SM90A && !c.tiles.cp_async && fits_tma_map(c.a.x); }
// F2 + F3 fused: entering states and final states, s_c kept on chip (the default path).
bool fused(const F& c) { return !c.tiles.staged_states; }
// Its wgmma kernel with TMA stages where x and B fit the maps (sm_90a; its cp.async loaders otherwise,
// or with ForwardTuning::cp_async: the same bits). The backward's recompute takes it too.
bool state_pass_tma(const F& c) {
  return tma_allowed(c) && ssd_kernels::fwd_geom::chunk_state_passing_wgmma_shape(int(c.d.p), int(c.d.n)) &&
         fits_tma_map(c.a.B);
}
ssd_kernel_config state_pass_config(const F& c) {
  ssd_kernel_config k = shaped(c, SSD_KERNEL_CHUNK_STATE_PASSING_FWD, c.tiles.state_pass);
  if (states_in_dtype(c)) k.flags |= SSD_FLAG_STATES_IN_DTYPE;
  k.flags |= state_product_flags(c);
  if (state_pass_tma(c)) k.flags |= SSD_FLAG_TMA;
  return k;
}
Status state_pass_launch(const F& c, const ssd_kernel& k, CUstream stream) {
  // (The walk's 32-bit (chunk, K step) count is checked by check_forward_inputs.)
  // The larger block for every specialization: the cp.async ones read its prefix.
  ssd_kernels::ChunkStatePassingFwdTmaParams p{};
  bind_chunk_state_inputs(c, p);
  p.initial_states = ref<const float, 2>(c.a.initial_states);
  p.states = states_ref<void, 4>(c);
  p.final_states = ref<float, 2>(c.a.final_states);
  if (k.built->config.flags & SSD_FLAG_TMA) {
    const uint32_t positions = uint32_t(k.built->config.tile.k);
    SSD_RETURN_IF_ERROR(put_map(blhp_map(c.a.x, positions), p.map_x));
    SSD_RETURN_IF_ERROR(put_map(blhp_map(c.a.B, positions), p.map_b));
  }
  void* params[] = {&p};
  return launch_state_pass(k, c.d.b, c.d.h, c.d.p, c.d.n, c.max_blocks, params, stream);
}

// F5: the output.
bool scan_runs(const F& c) { return c.with_output; }

// The wgmma kernel with TMA operand tiles (SSD_FLAG_TMA) where the maps fit: sm_90a, the wgmma shape,
// P in x's dtype, x and C as above. Otherwise its cp.async loaders (the same bits).
bool scan_tma(const F& c) {
  return tma_allowed(c) && states_in_dtype(c) &&
         ssd_kernels::fwd_geom::chunk_scan_wg_shape(int(c.d.Q), int(c.d.p), int(c.d.n)) && fits_tma_map(c.a.C);
}
ssd_kernel_config scan_config(const F& c) {
  ssd_kernel_config k = shaped(c, SSD_KERNEL_CHUNK_SCAN_FWD, c.tiles.scan);
  if (states_in_dtype(c)) k.flags |= SSD_FLAG_STATES_IN_DTYPE;
  if (scan_tma(c)) k.flags |= SSD_FLAG_TMA;
  return k;
}
// ChunkScanFwdTmaParams' maps (forward_params.cuh) for the kernel's tile: 4-D, innermost first,
// 128-byte swizzled boxes of 128-byte rows.
Status encode_scan_maps(const F& c, const ssd_tile& t, ssd_kernels::ChunkScanFwdTmaParams& p) {
  const uint64_t bc = uint64_t(c.d.b * c.d.nc);
  SSD_RETURN_IF_ERROR(put_map(blhp_map(c.a.C, uint32_t(t.m)), p.map_c));
  SSD_RETURN_IF_ERROR(put_map(blhp_map(c.a.x, 64), p.map_x));
  SSD_RETURN_IF_ERROR(put_map(dense_map(c.buf.states, c.a.x.dtype, 2,
                                        {uint64_t(c.d.n), uint64_t(c.d.p), uint64_t(c.d.h), bc}, 64, uint32_t(t.n)),
                              p.map_states));
  SSD_RETURN_IF_ERROR(put_map(dense_map(c.buf.CB, SSD_DTYPE_FP32, 4,
                                        {uint64_t(c.d.Q), uint64_t(c.d.Q), uint64_t(c.d.g), bc}, 32, uint32_t(t.m)),
                              p.map_cb));
  return Status::Ok();
}
Status scan_launch(const F& c, const ssd_kernel& k, CUstream stream) {
  // The larger block for every specialization: the cp.async ones read its ChunkScanFwdParams prefix.
  ssd_kernels::ChunkScanFwdTmaParams p{};
  p.CB = cb_ref<const float, 4>(c);
  p.x = ref<const void, 4>(c.a.x);
  p.dt = chunked<const float, 3>(c, c.buf.dt_out);
  p.dA_cumsum = chunked<const float, 3>(c, c.buf.dA_cumsum);
  p.C = ref<const void, 4>(c.a.C);
  p.states = states_ref<const void, 4>(c);
  p.D = ref<const float, 2>(c.a.D);  // D (h): stride[1] = 0
  p.z = ref<const void, 4>(c.a.z);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.out = ref<void, 4>(c.a.out);
  p.out_x = ref<void, 4>(c.a.out_x);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.nheads = c.d.h;
  const ssd_tile& t = k.built->config.tile;
  if (k.built->config.flags & SSD_FLAG_TMA) SSD_RETURN_IF_ERROR(encode_scan_maps(c, t, p));
  void* params[] = {&p};
  return launch_kernel(
      k, grid_x(ssd_kernels::fwd_geom::chunk_scan_tiles(c.d.Q, int(c.d.p), t.m, t.n), c.max_blocks), gy(c),
      grid_yz(c.d.h, c.max_blocks), params, stream);
}

// The data flow (Stage::after): chunk_cumsum_fwd writes Δ and 𝒜 from dt; bmm_chunk_fwd writes CB
// from the caller's C, B (and seq_idx) alone, so it follows nothing and runs beside the cumsum and
// the state pass in a launch graph; the state pass (fused, or the staged chunk_state then
// state_passing) reads Δ, 𝒜, x, B and writes P and the final states; chunk_scan_fwd reads all of it.
const std::vector<Stage<F>>& forward_plan() {
  static const std::vector<Stage<F>> plan = {
      {"chunk_cumsum_fwd", 0, nullptr, cumsum_config, cumsum_launch},
      {"bmm_chunk_fwd", 1, nullptr, bmm_config, bmm_launch, after_stages({})},
      {"chunk_state_fwd", 2, staged, state_config, state_launch, after_stages({0})},
      {"state_passing_fwd", 3, staged, passing_config, passing_launch, after_stages({0, 2})},
      {"chunk_state_passing_fwd", 4, fused, state_pass_config, state_pass_launch, after_stages({0})},
      {"chunk_scan_fwd", 5, scan_runs, scan_config, scan_launch},
  };
  return plan;
}

}  // namespace

const char* const kForwardStageNames[kForwardStages] = {"chunk_cumsum_fwd",  "bmm_chunk_fwd",
                                                        "chunk_state_fwd",   "state_passing_fwd",
                                                        "chunk_state_passing_fwd", "chunk_scan_fwd"};

uint32_t specialization_flags(const ssd_forward_args& a) {
  uint32_t flags = 0;
  if (a.seq_idx.data) flags |= SSD_FLAG_SEQ_IDX;
  if (a.initial_states.data) flags |= SSD_FLAG_INITIAL_STATES;
  if (a.D.data) flags |= SSD_FLAG_D | (a.D.ndim == 2 ? uint32_t(SSD_FLAG_D_PER_HEADDIM) : 0u);
  if (a.z.data) flags |= SSD_FLAG_Z;
  return flags;
}

std::vector<ssd_kernel_config> forward_plan_configs(const ForwardCall& call) {
  return plan_configs(call, forward_plan());
}

Result<PlanKernels> fetch_forward_plan(ssd_runtime& rt, const ForwardCall& call) {
  return fetch_plan(rt, call, forward_plan());
}

Status launch_forward_plan(const ForwardCall& call, const PlanKernels& kernels, CUstream stream,
                           const std::function<void(int)>& after_stage) {
  return launch_plan(call, forward_plan(), kernels, stream, after_stage);
}

ssd_forward_args default_forward_args() { return default_dt_args<ssd_forward_args>(); }

Result<ssd_forward_layout> forward_layout(const ssd_forward_args* user_args, const ForwardTuning* tuning) {
  ssd_forward_args a;
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(read_checked_args(user_args, default_forward_args(), check_forward, a, d));
  return layout_for(d, states_bytes(true, tuning ? *tuning : ForwardTuning{}));
}

Result<std::vector<ssd_kernel_config>> forward_kernel_configs(const ssd_forward_args* user_args, ssd_arch arch,
                                                             ssd_mode mode, const ForwardTuning* tiles) {
  ssd_forward_args a;
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(read_checked_args(user_args, default_forward_args(), check_forward, a, d));
  const ForwardCall call{a, d, mode, arch, ForwardBuffers{}, 0, tiles ? *tiles : ForwardTuning{}, true};
  return forward_plan_configs(call);
}

Status ssd_forward(ssd_runtime& rt, const ssd_forward_args* user_args, const ssd_launch_options* options,
                   CUstream stream, const std::function<void(int)>& after_stage, const ForwardTuning* tiles) {
  ssd_forward_args a;
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(read_checked_args(user_args, default_forward_args(), check_forward, a, d));
  const ForwardTuning tuning = tiles ? *tiles : ForwardTuning{};
  auto checked_layout = layout_for(d, states_bytes(true, tuning));
  if (!checked_layout.ok()) return checked_layout.status();
  const ssd_forward_layout layout = checked_layout.value();
  if (a.workspace && a.workspace_bytes < layout.total_bytes)
    return make_error(SSD_ERROR_WORKSPACE_TOO_SMALL, fmt::format("workspace_bytes: {} given, {} needed "
                                                                 "(ssd_forward_workspace_layout)", a.workspace_bytes,
                                                                 layout.total_bytes));
  if (a.workspace && reinterpret_cast<uintptr_t>(a.workspace) % kAlign != 0)
    return make_error(SSD_ERROR_INVALID_ALIGNMENT, "workspace: must be 256-byte aligned");
  ssd_mode mode = rt.mode;
  if (options) {
    ssd_launch_options o = default_launch_options();
    auto read = read_sized_struct(options, o, "options", offsetof(ssd_launch_options, mode) + sizeof(int32_t));
    if (!read.ok()) return read.status();
    if (read->mode < -1 || read->mode > 1)
      return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("options.mode: {} (legal: -1, 0, 1)", read->mode));
    if (read->mode >= 0) mode = ssd_mode(read->mode);
  }
  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();
  // A call identical to one whose launch graph is kept as that call left it (the same arguments,
  // workspace included, stream, context and mode) replays it as is (runtime/launch_graph.h), as
  // ssd_backward's does. Only calls of the C API's form: a caller's workspace, no tiles, no stage events.
  CallKey same_call;
  if (a.workspace && !tiles && !after_stage) {
    constexpr uint64_t kForwardOp = 0x5353442d46574400ull;  // "SSD-FWD"
    same_call = call_key(kForwardOp, &a, sizeof a, a.workspace, a.workspace_bytes, stream, int(mode));
    Status replayed;
    if (!same_call.empty() && CallRecording::replay_same_call(rt, stream, same_call, &replayed)) return replayed;
  }
  // Every kernel before any allocation: nothing happens unless all of them are available.
  ForwardCall call{a, d, mode, arch.value(), ForwardBuffers{}, tuning.max_blocks, tuning, true};
  PlanKernels kernels;
  SSD_ASSIGN_OR_RETURN(kernels, fetch_forward_plan(rt, call));

  CallWorkspace ws;
  // Formatted only when the call allocates (the host path of a call with a workspace stays short).
  const std::string warning =
      a.workspace ? std::string()
                  : fmt::format("ssd_forward: no workspace given; allocating {} bytes per call on the stream (pass "
                                "one of ssd_forward_workspace_layout().total_bytes to avoid this)",
                                layout.total_bytes);
  SSD_RETURN_IF_ERROR(ws.acquire(rt, a.workspace, layout.total_bytes, stream, warning.c_str()));
  char* base = ws.base();
  call.buf = ForwardBuffers{reinterpret_cast<float*>(base + layout.dt_out_offset),
                            reinterpret_cast<float*>(base + layout.dA_cumsum_offset),
                            reinterpret_cast<float*>(base + layout.CB_offset), base + layout.states_offset};
  // Recorded and launched as one cached graph (runtime/launch_graph.h) unless the caller times the stages.
  CallRecording recording(rt, stream, !after_stage);
  recording.remember_as(std::move(same_call));
  return ws.release(recording.finish(launch_forward_plan(call, kernels, stream, after_stage)));
}

Status launch_state_pass(const ssd_kernel& k, int64_t batch, int64_t nheads, int64_t headdim, int64_t dstate,
                         int32_t max_blocks, void** params, CUstream stream) {
  namespace geom = ssd_kernels::fwd_geom;
  const ssd_tile& t = k.built->config.tile;
  const int p = int(headdim);
  return launch_kernel(k, grid_x(geom::chunk_state_tiles(p, int(dstate), geom::chunk_state_passing_head_rows(p, t.m), t.n),
                                 max_blocks),
                       grid_yz(batch, max_blocks), grid_yz(nheads / geom::chunk_state_passing_heads_per_block(p, t.m), max_blocks),
                       params, stream);
}

}  // namespace ssd
