// Argument checks of the typed operations that need no GPU: tensor validation, runtime options and
// the workspace-size functions (src/ops, src/runtime).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "call_args_support.h"
#include "config/config.h"
#include "ops/chunk_cumsum.h"
#include "ops/ssd_backward.h"
#include "state_pass_test_support.h"
#include "ops/ssd_forward.h"
#include "ops/tensor_check.h"
#include "runtime/runtime.h"

using namespace ssd;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Device pointers are never dereferenced by these checks: any aligned non-null value will do.
void* fake_pointer() { return reinterpret_cast<void*>(uintptr_t(1) << 20); }

void set_raw_dtype(ssd_tensor& t, int32_t raw) { std::memcpy(&t.dtype, &raw, sizeof raw); }

}  // namespace

TEST_CASE("check_tensor: a dtype outside the enum is an error naming the tensor and the number") {
  ssd_tensor t = contiguous_tensor(fake_pointer(), SSD_DTYPE_FP32, {4, 8});
  set_raw_dtype(t, 12345);
  Status s = check_tensor(t, {"dt", {-1, -1}, {SSD_DTYPE_BF16, SSD_DTYPE_FP32}});
  CHECK(s.code == SSD_ERROR_INVALID_DTYPE);
  CHECK(s.detail == "dt: dtype 12345 (not an ssd_dtype) (legal: bf16, fp32)");
  set_raw_dtype(t, -7);
  CHECK(contains(check_tensor(t, {"A", {-1, -1}, {SSD_DTYPE_FP32}}).detail, "A: dtype -7 (not an ssd_dtype)"));
  // A valid enumerator that is not allowed is named.
  t.dtype = SSD_DTYPE_INT32;
  CHECK(check_tensor(t, {"A", {-1, -1}, {SSD_DTYPE_FP32}}).detail == "A: dtype int32 (legal: fp32)");
}

