// Seeded variable initializers, as in Keras (glorot_uniform is the default kernel
// initializer, zeros the default bias initializer).
//
// An Initializer maps (shape, dtype) to a fresh tensor. Fans follow Keras's
// _compute_fans: a [in, out] kernel has fan_in = in, fan_out = out; a convolution kernel
// [kh, kw, in, out] (HWIO) multiplies both by kh*kw; a 1-D shape uses its extent for both.
//
// Random initializers take an explicit seed. Without one they draw the next seed from a
// process-wide counter started by set_global_seed() (0 by default), so a program that
// builds the same layers in the same order gets the same values on every run and every
// worker.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

#include <strata/core/tensor.h>

namespace strata::nn {

using Initializer = std::function<Tensor(const Shape& shape, DType dtype)>;

// Restarts the counter that unseeded initializers and Dropout layers draw seeds from.
void set_global_seed(uint64_t seed);
// The next seed of that counter (a well-mixed function of the global seed and a count).
uint64_t next_seed();

// (fan_in, fan_out) of a kernel shape, as Keras computes them.
std::pair<double, double> compute_fans(const Shape& shape);

// Uniform(-limit, limit) with limit = sqrt(6 / (fan_in + fan_out)).
Initializer glorot_uniform(std::optional<uint64_t> seed = std::nullopt);
// Truncated normal (within two standard deviations) with stddev sqrt(2 / fan_in) / .8796,
// Keras's VarianceScaling(2, "fan_in", "truncated_normal").
Initializer he_normal(std::optional<uint64_t> seed = std::nullopt);
// Uniform(low, high) (Keras's RandomUniform; Embedding's default is (-0.05, 0.05)).
Initializer random_uniform(double low, double high, std::optional<uint64_t> seed = std::nullopt);
Initializer zeros_initializer();
Initializer ones_initializer();
Initializer constant(double value);

}  // namespace strata::nn
