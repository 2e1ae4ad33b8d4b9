// CPU kernels of the unary and binary elementwise ops, where, cast and copy.
//
// Contiguous runs of float32/float64 go straight through Eigen array expressions, and the
// float32 transcendentals (exp, sigmoid, tanh, erf, gelu) through kernels/cpu/vec_math.h;
// strided, broadcast or half-precision runs are gathered into a small block of the compute
// type first.
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include <strata/core/dispatch.h>
#include <strata/kernels/cpu/flushed_exp.h>
#include <strata/kernels/cpu/loops.h>
#include <strata/kernels/cpu/vec_math.h>

namespace strata::cpu_kernels {

namespace {

template <typename C>
using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
template <typename C>
using CMap = Eigen::Map<const Arr<C>>;
template <typename C>
using MMap = Eigen::Map<Arr<C>>;

template <typename C>
inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Elementwise cost estimates (ns per element) used to decide on splitting across threads.
// kVectorised: a vec_math.h function on one core here (0.3-0.7 ns).
constexpr double kCheap = 0.3, kTranscendental = 3.0, kVectorised = 1.0;

// Note [Layout-independent transcendentals]
// Eigen evaluates an array expression with packets (SIMD) in the middle of a run and with
// scalar code at an unaligned head and at the tail. For exp, log, sqrt/rsqrt (under
// EIGEN_FAST_MATH), sin, cos, tanh, ... the two paths round differently, so an element's
// value would depend on where it sits in a run: on the memory layout (a transposed view
// would differ from its contiguous copy) and on where parallel_for split the work (results
// would change with the thread count). Such ops are therefore always evaluated on 64-byte
// aligned blocks padded to a whole number of packets, so every element takes the packet
// path. Exactly rounded ops (neg, abs, add, mul, div, ...) give the same bits either way
// and keep the direct path over contiguous runs.
enum class Rounding { Exact, Approximate };

// out = f(x), out and x of the same storage type T (or Out for predicates).
template <typename T, typename Out, Rounding R = Rounding::Approximate, typename F>
void unary_loop(const Tensor& x, const Tensor& out, double cost, F f) {
  using C = compute_t<T>;
  using OC = std::conditional_t<std::is_same_v<Out, bool>, bool, compute_t<Out>>;
  const T* in = ptr<T>(x);
  Out* o = ptr<Out>(out);
  for_each_strided<2>(out.shape(), {out.strides(), strides_for(x, out.shape())}, cost,
                      [&](int64_t n, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st) {
    alignas(64) C ibuf[kBlock];
    alignas(64) OC obuf[kBlock];
    if constexpr (R == Rounding::Approximate) {
      constexpr int64_t kPacket = 64 / sizeof(C);  // a whole number of any SIMD width
      for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t m = std::min(kBlock, n - b);
        for (int64_t i = 0; i < m; ++i) ibuf[i] = convert<C>(in[off[1] + (b + i) * st[1]]);
        const int64_t padded = (m + kPacket - 1) / kPacket * kPacket;
        for (int64_t i = m; i < padded; ++i) ibuf[i] = C(1);
        MMap<OC>(obuf, padded) = f(CMap<C>(ibuf, padded));
        store_block(o + off[0] + b * st[0], st[0], m, obuf);
      }
      return;
    }
    const bool direct = std::is_same_v<C, T> && std::is_same_v<OC, Out> && st[0] == 1 && st[1] == 1;
    if (direct) {
      MMap<OC>(reinterpret_cast<OC*>(o + off[0]), n) = f(CMap<C>(reinterpret_cast<const C*>(in + off[1]), n));
      return;
    }
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      const C* src = load_block<C>(in + off[1] + b * st[1], st[1], m, ibuf);
      MMap<OC>(obuf, m) = f(CMap<C>(src, m));
      store_block(o + off[0] + b * st[0], st[0], m, obuf);
    }
  });
}

