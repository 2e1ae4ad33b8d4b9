// CPU kernels of the creation and random ops: each element is a function of its index
// and the op's scalar attributes, computed in double and rounded to the output dtype as
// Tensor::from_vector rounds (convert<T>), split across the intra-op pool.
#include <cmath>

#include <strata/core/philox.h>
#include <strata/kernels/cpu/loops.h>

namespace strata::cpu_kernels {

namespace {

// out[i] = convert<T>(value(i)) over the contiguous output.
template <typename ValueFn>
void generate(const Tensor& out, double cost_per_element, ValueFn value) {
  visit_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(out.numel(), cost_per_element, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = convert<T>(value(i));
    });
  });
}

void fill_kernel(const KernelArgs& k) {
  const Tensor& out = k.out[0];
  const double value = k.attrs.get<FillAttrs>(k.op).value;
  visit_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    const T v = convert<T>(value);
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(out.numel(), 0.1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = v;
    });
  });
}

void range_kernel(const KernelArgs& k) {
  const RangeAttrs& r = k.attrs.get<RangeAttrs>(k.op);
  if (k.op == OpId::Arange) {
    generate(k.out[0], 0.5, [&](int64_t i) { return r.start + double(i) * r.step; });
    return;
  }
  const int64_t num = k.out[0].numel();
  generate(k.out[0], 0.5, [&](int64_t i) {
    return num == 1 ? r.start : r.start + (r.stop - r.start) * double(i) / double(num - 1);
  });
}

void eye_kernel(const KernelArgs& k) {
  const int64_t n = k.out[0].dim(0);
  generate(k.out[0], 0.2, [n](int64_t i) { return i / n == i % n ? 1.0 : 0.0; });
}

// The largest value of T (a 16-bit float) below `high`: step the bit pattern towards -inf.
template <typename T>
double step_below(double v, double high) {
  T t{float(v)};  // the same double -> float -> T rounding as convert<T>
  while (double(float(t)) >= high) {
    if ((t.bits & 0x7fffu) == 0) {
      t.bits = 0x8001u;  // +-0 -> the smallest negative subnormal
    } else if (t.bits & 0x8000u) {
      ++t.bits;  // negative: a larger magnitude is smaller
    } else {
      --t.bits;
    }
  }
  return double(float(t));
}

// low + (high - low) * u with u < 1 can still round up to `high` in the output dtype
// (bfloat16 keeps 8 significant bits: 0.2% of uniform(0, 1) draws would be exactly 1).
// Such draws become the largest value of the dtype below high, so every draw is in
// [low, high) as documented.
double below_high(double v, double low, double high, DType dtype) {
  if (!(high > low)) return v;
  double r = v;
  switch (dtype) {
    case DType::Float64:
      if (r >= high) r = std::nextafter(high, low);
      break;
    case DType::Float32: {
      float f = float(v);
      while (double(f) >= high) f = std::nextafterf(f, -INFINITY);
      r = f;
      break;
    }
    case DType::Float16: r = step_below<Half>(v, high); break;
    case DType::BFloat16: r = step_below<BFloat16>(v, high); break;
    default: break;
  }
  return std::max(r, low);
}

void random_kernel(const KernelArgs& k) {
  const RandomAttrs& a = k.attrs.get<RandomAttrs>(k.op);
  const Tensor& out = k.out[0];
  const uint64_t seed = a.seed;
  switch (k.op) {
    case OpId::RandomUniform: {
      const DType dtype = out.dtype();
      return generate(out, 30, [&](int64_t i) {
        return below_high(philox::uniform(seed, uint64_t(i), a.a, a.b), a.a, a.b, dtype);
      });
    }
    case OpId::RandomNormal:
      return generate(out, 80, [&](int64_t i) { return philox::normal(seed, uint64_t(i), a.a, a.b); });
    case OpId::RandomTruncatedNormal:
      return generate(out, 100,
                      [&](int64_t i) { return philox::truncated_normal(seed, uint64_t(i), a.a, a.b); });
    case OpId::RandomBernoulli:
      return generate(out, 30, [&](int64_t i) { return philox::bernoulli(seed, uint64_t(i), a.a); });
    default: fail(op_name(k.op), ": not a random op");
  }
}

}  // namespace

void register_creation_kernels() {
  register_kernel(OpId::Fill, DeviceType::CPU, fill_kernel);
  register_kernel(OpId::Arange, DeviceType::CPU, range_kernel);
  register_kernel(OpId::Linspace, DeviceType::CPU, range_kernel);
  register_kernel(OpId::Eye, DeviceType::CPU, eye_kernel);
  for (OpId op : {OpId::RandomUniform, OpId::RandomNormal, OpId::RandomTruncatedNormal,
                  OpId::RandomBernoulli}) {
    register_kernel(op, DeviceType::CPU, random_kernel);
  }
}

}  // namespace strata::cpu_kernels
