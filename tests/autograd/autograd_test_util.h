// Helpers shared by the autograd tests: float64 inputs with controlled values and a
// gradcheck wrapper that reports which case failed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <strata/autograd/autograd.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include "tests/test_util.h"

namespace strata::testing {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Uniform float64 values in [lo, hi).
inline Tensor rand64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return random::uniform(shape, seed, lo, hi, kFloat64);
}

// Values with |v| in [lo, hi] and a random sign: keeps kinks (abs, relu) and poles
// (reciprocal, div) far from every finite-difference probe.
inline Tensor away_from_zero64(const Shape& shape, uint64_t seed, double lo = 0.2,
                               double hi = 1.0) {
  Tensor mag = random::uniform(shape, seed, lo, hi, kFloat64);
  Tensor s = random::uniform(shape, seed + 1000, -1.0, 1.0, kFloat64);
  return where(greater(s, scalar_like(s, 0.0)), mag, -mag);
}

// Pairwise distinct values on a grid of spacing `gap` (shuffled), shifted by `shift`: no
// ties for max-type ops, so their gradients are well defined at every probe.
inline Tensor distinct64(const Shape& shape, uint64_t seed, double gap = 0.05,
                         double shift = 0.0) {
  const int64_t n = numel_of(shape);
  Tensor p = cast(random::permutation(n, seed), kFloat64);
  // Centre on an integer multiple of gap so that every value stays on the grid.
  return reshape(p * gap + (shift - double(n / 2) * gap), shape);
}

// Runs gradcheck and records a failure (without stopping the test) naming the case.
inline bool check_gradient(const std::string& what, const TensorFn& fn,
                           const std::vector<Tensor>& inputs,
                           autograd::GradcheckOptions options = {}) {
  autograd::GradcheckResult r = autograd::gradcheck(fn, inputs, options);
  INFO(what << ": " << r.message << " (max |error| " << r.max_abs_error << ")");
  CHECK(r.ok);
  return r.ok;
}

// d/dx of sum(f(x) * w) computed by a tape inside fn, so gradcheck over it checks the
// VJP's own derivative (double backward).
inline Tensor grad_of(const std::function<Tensor(const Tensor&)>& f, const Tensor& x,
                      const Tensor& w) {
  autograd::GradientTape tape;
  tape.watch(x);
  Tensor y = f(x);
  return tape.gradient(sum(y * w), x);
}

// A VariableOptions with a name (and trainability), without spelling every field.
inline autograd::VariableOptions var_options(std::string name, bool trainable = true) {
  autograd::VariableOptions o;
  o.name = std::move(name);
  o.trainable = trainable;
  return o;
}

}  // namespace strata::testing

// REQUIRE_ALLCLOSE that evaluates each argument once (tests/test_util.h's version
// evaluates them twice, which breaks for calls like a non-persistent tape's gradient()).
#define REQUIRE_CLOSE(a, b, ...)                                                      \
  do {                                                                                \
    const ::strata::Tensor got_ = (a);                                                \
    const ::strata::Tensor want_ = (b);                                               \
    INFO("got " << got_ << "\nwant " << want_);                                       \
    REQUIRE(::strata::testing::allclose(got_, want_ __VA_OPT__(, ) __VA_ARGS__));     \
  } while (0)