// out = fn(x) for a float32 function of kernels/cpu/vec_math.h, x and out of storage type
// T (float32, or float16/bfloat16 computed in float32). Contiguous float32 runs go
// straight through fn; other runs through a float block. fn computes every element alike
// wherever it sits in a run, so both paths give the same bits (Note [Layout-independent
// transcendentals]) without the padded blocks unary_loop needs for Eigen.
template <typename T>
void vec_unary_loop(const Tensor& x, const Tensor& out, vec::UnaryFn fn) {
  static_assert(std::is_same_v<compute_t<T>, float>);
  const T* in = ptr<T>(x);
  T* o = ptr<T>(out);
  for_each_strided<2>(out.shape(), {out.strides(), strides_for(x, out.shape())}, kVectorised,
                      [&](int64_t n, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st) {
    if constexpr (std::is_same_v<T, float>) {
      if (st[0] == 1 && st[1] == 1) return fn(in + off[1], o + off[0], n);
    }
    float buf[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      for (int64_t i = 0; i < m; ++i) buf[i] = convert<float>(in[off[1] + (b + i) * st[1]]);
      fn(buf, buf, m);
      store_block(o + off[0] + b * st[0], st[0], m, buf);
    }
  });
}

template <typename T, typename Out, typename F>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, double cost, F f) {
  using C = compute_t<T>;
  using OC = std::conditional_t<std::is_same_v<Out, bool>, bool, compute_t<Out>>;
  const T* pa = ptr<T>(a);
  const T* pb = ptr<T>(b);
  Out* o = ptr<Out>(out);
  const Shape& shape = out.shape();
  for_each_strided<3>(shape, {out.strides(), strides_for(a, shape), strides_for(b, shape)}, cost,
                      [&](int64_t n, const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st) {
    C abuf[kBlock], bbuf[kBlock];
    OC obuf[kBlock];
    if constexpr (std::is_same_v<C, T> && std::is_same_v<OC, Out>) {
      if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
        MMap<OC>(o + off[0], n) = f(CMap<C>(pa + off[1], n), CMap<C>(pb + off[2], n));
        return;
      }
      if (st[0] == 1 && st[1] == 1 && st[2] == 0) {  // tensor op scalar: common with biases
        MMap<OC>(o + off[0], n) = f(CMap<C>(pa + off[1], n), Arr<C>::Constant(n, pb[off[2]]));
        return;
      }
    }
    for (int64_t k = 0; k < n; k += kBlock) {
      const int64_t m = std::min(kBlock, n - k);
      const C* sa = load_block<C>(pa + off[1] + k * st[1], st[1], m, abuf);
      const C* sb = load_block<C>(pb + off[2] + k * st[2], st[2], m, bbuf);
      OC* dst = obuf;
      if constexpr (std::is_same_v<OC, Out>) {
        if (st[0] == 1) dst = reinterpret_cast<OC*>(o + off[0] + k);
      }
      MMap<OC>(dst, m) = f(CMap<C>(sa, m), CMap<C>(sb, m));
      if (dst == obuf) store_block(o + off[0] + k * st[0], st[0], m, obuf);
    }
  });
}

template <typename C>
C gelu_exact(C x) {
  return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
}
template <typename C>
C gelu_tanh(C x) {
  const C k = C(0.79788456080286535588);  // sqrt(2/pi)
  return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
}

