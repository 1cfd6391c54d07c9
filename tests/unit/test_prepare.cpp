// ssd_forward_prepare / ssd_backward_prepare (src/ops/prepare.h): which kernels, validation with
// NULL or fake pointers, and the build into the runtime's memory and the disk cache (NVRTC, no GPU).
#include <doctest/doctest.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "call_args_support.h"
#include "config/config.h"
#include "ops/prepare.h"
#include "ops/ssd_backward.h"
#include "ops/ssd_forward.h"
#include "ops/tensor_check.h"
#include "temp_dir.h"

using namespace ssd;

namespace {

// Shapes only: every pointer NULL (what prepare accepts for required tensors).
using Shape = calltest::CallShape;

// A tensor described without memory (prepare needs only the shapes).
ssd_tensor no_memory(ssd_dtype dtype, calltest::Dims shape) { return contiguous_tensor(nullptr, dtype, shape); }

ssd_forward_args forward_shape(const Shape& s) {
  ssd_forward_args a = calltest::with_inputs(default_forward_args(), s, no_memory);
  a.out = no_memory(s.T, {s.b, s.L, s.h, s.p});
  return a;
}

ssd_backward_args backward_shape(const Shape& s) {
  ssd_backward_args a = calltest::with_inputs(default_backward_args(), s, no_memory);
  calltest::set_gradients(a, s, no_memory);
  return a;
}

// Real-looking (aligned, distinct) pointers, for comparing with the call's own config list.
void give(ssd_tensor& t, uintptr_t& next) {
  t.data = reinterpret_cast<void*>(next);
  next += 1 << 20;
}

std::set<std::string> records(const std::vector<ssd_kernel_config>& configs) {
  std::set<std::string> out;
  for (const ssd_kernel_config& c : configs) out.insert(config_record(*normalize_config(c)));
  return out;
}

std::unique_ptr<ssd_runtime> runtime_on(const std::string& dir) {
  ssd_runtime_options o{};
  o.struct_size = sizeof(o);
  o.mode = SSD_MODE_DETERMINISTIC;
  o.cache_dir = dir.c_str();
  o.cache_mode = 0;
  auto rt = create_runtime(o);
  REQUIRE(rt.ok());
  return std::move(rt).value();
}

ssd_prepare_options options_for(ssd_arch arch, int32_t mode = -1, int32_t jobs = 0) {
  ssd_prepare_options o = default_prepare_options();
  o.arch = arch;
  o.mode = mode;
  o.jobs = jobs;
  return o;
}

}  // namespace