TEST_CASE("create_runtime: options.mode and options.arch are range-checked as integers") {
  ssd_runtime_options o{};
  o.struct_size = sizeof(o);
  o.cache_mode = 3;  // off: nothing on disk
  int32_t raw = 7;
  std::memcpy(&o.mode, &raw, sizeof raw);
  auto r = create_runtime(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(r.status().detail == "options.mode: 7 (legal: 0 deterministic, 1 fast)");
  o.mode = SSD_MODE_FAST;
  o.arch = 12345;
  r = create_runtime(o);
  REQUIRE_FALSE(r.ok());
  CHECK(contains(r.status().detail, "options.arch: 12345 (legal: 0 from the device, 80, 90, 901)"));
  o.arch = SSD_ARCH_SM90A;
  CHECK(create_runtime(o).ok());
}

TEST_CASE("create_runtime: options.launch_graphs is 0 (on unless $SSD_LAUNCH_GRAPHS=0), 1 (on) or 2 (off)") {
  ssd_runtime_options o;
  ssd_runtime_options_init(&o);
  CHECK(o.launch_graphs == 0);
  CHECK(sizeof(ssd_runtime_options) == offsetof(ssd_runtime_options, launch_graphs) + sizeof(int32_t));
  o.arch = SSD_ARCH_SM90A;
  o.cache_mode = 3;
  for (int32_t bad : {3, -1, 1000}) {
    o.launch_graphs = bad;
    auto r = create_runtime(o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code == SSD_ERROR_INVALID_ARGUMENT);
    CHECK(r.status().detail == "options.launch_graphs: " + std::to_string(bad) +
                                   " (legal: 0 on unless $SSD_LAUNCH_GRAPHS is 0, 1 on, 2 off)");
  }
  auto enabled = [&](int32_t value) {
    o.launch_graphs = value;
    auto r = create_runtime(o);
    REQUIRE(r.ok());
    return r.value()->graphs->enabled();
  };
  CHECK(enabled(1));
  CHECK_FALSE(enabled(2));
  const char* saved = std::getenv("SSD_LAUNCH_GRAPHS");
  const std::string saved_value = saved ? saved : "";
  unsetenv("SSD_LAUNCH_GRAPHS");
  CHECK(enabled(0));
  setenv("SSD_LAUNCH_GRAPHS", "0", 1);
  CHECK_FALSE(enabled(0));
  CHECK(enabled(1));  // the option wins over the environment
  setenv("SSD_LAUNCH_GRAPHS", "1", 1);
  CHECK(enabled(0));
  if (saved) setenv("SSD_LAUNCH_GRAPHS", saved_value.c_str(), 1); else unsetenv("SSD_LAUNCH_GRAPHS");
}

namespace {

// A tensor of `shape` whose every stride is 0 (legal for inputs: one element seen everywhere).
ssd_tensor broadcast(ssd_dtype dtype, std::initializer_list<int64_t> shape) {
  ssd_tensor t{};  // not contiguous_tensor(): its strides would overflow for these shapes
  t.data = fake_pointer();
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  return t;
}
ssd_tensor dense(ssd_dtype dtype, std::initializer_list<int64_t> shape) {
  return contiguous_tensor(fake_pointer(), dtype, shape);
}

using Shape = calltest::CallShape;

// The inputs both directions take: every one broadcast (inputs may overlap themselves) but A.
template <class Args>
Args with_inputs(Args a, const Shape& s) {
  a = calltest::with_inputs(a, s, broadcast);
  a.A = dense(SSD_DTYPE_FP32, {s.h});
  return a;
}

// Forward arguments: `out` dense (outputs must not overlap themselves).
ssd_forward_args forward_args(const Shape& s) {
  ssd_forward_args a = with_inputs(default_forward_args(), s);
  a.out = dense(SSD_DTYPE_BF16, {s.b, s.L, s.h, s.p});
  return a;
}

// Backward arguments: the gradients dense, dout (an input) broadcast.
ssd_backward_args backward_args(const Shape& s) {
  ssd_backward_args a = with_inputs(default_backward_args(), s);
  calltest::set_gradients(a, s, dense);
  a.dout = broadcast(SSD_DTYPE_BF16, {s.b, s.L, s.h, s.p});
  return a;
}

// Backward arguments with D (h) and dt_bias, and their gradients, dense.
ssd_backward_args backward_args_with_D_bias(const Shape& s) {
  ssd_backward_args a = backward_args(s);
  a.D = dense(SSD_DTYPE_FP32, {s.h});
  a.dD = dense(SSD_DTYPE_FP32, {s.h});
  a.dt_bias = dense(SSD_DTYPE_FP32, {s.h});
  a.ddt_bias = dense(SSD_DTYPE_FP32, {s.h});
  return a;
}

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

TEST_CASE("workspace sizes: ordinary shapes give the documented layout") {
  const Shape s{2, 1000, 8, 64, 2, 64, 64};
  const size_t nc = 16;
  auto fl = forward_layout(&static_cast<const ssd_forward_args&>(forward_args(s)));
  REQUIRE(fl.ok());
  const size_t chunked = align256(2 * 8 * nc * 64 * 4);
  CHECK(fl->dA_cumsum_offset == chunked);
  CHECK(fl->CB_offset == 2 * chunked);
  CHECK(fl->states_offset == 2 * chunked + align256(2 * nc * 2 * 64 * 64 * 4));
  CHECK(fl->total_bytes == fl->states_offset + align256(2 * nc * 8 * 64 * 64 * 2));  // P in x's dtype (bf16)
  const ssd_backward_args ba = backward_args(s);
  auto bl = backward_layout(&ba, SSD_MODE_DETERMINISTIC);
  REQUIRE(bl.ok());
  CHECK(bl->total > bl->cumsum);
  CHECK(bl->total % 256 == 0);
}

TEST_CASE("workspace sizes: the backward's gate and cumsum sections are pure functions of the extents") {
  // Sized from the dimensions alone (no placeholder pointers through the sub-operations' checks):
  // the dD partials (b, nc, h[, p]) fp64 with D in deterministic mode, chunk_cumsum_bwd's partials
  // (b, nc, h, 1 or 2 with dt_bias) fp64 in deterministic mode; both 0 in fast mode.
  const Shape s{2, 1000, 8, 64, 2, 64, 64};
  const size_t nc = 16;
  for (int D_rank : {0, 1, 2}) {
    for (bool bias : {false, true}) {
      CAPTURE(D_rank);
      CAPTURE(bias);
      ssd_backward_args a = backward_args(s);
      if (D_rank) {
        a.D = D_rank == 2 ? dense(SSD_DTYPE_FP32, {s.h, s.p}) : dense(SSD_DTYPE_FP32, {s.h});
        a.dD = D_rank == 2 ? dense(SSD_DTYPE_FP32, {s.h, s.p}) : dense(SSD_DTYPE_FP32, {s.h});
      }
      if (bias) {
        a.dt_bias = dense(SSD_DTYPE_FP32, {s.h});
        a.ddt_bias = dense(SSD_DTYPE_FP32, {s.h});
      }
      auto det = backward_layout(&a, SSD_MODE_DETERMINISTIC);
      REQUIRE(det.ok());
      const size_t gate = D_rank ? align256(2 * nc * 8 * (D_rank == 2 ? 64 : 1) * 8) : 0;
      CHECK(det->cumsum - det->gate == gate);
      CHECK(det->total - det->cumsum == align256(2 * nc * 8 * (bias ? 2 : 1) * 8));
      BackwardTuning fast_kernels;
      fast_kernels.fast_kernels = true;
      auto fast = backward_layout(&a, SSD_MODE_FAST, &fast_kernels);
      REQUIRE(fast.ok());
      CHECK(fast->cumsum == fast->gate);
      CHECK(fast->total == fast->cumsum);
    }
  }
}

TEST_CASE("workspace sizes: the backward slices its groups to bound the workspace, and says how") {
  // nemotronh-56b at b=4 L=2048 (h=256, p=64, n=256, g=8, chunk 256): 1.73 GiB unsliced; the default
  // takes the fewest slices (a divisor of g) of at most kSliceTargetBytes each, here one group each,
  // through two buffers, beside one copy of P and the whole problem's (b, h, nchunks, Q) vectors:
  // under issue 10's 0.45 GiB.
  const Shape big{4, 2048, 256, 64, 8, 256, 256};
  const ssd_backward_args a = backward_args_with_D_bias(big);
  BackwardTuning whole;
  whole.group_slices = 1;
  auto full = backward_layout(&a, SSD_MODE_DETERMINISTIC, &whole);
  REQUIRE(full.ok());
  CHECK(full->slices == 1);
  CHECK(full->buffers == 1);
  CHECK(full->whole == full->slice_bytes);  // one buffer, then the whole problem's sections
  CHECK(full->total > full->whole);
  CHECK(full->total > (size_t(17) << 30) / 10);  // 1.7 GiB
  auto dflt = backward_layout(&a, SSD_MODE_DETERMINISTIC);
  REQUIRE(dflt.ok());
  CHECK(dflt->slices == 8);
  CHECK(dflt->buffers == 2);
  CHECK(dflt->slice_bytes > kSliceTargetBytes);  // no divisor of g reaches the target: one group each
  CHECK(dflt->whole == 2 * dflt->slice_bytes);
  CHECK(dflt->ds < dflt->slice_bytes);  // a slice's sections lie in its buffer, the whole problem's past both
  CHECK(dflt->dA_cumsum >= dflt->whole);
  CHECK(dflt->states >= dflt->whole);  // P: one copy for both buffers
  CHECK(dflt->cumsum >= dflt->whole);
  CHECK(dflt->total <= (size_t(45) << 30) / 100);  // 0.45 GiB
  MESSAGE("nemotronh b=4 L=2048: " << full->total << " bytes whole, " << dflt->total << " sliced");
  // Each slice's layout is the whole layout of the problem with h / slices heads and g / slices groups.
  const ssd_backward_args one_group = backward_args_with_D_bias(Shape{4, 2048, 32, 64, 1, 256, 256});
  auto per_group = backward_layout(&one_group, SSD_MODE_DETERMINISTIC);
  REQUIRE(per_group.ok());
  CHECK(per_group->slices == 1);  // one group: nothing to slice
  CHECK(per_group->slice_bytes == dflt->slice_bytes);
  CHECK(per_group->ds == dflt->ds);
  // Linear in b·L at a fixed slicing; the default grows the slice count with the problem up to g.
  for (int64_t L : {512, 1024, 4096}) {
    CAPTURE(L);
    const ssd_backward_args al = backward_args(Shape{4, L, 256, 64, 8, 256, 256});
    BackwardTuning eight;
    eight.group_slices = 8;
    auto l = backward_layout(&al, SSD_MODE_DETERMINISTIC, &eight);
    REQUIRE(l.ok());
    auto l2048 = backward_layout(&static_cast<const ssd_backward_args&>(backward_args(big)), SSD_MODE_DETERMINISTIC, &eight);
    REQUIRE(l2048.ok());
    const double ratio = double(l->total) / double(l2048->total);
    CHECK(ratio == doctest::Approx(double(L) / 2048).epsilon(0.01));
    auto d = backward_layout(&al, SSD_MODE_DETERMINISTIC);
    REQUIRE(d.ok());
    CHECK(d->slice_bytes <= std::max<size_t>(kSliceTargetBytes, l->slice_bytes));
  }
  // A small problem is not sliced.
  const Shape small{2, 1000, 8, 64, 2, 64, 64};
  auto s1 = backward_layout(&static_cast<const ssd_backward_args&>(backward_args(small)), SSD_MODE_DETERMINISTIC);
  REQUIRE(s1.ok());
  CHECK(s1->slices == 1);
  // The tuning's slicing is checked, naming the field.
  BackwardTuning bad;
  bad.group_slices = 3;
  auto b3 = backward_layout(&a, SSD_MODE_DETERMINISTIC, &bad);
  REQUIRE(!b3.ok());
  CHECK(b3.status().detail == "tuning.group_slices: 3 does not divide ngroups 8");
  bad.group_slices = 4;
  bad.slice_buffers = 8;  // more buffers than slices: one per slice
  auto b4 = backward_layout(&a, SSD_MODE_DETERMINISTIC, &bad);
  REQUIRE(b4.ok());
  CHECK(b4->buffers == 4);
}

TEST_CASE("fast mode: the backward runs the deterministic kernels unless the fast kernels are asked for") {
  // Issue 10: SSD_MODE_FAST keeps the fast (atomic) kernels only where they are faster; on the H200
  // the whole fast backward was slower (docs/perf.md), so a fast-mode call runs the deterministic
  // plan: its layout and every kernel config. BackwardTuning::fast_kernels (benchmarks, the fast
  // kernels' tests) still selects them, and the mode stays in each kernel's config (cache key).
  const Shape s{2, 1000, 8, 64, 2, 64, 64};
  ssd_backward_args a = backward_args_with_D_bias(s);
  CHECK(backward_kernel_mode(SSD_MODE_FAST, nullptr) == SSD_MODE_DETERMINISTIC);
  CHECK(backward_kernel_mode(SSD_MODE_DETERMINISTIC, nullptr) == SSD_MODE_DETERMINISTIC);
  BackwardTuning fast_kernels;
  fast_kernels.fast_kernels = true;
  CHECK(backward_kernel_mode(SSD_MODE_FAST, &fast_kernels) == SSD_MODE_FAST);
  CHECK(backward_kernel_mode(SSD_MODE_DETERMINISTIC, &fast_kernels) == SSD_MODE_DETERMINISTIC);

  auto det = backward_layout(&a, SSD_MODE_DETERMINISTIC);
  auto fast = backward_layout(&a, SSD_MODE_FAST);
  auto fast_k = backward_layout(&a, SSD_MODE_FAST, &fast_kernels);
  REQUIRE(det.ok());
  REQUIRE(fast.ok());
  REQUIRE(fast_k.ok());
  CHECK(fast->total == det->total);
  CHECK(fast->rho == det->rho);
  // The fast kernels' layout has no partial slots, but a dP section (their state pass is the staged
  // pair): compare it with the deterministic staged layout.
  BackwardTuning staged;
  staged.staged_state_pass = true;
  auto det_staged = backward_layout(&a, SSD_MODE_DETERMINISTIC, &staged);
  REQUIRE(det_staged.ok());
  CHECK(fast_k->total < det_staged->total);
  a.mode = SSD_MODE_FAST;  // the args' own mode, as the C API's workspace size reads it
  auto by_args = backward_layout(&a, -1);
  REQUIRE(by_args.ok());
  CHECK(by_args->total == det->total);

  auto det_configs = backward_kernel_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
  auto fast_configs = backward_kernel_configs(&a, SSD_ARCH_SM90A, SSD_MODE_FAST);
  auto fast_k_configs = backward_kernel_configs(&a, SSD_ARCH_SM90A, SSD_MODE_FAST, &fast_kernels);
  REQUIRE(det_configs.ok());
  REQUIRE(fast_configs.ok());
  REQUIRE(fast_k_configs.ok());
  REQUIRE(fast_configs->size() == det_configs->size());
  for (size_t i = 0; i < det_configs->size(); ++i) {
    CHECK(config_record((*fast_configs)[i]) == config_record((*det_configs)[i]));
    CHECK((*fast_configs)[i].mode == SSD_MODE_DETERMINISTIC);
  }
  bool any_fast = false;
  for (const ssd_kernel_config& c : fast_k_configs.value()) any_fast |= c.mode == SSD_MODE_FAST;
  CHECK(any_fast);
}

TEST_CASE("workspace sizes: the backward's dy and its second term dy_lo exist only with z, laid out alike") {
  // With z, gate_bwd writes the gated dy as two terms in x's dtype (dy, dy_lo); without z, dy is the
  // caller's dout and neither section takes space (the other sections keep their offsets).
  const Shape s{2, 1000, 8, 64, 2, 64, 64};
  for (int32_t mode : {int32_t(SSD_MODE_DETERMINISTIC), int32_t(SSD_MODE_FAST)}) {
    CAPTURE(mode);
    ssd_backward_args a = backward_args(s);
    auto plain = backward_layout(&a, mode);
    REQUIRE(plain.ok());
    CHECK(plain->dy_lo == plain->dy);
    CHECK(plain->dP == plain->dy);
    a.z = dense(SSD_DTYPE_BF16, {s.b, s.L, s.h, s.p});
    a.out_x = dense(SSD_DTYPE_BF16, {s.b, s.L, s.h, s.p});
    a.dz = dense(SSD_DTYPE_BF16, {s.b, s.L, s.h, s.p});
    auto gated = backward_layout(&a, mode);
    REQUIRE(gated.ok());
    const size_t section = align256(size_t(s.b * s.L * s.h * s.p) * 2);  // bf16
    CHECK(gated->dy == plain->dy);
    CHECK(gated->dy_lo - gated->dy == section);
    CHECK(gated->dP - gated->dy_lo == section);
    CHECK(gated->total - plain->total == 2 * section);
  }
}

TEST_CASE("gate_bwd's tensors: with z, dy_lo is required and laid out as dy; without z it is refused") {
  GateBwdTensors t;
  t.chunk_size = 64;
  t.dout = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  t.x = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  t.z = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  t.out_x = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  t.dy = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  t.dz = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  auto missing = gate_backward_workspace(t, SSD_MODE_DETERMINISTIC);
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.status().detail, "dy_lo"));
  t.dy_lo = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  CHECK(gate_backward_workspace(t, SSD_MODE_DETERMINISTIC).ok());
  t.dy_lo.strides[1] = 2 * t.dy.strides[1];  // a legal tensor, but not laid out as dy
  t.dy_lo.strides[0] = 100 * t.dy_lo.strides[1];
  auto strided = gate_backward_workspace(t, SSD_MODE_DETERMINISTIC);
  REQUIRE_FALSE(strided.ok());
  CHECK(strided.status().code == SSD_ERROR_INVALID_STRIDE);
  CHECK(contains(strided.status().detail, "dy_lo"));
  t.z = t.out_x = t.dy = t.dz = ssd_tensor{};  // without z: dy is dout, so dy_lo is refused too
  t.dy_lo = dense(SSD_DTYPE_BF16, {2, 100, 4, 32});
  t.D = dense(SSD_DTYPE_FP32, {4});
  t.dD = dense(SSD_DTYPE_FP32, {4});
  auto without_z = gate_backward_workspace(t, SSD_MODE_DETERMINISTIC);
  REQUIRE_FALSE(without_z.ok());
  CHECK(contains(without_z.status().detail, "dy_lo"));
  t.dy_lo = ssd_tensor{};
  CHECK(gate_backward_workspace(t, SSD_MODE_DETERMINISTIC).ok());
}