template <typename T>
void float_unary(OpId op, const OpAttrs& attrs, const Tensor& x, const Tensor& out) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, float>) {
    const vec::Functions& v = vec::functions();
    switch (op) {
      case OpId::Exp: return vec_unary_loop<T>(x, out, v.exp);
      case OpId::Sigmoid: return vec_unary_loop<T>(x, out, v.sigmoid);
      case OpId::Tanh: return vec_unary_loop<T>(x, out, v.tanh);
      case OpId::Erf: return vec_unary_loop<T>(x, out, v.erf);
      case OpId::Gelu:
        return vec_unary_loop<T>(x, out, attrs.get<GeluAttrs>(OpId::Gelu).approximate_tanh ? v.gelu_tanh : v.gelu);
      default: break;
    }
  }
  switch (op) {
    case OpId::Exp: return unary_loop<T, T>(x, out, kTranscendental, [](const auto& a) { return flushed_exp<C>(a); });
    case OpId::Log: return unary_loop<T, T>(x, out, kTranscendental, [](const auto& a) { return a.log(); });
    case OpId::Sqrt: return unary_loop<T, T>(x, out, kCheap, [](const auto& a) { return a.sqrt(); });
    case OpId::Rsqrt: return unary_loop<T, T>(x, out, kCheap, [](const auto& a) { return a.rsqrt(); });
    case OpId::Sin: return unary_loop<T, T>(x, out, kTranscendental, [](const auto& a) { return a.sin(); });
    case OpId::Cos: return unary_loop<T, T>(x, out, kTranscendental, [](const auto& a) { return a.cos(); });
    case OpId::Tanh: return unary_loop<T, T>(x, out, kTranscendental, [](const auto& a) { return a.tanh(); });
    case OpId::Sigmoid:
      return unary_loop<T, T>(x, out, kTranscendental,
                              [](const auto& a) { return C(1) / (C(1) + flushed_exp<C>(-a)); });
    case OpId::Softplus:
      // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): never overflows.
      return unary_loop<T, T>(x, out, kTranscendental, [](const auto& a) {
        return a.max(C(0)) + flushed_exp<C>(-a.abs()).log1p();
      });
    case OpId::Gelu:
      if (attrs.get<GeluAttrs>(OpId::Gelu).approximate_tanh) {
        return unary_loop<T, T>(x, out, kTranscendental,
                                [](const auto& a) { return a.unaryExpr([](C v) { return gelu_tanh(v); }); });
      }
      return unary_loop<T, T>(x, out, kTranscendental,
                              [](const auto& a) { return a.unaryExpr([](C v) { return gelu_exact(v); }); });
    case OpId::Reciprocal: return unary_loop<T, T>(x, out, kCheap, [](const auto& a) { return a.inverse(); });
    case OpId::Erf:
      return unary_loop<T, T>(x, out, kTranscendental,
                              [](const auto& a) { return a.unaryExpr([](C v) { return C(std::erf(v)); }); });
    case OpId::StopGradient:
    case OpId::Copy: return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a; });
    default: break;
  }
  fail(op_name(op), ": no CPU kernel for dtype ", x.dtype());
}

template <typename T>
void numeric_unary(OpId op, const Tensor& x, const Tensor& out) {
  using C = compute_t<T>;
  switch (op) {
    case OpId::Neg: return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return -a; });
    case OpId::Abs: return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a.abs(); });
    case OpId::Square: return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a * a; });
    case OpId::Relu:
      // A select rather than max(a, 0): Eigen's packet and scalar max disagree on NaN, and
      // relu(NaN) must be NaN wherever the element sits.
      return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return (a < C(0)).select(C(0), a); });
    case OpId::Sign:
      return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) {
        return a.unaryExpr([](C v) { return is_nan(v) ? v : C((C(0) < v) - (v < C(0))); });
      });
    case OpId::Floor:
      if constexpr (std::is_floating_point_v<C>) {
        return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a.floor(); });
      } else {
        return unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a; });
      }
    case OpId::IsFinite:
      if constexpr (std::is_floating_point_v<C>) {
        return unary_loop<T, bool, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a.isFinite(); });
      } else {
        return unary_loop<T, bool, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a == a; });
      }
    default: break;
  }
  if constexpr (std::is_floating_point_v<C>) {
    float_unary<T>(op, OpAttrs{}, x, out);
  } else if (op == OpId::Copy) {
    unary_loop<T, T, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a; });
  } else {
    fail(op_name(op), ": no CPU kernel for dtype ", x.dtype());
  }
}

void unary_kernel(const KernelArgs& k) {
  const Tensor& x = k.in[0];
  const Tensor& out = k.out[0];
  if (k.op == OpId::LogicalNot) {
    return unary_loop<bool, bool, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return !a; });
  }
  if (k.op == OpId::Copy && x.dtype() == kBool) {
    return unary_loop<bool, bool, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a; });
  }
  if (k.op == OpId::IsFinite && x.dtype() == kBool) {
    return unary_loop<bool, bool, Rounding::Exact>(x, out, kCheap, [](const auto& a) { return a || !a; });
  }
  visit_dtype(x.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, bool>) {
      fail(op_name(k.op), ": no CPU kernel for bool");
    } else if constexpr (std::is_floating_point_v<compute_t<T>>) {
      if (k.op == OpId::Gelu) return float_unary<T>(k.op, k.attrs, x, out);
      numeric_unary<T>(k.op, x, out);
    } else {
      numeric_unary<T>(k.op, x, out);
    }
  });
}

