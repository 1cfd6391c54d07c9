// TensorRef (templates/ssd/primitives/tensor_ref.cuh) on the host, the launchers' binding helpers
// (src/ops/tensor_ref.h), and the embedding of the header into every kernel's unit (and key).
#include <doctest/doctest.h>

#include <cstddef>
#include <set>
#include <string>
#include <type_traits>

#include "codegen/codegen.h"
#include "compile/kernel_builder.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ops/tensor_check.h"
#include "ops/tensor_ref.h"
#include "ssd/backward_params.cuh"
#include "ssd/kernel_params.cuh"

using namespace ssd;

TEST_CASE("TensorRef has plain C layout: pointer then N 64-bit strides") {
  using R4 = TensorRef<const float, 4>;
  using V3 = TensorRef<void, 3>;
  CHECK(std::is_trivially_copyable<R4>::value);
  CHECK(std::is_standard_layout<R4>::value);
  CHECK(std::is_trivially_copyable<V3>::value);
  CHECK(sizeof(R4) == sizeof(void*) + 4 * sizeof(long long));
  CHECK(sizeof(V3) == sizeof(void*) + 3 * sizeof(long long));
  CHECK(offsetof(R4, stride) == sizeof(void*));
  // The parameter blocks stay trivially copyable (the launchers pass them by address).
  CHECK(std::is_trivially_copyable<ssd_kernels::ChunkScanBwdDxParams>::value);
  CHECK(std::is_trivially_copyable<ssd_kernels::ReduceHeadPartialsParams>::value);
}

TEST_CASE("the F2 parameter blocks lay out their ChunkStateInputs base as the members written out") {
  using ssd_kernels::ChunkStateInputs;
  CHECK(sizeof(ChunkStateInputs) == 2 * sizeof(TensorRef<const void, 4>) + 2 * sizeof(TensorRef<const float, 3>) +
                                        sizeof(TensorRef<const int, 2>));
  ssd_kernels::ChunkStateFwdParams f{};
  ssd_kernels::ChunkStatePassingFwdParams fp{};
  auto at = [](const void* base, const void* member) {
    return static_cast<const char*>(member) - static_cast<const char*>(base);
  };
  CHECK(at(&f, &f.x) == 0);
  CHECK(at(&f, &f.seq_idx) == sizeof(ChunkStateInputs) - sizeof(TensorRef<const int, 2>));
  CHECK(at(&f, &f.states) == sizeof(ChunkStateInputs));
  CHECK(at(&fp, &fp.initial_states) == sizeof(ChunkStateInputs));
  CHECK(std::is_trivially_copyable<ssd_kernels::ChunkStateFwdParams>::value);
  CHECK(std::is_trivially_copyable<ssd_kernels::ChunkStatePassingFwdParams>::value);
}

TEST_CASE("the z parameter blocks extend their base at its end (the specializations without z read the prefix)") {
  auto at = [](const void* base, const void* member) {
    return static_cast<const char*>(member) - static_cast<const char*>(base);
  };
  ssd_kernels::GateBwdZParams g{};
  ssd_kernels::ChunkStateXLoParams s{};
  ssd_kernels::ChunkScanBwdDxZParams x{};
  ssd_kernels::ChunkScanBwdDdaIntraZParams i{};
  CHECK(at(&g, &g.dy_lo) == sizeof(ssd_kernels::GateBwdParams));
  CHECK(at(&s, &s.x_lo) == sizeof(ssd_kernels::ChunkStateFwdParams));
  CHECK(at(&x, &x.dy_lo) == sizeof(ssd_kernels::ChunkScanBwdDxParams));
  CHECK(at(&i, &i.dy_lo) == sizeof(ssd_kernels::ChunkScanBwdDdaIntraParams));
  CHECK(at(&x, &x.v) == at(static_cast<const ssd_kernels::ChunkScanBwdDxParams*>(&x), &x.v));
  CHECK(std::is_trivially_copyable<ssd_kernels::GateBwdZParams>::value);
  CHECK(std::is_trivially_copyable<ssd_kernels::ChunkStateXLoParams>::value);
  CHECK(std::is_trivially_copyable<ssd_kernels::ChunkScanBwdDxZParams>::value);
  CHECK(std::is_trivially_copyable<ssd_kernels::ChunkScanBwdDdaIntraZParams>::value);
}