// The forward's and the backward's (both modes) layouts refuse the shape: INVALID_SHAPE, with these words.
void check_shape_refused(const Shape& s, const char* forward_words, const char* backward_words) {
  const ssd_forward_args fa = forward_args(s);
  auto fl = forward_layout(&fa);
  REQUIRE_FALSE(fl.ok());
  CHECK(fl.status().code == SSD_ERROR_INVALID_SHAPE);
  CHECK(contains(fl.status().detail, forward_words));
  const ssd_backward_args ba = backward_args(s);
  for (int32_t mode : {int32_t(SSD_MODE_DETERMINISTIC), int32_t(SSD_MODE_FAST)}) {
    auto bl = backward_layout(&ba, mode);
    REQUIRE_FALSE(bl.ok());
    CHECK(bl.status().code == SSD_ERROR_INVALID_SHAPE);
    CHECK(contains(bl.status().detail, backward_words));
  }
}

TEST_CASE("workspace sizes: shapes whose workspace exceeds 2^64 bytes are refused, not wrapped") {
  // b=1, L=2^34, 2^20 heads (stride-0 inputs pass the 2^62 extent check; out is 2^61 elements): the
  // states alone are 2^28 chunks * 2^20 heads * 128 * 256 * 2 bytes (bf16 P) = 2^64 bytes. size_t used
  // to wrap and return SSD_OK with a small total and overlapping regions.
  const Shape s{1, int64_t(1) << 34, int64_t(1) << 20, 128, 1, 256, 64};
  check_shape_refused(s, "ssd_forward needs more than 2^64 bytes of workspace",
                      "ssd_backward needs more than 2^64 bytes of workspace");
  const ssd_forward_args fa = forward_args(s);
  CHECK(contains(forward_layout(&fa).status().detail, "L=17179869184"));

  // Smaller: 2^17 heads give 2^61 bytes of (bf16) states in the forward, which still fits.
  const Shape fits{1, int64_t(1) << 34, int64_t(1) << 17, 128, 1, 256, 64};
  const ssd_forward_args ok_args = forward_args(fits);
  auto big = forward_layout(&ok_args);
  REQUIRE_MESSAGE(big.ok(), big.status().detail);
  CHECK(big->total_bytes - big->states_offset == size_t(1) << 61);
}

