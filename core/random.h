// Counter-based random numbers (Philox-4x32-10): element i of a draw depends only on
// (seed, i), never on the number of threads, so results are reproducible everywhere.
#pragma once

#include <concepts>
#include <cstdint>

#include <strata/core/tensor.h>

namespace strata::random {

// A seed. Any integer converts to it implicitly; a floating-point number does not, and a
// Seed converts to nothing, so a call can never read a bound as the seed or the seed as a
// bound: uniform(shape, 0.0f, 1.0f, seed) is tf.random.uniform's order (below), and
// uniform(shape, seed, 0.0, 1.0) tf.random.stateless_uniform's; nothing else compiles.
// (With integer bounds, uniform(shape, 1, 0, 10), both orders fit and the call is
// ambiguous: write the bounds as floating-point numbers.)
class Seed {
 public:
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  constexpr Seed(T value) : value_(static_cast<uint64_t>(value)) {}  // NOLINT(google-explicit-constructor)
  constexpr uint64_t value() const { return value_; }

 private:
  uint64_t value_;
};

// Seed first (tf.random.stateless_* order): element i depends on (seed, i) only.
Tensor uniform(const Shape& shape, Seed seed, double low = 0.0, double high = 1.0,
               DType dtype = kFloat32, Device device = current_device());
Tensor normal(const Shape& shape, Seed seed, double mean = 0.0, double stddev = 1.0,
              DType dtype = kFloat32, Device device = current_device());
// Normal resampled until within two standard deviations, as Keras's initializers do.
Tensor truncated_normal(const Shape& shape, Seed seed, double mean = 0.0,
                        double stddev = 1.0, DType dtype = kFloat32, Device device = current_device());

// tf.random's order: (shape, minval, maxval, seed) / (shape, mean, stddev, seed); the same
// draws as the seed-first forms. The seed is required (strata has no global generator
// state: a draw is reproducible from its arguments alone).
inline Tensor uniform(const Shape& shape, double minval, double maxval, Seed seed,
                      DType dtype = kFloat32, Device device = current_device()) {
  return uniform(shape, seed, minval, maxval, dtype, device);
}
inline Tensor normal(const Shape& shape, double mean, double stddev, Seed seed,
                     DType dtype = kFloat32, Device device = current_device()) {
  return normal(shape, seed, mean, stddev, dtype, device);
}
inline Tensor truncated_normal(const Shape& shape, double mean, double stddev, Seed seed,
                               DType dtype = kFloat32, Device device = current_device()) {
  return truncated_normal(shape, seed, mean, stddev, dtype, device);
}

// 1 with probability p, else 0, in dtype.
Tensor bernoulli(const Shape& shape, double p, Seed seed, DType dtype = kFloat32,
                 Device device = current_device());
// A random permutation of [0, n) as int64, on the current device (drawn on the host:
// Fisher-Yates is sequential).
Tensor permutation(int64_t n, Seed seed);

// The raw generator: four 32-bit words for (key, counter).
struct Philox {
  static void block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]);
};

}  // namespace strata::random
