// The SSD backward's stages on the GPU against ssd::ref::backward (issue 4, in progress):
// gate_bwd (B-a): dy (with z as two T terms, dy and dy_lo), dz and dD.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "config/config.h"
#include "gpu_support.h"
#include "ops/ssd_backward.h"
#include "reference/metrics.h"
#include "reference/ssd_reference.h"
#include "runtime/runtime.h"

using namespace gputest;

namespace {

struct GateCase {
  int64_t b, L, h, p;
  int32_t Q;
  ssd_dtype dtype;
  bool z, D, D_per_headdim;
};

std::string describe(const GateCase& c) {
  return "b=" + std::to_string(c.b) + " L=" + std::to_string(c.L) + " h=" + std::to_string(c.h) + " p=" +
         std::to_string(c.p) + " Q=" + std::to_string(c.Q) + " " + ssd::dtype_name(c.dtype) + (c.z ? " z" : "") +
         (c.D ? (c.D_per_headdim ? " D(h,p)" : " D(h)") : "");
}

struct GateProblem {
  GateCase c;
  ssd::ref::SsdGradients ref;
  HostArray x, z, D, dout, out_x;
  DeviceBuffer d_x, d_z, d_D, d_dout, d_out_x, d_dy, d_dy_lo, d_dz, d_dD, d_ws;

  explicit GateProblem(const GateCase& cc) : c(cc) {
    const int64_t g = 2, n = 16;
    const size_t nx = size_t(c.b * c.L * c.h * c.p), nbc = size_t(c.b * c.L * g * n);
    x = make_array(c.dtype, normal(nx));
    z = make_array(c.dtype, normal(nx));
    dout = make_array(c.dtype, normal(nx));
    D = make_array(SSD_DTYPE_FP32, uniform(size_t(c.D_per_headdim ? c.h * c.p : c.h), 0.5, 1.5));
    const std::vector<double> B = normal(nbc), C = normal(nbc), dt = uniform(size_t(c.b * c.L * c.h), 0.01, 0.2),
                              A = uniform(size_t(c.h), -4.0, -0.5);
    ssd::ref::SsdProblem q;
    q.sz = {c.b, c.L, c.h, c.p, g, n, c.Q};
    q.x = x.values.data(); q.dt = dt.data(); q.A = A.data(); q.B = B.data(); q.C = C.data();
    if (c.D) { q.D = D.values.data(); q.D_per_headdim = c.D_per_headdim; }
    if (c.z) q.z = z.values.data();
    const ssd::ref::SsdForwardResult fwd = ssd::ref::forward_chunked(q);
    ref = ssd::ref::backward(q, dout.values.data(), nullptr);
    out_x = make_array(c.dtype, c.z ? fwd.out_x : std::vector<double>(nx, 0.0));
    d_x = upload_array(x); d_z = upload_array(z); d_D = upload_array(D); d_dout = upload_array(dout); d_out_x = upload_array(out_x);
    d_dy = DeviceBuffer(x.bytes.size());
    d_dy_lo = DeviceBuffer(x.bytes.size());
    d_dz = DeviceBuffer(x.bytes.size());
    d_dD = DeviceBuffer(D.bytes.size());
    size_t ws = 0;
    auto need = ssd::gate_backward_workspace(tensors(), SSD_MODE_DETERMINISTIC);
    REQUIRE(need.ok());
    ws = need.value();
    d_ws = DeviceBuffer(std::max<size_t>(ws, 16));
  }

  ssd::GateBwdTensors tensors() const {
    ssd::GateBwdTensors t;
    t.chunk_size = c.Q;
    t.dout = tensor(d_dout, c.dtype, {c.b, c.L, c.h, c.p});
    t.x = tensor(d_x, c.dtype, {c.b, c.L, c.h, c.p});
    if (c.z) {
      t.z = tensor(d_z, c.dtype, {c.b, c.L, c.h, c.p});
      t.out_x = tensor(d_out_x, c.dtype, {c.b, c.L, c.h, c.p});
      t.dy = tensor(d_dy, c.dtype, {c.b, c.L, c.h, c.p});
      t.dy_lo = tensor(d_dy_lo, c.dtype, {c.b, c.L, c.h, c.p});
      t.dz = tensor(d_dz, c.dtype, {c.b, c.L, c.h, c.p});
    }
    if (c.D) {
      t.D = c.D_per_headdim ? tensor(d_D, SSD_DTYPE_FP32, {c.h, c.p}) : tensor(d_D, SSD_DTYPE_FP32, {c.h});
      t.dD = c.D_per_headdim ? tensor(d_dD, SSD_DTYPE_FP32, {c.h, c.p}) : tensor(d_dD, SSD_DTYPE_FP32, {c.h});
    }
    return t;
  }