void cast_kernel(const KernelArgs& k) {
  const Tensor& x = k.in[0];
  const Tensor& out = k.out[0];
  visit_dtype(x.dtype(), [&](auto zs) {
    using S = decltype(zs);
    visit_dtype(out.dtype(), [&](auto zd) {
      using D = decltype(zd);
      const S* in = ptr<S>(x);
      D* o = ptr<D>(out);
      for_each_strided<2>(out.shape(), {out.strides(), strides_for(x, out.shape())}, kCheap,
                          [&](int64_t n, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st) {
        for (int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = convert<D>(in[off[1] + i * st[1]]);
      });
    });
  });
}

template <typename T>
void arithmetic(OpId op, const Tensor& a, const Tensor& b, const Tensor& out) {
  using C = compute_t<T>;
  switch (op) {
    case OpId::Add: return binary_loop<T, T>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x + y; });
    case OpId::Sub: return binary_loop<T, T>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x - y; });
    case OpId::Mul: return binary_loop<T, T>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x * y; });
    case OpId::Maximum:
      return binary_loop<T, T>(a, b, out, kCheap, [](const auto& x, const auto& y) {
        return x.binaryExpr(y, [](C u, C v) { return (is_nan(u) || u > v) ? u : (is_nan(v) ? v : (u == v ? u : v)); });
      });
    case OpId::Minimum:
      return binary_loop<T, T>(a, b, out, kCheap, [](const auto& x, const auto& y) {
        return x.binaryExpr(y, [](C u, C v) { return (is_nan(u) || u < v) ? u : (is_nan(v) ? v : (u == v ? u : v)); });
      });
    case OpId::ReluGrad:
      // A select, not g * (x > 0): where x <= 0 (or is NaN) the result is 0 even for an
      // infinite or NaN g.
      return binary_loop<T, T>(a, b, out, kCheap, [](const auto& x, const auto& y) {
        return x.binaryExpr(y, [](C u, C v) { return u > C(0) ? v : C(0); });
      });
    case OpId::Equal: return binary_loop<T, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x == y; });
    case OpId::NotEqual: return binary_loop<T, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x != y; });
    case OpId::Less: return binary_loop<T, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x < y; });
    case OpId::LessEqual: return binary_loop<T, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x <= y; });
    case OpId::Greater: return binary_loop<T, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x > y; });
    case OpId::GreaterEqual: return binary_loop<T, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x >= y; });
    default: break;
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case OpId::Div: return binary_loop<T, T>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x / y; });
      case OpId::Pow:
        return binary_loop<T, T>(a, b, out, kTranscendental, [](const auto& x, const auto& y) {
          return x.binaryExpr(y, [](C u, C v) { return std::pow(u, v); });
        });
      default: break;
    }
  }
  fail(op_name(op), ": no CPU kernel for dtype ", a.dtype());
}

void binary_kernel(const KernelArgs& k) {
  const Tensor& a = k.in[0];
  const Tensor& b = k.in[1];
  const Tensor& out = k.out[0];
  if (a.dtype() == kBool) {
    switch (k.op) {
      case OpId::LogicalAnd: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x && y; });
      case OpId::LogicalOr: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x || y; });
      case OpId::Equal: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x == y; });
      case OpId::NotEqual: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x != y; });
      // Ordering as in NumPy: false < true.
      case OpId::Less: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return !x && y; });
      case OpId::LessEqual: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return !x || y; });
      case OpId::Greater: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x && !y; });
      case OpId::GreaterEqual: return binary_loop<bool, bool>(a, b, out, kCheap, [](const auto& x, const auto& y) { return x || !y; });
      default: fail(op_name(k.op), ": no CPU kernel for bool operands");
    }
  }
  visit_dtype(a.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!std::is_same_v<T, bool>) arithmetic<T>(k.op, a, b, out);
  });
}

