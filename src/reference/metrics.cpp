#include "reference/metrics.h"

#include <cmath>
#include <limits>

namespace ssd::ref {

double rel_l2(const double* a, const double* ref, size_t n) {
  double num = 0.0, den = 0.0;
  bool nan = false;
  for (size_t k = 0; k < n; ++k) {
    const double d = a[k] - ref[k];
    if (std::isnan(d) || std::isnan(ref[k])) nan = true;
    num += d * d;
    den += ref[k] * ref[k];
  }
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  if (den == 0.0) {
    double s = 0.0;
    for (size_t k = 0; k < n; ++k) s += a[k] * a[k];
    return std::sqrt(s);
  }
  return std::sqrt(num) / std::sqrt(den);
}

double max_rel(const double* a, const double* ref, size_t n) {
  double num = 0.0, den = 0.0, amax = 0.0;
  for (size_t k = 0; k < n; ++k) {
    const double d = std::fabs(a[k] - ref[k]);
    if (std::isnan(d) || std::isnan(ref[k])) return std::numeric_limits<double>::quiet_NaN();
    num = std::fmax(num, d);
    den = std::fmax(den, std::fabs(ref[k]));
    amax = std::fmax(amax, std::fabs(a[k]));
  }
  return den == 0.0 ? amax : num / den;
}

}  // namespace ssd::ref
