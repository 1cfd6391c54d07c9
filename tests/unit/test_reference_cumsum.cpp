// Tests of the float64 chunk cumsum oracle (src/reference/chunk_cumsum_reference.h):
// analytic adjoint vs central finite differences (step 1e-6) of
//   loss = Σ_valid w1·dt_out + Σ_valid w2·dA_cumsum.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "reference/chunk_cumsum_reference.h"

namespace {

using ssd::ref::CumsumShape;
using ssd::ref::DtOptions;

struct CumsumCase {
  CumsumShape shape;
  DtOptions opts;
  unsigned seed;
};

double max_abs_diff_rel(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t k = 0; k < a.size(); ++k) {
    num = std::max(num, std::fabs(a[k] - ref[k]));
    den = std::max(den, std::fabs(ref[k]));
  }
  return den > 0 ? num / den : num;
}

void run_cumsum_fd_case(const CumsumCase& cs) {
  const CumsumShape& s = cs.shape;
  const DtOptions& o = cs.opts;
  const int64_t nc = ssd::ref::num_chunks(s);
  const size_t n_dt = static_cast<size_t>(s.batch * s.seqlen * s.nheads);
  const size_t n_out = static_cast<size_t>(s.batch * s.nheads * nc * s.chunk);
  std::mt19937_64 rng(cs.seed);
  std::uniform_real_distribution<double> U(-1.0, 1.0);

  std::vector<double> A(s.nheads), bias(s.nheads), dt(n_dt);
  for (auto& a : A) a = -0.2 - std::fabs(U(rng));
  for (auto& b : bias) b = 0.5 * U(rng);
  // Redraw entries that sit within 1e-3 of a kink (lo, hi, the softplus threshold u = 20).
  auto near_kink = [&](double x, double bi) {
    const double u = x + (o.has_bias ? bi : 0.0);
    const double v = o.softplus ? (u <= 20 ? std::log1p(std::exp(u)) : u) : u;
    return std::fabs(v - o.lo) < 1e-3 || std::fabs(v - o.hi) < 1e-3 || std::fabs(u - 20) < 1e-3;
  };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seqlen; ++t)
      for (int64_t i = 0; i < s.nheads; ++i) {
        double& x = dt[(b * s.seqlen + t) * s.nheads + i];
        do {
          x = 1.5 * U(rng);
          if (o.softplus && (t % 7 == 3)) x = 21.0 + U(rng);  // exercise the u > 20 branch
        } while (near_kink(x, bias[i]));
      }
  std::vector<double> w1(n_out), w2(n_out);
  for (auto& w : w1) w = U(rng);
  for (auto& w : w2) w = U(rng);

  auto loss = [&](const std::vector<double>& dt_, const std::vector<double>& A_,
                  const std::vector<double>& bias_) {
    std::vector<double> d(n_out), cs_(n_out);
    ssd::ref::chunk_cumsum_fwd(s, o, dt_.data(), A_.data(), o.has_bias ? bias_.data() : nullptr,
                               d.data(), cs_.data());
    double acc = 0.0;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < s.nheads; ++i)
        for (int64_t t = 0; t < s.seqlen; ++t) {
          const size_t k = static_cast<size_t>(((b * s.nheads + i) * nc + t / s.chunk) * s.chunk +
                                               t % s.chunk);
          acc += w1[k] * d[k] + w2[k] * cs_[k];
        }
    return acc;
  };

  // Forward sanity: padding Δ is 0 and the cumsum keeps its running value there.
  {
    std::vector<double> d(n_out), c(n_out);
    ssd::ref::chunk_cumsum_fwd(s, o, dt.data(), A.data(), o.has_bias ? bias.data() : nullptr,
                               d.data(), c.data());
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < s.nheads; ++i)
        for (int64_t t = s.seqlen; t < nc * s.chunk; ++t) {
          const size_t k = static_cast<size_t>(((b * s.nheads + i) * nc + nc - 1) * s.chunk +
                                               t % s.chunk);
          CHECK(d[k] == 0.0);
          CHECK(c[k] == c[k - 1]);
        }
  }

  std::vector<double> ddt(n_dt), dA(s.nheads), dbias(s.nheads);
  // w1/w2 are random at padding positions too: the adjoint must ignore them.
  ssd::ref::chunk_cumsum_bwd(s, o, dt.data(), A.data(), o.has_bias ? bias.data() : nullptr,
                             w2.data(), w1.data(), ddt.data(), dA.data(), dbias.data());

  const double h = 1e-6;
  auto fd = [&](std::vector<double>& v, size_t k) {
    const double keep = v[k];
    v[k] = keep + h;
    const double lp = loss(dt, A, bias);
    v[k] = keep - h;
    const double lm = loss(dt, A, bias);
    v[k] = keep;
    return (lp - lm) / (2 * h);
  };
  std::vector<double> fd_dt(n_dt), fd_A(s.nheads), fd_bias(s.nheads);
  for (size_t k = 0; k < n_dt; ++k) fd_dt[k] = fd(dt, k);
  for (size_t k = 0; k < A.size(); ++k) fd_A[k] = fd(A, k);
  for (size_t k = 0; k < bias.size(); ++k) fd_bias[k] = fd(bias, k);

  CHECK(max_abs_diff_rel(ddt, fd_dt) < 1e-7);
  CHECK(max_abs_diff_rel(dA, fd_A) < 1e-7);
  if (o.has_bias) {
    CHECK(max_abs_diff_rel(dbias, fd_bias) < 1e-7);
  } else {
    for (double v : dbias) CHECK(v == 0.0);
  }
}

}  // namespace

