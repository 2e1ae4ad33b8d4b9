#include "core/random.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "core/ops.h"

namespace strata::random {

void Philox::block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]) {
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c0, p1 = uint64_t(kM1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kW0, k1 += kW1;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

namespace {

// Stream of doubles in [0,1) for (seed, stream): element i uses block i/2 (two 53-bit draws
// per block), so values never depend on threads or call order.
struct Uniform01 {
  uint64_t seed, stream;
  double operator()(uint64_t i) const {
    uint32_t r[4];
    Philox::block(seed, stream, i >> 1, r);
    const uint32_t* w = (i & 1) ? r + 2 : r;
    const uint64_t bits = (uint64_t(w[0]) << 21) ^ (uint64_t(w[1]) >> 11);  // 53 bits
    return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
};

Tensor from_doubles(const std::vector<double>& v, const Shape& shape, DType dtype,
                    Device device) {
  return Tensor::from_vector(v, shape, dtype, device);
}

void check_float(DType dtype, const char* op) {
  STRATA_CHECK(is_floating(dtype), op, ": expected a floating dtype, got ", dtype);
}

// The largest value of T (a 16-bit float) below `high`: step the bit pattern towards -inf.
template <typename T>
double step_below(double v, double high) {
  T t{float(v)};  // the same double -> float -> T rounding as Tensor::from_vector
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

// Standard normal for element i from two uniforms (Box-Muller), stream-separated.
double normal01(const Uniform01& u, uint64_t i) {
  double u1 = u(2 * i), u2 = u(2 * i + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

Tensor uniform(const Shape& shape, uint64_t seed, double low, double high, DType dtype,
               Device device) {
  check_float(dtype, "random::uniform");
  STRATA_CHECK(low <= high, "random::uniform: low ", low, " > high ", high);
  const int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  Uniform01 u{seed, 1};
  for (int64_t i = 0; i < n; ++i) {
    v[size_t(i)] = below_high(low + (high - low) * u(uint64_t(i)), low, high, dtype);
  }
  return from_doubles(v, shape, dtype, device);
}

Tensor normal(const Shape& shape, uint64_t seed, double mean, double stddev, DType dtype,
              Device device) {
  check_float(dtype, "random::normal");
  STRATA_CHECK(stddev >= 0, "random::normal: stddev must be >= 0, got ", stddev);
  const int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  Uniform01 u{seed, 2};
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = mean + stddev * normal01(u, uint64_t(i));
  return from_doubles(v, shape, dtype, device);
}

Tensor truncated_normal(const Shape& shape, uint64_t seed, double mean, double stddev,
                        DType dtype, Device device) {
  check_float(dtype, "random::truncated_normal");
  const int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // Resample element i on its own sub-streams until it lands within two deviations.
    double z = 0;
    for (uint64_t attempt = 0;; ++attempt) {
      Uniform01 u{seed, 3 + (attempt << 8)};
      z = normal01(u, uint64_t(i));
      if (std::abs(z) <= 2.0) break;
    }
    v[size_t(i)] = mean + stddev * z;
  }
  return from_doubles(v, shape, dtype, device);
}

Tensor bernoulli(const Shape& shape, double p, uint64_t seed, DType dtype, Device device) {
  STRATA_CHECK(p >= 0 && p <= 1, "random::bernoulli: probability must be in [0,1], got ", p);
  const int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  Uniform01 u{seed, 4};
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = u(uint64_t(i)) < p ? 1.0 : 0.0;
  return from_doubles(v, shape, dtype, device);
}

Tensor permutation(int64_t n, uint64_t seed) {
  STRATA_CHECK(n >= 0, "random::permutation: n must be >= 0, got ", n);
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  Uniform01 u{seed, 5};
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    const int64_t j = int64_t(u(uint64_t(i)) * double(i + 1));
    std::swap(v[size_t(i)], v[size_t(std::min(j, i))]);
  }
  return Tensor::from_vector(v, Shape{n});
}

}  // namespace strata::random