TEST_CASE("offset, ptr, operator() and ptr_as address the element; missing trailing indices are 0") {
  float buf[2 * 3 * 5] = {};
  for (int i = 0; i < 30; ++i) buf[i] = float(i);
  // A (2, 3, 5) tensor viewed with its axes permuted: (c, a, b) with strides (1, 15, 5).
  TensorRef<float, 3> v{buf, {1, 15, 5}};
  CHECK(v.offset(4, 1, 2) == 4 + 15 + 10);
  CHECK(v.ptr(4, 1, 2) == buf + 29);
  CHECK(v(4, 1, 2) == 29.f);
  v(0, 1, 1) = -1.f;
  CHECK(buf[20] == -1.f);
  CHECK(v.offset(3) == 3);
  CHECK(v.offset(3, 1) == 18);
  CHECK(v.ptr(3, 1) == buf + 18);
  const long long big = 1LL << 40;  // 64-bit indices and strides: no 32-bit wrap
  TensorRef<const float, 2> wide{nullptr, {big, 3}};
  CHECK(wide.offset(5, int(7)) == 5 * big + 21);
  TensorRef<const void, 2> erased{buf, {5, 1}};
  CHECK(erased.ptr_as<float>(2, 3) == buf + 13);
  CHECK(std::is_same<decltype(erased.ptr_as<float>(0)), const float*>::value);
  TensorRef<void, 1> mut{buf, {2}};
  CHECK(std::is_same<decltype(mut.ptr_as<float>(0)), float*>::value);
  CHECK(mut.ptr_as<float>(4) == buf + 8);
}

TEST_CASE("ref binds a caller tensor's leading strides; absent tensors and axes give 0") {
  float data[64];
  ssd_tensor t = contiguous_tensor(data, SSD_DTYPE_FP32, {2, 4, 8});
  t.strides[1] = 16;  // a non-contiguous caller layout is passed through as given
  auto r = ref<const float, 3>(t);
  CHECK(r.data == data);
  CHECK(r.stride[0] == 32);
  CHECK(r.stride[1] == 16);
  CHECK(r.stride[2] == 1);
  auto lead = ref<const float, 2>(t);  // leading axes only
  CHECK(lead.stride[0] == 32);
  CHECK(lead.stride[1] == 16);
  ssd_tensor d = contiguous_tensor(data, SSD_DTYPE_FP32, {6});  // D given per head: (h) read as (h, p)
  auto dv = ref<const float, 2>(d);
  CHECK(dv.stride[0] == 1);
  CHECK(dv.stride[1] == 0);
  ssd_tensor none{};
  none.ndim = 2;
  none.strides[0] = 7;  // ignored: no data
  auto n = ref<const int, 2>(none);
  CHECK(n.data == nullptr);
  CHECK(n.stride[0] == 0);
  CHECK(n.stride[1] == 0);
}

TEST_CASE("contiguous_ref views the leading axes of a row-major buffer") {
  float buf[1];
  const long long cb_shape[] = {3, 5, 2, 16, 16};  // (b, nchunks, g, Q, Q)
  auto cb = contiguous_ref<float, 4>(buf, cb_shape);
  CHECK(cb.data == buf);
  CHECK(cb.stride[3] == 16);
  CHECK(cb.stride[2] == 16 * 16);
  CHECK(cb.stride[1] == 2 * 16 * 16);
  CHECK(cb.stride[0] == 5 * 2 * 16 * 16);
  const long long chunk_shape[] = {3, 7, 5, 64};  // (b, h, nchunks, Q)
  auto ch = contiguous_ref<const float, 3>(buf, chunk_shape);
  CHECK(ch.stride[0] == 7 * 5 * 64);
  CHECK(ch.stride[1] == 5 * 64);
  CHECK(ch.stride[2] == 64);
  auto all = contiguous_ref<float, 4>(buf, chunk_shape);
  CHECK(all.stride[3] == 1);
}

TEST_CASE("every kernel's unit includes tensor_ref.cuh, so it is embedded and hashed into the key") {
  KernelBuilder planner(nullptr);
  for (const KernelFamily* f : kernel_families()) {
    const int kind = int(f->id);
    auto plan = planner.plan(default_config(f->id));
    REQUIRE_MESSAGE(plan.ok(), kind);
    auto unit = generate_unit(plan->config);
    REQUIRE_MESSAGE(unit.ok(), kind);
    const std::set<std::string> headers(unit->headers.begin(), unit->headers.end());
    CHECK_MESSAGE(headers.count("ssd/primitives/tensor_ref.cuh") == 1, kind);
  }
  REQUIRE(find_template("ssd/primitives/tensor_ref.cuh") != nullptr);
}