TEST_CASE("prepare: the forward's kernels are the call's, from shapes alone") {
  Shape s;
  ssd_forward_args a = forward_shape(s);
  auto configs = forward_prepare_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  REQUIRE_MESSAGE(configs.ok(), configs.status().detail);
  std::vector<ssd_kernel_id> kernels;
  for (const ssd_kernel_config& c : configs.value()) kernels.push_back(c.kernel);
  CHECK(kernels == std::vector<ssd_kernel_id>{SSD_KERNEL_CHUNK_CUMSUM_FWD, SSD_KERNEL_BMM_CHUNK_FWD,
                                              SSD_KERNEL_CHUNK_STATE_PASSING_FWD, SSD_KERNEL_CHUNK_SCAN_FWD});
  // The plan's stage names are its kernels' names (ssdgen bench fwd matches them).
  for (const char* name : kForwardStageNames) CHECK_MESSAGE(parse_kernel_name(name).ok(), name);

  // With every option on, fake pointers for the optional tensors select the same specializations
  // as the call with real pointers computes.
  ssd_forward_args full = a;
  full.D = contiguous_tensor(reinterpret_cast<void*>(1), SSD_DTYPE_FP32, {s.h, s.p});
  full.z = contiguous_tensor(reinterpret_cast<void*>(1), s.T, {s.b, s.L, s.h, s.p});
  full.out_x = contiguous_tensor(nullptr, s.T, {s.b, s.L, s.h, s.p});
  full.dt_bias = contiguous_tensor(reinterpret_cast<void*>(1), SSD_DTYPE_FP32, {s.h});
  full.dt_softplus = 1;
  full.initial_states = contiguous_tensor(reinterpret_cast<void*>(1), SSD_DTYPE_FP32, {s.b, s.h, s.p, s.n});
  full.seq_idx = contiguous_tensor(reinterpret_cast<void*>(1), SSD_DTYPE_INT32, {s.b, s.L});
  auto prepared = forward_prepare_configs(&full, SSD_ARCH_SM80, SSD_MODE_FAST);
  REQUIRE_MESSAGE(prepared.ok(), prepared.status().detail);
  ssd_forward_args real = full;
  uintptr_t next = 1 << 20;
  for (ssd_tensor* t : {&real.x, &real.dt, &real.A, &real.B, &real.C, &real.D, &real.z, &real.dt_bias,
                        &real.initial_states, &real.seq_idx, &real.out, &real.out_x})
    give(*t, next);
  auto called = forward_kernel_configs(&real, SSD_ARCH_SM80, SSD_MODE_FAST);
  REQUIRE_MESSAGE(called.ok(), called.status().detail);
  CHECK(records(prepared.value()) == records(called.value()));
  CHECK(records(prepared.value()) != records(*forward_prepare_configs(&a, SSD_ARCH_SM80, SSD_MODE_FAST)));
  for (const ssd_kernel_config& c : prepared.value()) {
    CHECK(c.arch == SSD_ARCH_SM80);
    CHECK(c.mode == SSD_MODE_FAST);
  }
}

