// CUDA kernels of the unary and binary elementwise ops, where, cast and copy: one
// grid-stride kernel per (dtype, kind) with the op as a runtime code (a uniform branch),
// which keeps the number of instantiations -- and nvcc's compile time -- low. Operands are
// strided (broadcast operands have stride 0); a rank-0 host scalar operand is read on the
// host and passed by value.
//
// Results match kernels/cpu/elementwise.cc: the same formulas (exp flushed below the
// smallest normal, NaN-propagating maximum/minimum, softplus without overflow, ...),
// exactly for the exactly rounded ops and within a few ulp for transcendentals.
#pragma once

#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda_kernels {

enum class UnaryCode : int {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Square, Sin, Cos, Tanh, Sigmoid, Relu, Softplus,
  GeluErf, GeluTanh, Erf, Sign, Reciprocal, Floor,
};

enum class BinaryCode : int {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum, ReluGrad,
  Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual, LogicalAnd, LogicalOr,
};

// ---- device code ----

template <typename C>
__device__ __forceinline__ C apply_unary(UnaryCode code, C x) {
  using namespace dmath;
  switch (code) {
    case UnaryCode::Neg: return -x;
    case UnaryCode::Square: return x * x;
    case UnaryCode::Relu: return x < C(0) ? C(0) : x;
    case UnaryCode::Sign:
      if (is_nan(x)) return x;
      return C((C(0) < x) - (x < C(0)));
    default: break;
  }
  if constexpr (!std::is_floating_point_v<C>) {
    if (code == UnaryCode::Abs) return x < C(0) ? C(-x) : x;
  } else {
    switch (code) {
      case UnaryCode::Abs: return fabs(x);
      case UnaryCode::Exp: return exp_flushed(x);
      case UnaryCode::Log: return log(x);
      case UnaryCode::Sqrt: return sqrt(x);
      case UnaryCode::Rsqrt: return C(1) / sqrt(x);
      case UnaryCode::Sin: return sin(x);
      case UnaryCode::Cos: return cos(x);
      case UnaryCode::Tanh: return tanh(x);
      case UnaryCode::Sigmoid: return C(1) / (C(1) + exp_flushed(-x));
      case UnaryCode::Softplus:  // max(x, 0) + log1p(e^-|x|): never overflows
        return (x > C(0) ? x : C(0)) + log1p(exp_flushed(-fabs(x)));
      case UnaryCode::GeluErf: return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440)));
      case UnaryCode::GeluTanh: {
        const C k = C(0.79788456080286535588);  // sqrt(2/pi)
        return C(0.5) * x * (C(1) + tanh(k * (x + C(0.044715) * x * x * x)));
      }
      case UnaryCode::Erf: return erf(x);
      case UnaryCode::Reciprocal: return C(1) / x;
      case UnaryCode::Floor: return floor(x);
      default: break;
    }
  }
  return x;  // Floor of an integer
}

template <typename T>
__global__ void unary_kernel(Indexer<2> ix, int64_t n, const T* __restrict__ in, T* __restrict__ out,
                             UnaryCode code) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    out[off[0]] = store<T>(apply_unary(code, load(in[off[1]])));
  }
}

// Contiguous operands move as 16-byte vectors (one memory transaction per thread per
// operand instead of 16 / sizeof(T)): the strided kernels above reach about 60% of the
// copy bandwidth on an H200, these close to all of it. The launcher checks contiguity and
// 16-byte alignment; the last n % kN elements go one by one.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kN = int(16 / sizeof(T));
  T v[kN];
};

// Operands of the contiguous kernels: a device array (unary: a plain pointer, which keeps
// the kernel parameter's __restrict__), or an In<T> that may also be a host scalar.
template <typename T>
__device__ __forceinline__ Vec16<T> load_vec(const T* in, int64_t i) {
  return reinterpret_cast<const Vec16<T>*>(in)[i];
}
template <typename T>
__device__ __forceinline__ Vec16<T> load_vec(const In<T>& in, int64_t i) {
  if (in.ptr) return load_vec(in.ptr, i);
  Vec16<T> v;
  for (int j = 0; j < Vec16<T>::kN; ++j) v.v[j] = in.value;
  return v;
}
template <typename T>
__device__ __forceinline__ T element_at(const T* in, int64_t i) { return in[i]; }
template <typename T>
__device__ __forceinline__ T element_at(const In<T>& in, int64_t i) { return in.at(i); }

