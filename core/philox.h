// Philox-4x32-10 and the per-element draws built on it, written once for every backend.
//
// Element i of a draw depends only on (seed, sub-stream, i): never on the number of
// threads, the launch shape or the device. Every function here is plain arithmetic on
// integers and doubles (the C math functions, `::`-qualified so that strata::log(Tensor)
// never shadows them) marked STRATA_HOST_DEVICE, so the CUDA kernels compile the same
// code and produce the same bits as the CPU for uniform and bernoulli (normal draws go
// through log/cos/sqrt, whose last bit may differ between libm and CUDA's math library).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::philox {

// Sub-streams of one seed, so that uniform(seed) and normal(seed) are unrelated.
enum SubStream : uint64_t {
  kUniform = 1,
  kNormal = 2,
  kTruncatedNormal = 3,  // + (attempt << 8) for the resampling rounds
  kBernoulli = 4,
  kPermutation = 5,
};

// Four 32-bit words for (key, counter).
STRATA_HOST_DEVICE inline void block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo,
                                     uint32_t out[4]) {
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

// A double in [0, 1) for element i of (seed, stream): block i/2 gives two 53-bit draws.
STRATA_HOST_DEVICE inline double uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  uint32_t r[4];
  block(seed, stream, i >> 1, r);
  const uint32_t* w = (i & 1) ? r + 2 : r;
  const uint64_t bits = (uint64_t(w[0]) << 21) ^ (uint64_t(w[1]) >> 11);
  return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// A standard normal for element i of (seed, stream), by Box-Muller from two uniforms.
STRATA_HOST_DEVICE inline double normal01(uint64_t seed, uint64_t stream, uint64_t i) {
  double u1 = uniform01(seed, stream, 2 * i);
  const double u2 = uniform01(seed, stream, 2 * i + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

// A standard normal within two deviations: element i is resampled on its own sub-streams
// until it lands there, as Keras's truncated-normal initializer does.
STRATA_HOST_DEVICE inline double truncated_normal01(uint64_t seed, uint64_t i) {
  for (uint64_t attempt = 0;; ++attempt) {
    const double z = normal01(seed, kTruncatedNormal + (attempt << 8), i);
    if (::fabs(z) <= 2.0) return z;
  }
}

// Element i of each distribution, in double before rounding to the output dtype.
STRATA_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t i, double low, double high) {
  return low + (high - low) * uniform01(seed, kUniform, i);
}
STRATA_HOST_DEVICE inline double normal(uint64_t seed, uint64_t i, double mean, double stddev) {
  return mean + stddev * normal01(seed, kNormal, i);
}
STRATA_HOST_DEVICE inline double truncated_normal(uint64_t seed, uint64_t i, double mean,
                                                  double stddev) {
  return mean + stddev * truncated_normal01(seed, i);
}
STRATA_HOST_DEVICE inline double bernoulli(uint64_t seed, uint64_t i, double p) {
  return uniform01(seed, kBernoulli, i) < p ? 1.0 : 0.0;
}

}  // namespace strata::philox
