// TensorRef<T, N>: a strided view of a tensor, shared by the host launchers (g++) and the kernels
// (NVRTC): a base pointer and N strides in ELEMENTS, 64-bit, the outermost axis first.
//
//   offset(i0, ..., iN-1) = i0·stride[0] + i1·stride[1] + ... + iN-1·stride[N-1]   (64-bit, k increasing)
//   ptr(i...) = data + offset(i...);   operator()(i...) = data[offset(i...)]
//
// Plain C layout on purpose: the struct is an aggregate of one pointer and a long long array (no
// constructors, no virtuals), so it is trivially copyable, has the same size and alignment under
// g++ and NVRTC, and can sit inside the __grid_constant__ parameter blocks that the host fills
// byte for byte. A view may cover only the leading axes of a tensor whose innermost axis has unit
// stride (the parameter blocks say so per field); the kernels then add the inner index to ptr().
//
// Element type erasure: tensors whose element type is a template parameter of the kernel (x, B,
// C, z, ...) are TensorRef<const void, N> / TensorRef<void, N> in the parameter blocks, since the
// blocks are not templates. ptr()/operator() do not exist for void views; a kernel converts once
// with as<T>() (same pointer, same strides) and then indexes the typed view, so the indexing reads
// the same for every tensor and no static_cast sits next to each address.
#pragma once

#if !defined(SSD_HOST_DEVICE)
#if defined(__CUDACC__)
#define SSD_HOST_DEVICE __host__ __device__
#else
#define SSD_HOST_DEVICE
#endif
#endif

namespace ssd_kernels {

namespace detail {
// E with the const-ness of Erased (const void -> const E, void -> E).
template <class Erased, class E>
struct with_const_of {
  using type = E;
};
template <class Erased, class E>
struct with_const_of<const Erased, E> {
  using type = const E;
};
}  // namespace detail

template <class T, int N>
struct TensorRef {
  T* data;
  long long stride[N];

  // Element offset of (i0, ..., iN-1); the indices are widened to 64 bits before the multiply.
  template <class... I>
  SSD_HOST_DEVICE long long offset(I... i) const {
    static_assert(sizeof...(I) == N, "TensorRef::offset: one index per axis");
    const long long idx[N] = {static_cast<long long>(i)...};
    long long off = idx[0] * stride[0];
    for (int k = 1; k < N; ++k) off += idx[k] * stride[k];
    return off;
  }
  // Pointer to / reference to the element (typed views only: the return types of void views are
  // never formed because the bodies are instantiated only when called).
  template <class... I>
  SSD_HOST_DEVICE auto ptr(I... i) const {
    return data + offset(i...);
  }
  template <class... I>
  SSD_HOST_DEVICE decltype(auto) operator()(I... i) const {
    return data[offset(i...)];
  }
  // The same view with element type E (for the type-erased fields).
  template <class E>
  SSD_HOST_DEVICE TensorRef<typename detail::with_const_of<T, E>::type, N> as() const {
    TensorRef<typename detail::with_const_of<T, E>::type, N> r;
    r.data = static_cast<typename detail::with_const_of<T, E>::type*>(data);
    for (int k = 0; k < N; ++k) r.stride[k] = stride[k];
    return r;
  }
};

}  // namespace ssd_kernels