// The contiguous kernels' grid-stride loop: out[i] = store(f(load(operand[i])...)) for
// i < n, by whole Vec16s first, then the tail element by element.
template <typename T, typename F, typename... Operands>
__device__ __forceinline__ void vec16_map(int64_t n, T* __restrict__ out, F f, const Operands&... in) {
  using V = Vec16<T>;
  const auto map = [&f](const auto&... x) {  // one Vec16 per operand
    V y;
    for (int j = 0; j < V::kN; ++j) y.v[j] = store<T>(f(load(x.v[j])...));
    return y;
  };
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t vectors = n / V::kN;
  for (int64_t i = first; i < vectors; i += step) reinterpret_cast<V*>(out)[i] = map(load_vec(in, i)...);
  for (int64_t i = vectors * V::kN + first; i < n; i += step) out[i] = store<T>(f(load(element_at(in, i))...));
}

template <typename T>
__global__ void unary_contiguous_kernel(int64_t n, const T* __restrict__ in, T* __restrict__ out, UnaryCode code) {
  vec16_map(n, out, [code](auto x) { return apply_unary(code, x); }, in);
}

template <typename T>
__global__ void is_finite_kernel(Indexer<2> ix, int64_t n, const T* __restrict__ in, bool* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    if constexpr (is_float_v<T>) {
      out[off[0]] = dmath::is_finite(load(in[off[1]]));
    } else {
      out[off[0]] = true;
    }
  }
}

__global__ inline void logical_not_kernel(Indexer<2> ix, int64_t n, const bool* __restrict__ in,
                                          bool* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    out[off[0]] = !in[off[1]];
  }
}

// Cast, and copy when S == D.
template <typename S, typename D>
__global__ void cast_kernel(Indexer<2> ix, int64_t n, In<S> in, D* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    out[off[0]] = convert<D>(in.at(off[1]));
  }
}

template <typename C>
__device__ __forceinline__ C apply_arith(BinaryCode code, C u, C v) {
  using dmath::is_nan;
  switch (code) {
    case BinaryCode::Add: return u + v;
    case BinaryCode::Sub: return u - v;
    case BinaryCode::Mul: return u * v;
    case BinaryCode::Maximum: return (is_nan(u) || u > v) ? u : (is_nan(v) ? v : (u == v ? u : v));
    case BinaryCode::Minimum: return (is_nan(u) || u < v) ? u : (is_nan(v) ? v : (u == v ? u : v));
    case BinaryCode::ReluGrad: return u > C(0) ? v : C(0);  // a select, as on the CPU
    default: break;
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (code) {
      case BinaryCode::Div: return u / v;
      case BinaryCode::Pow: return dmath::pow(u, v);
      default: break;
    }
  }
  return C(0);
}

template <typename C>
__device__ __forceinline__ bool apply_compare(BinaryCode code, C u, C v) {
  switch (code) {
    case BinaryCode::Equal: return u == v;
    case BinaryCode::NotEqual: return u != v;
    case BinaryCode::Less: return u < v;
    case BinaryCode::LessEqual: return u <= v;
    case BinaryCode::Greater: return u > v;
    case BinaryCode::GreaterEqual: return u >= v;
    case BinaryCode::LogicalAnd: return bool(u) && bool(v);
    case BinaryCode::LogicalOr: return bool(u) || bool(v);
    default: break;
  }
  return false;
}

template <typename T>
__global__ void arith_kernel(Indexer<3> ix, int64_t n, In<T> a, In<T> b, T* __restrict__ out, BinaryCode code) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = store<T>(apply_arith(code, load(a.at(off[1])), load(b.at(off[2]))));
  }
}