TEST_CASE("reference chunk_cumsum: num_chunks") {
  CHECK(ssd::ref::num_chunks({1, 10, 1, 4}) == 3);
  CHECK(ssd::ref::num_chunks({1, 8, 1, 4}) == 2);
  CHECK(ssd::ref::num_chunks({1, 1, 1, 256}) == 1);
}

TEST_CASE("reference chunk_cumsum: forward values by hand") {
  // b=1, L=3, h=1, Q=2, no softplus, default clamp (0, inf): dt = {0.5, -1, 2}, A = -2.
  const double dt[3] = {0.5, -1.0, 2.0}, A[1] = {-2.0};
  double d[4], c[4];
  ssd::ref::chunk_cumsum_fwd({1, 3, 1, 2}, {}, dt, A, nullptr, d, c);
  CHECK(d[0] == 0.5);
  CHECK(d[1] == 0.0);  // negative dt clamped to lo = 0
  CHECK(d[2] == 2.0);
  CHECK(d[3] == 0.0);  // padding
  CHECK(c[0] == -1.0);
  CHECK(c[1] == -1.0);
  CHECK(c[2] == -4.0);
  CHECK(c[3] == -4.0);
}

TEST_CASE("reference chunk_cumsum: backward vs central finite differences") {
  const double inf = INFINITY;
  const CumsumCase cases[] = {
      {{2, 10, 3, 4}, {false, false, 0.0, inf}, 1},  // default clamp zeroes negative dt
      {{2, 10, 3, 4}, {true, false, 0.0, inf}, 2},
      {{2, 10, 3, 4}, {true, true, 0.0, inf}, 3},
      {{2, 10, 3, 4}, {false, true, 0.0, inf}, 4},
      {{2, 12, 3, 4}, {true, true, 0.3, 1.2}, 5},    // L multiple of Q, finite dt_limit
      {{1, 13, 2, 8}, {false, true, 0.3, 1.2}, 6},   // finite limit without softplus
      {{3, 7, 4, 8}, {true, true, 0.0, 1.0}, 7},     // single partial chunk
      {{2, 17, 2, 5}, {true, false, 0.5, inf}, 8},   // Q not a power of two
      {{1, 9, 2, 3}, {false, false, -inf, inf}, 9},  // no clamp at all
  };
  for (const auto& cs : cases) {
    CAPTURE(cs.seed);
    run_cumsum_fd_case(cs);
  }
}