  std::vector<uint8_t> run(ssd_runtime* rt, ssd_mode mode, int32_t max_blocks = 0) {
    d_dy.poison(); d_dy_lo.poison(); d_dz.poison(); d_dD.poison(); d_ws.poison();
    ssd::Status s = ssd::gate_backward(*rt, tensors(), mode, d_ws.get(), max_blocks, nullptr);
    REQUIRE_MESSAGE(s.ok(), s.detail);
    std::vector<uint8_t> r;
    if (c.z) {
      std::vector<uint8_t> dy = download_bytes(d_dy), dy_lo = download_bytes(d_dy_lo), dz = download_bytes(d_dz);
      r.insert(r.end(), dy.begin(), dy.end());
      r.insert(r.end(), dy_lo.begin(), dy_lo.end());
      r.insert(r.end(), dz.begin(), dz.end());
    }
    if (c.D) {
      std::vector<uint8_t> dD = download_bytes(d_dD);
      r.insert(r.end(), dD.begin(), dD.end());
    }
    return r;
  }
};

const GateCase kGateCases[] = {
    {2, 300, 4, 64, 128, SSD_DTYPE_BF16, true, true, false},
    {2, 300, 4, 32, 64, SSD_DTYPE_FP16, true, true, true},
    {3, 257, 6, 128, 256, SSD_DTYPE_BF16, false, true, false},
    {1, 200, 4, 64, 64, SSD_DTYPE_BF16, true, false, false},
};

}  // namespace

TEST_CASE("gate_bwd: dy, dz, dD against the float64 oracle; D1 and D4 bitwise" * doctest::skip(!gpu_available())) {
  for_each_case(kGateCases, [&](ssd_runtime* rt, const GateCase& c) {
    GateProblem prob(c);
    const std::vector<uint8_t> det = prob.run(rt, SSD_MODE_DETERMINISTIC);
    const size_t nx = size_t(c.b * c.L * c.h * c.p);
    const double tol = c.dtype == SSD_DTYPE_BF16 ? 8e-3 : 1e-3;
    double e_dy = 0, e_dy2 = 0, e_dz = 0, e_dD = 0;
    if (c.z) {
      std::vector<double> dy = download_values(prob.d_dy, c.dtype, nx), dz = download_values(prob.d_dz, c.dtype, nx);
      const std::vector<double> dy_lo = download_values(prob.d_dy_lo, c.dtype, nx);
      REQUIRE(all_finite(dy));
      REQUIRE(all_finite(dy_lo));
      REQUIRE(all_finite(dz));
      e_dy = ssd::ref::rel_l2(dy.data(), prob.ref.inter.dy.data(), nx);
      e_dz = ssd::ref::rel_l2(dz.data(), prob.ref.dz.data(), nx);
      CHECK(e_dy < tol);
      CHECK(e_dz < tol);
      // dy + dy_lo is the fp32 dy to ~2^-8 of dy_lo: fp32-level against the oracle, and each dy_lo
      // is at most half a unit in the last place of its dy (it is the residual of dy's rounding).
      std::vector<double> two(nx);
      size_t over_half_ulp = 0;
      for (size_t i = 0; i < nx; ++i) {
        two[i] = dy[i] + dy_lo[i];
        const int e = std::ilogb(dy[i] == 0 ? 1.0 : dy[i]);  // fp16: subnormal ulp 2^-24
        const double ulp = c.dtype == SSD_DTYPE_BF16 ? std::ldexp(1.0, e - 7) : std::ldexp(1.0, std::max(e - 10, -24));
        over_half_ulp += dy[i] != 0 && std::fabs(dy_lo[i]) > 0.5 * ulp;
      }
      e_dy2 = ssd::ref::rel_l2(two.data(), prob.ref.inter.dy.data(), nx);
      CHECK(e_dy2 < 1e-5);
      CHECK(e_dy2 < e_dy / 50);
      CHECK(over_half_ulp == 0);
    }
    if (c.D) {
      std::vector<double> dD = download_values(prob.d_dD, SSD_DTYPE_FP32, prob.ref.dD.size());
      REQUIRE(all_finite(dD));
      e_dD = ssd::ref::rel_l2(dD.data(), prob.ref.dD.data(), dD.size());
      CHECK(e_dD < 1e-5);
      prob.run(rt, SSD_MODE_FAST);
      std::vector<double> fast = download_values(prob.d_dD, SSD_DTYPE_FP32, prob.ref.dD.size());
      CHECK(ssd::ref::rel_l2(fast.data(), dD.data(), dD.size()) < 1e-5);
    }
    MESSAGE("gate_bwd " << describe(c) << ": rel_l2 dy " << e_dy << ", dy + dy_lo " << e_dy2 << ", dz " << e_dz
                        << ", dD " << e_dD);
    for (int i = 0; i < 5; ++i) CHECK(same_bytes(prob.run(rt, SSD_MODE_DETERMINISTIC), det));
    for (int grid : {1, 7, 64}) CHECK(same_bytes(prob.run(rt, SSD_MODE_DETERMINISTIC, grid), det));
  });
}

namespace {

// A (b, L, h, p) tensor of a gate problem in a layout the 16-byte path refuses: `spread` puts the
// elements at p-stride 2 (the gaps stay 0xFF from the poison), `shift` moves the base one element
// (2 bytes) off 16-byte alignment.
struct GateView {
  DeviceBuffer buf;
  size_t elem = 0, count = 0;
  bool spread = false, shift = false;