TEST_CASE("shapes past the kernels' 32-bit work indices are refused by name, both directions") {
  // nchunks x chunk_size / 16 (the fused state pass's steps), batch x nchunks, nheads.
  for (const Shape& s : {Shape{1, int64_t(1) << 35, 16, 128, 1, 256, 64},   // 2^29 chunks x 4 steps
                         Shape{int64_t(1) << 20, int64_t(1) << 17, 4, 32, 1, 16, 64},  // 2^20 x 2^11 work items
                         Shape{1, 96, int64_t(1) << 31, 32, 1, 16, 64}}) {   // 2^31 heads
    CAPTURE(s.b);
    CAPTURE(s.L);
    CAPTURE(s.h);
    check_shape_refused(s, "work indices are 32-bit", "work indices are 32-bit");
    const ssd_forward_args fa = forward_args(s);
    CHECK(contains(forward_layout(&fa).status().detail, "x: batch"));
  }
  // Just below the limits: accepted.
  const Shape ok{1, (int64_t(1) << 35) - 64, 16, 128, 1, 256, 64};  // 2^29 - 1 chunks
  const ssd_forward_args oa = forward_args(ok);
  CHECK(forward_layout(&oa).ok());
}

TEST_CASE("workspace sizes: chunk_cumsum_bwd with L near 2^63 does not overflow") {
  // (L + Q - 1) / Q overflowed int64 for L near 2^63 (undefined behaviour; negative chunk counts).
  ssd_chunk_cumsum_bwd_args a = default_cumsum_bwd_args();
  a.chunk_size = 256;
  const int64_t L = INT64_MAX;
  a.dt = broadcast(SSD_DTYPE_FP32, {1, L, 1});
  a.A = dense(SSD_DTYPE_FP32, {1});
  const int64_t nc = L / 256 + 1;
  a.ddA_cumsum = broadcast(SSD_DTYPE_FP32, {1, 1, nc, 256});
  a.ddA_cumsum.strides[3] = 1;  // the Q axis must be unit-stride
  a.ddt_out = a.ddA_cumsum;
  a.ddt = dense(SSD_DTYPE_FP32, {1, 1, 1});
  a.ddt.shape[1] = L;  // (1, L, 1) with stride 1 spans 2^63 elements: refused by the extent check
  a.dA = dense(SSD_DTYPE_FP32, {1});
  auto r = chunk_cumsum_bwd_workspace_size(&a, SSD_MODE_DETERMINISTIC);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code == SSD_ERROR_INVALID_STRIDE);
  CHECK(contains(r.status().detail, "ddt: element offsets exceed 2^62"));
}

