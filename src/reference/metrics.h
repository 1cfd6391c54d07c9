// Error metrics used to compare an implementation against the float64 oracle.
#ifndef SSD_REFERENCE_METRICS_H
#define SSD_REFERENCE_METRICS_H

#include <cstddef>

namespace ssd::ref {

// rel_l2 = ‖a − ref‖₂ / ‖ref‖₂ over n entries. When ‖ref‖₂ = 0 it returns ‖a‖₂ (absolute
// error), so that an all-zero reference is matched only by an all-zero a. n = 0 gives 0.
// A NaN anywhere gives NaN (so `rel_l2(...) <= tol` fails).
double rel_l2(const double* a, const double* ref, size_t n);

// max_rel = max_k |a_k − ref_k| / max_k |ref_k| (the metric of ssd-math.md §9). When
// max|ref| = 0 it returns max|a|. A NaN anywhere gives NaN.
double max_rel(const double* a, const double* ref, size_t n);

}  // namespace ssd::ref

#endif  // SSD_REFERENCE_METRICS_H
