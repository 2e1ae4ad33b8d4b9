// CUDA kernels of the creation and random ops: element i is a function of i and the op's
// scalar attributes, computed in double and rounded to the output dtype as the CPU does
// (kernels/cpu/creation.cc). Random draws come from core/philox.h, the code the CPU runs:
// uniform and bernoulli are bitwise equal to the CPU, provided the double arithmetic is
// not contracted into fused multiply-adds -- creation.cu is compiled with --fmad=false.
#pragma once

#include <strata/core/philox.h>
#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda_kernels {

enum class CreationCode : int { Arange, Linspace, Eye, Uniform, Normal, TruncatedNormal, Bernoulli };

// The largest value of the 16-bit float H below `high` (kernels/cpu/creation.cc step_below).
template <typename H>
__device__ __forceinline__ double step_below(double v, double high) {
  H t = float_to_half<H>(float(v));
  uint16_t bits;
  memcpy(&bits, static_cast<const void*>(&t), 2);
  for (;;) {
    H cur;
    memcpy(static_cast<void*>(&cur), &bits, 2);
    if (!(double(half_to_float(cur)) >= high)) return double(half_to_float(cur));
    if ((bits & 0x7fffu) == 0) {
      bits = 0x8001u;  // +-0 -> the smallest negative subnormal
    } else if (bits & 0x8000u) {
      ++bits;  // negative: a larger magnitude is smaller
    } else {
      --bits;
    }
  }
}

// A uniform draw rounded into [low, high) in T (kernels/cpu/creation.cc below_high).
template <typename T>
__device__ __forceinline__ double below_high(double v, double low, double high) {
  if (!(high > low)) return v;
  double r = v;
  if constexpr (std::is_same_v<T, double>) {
    if (r >= high) r = ::nextafter(high, low);
  } else if constexpr (std::is_same_v<T, float>) {
    float f = float(v);
    while (double(f) >= high) f = ::nextafterf(f, -INFINITY);
    r = f;
  } else if constexpr (is_half_v<T>) {
    r = step_below<T>(v, high);
  }
  return r > low ? r : low;
}

template <typename T>
__device__ __forceinline__ double creation_value(CreationCode code, int64_t i, int64_t n, uint64_t seed,
                                                 double a, double b, double c) {
  switch (code) {
    case CreationCode::Arange: return a + double(i) * b;  // start, step
    case CreationCode::Linspace:                          // start, stop
      return n == 1 ? a : a + (b - a) * double(i) / double(n - 1);
    case CreationCode::Eye: {  // c = columns
      const int64_t cols = int64_t(c);
      return i / cols == i % cols ? 1.0 : 0.0;
    }
    case CreationCode::Uniform: return below_high<T>(philox::uniform(seed, uint64_t(i), a, b), a, b);
    case CreationCode::Normal: return philox::normal(seed, uint64_t(i), a, b);
    case CreationCode::TruncatedNormal: return philox::truncated_normal(seed, uint64_t(i), a, b);
    case CreationCode::Bernoulli: return philox::bernoulli(seed, uint64_t(i), a);
  }
  return 0.0;
}

template <typename T>
__global__ void fill_kernel(int64_t n, T* __restrict__ out, T value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

template <typename T>
__global__ void generate_kernel(int64_t n, T* __restrict__ out, CreationCode code, uint64_t seed, double a,
                                double b, double c) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = convert<T>(creation_value<T>(code, i, n, seed, a, b, c));
  }
}

// ---- host launchers ----

// Fills the contiguous tensor `out` with `value` (as convert<T>(value) on the CPU).
inline void fill_value(const char* op, const Tensor& out, double value, const Stream& stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
  visit_device_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    const T v = convert<T>(value);
    cuda_backend::launch(op, fill_kernel<T>, cuda_backend::elementwise_shape(n).grid, cuda_backend::elementwise_shape(n).block, 0, stream, n,
                 out_ptr<T>(out), v);
  });
}

inline void cuda_fill(const KernelArgs& k) {
  fill_value(op_name(k.op), k.out[0], k.attrs.get<FillAttrs>(k.op).value, k.stream);
}

inline void cuda_generate(const KernelArgs& k) {
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  const int64_t n = out.numel();
  if (n == 0) return;
  STRATA_CHECK(out.is_contiguous(), op, ": the CUDA kernel writes contiguous outputs");
  CreationCode code = CreationCode::Arange;
  uint64_t seed = 0;
  double a = 0, b = 0, c = 0;
  switch (k.op) {
    case OpId::Arange: {
      const RangeAttrs& r = k.attrs.get<RangeAttrs>(k.op);
      code = CreationCode::Arange, a = r.start, b = r.step;
      break;
    }
    case OpId::Linspace: {
      const RangeAttrs& r = k.attrs.get<RangeAttrs>(k.op);
      code = CreationCode::Linspace, a = r.start, b = r.stop;
      break;
    }
    case OpId::Eye:
      code = CreationCode::Eye, c = double(out.dim(0));
      break;
    case OpId::RandomUniform:
    case OpId::RandomNormal:
    case OpId::RandomTruncatedNormal:
    case OpId::RandomBernoulli: {
      const RandomAttrs& r = k.attrs.get<RandomAttrs>(k.op);
      seed = r.seed, a = r.a, b = r.b;
      code = k.op == OpId::RandomUniform  ? CreationCode::Uniform
             : k.op == OpId::RandomNormal ? CreationCode::Normal
             : k.op == OpId::RandomBernoulli ? CreationCode::Bernoulli
                                             : CreationCode::TruncatedNormal;
      break;
    }
    default: fail(op, ": not a creation op");
  }
  visit_device_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda_backend::launch(op, generate_kernel<T>, cuda_backend::elementwise_shape(n).grid, cuda_backend::elementwise_shape(n).block, 0, k.stream, n,
                 out_ptr<T>(out), code, seed, a, b, c);
  });
}

inline void register_creation_kernels() {
  register_kernel(OpId::Fill, DeviceType::CUDA, cuda_fill);
  for (OpId op : {OpId::Arange, OpId::Linspace, OpId::Eye, OpId::RandomUniform, OpId::RandomNormal,
                  OpId::RandomTruncatedNormal, OpId::RandomBernoulli}) {
    register_kernel(op, DeviceType::CUDA, cuda_generate);
  }
}

}  // namespace strata::cuda_kernels
