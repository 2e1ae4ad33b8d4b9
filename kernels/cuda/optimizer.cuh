// CUDA kernels of the fused optimizer updates (SGD, Adam/AdamW) and of AllFinite.
//
// The updates evaluate kernels/cpu/optimizer.cc's formula per element in the same order
// and precision: the scalars are computed on the host in double exactly as the CPU
// computes them and rounded to the compute type; float16/bfloat16 compute in float32 and
// round once per stored value. optimizer.cu is compiled with --fmad=false (no a*b+c
// contracted into an FMA, as the CPU build's -ffp-contract=off), and nvcc's default
// IEEE division and square root (-prec-div, -prec-sqrt) are correctly rounded like the
// CPU's std::sqrt and `/` -- so every dtype is bitwise equal to the CPU kernel.
//
// Updates: in = {grad} (contiguous), out = the in-place targets {param[, slots...]}
// (contiguous, distinct), all of one float dtype and shape -- the front-end guarantees it.
//
// AllFinite: out = {0-d bool}; in = floating tensors of any dtype and strides. The output
// is set true, then batches of inputs (one per blockIdx.y) are tested bitwise, as the CPU
// does (exponent bits all ones: inf or NaN), and a block that finds one stores false --
// a plain store of the same value from any number of blocks, so no grid-wide sync.
#pragma once

#include <algorithm>
#include <cmath>

#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda_kernels {

namespace optimizer_detail {

template <typename C>
struct SgdScalars {
  C wd, mom, rate;
  bool decay, nesterov;
};

template <typename C>
struct AdamScalars {
  C decay_factor, wd, b1, c1, b2, c2, bc2, eps, step;
  bool decay, decoupled;
};

// ---- device code ----

// buf is nullptr without momentum.
template <typename T>
__global__ void sgd_kernel(int64_t n, T* __restrict__ p, T* __restrict__ buf, const T* __restrict__ grad,
                           SgdScalars<compute_t<T>> s) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const C pi = load(p[i]);
    C d = load(grad[i]);
    if (s.decay) d = d + pi * s.wd;
    if (buf) {
      const C b = load(buf[i]) * s.mom + d;
      buf[i] = store<T>(b);
      d = s.nesterov ? d + b * s.mom : b;
    }
    p[i] = store<T>(pi - d * s.rate);
  }
}

template <typename T>
__global__ void adam_kernel(int64_t n, T* __restrict__ p, T* __restrict__ m, T* __restrict__ v,
                            const T* __restrict__ grad, AdamScalars<compute_t<T>> s) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    C pi = load(p[i]);
    C g = load(grad[i]);
    if (s.decay) {
      if (s.decoupled) {
        pi = pi * s.decay_factor;
      } else {
        g = g + pi * s.wd;
      }
    }
    const C mi = load(m[i]) * s.b1 + g * s.c1;
    const C vi = load(v[i]) * s.b2 + g * g * s.c2;
    m[i] = store<T>(mi);
    v[i] = store<T>(vi);
    const C denom = dmath::sqrt(vi) / s.bc2 + s.eps;
    p[i] = store<T>(pi - (mi / denom) * s.step);
  }
}

// The unsigned type of a float's bits and its exponent mask.
template <typename U>
struct FiniteInput {
  const U* ptr = nullptr;
  Indexer<1> ix;
  int64_t numel = 0;
  U exponent = 0;  // a value is inf or NaN when these bits are all set
};
inline constexpr int kFiniteBatch = 16;  // kernel parameters are limited to 4 KiB
template <typename U>
struct FiniteBatch {
  FiniteInput<U> in[kFiniteBatch];
};

__global__ inline void set_bool_kernel(bool* out, bool value) { *out = value; }

template <typename U>
__global__ void all_finite_kernel(FiniteBatch<U> b, bool* out) {
  __shared__ int skip;   // the output is already false: nothing to do
  __shared__ int found;  // this block found a non-finite value
  if (threadIdx.x == 0) {
    skip = !*static_cast<volatile bool*>(out);  // another block's store may show; a hint only
    found = 0;
  }
  __syncthreads();
  if (skip) return;  // uniform across the block
  const FiniteInput<U>& in = b.in[blockIdx.y];
  bool bad = false;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < in.numel && !bad;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    in.ix.offsets(i, off);
    bad = (in.ptr[off[0]] & in.exponent) == in.exponent;
  }
  if (bad) atomicExch(&found, 1);
  __syncthreads();
  if (threadIdx.x == 0 && found) *out = false;
}

template <typename T> struct float_bits;
template <> struct float_bits<float> {
  using type = uint32_t;
  static constexpr uint32_t exponent = 0x7f800000u;
};
template <> struct float_bits<double> {
  using type = uint64_t;
  static constexpr uint64_t exponent = 0x7ff0000000000000ull;
};
template <> struct float_bits<__half> {
  using type = uint16_t;
  static constexpr uint16_t exponent = 0x7c00u;
};
template <> struct float_bits<__nv_bfloat16> {
  using type = uint16_t;
  static constexpr uint16_t exponent = 0x7f80u;
};

// Calls fn(T{}) for a floating parameter dtype T.
template <typename Fn>
void visit_float(const KernelArgs& k, DType dt, Fn&& fn) {
  visit_device_dtype(dt, [&](auto z) {
    if constexpr (is_float_v<decltype(z)>) {
      fn(z);
    } else {
      fail(op_name(k.op), ": expected a floating-point tensor, got ", dt);
    }
  });
}