template <typename T>
__global__ void arith_contiguous_kernel(int64_t n, In<T> a, In<T> b, T* __restrict__ out, BinaryCode code) {
  vec16_map(n, out, [code](auto u, auto v) { return apply_arith(code, u, v); }, a, b);
}

template <typename T>
__global__ void compare_kernel(Indexer<3> ix, int64_t n, In<T> a, In<T> b, bool* __restrict__ out,
                               BinaryCode code) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = apply_compare(code, load(a.at(off[1])), load(b.at(off[2])));
  }
}

template <typename T>
__global__ void where_kernel(Indexer<4> ix, int64_t n, In<bool> c, In<T> a, In<T> b, T* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[4];
    ix.offsets(i, off);
    out[off[0]] = c.at(off[1]) ? a.at(off[2]) : b.at(off[3]);
  }
}

// ---- host launchers (KernelFn) ----

namespace elementwise_detail {

inline UnaryCode unary_code(const KernelArgs& k) {
  switch (k.op) {
    case OpId::Neg: return UnaryCode::Neg;
    case OpId::Exp: return UnaryCode::Exp;
    case OpId::Log: return UnaryCode::Log;
    case OpId::Sqrt: return UnaryCode::Sqrt;
    case OpId::Rsqrt: return UnaryCode::Rsqrt;
    case OpId::Abs: return UnaryCode::Abs;
    case OpId::Square: return UnaryCode::Square;
    case OpId::Sin: return UnaryCode::Sin;
    case OpId::Cos: return UnaryCode::Cos;
    case OpId::Tanh: return UnaryCode::Tanh;
    case OpId::Sigmoid: return UnaryCode::Sigmoid;
    case OpId::Relu: return UnaryCode::Relu;
    case OpId::Softplus: return UnaryCode::Softplus;
    case OpId::Gelu:
      return k.attrs.get<GeluAttrs>(OpId::Gelu).approximate_tanh ? UnaryCode::GeluTanh : UnaryCode::GeluErf;
    case OpId::Erf: return UnaryCode::Erf;
    case OpId::Sign: return UnaryCode::Sign;
    case OpId::Reciprocal: return UnaryCode::Reciprocal;
    case OpId::Floor: return UnaryCode::Floor;
    default: break;
  }
  fail(op_name(k.op), ": not a unary elementwise op with a CUDA kernel");
}

// Integer dtypes run only these (the others are float-only in the front-end).
inline bool integer_unary(UnaryCode c) {
  return c == UnaryCode::Neg || c == UnaryCode::Abs || c == UnaryCode::Square || c == UnaryCode::Relu ||
         c == UnaryCode::Sign || c == UnaryCode::Floor;
}

inline Indexer<2> unary_indexer(const char* op, const Tensor& x, const Tensor& out) {
  const Strides sx = strides_for(x, out.shape());
  const Strides* st[2] = {&out.strides(), &sx};
  return make_indexer<2>(op, out.shape(), st);
}

// Writes src (cast to dst's dtype, broadcast to its shape; a rank-0 host scalar too) into
// dst on `stream`.
inline void cast_into(const char* op, const Tensor& src, const Tensor& dst, const Stream& stream) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const Indexer<2> ix = unary_indexer(op, src, dst);
  visit_device_dtype(src.dtype(), [&](auto zs) {
    using S = decltype(zs);
    visit_device_dtype(dst.dtype(), [&](auto zd) {
      using D = decltype(zd);
      cuda_backend::launch(op, cast_kernel<S, D>, cuda_backend::elementwise_shape(n).grid, cuda_backend::elementwise_shape(n).block, 0, stream, ix, n,
                   input_of<S>(src), out_ptr<D>(dst));
    });
  });
}

// Whether t can be read by the contiguous kernels for an output of `shape`: a host
// scalar (passed by value), or a dense tensor of that shape at a 16-byte aligned address.
inline bool vector_operand(const Tensor& t, const Shape& shape) {
  if (on_host(t)) return true;
  return t.shape() == shape && t.is_contiguous() && reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
}

}  // namespace elementwise_detail

