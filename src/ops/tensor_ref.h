// Host side of the kernels' tensor views (templates/ssd/primitives/tensor_ref.cuh): builds the
// TensorRef fields of the parameter blocks from caller tensors and from workspace buffers.
#pragma once

#include <cstddef>

#include "ssd/primitives/tensor_ref.cuh"
#include "ssd/ssd.h"

namespace ssd {

using ssd_kernels::TensorRef;

// View of the leading N axes of a caller tensor: its data pointer and strides[0..N-1] (elements).
// A tensor without data (an optional input left out) gives a null view with zero strides, and
// axes at or past t.ndim get stride 0 (D given as (h) read through a (h, p) view). The tensor is
// validated (check_tensor) before it is bound.
template <class T, int N>
TensorRef<T, N> ref(const ssd_tensor& t) {
  TensorRef<T, N> r{};
  r.data = static_cast<T*>(t.data);
  if (t.data)
    for (int k = 0; k < N && k < t.ndim; ++k) r.stride[k] = t.strides[k];
  return r;
}

// View of the leading N axes of a contiguous (row-major) buffer of shape `shape` (M >= N axes):
// stride[k] = shape[k+1] · ... · shape[M-1]. The workspace intermediates are laid out this way.
template <class T, int N, size_t M>
TensorRef<T, N> contiguous_ref(T* data, const long long (&shape)[M]) {
  static_assert(N >= 1 && size_t(N) <= M, "contiguous_ref: a view of at most the buffer's axes");
  TensorRef<T, N> r{};
  r.data = data;
  long long stride = 1;
  for (size_t k = M; k-- > 0;) {
    if (k < size_t(N)) r.stride[k] = stride;
    stride *= shape[k];
  }
  return r;
}

}  // namespace ssd
