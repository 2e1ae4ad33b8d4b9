// Shared pieces of the CUDA kernel families: device storage types, the conversions and
// math of the CPU backend written once for device code, and strided indexing.
//
// Compiled by nvcc (kernels/cuda/*.cu) and by g++ under emulation (see launch.h). The
// rules each kernel family follows, so that both builds compute the same as the CPU
// backend (kernels/cpu):
// - float16/bfloat16 are computed in float32 and rounded to nearest even on store, as the
//   CPU does (strata::Half/BFloat16 and __half/__nv_bfloat16 share their bit layout);
// - conversions follow kernels/cpu/loops.h convert<D>(S) exactly (float->int truncates and
//   saturates, NaN gives 0; x->bool compares with zero in the source type; int/double ->
//   half goes through float);
// - math functions are called `::`-qualified (strata::exp(Tensor) would hide them).
#pragma once

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/core/tensor.h>
#include <strata/kernels/cuda/launch.h>

// Functions both host launchers and kernels call (conversions of scalar attributes).
#define STRATA_CUDA_HD __host__ __device__ __forceinline__

namespace strata::cuda_kernels {

// ---- types ----

// The device type holding a strata storage type.
template <typename T> struct device_type { using type = T; };
template <> struct device_type<Half> { using type = __half; };
template <> struct device_type<BFloat16> { using type = __nv_bfloat16; };
template <typename T> using device_t = typename device_type<T>::type;

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T>
inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;

// float16/bfloat16 compute in float32; everything else in its own type.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<__half> { using type = float; };
template <> struct compute_type<__nv_bfloat16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

template <typename T> struct int_limits;
template <> struct int_limits<int32_t> {
  static constexpr int32_t lo = INT_MIN, hi = INT_MAX;
};
template <> struct int_limits<int64_t> {
  static constexpr int64_t lo = LLONG_MIN, hi = LLONG_MAX;
};

// ---- conversions (kernels/cpu/loops.h convert<D>(S)) ----

template <typename T>
STRATA_CUDA_HD float half_to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return __bfloat162float(v);
  }
}
template <typename T>
STRATA_CUDA_HD T float_to_half(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

template <typename I>
STRATA_CUDA_HD I float_to_int(double v) {
  if (!(v == v)) return I(0);
  if (v >= double(int_limits<I>::hi)) return int_limits<I>::hi;
  if (v <= double(int_limits<I>::lo)) return int_limits<I>::lo;
  return static_cast<I>(v);
}

template <typename D, typename S>
STRATA_CUDA_HD D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (is_half_v<S>) {
      return half_to_float(v) != 0.0f;
    } else {
      return v != S(0);
    }
  } else if constexpr (std::is_integral_v<D> && is_half_v<S>) {
    return float_to_int<D>(double(half_to_float(v)));
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
    return float_to_int<D>(double(v));
  } else if constexpr (is_half_v<S> && is_half_v<D>) {
    return float_to_half<D>(half_to_float(v));
  } else if constexpr (is_half_v<S>) {
    return D(half_to_float(v));
  } else if constexpr (is_half_v<D>) {
    return float_to_half<D>(float(v));
  } else {
    return static_cast<D>(v);
  }
}

// Load as the compute type; store from it.
template <typename T>
STRATA_CUDA_HD compute_t<T> load(T v) {
  if constexpr (is_half_v<T>) {
    return half_to_float(v);
  } else {
    return v;
  }
}
template <typename T, typename C>
STRATA_CUDA_HD T store(C v) {
  if constexpr (is_half_v<T>) {
    return float_to_half<T>(float(v));
  } else {
    return T(v);
  }
}