void where_kernel(const KernelArgs& k) {
  const Tensor& cond = k.in[0];
  const Tensor& out = k.out[0];
  const Shape& shape = out.shape();
  visit_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    const bool* c = ptr<bool>(cond);
    const T* pa = ptr<T>(k.in[1]);
    const T* pb = ptr<T>(k.in[2]);
    T* o = ptr<T>(out);
    for_each_strided<4>(shape, {out.strides(), strides_for(cond, shape), strides_for(k.in[1], shape),
                                strides_for(k.in[2], shape)},
                        kCheap, [&](int64_t n, const std::array<int64_t, 4>& off, const std::array<int64_t, 4>& st) {
      // Contiguous runs whose branches are contiguous or scalars (relu's gradient selects
      // between g and 0) take loops the compiler vectorises.
      if (st[0] == 1 && st[1] == 1 && (st[2] | st[3]) <= 1 && st[2] >= 0 && st[3] >= 0) {
        T* po = o + off[0];
        // Read as bytes: GCC 12 vectorises the select on unsigned char but not on bool.
        const unsigned char* pc = reinterpret_cast<const unsigned char*>(c + off[1]);
        const T* x = pa + off[2];
        const T* y = pb + off[3];
        // Both sides are loaded unconditionally so that the select becomes a blend.
        if (st[2] == 1 && st[3] == 1) {
          for (int64_t i = 0; i < n; ++i) {
            const T xi = x[i], yi = y[i];
            po[i] = pc[i] ? xi : yi;
          }
        } else if (st[2] == 1) {
          const T yv = y[0];
          for (int64_t i = 0; i < n; ++i) {
            const T xi = x[i];
            po[i] = pc[i] ? xi : yv;
          }
        } else if (st[3] == 1) {
          const T xv = x[0];
          for (int64_t i = 0; i < n; ++i) {
            const T yi = y[i];
            po[i] = pc[i] ? xv : yi;
          }
        } else {
          const T xv = x[0], yv = y[0];
          for (int64_t i = 0; i < n; ++i) po[i] = pc[i] ? xv : yv;
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        o[off[0] + i * st[0]] = c[off[1] + i * st[1]] ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
      }
    });
  });
}

// Copy between logical CPU devices (cpu:i -> cpu:j share host memory): the strided copy
// kernel into the destination's own storage. CPU streams are immediate, so it is always
// finished on return.
void cpu_to_cpu_copy(const Tensor& src, const Tensor& dst, const Stream& stream, bool) {
  const Tensor in[1] = {src}, out[1] = {dst};
  unary_kernel(KernelArgs{OpId::Copy, OpAttrs{}, in, out, stream});
}

}  // namespace

void register_elementwise_kernels() {
  register_copy(DeviceType::CPU, DeviceType::CPU, cpu_to_cpu_copy);
  for (OpId op : {OpId::Neg, OpId::Exp, OpId::Log, OpId::Sqrt, OpId::Rsqrt, OpId::Abs, OpId::Square,
                  OpId::Sin, OpId::Cos, OpId::Tanh, OpId::Sigmoid, OpId::Relu, OpId::Softplus,
                  OpId::Gelu, OpId::Erf, OpId::Sign, OpId::Reciprocal, OpId::Floor, OpId::IsFinite,
                  OpId::LogicalNot, OpId::Copy, OpId::StopGradient}) {
    register_kernel(op, DeviceType::CPU, unary_kernel);
  }
  register_kernel(OpId::Cast, DeviceType::CPU, cast_kernel);
  for (OpId op : {OpId::Add, OpId::Sub, OpId::Mul, OpId::Div, OpId::Pow, OpId::Maximum, OpId::Minimum,
                  OpId::ReluGrad, OpId::Equal, OpId::NotEqual, OpId::Less, OpId::LessEqual, OpId::Greater,
                  OpId::GreaterEqual, OpId::LogicalAnd, OpId::LogicalOr}) {
    register_kernel(op, DeviceType::CPU, binary_kernel);
  }
  register_kernel(OpId::Where, DeviceType::CPU, where_kernel);
}

}  // namespace strata::cpu_kernels