inline void check_update_operands(const KernelArgs& k) {
  const char* op = op_name(k.op);
  for (const Tensor& t : k.out) STRATA_CHECK(t.is_contiguous(), op, ": the CUDA kernel updates contiguous tensors");
  STRATA_CHECK(k.in[0].is_contiguous() && !on_host(k.in[0]), op,
               ": the CUDA kernel reads a contiguous gradient in device memory");
}

}  // namespace optimizer_detail

// ---- host launchers (KernelFn) ----

inline void cuda_sgd_update(const KernelArgs& k) {
  using namespace optimizer_detail;
  const int64_t n = k.out[0].numel();
  if (n == 0) return;
  check_update_operands(k);
  const SgdAttrs& a = k.attrs.get<SgdAttrs>(k.op);
  visit_float(k, k.out[0].dtype(), [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    const SgdScalars<C> s{C(a.weight_decay), C(a.momentum), C(a.learning_rate), a.weight_decay != 0.0, a.nesterov};
    T* buf = k.out.size() > 1 ? out_ptr<T>(k.out[1]) : nullptr;
    const auto [grid, block] = cuda_backend::elementwise_shape(n);
    cuda_backend::launch(op_name(k.op), sgd_kernel<T>, grid, block, 0, k.stream, n, out_ptr<T>(k.out[0]), buf,
                         static_cast<const T*>(k.in[0].raw_data()), s);
  });
}

inline void cuda_adam_update(const KernelArgs& k) {
  using namespace optimizer_detail;
  const int64_t n = k.out[0].numel();
  if (n == 0) return;
  check_update_operands(k);
  const AdamAttrs& a = k.attrs.get<AdamAttrs>(k.op);
  visit_float(k, k.out[0].dtype(), [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    // As kernels/cpu/optimizer.cc: in double, then rounded to C.
    const double lr = a.learning_rate, t = double(a.step);
    AdamScalars<C> s;
    s.decay_factor = C(1.0 - lr * a.weight_decay);
    s.wd = C(a.weight_decay);
    s.b1 = C(a.beta1);
    s.c1 = C(1.0 - a.beta1);
    s.b2 = C(a.beta2);
    s.c2 = C(1.0 - a.beta2);
    s.bc2 = C(std::sqrt(1.0 - std::pow(a.beta2, t)));
    s.eps = C(a.epsilon);
    s.step = C(lr / (1.0 - std::pow(a.beta1, t)));
    s.decay = a.weight_decay != 0.0;
    s.decoupled = a.decoupled;
    const auto [grid, block] = cuda_backend::elementwise_shape(n);
    cuda_backend::launch(op_name(k.op), adam_kernel<T>, grid, block, 0, k.stream, n, out_ptr<T>(k.out[0]),
                         out_ptr<T>(k.out[1]), out_ptr<T>(k.out[2]), static_cast<const T*>(k.in[0].raw_data()), s);
  });
}

inline void cuda_all_finite(const KernelArgs& k) {
  using namespace optimizer_detail;
  const char* op = op_name(k.op);
  bool* out = out_ptr<bool>(k.out[0]);
  cuda_backend::launch(op, set_bool_kernel, dim3(1), dim3(1), 0, k.stream, out, true);
  // One batch per bit width: float16 and bfloat16 share one (each input has its mask).
  auto run = [&](auto zu) {
    using U = decltype(zu);
    FiniteBatch<U> b;
    static_assert(sizeof(b) <= 4000, "kernel parameters are limited to 4 KiB");
    int count = 0;
    int64_t most = 0;
    auto flush = [&] {
      if (count == 0) return;
      const unsigned threads = cuda_backend::block_for(most);
      cuda_backend::launch(op, all_finite_kernel<U>, dim3(cuda_backend::grid_for(most, threads), unsigned(count)),
                           dim3(threads), 0, k.stream, b, out);
      count = 0;
      most = 0;
    };
    for (const Tensor& t : k.in) {
      // Only floating tensors can hold a non-finite value (the CPU skips the others too).
      if (!is_floating(t.dtype()) || t.numel() == 0 || dtype_size(t.dtype()) != sizeof(U)) continue;
      STRATA_CHECK(!on_host(t), op, ": the CUDA kernel got a host input");
      visit_float(k, t.dtype(), [&](auto z) {
        using T = decltype(z);
        if constexpr (std::is_same_v<typename float_bits<T>::type, U>) {
          FiniteInput<U>& in = b.in[count++];
          in.ptr = static_cast<const U*>(t.raw_data());
          const Strides* st[1] = {&t.strides()};
          in.ix = make_indexer<1>(op, t.shape(), st);
          in.numel = t.numel();
          in.exponent = float_bits<T>::exponent;
          most = std::max(most, in.numel);
        }
      });
      if (count == kFiniteBatch) flush();
    }
    flush();
  };
  run(uint16_t{});
  run(uint32_t{});
  run(uint64_t{});
}

// Registers the family for DeviceType::CUDA (called by the backend's init, or by the
// emulation tests' registration).
inline void register_optimizer_kernels() {
  register_kernel(OpId::SgdUpdate, DeviceType::CUDA, cuda_sgd_update);
  register_kernel(OpId::AdamUpdate, DeviceType::CUDA, cuda_adam_update);
  register_kernel(OpId::AllFinite, DeviceType::CUDA, cuda_all_finite);
}

}  // namespace strata::cuda_kernels
