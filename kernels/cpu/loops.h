// Strided iteration shared by the CPU kernels: walks an output shape with the strides of
// every operand (broadcast operands have stride 0), coalescing dimensions that are
// contiguous for all operands so that most calls become one long contiguous run, and
// splitting the walk across the intra-op pool.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <strata/core/half.h>
#include <strata/core/tensor.h>
#include <strata/core/dispatch.h>
#include <strata/core/thread_pool.h>

namespace strata::cpu_kernels {

// float16/bfloat16 compute in float32; everything else in its own type.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    // Compare in the source type: float(1e-50) would be 0 and turn true into false.
    if constexpr (is_half_v<S>) {
      return float(v) != 0.0f;
    } else {
      return v != S(0);
    }
  } else if constexpr (std::is_integral_v<D> && (is_half_v<S> || std::is_floating_point_v<S>)) {
    return float_to_int<D>(double(v));
  } else if constexpr (is_half_v<S> || is_half_v<D>) {
    return D(float(v));
  } else {
    return static_cast<D>(v);
  }
}

// Calls fn(count, offsets, inner_strides) for runs of elements; offsets[i] is the element
// offset of operand i at the run's start, inner_strides[i] its step along the run.
template <size_t N, typename Fn>
void for_each_strided(const Shape& shape, const std::array<Strides, N>& strides,
                      double cost_per_element, Fn&& fn) {
  // Drop extent-1 dimensions, then merge neighbours contiguous for every operand.
  std::vector<int64_t> sh;
  std::array<std::vector<int64_t>, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (!sh.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k) merge = merge && st[k].back() == strides[k][d] * shape[d];
      if (merge) {
        sh.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
        continue;
      }
    }
    sh.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  std::array<int64_t, N> inner{};
  if (sh.empty()) {
    std::array<int64_t, N> zero{};
    inner.fill(1);
    fn(int64_t(1), zero, inner);
    return;
  }
  const size_t nd = sh.size();
  for (size_t k = 0; k < N; ++k) inner[k] = st[k][nd - 1];
  int64_t total = 1;
  for (int64_t e : sh) total *= e;
  const int64_t inner_n = sh[nd - 1];
  // Operands this large stream from L3 or memory, not L1: an element then costs at least its
  // operands' bytes at one core's streaming speed (~20 GB/s here), whatever the in-cache
  // estimate says, so that such passes split across the pool. At 0.3 ns an element the MNIST
  // CNN's first-layer activations (1.4M floats: bias add, relu, relu's gradient) ran on
  // one thread. The byte count assumes 4-byte elements: an estimate, as the cost is.
  constexpr double kStreamingBytes = double(1 << 20), kNsPerStreamedByte = 0.05;
  const double bytes_per_element = 4.0 * double(N);
  if (double(total) * bytes_per_element > kStreamingBytes) {
    cost_per_element = std::max(cost_per_element, bytes_per_element * kNsPerStreamedByte);
  }
  parallel_for(total, cost_per_element, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(nd);
    int64_t rem = begin;
    for (size_t d = nd; d-- > 0;) {
      idx[d] = rem % sh[d];
      rem /= sh[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      std::array<int64_t, N> off{};
      for (size_t d = 0; d < nd; ++d) {
        for (size_t k = 0; k < N; ++k) off[k] += idx[d] * st[k][d];
      }
      const int64_t run = std::min(inner_n - idx[nd - 1], end - pos);
      fn(run, off, inner);
      pos += run;
      idx[nd - 1] += run;
      for (size_t d = nd - 1; d > 0 && idx[d] == sh[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

// Strides of t read as if broadcast to `shape`.
inline Strides strides_for(const Tensor& t, const Shape& shape) {
  return t.shape() == shape ? t.strides() : broadcast_strides(t.shape(), t.strides(), shape);
}

// Elements per block when a run must be converted or gathered into a scratch buffer.
inline constexpr int64_t kBlock = 512;

// Returns a pointer to n values of type C read from p with `stride`: p itself when no
// conversion or gathering is needed, else buf filled with the converted values.
template <typename C, typename T>
inline const C* load_block(const T* p, int64_t stride, int64_t n, C* buf) {
  if constexpr (std::is_same_v<C, T>) {
    if (stride == 1) return p;
  }
  for (int64_t i = 0; i < n; ++i) buf[i] = convert<C>(p[i * stride]);
  return buf;
}

template <typename T, typename C>
inline void store_block(T* p, int64_t stride, int64_t n, const C* buf) {
  for (int64_t i = 0; i < n; ++i) p[i * stride] = convert<T>(buf[i]);
}

template <typename T>
inline T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace strata::cpu_kernels

namespace strata::cpu_kernels {

// A view of t with axes permuted (not recorded by autograd; for kernels' internal use).
inline Tensor permuted_view(const Tensor& t, const std::vector<int64_t>& perm) {
  Shape shape(perm.size());
  Strides strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    shape[i] = t.shape()[size_t(perm[i])];
    strides[i] = t.strides()[size_t(perm[i])];
  }
  return Tensor::view_of(t.storage(), t.offset(), std::move(shape), std::move(strides), t.dtype());
}

// A view of contiguous t with another shape of the same element count.
inline Tensor reshaped_view(const Tensor& t, const Shape& shape) {
  return Tensor::view_of(t.storage(), t.offset(), shape, contiguous_strides(shape), t.dtype());
}

// t itself when contiguous, else a contiguous copy (not recorded by autograd).
Tensor contiguous_copy(const Tensor& t);

// Permutation moving `axis` to the end.
inline std::vector<int64_t> axis_last_perm(int64_t rank, int64_t axis) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != axis) perm.push_back(i);
  }
  perm.push_back(axis);
  return perm;
}

}  // namespace strata::cpu_kernels

namespace strata::cpu_kernels {

// Runs a float32/float64-only kernel on float16/bfloat16 operands by converting floating
// inputs to float32, running `fn`, and converting the outputs back.
template <typename Fn>
void with_float32_outputs(std::span<const Tensor> in, std::span<const Tensor> out, Fn fn) {
  auto cast_to = [](const Tensor& src, DType t) {
    Tensor dst = Tensor::empty(src.shape(), t, src.device());
    const Tensor i[1] = {src}, o[1] = {dst};
    run_kernel(OpId::Cast, OpAttrs{}, i, o);
    return dst;
  };
  std::vector<Tensor> in32, out32;
  for (const Tensor& t : in) in32.push_back(is_half(t.dtype()) ? cast_to(t, kFloat32) : t);
  for (const Tensor& t : out) out32.push_back(Tensor::empty(t.shape(), kFloat32, t.device()));
  fn(std::span<const Tensor>(in32), std::span<const Tensor>(out32));
  for (size_t i = 0; i < out.size(); ++i) {
    const Tensor s[1] = {out32[i]}, d[1] = {out[i]};
    run_kernel(OpId::Cast, OpAttrs{}, s, d);
  }
}

}  // namespace strata::cpu_kernels