// backward_args_with_D_bias with dense bf16 x, dout, B and C (views every tensor map fits).
ssd_backward_args dense_backward_args(const Shape& s) {
  ssd_backward_args a = backward_args_with_D_bias(s);
  a.x = dense(SSD_DTYPE_BF16, {s.b, s.L, s.h, s.p});
  a.dout = dense(SSD_DTYPE_BF16, {s.b, s.L, s.h, s.p});
  a.B = dense(SSD_DTYPE_BF16, {s.b, s.L, s.g, s.n});
  a.C = dense(SSD_DTYPE_BF16, {s.b, s.L, s.g, s.n});
  return a;
}

// The config of `kernel` in a backward call's kernel list (deterministic mode).
ssd_kernel_config listed_kernel(const ssd_backward_args& args, ssd_kernel_id kernel, ssd_arch arch,
                                const BackwardTuning* tn = nullptr) {
  auto cfgs = backward_kernel_configs(&args, arch, SSD_MODE_DETERMINISTIC, tn);
  REQUIRE(cfgs.ok());
  for (const ssd_kernel_config& c : cfgs.value())
    if (c.kernel == kernel) return c;
  FAIL("no " << kernel_name(kernel) << " in the list");
  return ssd_kernel_config{};
}

TEST_CASE("backward kernel list: the recompute's state pass follows the slices (narrow tile; cp.async where a slice's view loses alignment)") {
  // nemotronh-56b at b=1 L=16384: 8 group slices of 32 heads, whose default-tile state-pass grid
  // (32 blocks) takes the 64 x 64 x 64 tile; x, B and C dense, so the TMA loaders.
  ssd_backward_args a = backward_args_with_D_bias(Shape{1, 16384, 256, 64, 8, 256, 256});
  a.x = dense(SSD_DTYPE_BF16, {1, 16384, 256, 64});
  a.B = dense(SSD_DTYPE_BF16, {1, 16384, 8, 256});
  a.C = dense(SSD_DTYPE_BF16, {1, 16384, 8, 256});
  auto layout = backward_layout(&a, SSD_MODE_DETERMINISTIC);
  REQUIRE(layout.ok());
  REQUIRE(layout->slices == 8);
  auto state_pass = [](const ssd_backward_args& args, const BackwardTuning* tn = nullptr) {
    return listed_kernel(args, SSD_KERNEL_CHUNK_STATE_PASSING_FWD, SSD_ARCH_SM90A, tn);
  };
  const ssd_kernel_config dense_cfg = state_pass(a);
  CHECK(dense_cfg.tile.m == 64);
  CHECK(dense_cfg.tile.n == 64);
  CHECK(dense_cfg.tile.k == 64);
  CHECK((dense_cfg.flags & SSD_FLAG_TMA) != 0);
  // Unsliced (one slice, 256 heads: 256 blocks) the default tile stays.
  BackwardTuning whole;
  whole.group_slices = 1;
  const ssd_kernel_config whole_cfg = state_pass(a, &whole);
  CHECK(whole_cfg.tile.m == 0);
  CHECK((whole_cfg.flags & SSD_FLAG_TMA) != 0);
  // B with a padded group stride (260 elements: 520 bytes, not a multiple of 16): slice 0's view (one
  // group, so the stride is not checked) would fit a tensor map, slice 1's would start 8 bytes off;
  // every slice takes the cp.async loaders instead (the same bits).
  ssd_backward_args padded = a;
  padded.B.strides[0] = 16384 * 8 * 260;
  padded.B.strides[1] = 8 * 260;
  padded.B.strides[2] = 260;
  const ssd_kernel_config padded_cfg = state_pass(padded);
  CHECK((padded_cfg.flags & SSD_FLAG_TMA) == 0);
  CHECK(padded_cfg.tile.m == 64);  // still the narrow tile where it is legal
}