TEST_CASE("prepare: on sm_90a bmm_chunk_fwd runs on wgmma where its grid fills the GPU; shape lists hold both") {
  // nemotronh-56b's shape (chunk 256, dstate 256, 8 groups): the wgmma kernel's grid is b x chunks x 8
  // x 2 blocks, the call takes it from 128 blocks on (about one per SM of the H200).
  auto bmm_tiles = [](const std::vector<ssd_kernel_config>& configs) {
    std::vector<int> ks;
    for (const ssd_kernel_config& c : configs)
      if (c.kernel == SSD_KERNEL_BMM_CHUNK_FWD) ks.push_back(normalize_config(c)->tile.k);
    std::sort(ks.begin(), ks.end());
    return ks;
  };
  auto call_configs = [](Shape s, ssd_arch arch) {
    ssd_forward_args a = forward_shape(s);
    uintptr_t next = 1 << 20;
    for (ssd_tensor* t : {&a.x, &a.dt, &a.A, &a.B, &a.C, &a.out}) give(*t, next);
    auto configs = forward_kernel_configs(&a, arch, SSD_MODE_DETERMINISTIC);
    REQUIRE_MESSAGE(configs.ok(), configs.status().detail);
    return configs.value();
  };
  Shape s;
  s.h = 256, s.p = 64, s.g = 8, s.n = 256, s.Q = 256;
  s.b = 4, s.L = 2048;  // 512 blocks
  CHECK(bmm_tiles(call_configs(s, SSD_ARCH_SM90A)) == std::vector<int>{64});
  CHECK(bmm_tiles(call_configs(s, SSD_ARCH_SM80)) == std::vector<int>{0});
  s.b = 1, s.L = 16384;  // 1024 blocks
  CHECK(bmm_tiles(call_configs(s, SSD_ARCH_SM90A)) == std::vector<int>{64});
  s.b = 1, s.L = 2048;  // 128 blocks
  CHECK(bmm_tiles(call_configs(s, SSD_ARCH_SM90A)) == std::vector<int>{64});
  s.b = 1, s.L = 1024;  // 64 blocks: fewer than one per SM
  CHECK(bmm_tiles(call_configs(s, SSD_ARCH_SM90A)) == std::vector<int>{0});
  s.b = 1, s.L = 512;  // 32 blocks
  CHECK(bmm_tiles(call_configs(s, SSD_ARCH_SM90A)) == std::vector<int>{0});
  // A tuning's tile is taken as given.
  ssd_forward_args a = forward_shape(s);
  uintptr_t next = 1 << 20;
  for (ssd_tensor* p : {&a.x, &a.dt, &a.A, &a.B, &a.C, &a.out}) give(*p, next);
  ForwardTuning t;
  t.bmm = ssd_tile{64, 64, 64, 0, 0};
  auto tuned = forward_kernel_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC, &t);
  REQUIRE(tuned.ok());
  CHECK(bmm_tiles(tuned.value()) == std::vector<int>{64});
  // Prepare's lists (and so the presets and `ssdgen compile --shape`) hold both kernels on sm_90a,
  // whatever the extents; one where the shape has one kernel.
  for (int64_t b : {1, 4}) {
    s.b = b, s.L = 2048;
    ssd_forward_args f = forward_shape(s);
    auto prepared = forward_prepare_configs(&f, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
    REQUIRE_MESSAGE(prepared.ok(), prepared.status().detail);
    CHECK(bmm_tiles(prepared.value()) == std::vector<int>{0, 64});
  }
  s.n = 16;
  ssd_forward_args small = forward_shape(s);
  auto one = forward_prepare_configs(&small, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  REQUIRE(one.ok());
  CHECK(bmm_tiles(one.value()) == std::vector<int>{0});
  // The wgmma tile is refused where the shape has no wgmma kernel, by name.
  ssd_kernel_config c = one.value()[1];
  REQUIRE(c.kernel == SSD_KERNEL_BMM_CHUNK_FWD);
  c.tile = ssd_tile{64, 64, 64, 0, 0};
  auto bad = normalize_config(c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().detail.find("wgmma") != std::string::npos);
}

TEST_CASE("prepare: the backward's kernels are the call's, without duplicates") {
  Shape s;
  s.dt = SSD_DTYPE_BF16;
  ssd_backward_args a = backward_shape(s);
  a.D = contiguous_tensor(reinterpret_cast<void*>(8), SSD_DTYPE_FP32, {s.h});
  a.dt_bias = contiguous_tensor(reinterpret_cast<void*>(8), SSD_DTYPE_FP32, {s.h});
  a.z = contiguous_tensor(reinterpret_cast<void*>(8), s.T, {s.b, s.L, s.h, s.p});
  a.out_x = contiguous_tensor(nullptr, s.T, {s.b, s.L, s.h, s.p});
  a.dz = contiguous_tensor(nullptr, s.T, {s.b, s.L, s.h, s.p});
  a.dD = contiguous_tensor(nullptr, SSD_DTYPE_FP32, {s.h});
  a.ddt_bias = contiguous_tensor(nullptr, SSD_DTYPE_FP32, {s.h});
  auto prepared = backward_prepare_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  REQUIRE_MESSAGE(prepared.ok(), prepared.status().detail);

  ssd_backward_args real = a;
  uintptr_t next = 1 << 20;
  for (ssd_tensor* t : {&real.x, &real.dt, &real.A, &real.B, &real.C, &real.D, &real.z, &real.dt_bias, &real.out_x,
                        &real.dout, &real.dx, &real.ddt, &real.dA, &real.dB, &real.dC, &real.dD, &real.dz,
                        &real.ddt_bias})
    give(*t, next);
  auto called = backward_kernel_configs(&real, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  REQUIRE_MESSAGE(called.ok(), called.status().detail);
  CHECK(records(prepared.value()) == records(called.value()));
  CHECK(prepared->size() == records(prepared.value()).size());  // no duplicates
  std::set<ssd_kernel_id> kernels;
  for (const ssd_kernel_config& c : prepared.value()) kernels.insert(c.kernel);
  for (ssd_kernel_id k : {SSD_KERNEL_CHUNK_CUMSUM_FWD, SSD_KERNEL_BMM_CHUNK_FWD,
                          SSD_KERNEL_CHUNK_STATE_PASSING_FWD, SSD_KERNEL_GATE_BWD, SSD_KERNEL_CHUNK_STATE_PASSING_BWD,
                          SSD_KERNEL_CHUNK_SCAN_BWD_DX, SSD_KERNEL_CHUNK_SCAN_BWD_DCB,
                          SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA, SSD_KERNEL_CHUNK_STATE_BWD_DB,
                          SSD_KERNEL_CHUNK_SCAN_BWD_DC, SSD_KERNEL_CHUNK_SCAN_BWD_DDA, SSD_KERNEL_CHUNK_CUMSUM_BWD,
                          SSD_KERNEL_REDUCE_HEAD_PARTIALS})
    CHECK_MESSAGE(kernels.count(k) == 1, kernel_name(k));
  CHECK(kernels.count(SSD_KERNEL_CHUNK_SCAN_FWD) == 0);  // the recompute stops before the output
  CHECK(kernels.count(SSD_KERNEL_CHUNK_STATE_FWD) == 0);  // the states are fused
  CHECK(kernels.count(SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA) == 0);  // opt-in (BackwardTuning::fused_dcb_intra)
  CHECK(kernels.count(SSD_KERNEL_STATE_PASSING_FWD) == 0);
  CHECK(kernels.count(SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES) == 0);  // and so is the backward's state pass
  CHECK(kernels.count(SSD_KERNEL_STATE_PASSING_BWD) == 0);
}

TEST_CASE("prepare: validation names the field, as the call does") {
  Shape s;
  ssd_forward_args a = forward_shape(s);
  a.B.shape[3] = 24;
  auto r = forward_prepare_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  CHECK(r.status().code == SSD_ERROR_INVALID_SHAPE);
  CHECK(r.status().detail.rfind("B: dstate 24", 0) == 0);

  a = forward_shape(s);
  a.out.dtype = SSD_DTYPE_FP16;
  r = forward_prepare_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  CHECK(r.status().code == SSD_ERROR_INVALID_DTYPE);
  CHECK(r.status().detail.rfind("out:", 0) == 0);

  a = forward_shape(s);  // out_x without z is refused by the call, so by prepare too
  a.out_x = contiguous_tensor(reinterpret_cast<void*>(2), s.T, {s.b, s.L, s.h, s.p});
  r = forward_prepare_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  CHECK(r.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(r.status().detail.rfind("out_x:", 0) == 0);

  a = forward_shape(s);
  a.struct_size = 8;
  r = forward_prepare_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  CHECK(r.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(r.status().detail.rfind("args.struct_size", 0) == 0);
  CHECK(forward_prepare_configs(nullptr, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC).status().code ==
        SSD_ERROR_INVALID_ARGUMENT);

  ssd_backward_args b = backward_shape(s);
  b.dD = contiguous_tensor(reinterpret_cast<void*>(4), SSD_DTYPE_FP32, {s.h});  // dD without D
  auto rb = backward_prepare_configs(&b, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  CHECK(rb.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(rb.status().detail.rfind("dD: given without D", 0) == 0);
  b = backward_shape(s);
  b.mode = 7;
  rb = backward_prepare_configs(&b, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  CHECK(rb.status().detail.rfind("args.mode: 7", 0) == 0);

  ssd_prepare_options o = options_for(SSD_ARCH_SM90A);
  a = forward_shape(s);
  o.arch = 75;
  auto p = forward_prepare(nullptr, &a, &o);
  CHECK(p.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(p.status().detail.rfind("options.arch: 75", 0) == 0);
  o = options_for(SSD_ARCH_SM90A, 2);
  CHECK(forward_prepare(nullptr, &a, &o).status().detail.rfind("options.mode: 2", 0) == 0);
  o = options_for(SSD_ARCH_SM90A, -1, -3);
  CHECK(forward_prepare(nullptr, &a, &o).status().detail.rfind("options.jobs: -3", 0) == 0);
  o = options_for(SSD_ARCH_SM90A);
  o.struct_size = 4;
  CHECK(forward_prepare(nullptr, &a, &o).status().detail.rfind("options.struct_size", 0) == 0);
}

TEST_CASE("prepare: the backward prepares the deterministic kernels in either mode (fast mode runs them)") {
  // Issue 10: a fast-mode ssd_backward runs the deterministic kernels (backward_kernel_mode), so its
  // prepare builds exactly those, whichever of args.mode, the runtime's mode and options.mode decides.
  Shape s;
  ssd_backward_args b = backward_shape(s);
  b.mode = SSD_MODE_FAST;
  auto fast = backward_prepare_configs(&b, SSD_ARCH_SM90A, SSD_MODE_FAST);
  auto det = backward_prepare_configs(&b, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  REQUIRE(fast.ok());
  REQUIRE(det.ok());
  REQUIRE(fast->size() == det->size());
  for (size_t i = 0; i < det->size(); ++i) CHECK(config_record((*fast)[i]) == config_record((*det)[i]));
  // A runtime that may only read its (empty) cache: prepare compiles nothing, and its error names the
  // first kernel it needed, mode included ("... det sm_90a").
  unittest::TempDir dir("ssd_prepare_test");
  ssd_runtime_options ro{};
  ro.struct_size = sizeof(ro);
  ro.mode = SSD_MODE_FAST;
  ro.cache_dir = dir.path.c_str();
  ro.cache_mode = 2;  // require-cached
  auto rt = create_runtime(ro);
  REQUIRE(rt.ok());
  ssd_prepare_options o = options_for(SSD_ARCH_SM90A);
  const auto mode_built = [&]() -> std::string {
    auto r = backward_prepare(rt.value().get(), &b, &o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code == SSD_ERROR_CACHE_MISS);
    const std::string& d = r.status().detail;
    const bool is_fast = d.find(" fast sm_90a") != std::string::npos;
    const bool is_det = d.find(" det sm_90a") != std::string::npos;
    CHECK_MESSAGE(is_fast != is_det, d);
    return is_fast ? "fast" : "det";
  };
  CHECK(mode_built() == "det");  // args.mode fast
  b.mode = -1;
  CHECK(mode_built() == "det");  // the runtime's mode, fast
  o.mode = SSD_MODE_FAST;
  CHECK(mode_built() == "det");  // options.mode fast
  b.mode = SSD_MODE_FAST;
  o.mode = SSD_MODE_DETERMINISTIC;
  CHECK(mode_built() == "det");
}

TEST_CASE("prepare: kernels land in memory and on disk; a second prepare compiles nothing (NVRTC)") {
  unittest::TempDir dir("ssd_prepare_test");
  Shape s;
  ssd_forward_args a = forward_shape(s);
  const ssd_prepare_options o = options_for(SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC, 2);
  {
    auto rt = runtime_on(dir.path);
    auto first = forward_prepare(rt.get(), &a, &o);
    REQUIRE_MESSAGE(first.ok(), first.status().detail);
    CHECK(first->kernels == 4);
    CHECK(first->compiled == 4);
    CHECK(first->from_disk == 0);
    CHECK(first->from_memory == 0);
    CHECK(first->seconds > 0);
    CHECK(rt->cache->list().size() == 4);

    auto again = forward_prepare(rt.get(), &a, &o);
    REQUIRE(again.ok());
    CHECK(again->compiled == 0);
    CHECK(again->from_memory == 4);
  }
  // Another runtime (another process, model load after a restart) on the same cache: from disk.
  auto rt = runtime_on(dir.path);
  auto from_disk = forward_prepare(rt.get(), &a, &o);
  REQUIRE(from_disk.ok());
  CHECK(from_disk->compiled == 0);
  CHECK(from_disk->from_disk == 4);
  // What ssd_forward then asks the builder for is in memory, key for key.
  auto configs = forward_prepare_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  REQUIRE(configs.ok());
  for (const ssd_kernel_config& c : configs.value()) {
    auto built = rt->builder->build(c);
    REQUIRE(built.ok());
    CHECK(built.value()->source == BuiltKernel::Source::Memory);
  }
}
