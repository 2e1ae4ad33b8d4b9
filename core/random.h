// Counter-based random numbers (Philox-4x32-10): element i of a draw depends only on
// (seed, i), never on the number of threads, so results are reproducible everywhere.
#pragma once

#include <cstdint>

#include <strata/core/tensor.h>

namespace strata::random {

Tensor uniform(const Shape& shape, uint64_t seed, double low = 0.0, double high = 1.0,
               DType dtype = kFloat32, Device device = current_device());
Tensor normal(const Shape& shape, uint64_t seed, double mean = 0.0, double stddev = 1.0,
              DType dtype = kFloat32, Device device = current_device());
// Normal resampled until within two standard deviations, as Keras's initializers do.
Tensor truncated_normal(const Shape& shape, uint64_t seed, double mean = 0.0,
                        double stddev = 1.0, DType dtype = kFloat32, Device device = current_device());
// 1 with probability p, else 0, in dtype.
Tensor bernoulli(const Shape& shape, double p, uint64_t seed, DType dtype = kFloat32,
                 Device device = current_device());
// A random permutation of [0, n) as int64, on the current device (drawn on the host:
// Fisher-Yates is sequential).
Tensor permutation(int64_t n, uint64_t seed);

// The raw generator: four 32-bit words for (key, counter).
struct Philox {
  static void block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]);
};

}  // namespace strata::random