TEST_CASE("backward kernel list: the fused state pass takes 128 x 128 x 64 where a slice gives it a block per SM") {
  auto tile = [](const ssd_backward_args& args, ssd_arch arch, const BackwardTuning* tn = nullptr) {
    return statepass_test::tile_text(listed_kernel(args, SSD_KERNEL_CHUNK_STATE_PASSING_BWD, arch, tn).tile);
  };
  // nemotronh-56b at b=4 L=2048: 8 slices of 32 heads, 2 x 4 x 16 = 128 blocks at 128 x 128.
  const ssd_backward_args b4 = dense_backward_args(Shape{4, 2048, 256, 64, 8, 256, 256});
  CHECK(tile(b4, SSD_ARCH_SM90A) == "128x128x64");
  // b=1 L=16384: 32 blocks a slice, so the family's default (four times the blocks; the list leaves the
  // tile unset, 0x0x0, for the family to fill in).
  const ssd_backward_args b1 = dense_backward_args(Shape{1, 16384, 256, 64, 8, 256, 256});
  CHECK(tile(b1, SSD_ARCH_SM90A) == "0x0x0");
  // Unsliced at b=1 (256 heads: 256 blocks) it is wide again; a tuning's tile stays; sm_90 keeps the
  // mma.sync kernel's default.
  BackwardTuning whole;
  whole.group_slices = 1;
  CHECK(tile(b1, SSD_ARCH_SM90A, &whole) == "128x128x64");
  BackwardTuning set;
  set.state_pass = ssd_tile{64, 128, 64, 0, 0};
  CHECK(tile(b4, SSD_ARCH_SM90A, &set) == "64x128x64");
  CHECK(tile(b4, SSD_ARCH_SM90) == "0x0x0");
  // An odd number of heads per group (no two heads of a group a block): the default, though the grid
  // would be 2 x 16 x 12 = 192 blocks unsliced.
  const ssd_backward_args odd = dense_backward_args(Shape{16, 2048, 24, 64, 8, 256, 256});
  CHECK(tile(odd, SSD_ARCH_SM90A, &whole) == "0x0x0");
  const ssd_backward_args even = dense_backward_args(Shape{16, 2048, 16, 64, 8, 256, 256});
  CHECK(tile(even, SSD_ARCH_SM90A, &whole) == "128x128x64");
}

