// Gradient checking: compares the tape's gradients with central finite differences.
//
// Run it in float64: with eps ~1e-6 the finite differences are accurate to ~1e-9, so any
// mismatch above the tolerance is a wrong VJP, not noise.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <strata/core/tensor.h>

namespace strata::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 7;  // for the random projection of non-scalar outputs
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the worst mismatch when !ok
  double max_abs_error = 0;
};

// fn maps the inputs to one tensor. Inputs with a floating dtype are checked; others are
// passed through unchanged. A non-scalar output is reduced with fixed random weights so
// every element's gradient is exercised.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace strata::autograd