  GateView(const GateCase& c, size_t elem_bytes, bool spread_p, bool shift_base)
      : elem(elem_bytes), count(size_t(c.b * c.L * c.h * c.p)), spread(spread_p), shift(shift_base) {
    buf = DeviceBuffer((spread ? 2 : 1) * count * elem + 16);
  }
  uint8_t* base() const { return static_cast<uint8_t*>(buf.get()) + (shift ? elem : 0); }
  size_t at(size_t i) const { return (shift ? elem : 0) + (spread ? 2 * i : i) * elem; }  // byte offset in buf
  ssd_tensor tensor_of(const GateCase& c, ssd_dtype dtype) const {
    const int64_t s = spread ? 2 : 1;
    ssd_tensor t = tensor(buf, dtype, {c.b, c.L, c.h, c.p}, {c.L * c.h * c.p * s, c.h * c.p * s, c.p * s, s});
    t.data = base();
    return t;
  }
  void upload(const std::vector<uint8_t>& contiguous) {
    std::vector<uint8_t> host(buf.bytes(), 0xFF);
    for (size_t i = 0; i < count; ++i) std::copy_n(&contiguous[i * elem], elem, &host[at(i)]);
    buf.upload(host.data(), host.size());
  }
  // The elements in contiguous order; `gaps_untouched`: every byte that is not an element still 0xFF.
  std::vector<uint8_t> download(bool& gaps_untouched) const {
    const std::vector<uint8_t> host = download_bytes(buf);
    std::vector<bool> element(host.size(), false);
    std::vector<uint8_t> out(count * elem);
    for (size_t i = 0; i < count; ++i) {
      std::copy_n(&host[at(i)], elem, &out[i * elem]);
      std::fill_n(element.begin() + std::ptrdiff_t(at(i)), elem, true);
    }
    gaps_untouched = true;
    for (size_t k = 0; k < host.size(); ++k) gaps_untouched = gaps_untouched && (element[k] || host[k] == 0xFF);
    return out;
  }
};

}  // namespace

TEST_CASE("gate_bwd: views without 16-byte rows (p-stride 2; one view 2 bytes off alignment) take the per-element "
          "path, bit for bit the contiguous result" * doctest::skip(!gpu_available())) {
  for_each_case(kGateCases, [&](ssd_runtime* rt, const GateCase& c) {
    GateProblem prob(c);
    const std::vector<uint8_t> contiguous = prob.run(rt, SSD_MODE_DETERMINISTIC);  // the 16-byte path
    const size_t elem = dtype_bytes(c.dtype);
    // spread: every (b, L, h, p) view at p-stride 2. shifted: only one view off alignment (x with
    // D, else dz), the others contiguous: the launch's one decision must still refuse 16 bytes.
    for (const bool spread : {true, false}) {
      CAPTURE(spread);
      const bool shift_x = !spread && c.D, shift_dz = !spread && !c.D;
      GateView x(c, elem, spread, shift_x), dout(c, elem, spread, false), z(c, elem, spread, false),
          out_x(c, elem, spread, false), dy(c, elem, spread, false), dy_lo(c, elem, spread, false),
          dz(c, elem, spread, shift_dz);
      x.upload(prob.x.bytes);
      dout.upload(prob.dout.bytes);
      z.upload(prob.z.bytes);
      out_x.upload(prob.out_x.bytes);
      ssd::GateBwdTensors t = prob.tensors();
      t.x = x.tensor_of(c, c.dtype);
      t.dout = dout.tensor_of(c, c.dtype);
      if (c.z) {
        t.z = z.tensor_of(c, c.dtype);
        t.out_x = out_x.tensor_of(c, c.dtype);
        t.dy = dy.tensor_of(c, c.dtype);
        t.dy_lo = dy_lo.tensor_of(c, c.dtype);
        t.dz = dz.tensor_of(c, c.dtype);
      }
      for (int grid : {0, 7}) {
        CAPTURE(grid);
        poison_all({&dy.buf, &dy_lo.buf, &dz.buf, &prob.d_dD, &prob.d_ws});
        ssd::Status s = ssd::gate_backward(*rt, t, SSD_MODE_DETERMINISTIC, prob.d_ws.get(), grid, nullptr);
        REQUIRE_MESSAGE(s.ok(), s.detail);
        std::vector<uint8_t> r;
        if (c.z) {
          for (const GateView* v : {&dy, &dy_lo, &dz}) {
            bool gaps_untouched = false;
            const std::vector<uint8_t> part = v->download(gaps_untouched);
            CHECK(gaps_untouched);
            r.insert(r.end(), part.begin(), part.end());
          }
        }
        if (c.D) {
          const std::vector<uint8_t> dD = download_bytes(prob.d_dD);
          r.insert(r.end(), dD.begin(), dD.end());
        }
        CHECK(same_bytes(r, contiguous));
      }
    }
  });
}