// ---- math, float and double ----
namespace dmath {
__device__ __forceinline__ float exp(float x) { return ::expf(x); }
__device__ __forceinline__ double exp(double x) { return ::exp(x); }
__device__ __forceinline__ float log(float x) { return ::logf(x); }
__device__ __forceinline__ double log(double x) { return ::log(x); }
__device__ __forceinline__ float log1p(float x) { return ::log1pf(x); }
__device__ __forceinline__ double log1p(double x) { return ::log1p(x); }
__device__ __forceinline__ float sqrt(float x) { return ::sqrtf(x); }
__device__ __forceinline__ double sqrt(double x) { return ::sqrt(x); }
__device__ __forceinline__ float sin(float x) { return ::sinf(x); }
__device__ __forceinline__ double sin(double x) { return ::sin(x); }
__device__ __forceinline__ float cos(float x) { return ::cosf(x); }
__device__ __forceinline__ double cos(double x) { return ::cos(x); }
__device__ __forceinline__ float tanh(float x) { return ::tanhf(x); }
__device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
__device__ __forceinline__ float erf(float x) { return ::erff(x); }
__device__ __forceinline__ double erf(double x) { return ::erf(x); }
__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }
__device__ __forceinline__ float floor(float x) { return ::floorf(x); }
__device__ __forceinline__ double floor(double x) { return ::floor(x); }
__device__ __forceinline__ float fabs(float x) { return ::fabsf(x); }
__device__ __forceinline__ double fabs(double x) { return ::fabs(x); }
template <typename C>
__device__ __forceinline__ bool is_nan(C v) {
  return !(v == v);
}
template <typename C>
__device__ __forceinline__ bool is_finite(C v) {
  if constexpr (std::is_same_v<C, float>) {
    return v == v && fabs(v) <= FLT_MAX;
  } else {
    return v == v && fabs(v) <= DBL_MAX;
  }
}
// log of the smallest normal number: e^x below it is flushed to zero, as on the CPU
// (kernels/cpu/elementwise.cc exp_flushed).
template <typename C>
__device__ __forceinline__ C log_min_normal() {
  if constexpr (std::is_same_v<C, float>) {
    return -87.33654475f;
  } else {
    return -708.3964185322641;
  }
}
template <typename C>
__device__ __forceinline__ C exp_flushed(C x) {
  return x < log_min_normal<C>() ? C(0) : exp(x);
}
}  // namespace dmath

// ---- strided indexing ----

// Dimensions a kernel indexes after merging those contiguous for every operand.
inline constexpr int kMaxDims = 10;

// Maps the linear index of an element of the (coalesced) output shape to the element
// offset of each of N operands; broadcast operands have stride 0.
template <int N>
struct Indexer {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  __device__ __forceinline__ void offsets(int64_t linear, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (ndim == 1) {
      for (int k = 0; k < N; ++k) off[k] = linear * strides[k][0];
      return;
    }
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
};

// Strides of t read as if broadcast to `shape`.
inline Strides strides_for(const Tensor& t, const Shape& shape) {
  return t.shape() == shape ? t.strides() : broadcast_strides(t.shape(), t.strides(), shape);
}

// The indexer of `shape` with each operand's strides: extent-1 dimensions dropped and
// neighbours contiguous for every operand merged (as kernels/cpu/loops.h does).
template <int N>
Indexer<N> make_indexer(const char* op, const Shape& shape, const Strides* const (&strides)[N]) {
  Indexer<N> ix;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (ix.ndim > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && ix.strides[k][ix.ndim - 1] == (*strides[k])[d] * shape[d];
      if (merge) {
        ix.sizes[ix.ndim - 1] *= shape[d];
        for (int k = 0; k < N; ++k) ix.strides[k][ix.ndim - 1] = (*strides[k])[d];
        continue;
      }
    }
    STRATA_CHECK(ix.ndim < kMaxDims, op, ": the CUDA kernel indexes at most ", kMaxDims,
                 " dimensions that cannot be merged, got shape ", shape_str(shape));
    ix.sizes[ix.ndim] = shape[d];
    for (int k = 0; k < N; ++k) ix.strides[k][ix.ndim] = (*strides[k])[d];
    ++ix.ndim;
  }
  return ix;
}

// An input of an elementwise kernel: device memory, or a rank-0 host scalar read on the
// host and passed by value (ptr == nullptr).
template <typename T>
struct In {
  const T* ptr = nullptr;
  T value{};
  __device__ __forceinline__ T at(int64_t offset) const { return ptr ? ptr[offset] : value; }
};

inline bool on_host(const Tensor& t) { return t.device().is_cpu(); }

// The kernel input for tensor t of device type T (S its strata storage type).
template <typename T>
In<T> input_of(const Tensor& t) {
  In<T> in;
  if (on_host(t)) {
    std::memcpy(static_cast<void*>(&in.value), t.raw_data(), sizeof(T));
  } else {
    in.ptr = static_cast<const T*>(t.raw_data());
  }
  return in;
}

template <typename T>
T* out_ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// Calls fn(T{}) with the device type of dtype t.
template <typename Fn>
decltype(auto) visit_device_dtype(DType t, Fn&& fn) {
  return visit_dtype(t, [&](auto z) { return fn(device_t<decltype(z)>{}); });
}

}  // namespace strata::cuda_kernels