inline void cuda_unary(const KernelArgs& k) {
  using namespace elementwise_detail;
  const Tensor& x = k.in[0];
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  const int64_t n = out.numel();
  if (n == 0) return;
  if (k.op == OpId::Copy || k.op == OpId::StopGradient) return cast_into(op, x, out, k.stream);
  STRATA_CHECK(!on_host(x), op, ": the CUDA kernel got a host input");
  const Indexer<2> ix = unary_indexer(op, x, out);
  const auto [grid, block] = cuda_backend::elementwise_shape(n);
  if (k.op == OpId::LogicalNot) {
    STRATA_CHECK(x.dtype() == kBool, op, ": expected bool, got ", x.dtype());
    return cuda_backend::launch(op, logical_not_kernel, grid, block, 0, k.stream, ix, n,
                        static_cast<const bool*>(x.raw_data()), out_ptr<bool>(out));
  }
  visit_device_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if (k.op == OpId::IsFinite) {
      return cuda_backend::launch(op, is_finite_kernel<T>, grid, block, 0, k.stream, ix, n,
                          static_cast<const T*>(x.raw_data()), out_ptr<bool>(out));
    }
    if constexpr (std::is_same_v<T, bool>) {
      fail(op, ": no CUDA kernel for bool");
    } else {
      const UnaryCode code = unary_code(k);
      STRATA_CHECK(is_float_v<T> || integer_unary(code), op, ": no CUDA kernel for dtype ", x.dtype());
      if (vector_operand(x, out.shape()) && vector_operand(out, out.shape())) {
        const auto shape = cuda_backend::elementwise_shape(n / Vec16<T>::kN + 1);
        return cuda_backend::launch(op, unary_contiguous_kernel<T>, shape.grid, shape.block, 0, k.stream, n,
                                    static_cast<const T*>(x.raw_data()), out_ptr<T>(out), code);
      }
      cuda_backend::launch(op, unary_kernel<T>, grid, block, 0, k.stream, ix, n, static_cast<const T*>(x.raw_data()),
                   out_ptr<T>(out), code);
    }
  });
}

inline void cuda_cast(const KernelArgs& k) {
  elementwise_detail::cast_into(op_name(k.op), k.in[0], k.out[0], k.stream);
}

inline BinaryCode binary_code(OpId op) {
  switch (op) {
    case OpId::Add: return BinaryCode::Add;
    case OpId::Sub: return BinaryCode::Sub;
    case OpId::Mul: return BinaryCode::Mul;
    case OpId::Div: return BinaryCode::Div;
    case OpId::Pow: return BinaryCode::Pow;
    case OpId::Maximum: return BinaryCode::Maximum;
    case OpId::Minimum: return BinaryCode::Minimum;
    case OpId::ReluGrad: return BinaryCode::ReluGrad;
    case OpId::Equal: return BinaryCode::Equal;
    case OpId::NotEqual: return BinaryCode::NotEqual;
    case OpId::Less: return BinaryCode::Less;
    case OpId::LessEqual: return BinaryCode::LessEqual;
    case OpId::Greater: return BinaryCode::Greater;
    case OpId::GreaterEqual: return BinaryCode::GreaterEqual;
    case OpId::LogicalAnd: return BinaryCode::LogicalAnd;
    case OpId::LogicalOr: return BinaryCode::LogicalOr;
    default: break;
  }
  fail(op_name(op), ": not a binary elementwise op with a CUDA kernel");
}