TEST_CASE("backward kernel list: the fused state pass takes TMA stages where dy and C fit the maps in every slice") {
  // nemotronh-56b at b=1 L=16384 (8 group slices), dense inputs: chunk_state_passing_bwd's wgmma
  // kernel with SSD_FLAG_TMA on sm_90a, the cp.async loaders on request (the same bits) and on sm_90.
  ssd_backward_args a = dense_backward_args(Shape{1, 16384, 256, 64, 8, 256, 256});
  auto fused = [](const ssd_backward_args& args, ssd_arch arch, const BackwardTuning* tn = nullptr) {
    return listed_kernel(args, SSD_KERNEL_CHUNK_STATE_PASSING_BWD, arch, tn);
  };
  CHECK((fused(a, SSD_ARCH_SM90A).flags & SSD_FLAG_TMA) != 0);
  CHECK((fused(a, SSD_ARCH_SM90).flags & SSD_FLAG_TMA) == 0);
  BackwardTuning cp;
  cp.cp_async = true;
  CHECK((fused(a, SSD_ARCH_SM90A, &cp).flags & SSD_FLAG_TMA) == 0);
  // The kernel family refuses the flag where the wgmma kernel does not run.
  ssd_kernel_config on90 = fused(a, SSD_ARCH_SM90);
  on90.flags |= SSD_FLAG_TMA;
  const Status refused = validate_config(on90);
  CHECK(refused.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(refused.detail, "tma"));

  // dout with a padded head stride (66 elements, 132 bytes: off the 16-byte grid): no map fits, so the
  // cp.async loaders.
  ssd_backward_args padded = a;
  padded.dout.strides[0] = 16384 * 256 * 66;
  padded.dout.strides[1] = 256 * 66;
  padded.dout.strides[2] = 66;
  CHECK((fused(padded, SSD_ARCH_SM90A).flags & SSD_FLAG_TMA) == 0);
  // C with a padded group stride (260 elements: 520 bytes): slice 0's view (one group) would fit a
  // map, slice 1's would start 8 bytes off; every slice takes the cp.async loaders.
  ssd_backward_args padded_c = a;
  padded_c.C.strides[0] = 16384 * 8 * 260;
  padded_c.C.strides[1] = 8 * 260;
  padded_c.C.strides[2] = 260;
  CHECK((fused(padded_c, SSD_ARCH_SM90A).flags & SSD_FLAG_TMA) == 0);
  // With z dy is the workspace's (gate_bwd's output, contiguous): dout's layout does not matter.
  ssd_backward_args gated = padded;
  gated.z = dense(SSD_DTYPE_BF16, {1, 16384, 256, 64});
  gated.out_x = dense(SSD_DTYPE_BF16, {1, 16384, 256, 64});
  gated.dz = dense(SSD_DTYPE_BF16, {1, 16384, 256, 64});
  CHECK((fused(gated, SSD_ARCH_SM90A).flags & SSD_FLAG_TMA) != 0);
}

