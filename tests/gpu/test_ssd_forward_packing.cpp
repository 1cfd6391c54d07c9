// Packing invariance of ssd_forward (issue 9, "Keep"): a sequence's outputs are bitwise the same
// run alone or packed with others into one row through seq_idx, when it starts at a chunk boundary
// (the chunks then hold the same positions, and seq_idx masks every term that crosses sequences).
// Both runs use the seq_idx specialization (alone: all ids 0), so the kernels are the same.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_support.h"

using namespace gputest;

namespace {

// One sequence's inputs: x, z (L, h, p), dt (L, h), B, C (L, g, n), as values in x's dtype.
struct Sequence {
  int64_t L;
  std::vector<double> x, z, dt, B, C;
};

Sequence draw(int64_t L, int64_t h, int64_t p, int64_t g, int64_t n) {
  return Sequence{L, normal(size_t(L * h * p)), normal(size_t(L * h * p)), uniform(size_t(L * h), -3.0, 0.5),
                  normal(size_t(L * g * n)), normal(size_t(L * g * n))};
}

// ssd_forward on one row (b = 1) made of `parts` back to back, sequence k with seq_idx k; returns
// out (L, h, p) and final_states bytes.
struct RowResult {
  std::vector<uint8_t> out, final_states;
};
RowResult run_row(ssd_runtime* rt, const std::vector<const Sequence*>& parts, int64_t h, int64_t p, int64_t g,
                  int64_t n, int32_t Q, ssd_dtype dtype, const HostArray& A, const HostArray& D,
                  const HostArray& bias) {
  std::vector<double> x, z, dt, B, C;
  std::vector<int32_t> seq;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Sequence& s = *parts[k];
    x.insert(x.end(), s.x.begin(), s.x.end());
    z.insert(z.end(), s.z.begin(), s.z.end());
    dt.insert(dt.end(), s.dt.begin(), s.dt.end());
    B.insert(B.end(), s.B.begin(), s.B.end());
    C.insert(C.end(), s.C.begin(), s.C.end());
    seq.insert(seq.end(), size_t(s.L), int32_t(k));
  }
  const int64_t L = int64_t(seq.size());
  DeviceBuffer d_x = upload_array(make_array(dtype, x)), d_z = upload_array(make_array(dtype, z)),
               d_dt = upload_array(make_array(dtype, dt)), d_B = upload_array(make_array(dtype, B)),
               d_C = upload_array(make_array(dtype, C)), d_A = upload_array(A), d_D = upload_array(D),
               d_bias = upload_array(bias);
  DeviceBuffer d_seq(seq.size() * 4);
  d_seq.upload(seq.data(), seq.size() * 4);
  DeviceBuffer d_out(size_t(L * h * p) * dtype_bytes(dtype)), d_out_x(size_t(L * h * p) * dtype_bytes(dtype)),
      d_final(size_t(h * p * n) * 4);
  ssd_forward_args a;
  ssd_forward_args_init(&a);
  a.chunk_size = Q;
  a.dt_softplus = 1;
  a.x = tensor(d_x, dtype, {1, L, h, p});
  a.z = tensor(d_z, dtype, {1, L, h, p});
  a.dt = tensor(d_dt, dtype, {1, L, h});
  a.A = tensor(d_A, SSD_DTYPE_FP32, {h});
  a.B = tensor(d_B, dtype, {1, L, g, n});
  a.C = tensor(d_C, dtype, {1, L, g, n});
  a.D = tensor(d_D, SSD_DTYPE_FP32, {h});
  a.dt_bias = tensor(d_bias, SSD_DTYPE_FP32, {h});
  a.seq_idx = tensor(d_seq, SSD_DTYPE_INT32, {1, L});
  a.out = tensor(d_out, dtype, {1, L, h, p});
  a.out_x = tensor(d_out_x, dtype, {1, L, h, p});
  a.final_states = tensor(d_final, SSD_DTYPE_FP32, {1, h, p, n});
  ssd_forward_layout layout{};
  layout.struct_size = sizeof(layout);
  GPU_CHECK_SSD(ssd_forward_workspace_layout(&a, &layout));
  DeviceBuffer d_ws(layout.total_bytes);
  d_ws.poison();
  d_out.poison();
  d_out_x.poison();
  d_final.poison();
  a.workspace = d_ws.get();
  a.workspace_bytes = layout.total_bytes;
  GPU_CHECK_SSD(ssd_forward(rt, &a, nullptr, nullptr));
  return RowResult{download_bytes(d_out), download_bytes(d_final)};
}

std::vector<uint8_t> slice(const std::vector<uint8_t>& v, size_t begin, size_t bytes) {
  return std::vector<uint8_t>(v.begin() + ptrdiff_t(begin), v.begin() + ptrdiff_t(begin + bytes));
}

}  // namespace

TEST_CASE("ssd_forward: a sequence packed at a chunk boundary gives its bits alone" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  struct Shape {
    int64_t h, p, g, n;
    int32_t Q;
    ssd_dtype dtype;
  };
  for (const Shape& s : {Shape{4, 64, 2, 64, 64, SSD_DTYPE_BF16}, Shape{8, 32, 8, 128, 128, SSD_DTYPE_FP16}}) {
    CAPTURE(s.Q);
    CAPTURE(s.n);
    const HostArray A = make_array(SSD_DTYPE_FP32, uniform(size_t(s.h), -4.0, -0.5));
    const HostArray D = make_array(SSD_DTYPE_FP32, uniform(size_t(s.h), 0.5, 1.5));
    const HostArray bias = make_array(SSD_DTYPE_FP32, uniform(size_t(s.h), -3.0, -1.0));
    // first: two whole chunks; second: a partial last chunk; third: a partial chunk of its own.
    const Sequence first = draw(2 * s.Q, s.h, s.p, s.g, s.n), second = draw(s.Q + 37, s.h, s.p, s.g, s.n),
                   third = draw(s.Q / 2 + 3, s.h, s.p, s.g, s.n);
    const RowResult packed = run_row(rt.rt, {&first, &second}, s.h, s.p, s.g, s.n, s.Q, s.dtype, A, D, bias);
    const RowResult first_alone = run_row(rt.rt, {&first}, s.h, s.p, s.g, s.n, s.Q, s.dtype, A, D, bias);
    const RowResult second_alone = run_row(rt.rt, {&second}, s.h, s.p, s.g, s.n, s.Q, s.dtype, A, D, bias);
    const size_t row_bytes = size_t(s.h * s.p) * dtype_bytes(s.dtype);  // one position of out
    CHECK(same_bytes(slice(packed.out, 0, size_t(first.L) * row_bytes), first_alone.out));
    CHECK(same_bytes(slice(packed.out, size_t(first.L) * row_bytes, size_t(second.L) * row_bytes), second_alone.out));
    CHECK(same_bytes(packed.final_states, second_alone.final_states));  // the row's last sequence
    // A sequence that is not chunk-aligned keeps its bits when it comes first.
    const RowResult lead = run_row(rt.rt, {&third, &first}, s.h, s.p, s.g, s.n, s.Q, s.dtype, A, D, bias);
    const RowResult third_alone = run_row(rt.rt, {&third}, s.h, s.p, s.g, s.n, s.Q, s.dtype, A, D, bias);
    CHECK(same_bytes(slice(lead.out, 0, size_t(third.L) * row_bytes), third_alone.out));
  }
  MESSAGE("packing: sequences packed at chunk boundaries (and a leading unaligned one) bitwise equal alone");
}
