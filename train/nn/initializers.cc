#include <strata/train/nn/initializers.h>

#include <atomic>
#include <cmath>

#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>

namespace strata::nn {

namespace {

std::atomic<uint64_t> g_seed{0};
std::atomic<uint64_t> g_counter{0};

// splitmix64: turns (seed, count) into well-separated Philox keys.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void check_float(DType dtype, const char* name) {
  STRATA_CHECK(is_floating(dtype), "initializer ", name, ": expected a floating dtype, got ",
               dtype);
}

}  // namespace

void set_global_seed(uint64_t seed) {
  g_seed.store(seed);
  g_counter.store(0);
}

uint64_t next_seed() { return mix(mix(g_seed.load()) ^ g_counter.fetch_add(1)); }

std::pair<double, double> compute_fans(const Shape& shape) {
  if (shape.empty()) return {1.0, 1.0};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.size() == 2) return {double(shape[0]), double(shape[1])};
  // Convolution kernels: spatial extents first, then input and output channels.
  double receptive = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= double(shape[i]);
  return {receptive * double(shape[shape.size() - 2]), receptive * double(shape.back())};
}

Initializer glorot_uniform(std::optional<uint64_t> seed) {
  return [seed](const Shape& shape, DType dtype) {
    check_float(dtype, "glorot_uniform");
    const auto [fan_in, fan_out] = compute_fans(shape);
    const double limit = std::sqrt(6.0 / std::max(1.0, fan_in + fan_out));
    return random::uniform(shape, seed ? *seed : next_seed(), -limit, limit, dtype);
  };
}

Initializer he_normal(std::optional<uint64_t> seed) {
  return [seed](const Shape& shape, DType dtype) {
    check_float(dtype, "he_normal");
    const double fan_in = std::max(1.0, compute_fans(shape).first);
    // .87962566103423978 is the stddev of a unit normal truncated to two deviations.
    const double stddev = std::sqrt(2.0 / fan_in) / .87962566103423978;
    return random::truncated_normal(shape, seed ? *seed : next_seed(), 0.0, stddev, dtype);
  };
}

Initializer random_uniform(double low, double high, std::optional<uint64_t> seed) {
  STRATA_CHECK(low <= high, "random_uniform initializer: low ", low, " > high ", high);
  return [=](const Shape& shape, DType dtype) {
    check_float(dtype, "random_uniform");
    return random::uniform(shape, seed ? *seed : next_seed(), low, high, dtype);
  };
}

Initializer zeros_initializer() {
  return [](const Shape& shape, DType dtype) { return zeros(shape, dtype); };
}

Initializer ones_initializer() {
  return [](const Shape& shape, DType dtype) { return ones(shape, dtype); };
}

Initializer constant(double value) {
  return [value](const Shape& shape, DType dtype) { return full(shape, value, dtype); };
}

}  // namespace strata::nn