TEST_CASE("backward kernel list: dx takes TMA stages at its wgmma tiles where C, B and dy fit the maps") {
  ssd_backward_args a = dense_backward_args(Shape{4, 2048, 256, 64, 8, 256, 256});
  auto dx = [](const ssd_backward_args& args, ssd_arch arch, const BackwardTuning* tn = nullptr) {
    return listed_kernel(args, SSD_KERNEL_CHUNK_SCAN_BWD_DX, arch, tn);
  };
  const ssd_kernel_config tma = dx(a, SSD_ARCH_SM90A);
  CHECK((tma.flags & SSD_FLAG_TMA) != 0);
  CHECK(default_tile(tma).m == 128);  // the list keeps 0 (the default tile)
  CHECK(default_tile(tma).k == 64);
  CHECK((dx(a, SSD_ARCH_SM90).flags & SSD_FLAG_TMA) == 0);
  BackwardTuning cp;
  cp.cp_async = true;
  CHECK((dx(a, SSD_ARCH_SM90A, &cp).flags & SSD_FLAG_TMA) == 0);
  // A tile that is not one of the wgmma tiles: the cp.async loaders.
  BackwardTuning narrow;
  narrow.dx = ssd_tile{64, 0, 32, 0, 0};
  const ssd_kernel_config narrow_cfg = dx(a, SSD_ARCH_SM90A, &narrow);
  CHECK((narrow_cfg.flags & SSD_FLAG_TMA) == 0);
  CHECK(narrow_cfg.tile.m == 64);
  // The family refuses the flag there, by name.
  ssd_kernel_config forced = narrow_cfg;
  forced.flags |= SSD_FLAG_TMA;
  const Status refused = validate_config(forced);
  CHECK(refused.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(refused.detail, "tma"));
  // Every legal tile of the TMA config is a wgmma tile; the twin without the flag has more.
  ssd_kernel_config twin = tma;
  twin.flags &= ~uint32_t(SSD_FLAG_TMA);
  const auto tma_tiles = legal_tiles(tma), all_tiles = legal_tiles(twin);
  CHECK(!tma_tiles.empty());
  CHECK(tma_tiles.size() < all_tiles.size());
  for (const ssd_tile& t : tma_tiles) CHECK((t.m == 128 && t.k == 64));
  // B with a padded group stride (off the 16-byte grid): no map, so cp.async.
  ssd_backward_args padded = a;
  padded.B.strides[0] = 2048 * 8 * 260;
  padded.B.strides[1] = 8 * 260;
  padded.B.strides[2] = 260;
  CHECK((dx(padded, SSD_ARCH_SM90A).flags & SSD_FLAG_TMA) == 0);
  // Headdim 32 (a wgmma tile too): cp.async until its TMA path is proven on the GPU.
  CHECK((dx(dense_backward_args(Shape{2, 1024, 32, 32, 4, 128, 256}), SSD_ARCH_SM90A).flags & SSD_FLAG_TMA) == 0);
}