inline void cuda_binary(const KernelArgs& k) {
  const Tensor& a = k.in[0];
  const Tensor& b = k.in[1];
  const Tensor& out = k.out[0];
  const char* op = op_name(k.op);
  const int64_t n = out.numel();
  if (n == 0) return;
  STRATA_CHECK(a.dtype() == b.dtype(), op, ": CUDA kernel expects operands of one dtype, got ", a.dtype(),
               " and ", b.dtype());
  const BinaryCode code = binary_code(k.op);
  const bool to_bool = code >= BinaryCode::Equal;
  const bool logical = code == BinaryCode::LogicalAnd || code == BinaryCode::LogicalOr;
  STRATA_CHECK(!logical || a.dtype() == kBool, op, ": expected bool operands, got ", a.dtype());
  STRATA_CHECK(to_bool || a.dtype() != kBool, op, ": no CUDA kernel for bool operands");
  const Strides sa = strides_for(a, out.shape()), sb = strides_for(b, out.shape());
  const Strides* st[3] = {&out.strides(), &sa, &sb};
  const Indexer<3> ix = make_indexer<3>(op, out.shape(), st);
  const auto [grid, block] = cuda_backend::elementwise_shape(n);
  visit_device_dtype(a.dtype(), [&](auto z) {
    using T = decltype(z);
    if (to_bool) {
      return cuda_backend::launch(op, compare_kernel<T>, grid, block, 0, k.stream, ix, n, input_of<T>(a), input_of<T>(b),
                          out_ptr<bool>(out), code);
    }
    if constexpr (!std::is_same_v<T, bool>) {
      STRATA_CHECK(is_float_v<T> || (code != BinaryCode::Div && code != BinaryCode::Pow), op,
                   ": no CUDA kernel for dtype ", a.dtype());
      using elementwise_detail::vector_operand;
      if (vector_operand(a, out.shape()) && vector_operand(b, out.shape()) && vector_operand(out, out.shape())) {
        const auto shape = cuda_backend::elementwise_shape(n / Vec16<T>::kN + 1);
        return cuda_backend::launch(op, arith_contiguous_kernel<T>, shape.grid, shape.block, 0, k.stream, n,
                                    input_of<T>(a), input_of<T>(b), out_ptr<T>(out), code);
      }
      cuda_backend::launch(op, arith_kernel<T>, grid, block, 0, k.stream, ix, n, input_of<T>(a), input_of<T>(b),
                   out_ptr<T>(out), code);
    }
  });
}

inline void cuda_where(const KernelArgs& k) {
  const Tensor& c = k.in[0];
  const Tensor& out = k.out[0];
  const int64_t n = out.numel();
  if (n == 0) return;
  const Strides sc = strides_for(c, out.shape()), sa = strides_for(k.in[1], out.shape()),
                sb = strides_for(k.in[2], out.shape());
  const Strides* st[4] = {&out.strides(), &sc, &sa, &sb};
  const Indexer<4> ix = make_indexer<4>("where", out.shape(), st);
  visit_device_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda_backend::launch("where", where_kernel<T>, cuda_backend::elementwise_shape(n).grid, cuda_backend::elementwise_shape(n).block, 0, k.stream, ix, n,
                 input_of<bool>(c), input_of<T>(k.in[1]), input_of<T>(k.in[2]), out_ptr<T>(out));
  });
}

// Registers the family for DeviceType::CUDA (called by the backend's init, or by the
// emulation tests' registration).
inline void register_elementwise_kernels() {
  for (OpId op : {OpId::Neg, OpId::Exp, OpId::Log, OpId::Sqrt, OpId::Rsqrt, OpId::Abs, OpId::Square,
                  OpId::Sin, OpId::Cos, OpId::Tanh, OpId::Sigmoid, OpId::Relu, OpId::Softplus,
                  OpId::Gelu, OpId::Erf, OpId::Sign, OpId::Reciprocal, OpId::Floor, OpId::IsFinite,
                  OpId::LogicalNot, OpId::Copy, OpId::StopGradient}) {
    register_kernel(op, DeviceType::CUDA, cuda_unary);
  }
  register_kernel(OpId::Cast, DeviceType::CUDA, cuda_cast);
  for (OpId op : {OpId::Add, OpId::Sub, OpId::Mul, OpId::Div, OpId::Pow, OpId::Maximum, OpId::Minimum,
                  OpId::ReluGrad, OpId::Equal, OpId::NotEqual, OpId::Less, OpId::LessEqual, OpId::Greater,
                  OpId::GreaterEqual, OpId::LogicalAnd, OpId::LogicalOr}) {
    register_kernel(op, DeviceType::CUDA, cuda_binary);
  }
  register_kernel(OpId::Where, DeviceType::CUDA, cuda_where);
}

}  // namespace strata::cuda_kernels
