// Finite-difference checks of gradients with respect to variables (autograd::gradcheck
// covers plain input tensors; layers read their weights from Variables).
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <strata/autograd/tape.h>
#include <strata/autograd/variable.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>

namespace strata::testing {

struct VariableGradcheck {
  bool ok = true;
  std::string message;
};

// Compares tape gradients of L = sum(fn() * w) (w fixed random weights) with respect to
// each variable against central differences obtained by perturbing the variable in place.
// Run in float64.
inline VariableGradcheck check_variable_gradients(const std::function<Tensor()>& fn,
                                                  const std::vector<Variable>& vars,
                                                  double eps = 1e-6, double atol = 1e-6,
                                                  double rtol = 1e-4) {
  VariableGradcheck result;
  Tensor weights;
  std::vector<Tensor> analytic;
  {
    autograd::GradientTape tape;
    Tensor y = fn();
    weights = random::normal(y.shape(), 11, 0.0, 1.0, y.dtype());
    analytic = tape.gradient(sum(y * weights), vars, {}, autograd::UnconnectedGradients::Zero);
  }
  auto objective = [&] {
    autograd::StopRecording no_tape;
    return sum(fn() * weights).item<double>();
  };
  for (size_t i = 0; i < vars.size(); ++i) {
    Tensor value = vars[i].value();
    const std::vector<double> base = value.to_vector<double>();
    const std::vector<double> got = analytic[i].to_vector<double>();
    for (size_t j = 0; j < base.size(); ++j) {
      auto at = [&](double delta) {
        std::vector<double> v = base;
        v[j] += delta;
        value.copy_(Tensor::from_vector(v, value.shape(), value.dtype()));
        return objective();
      };
      const double numeric = (at(eps) - at(-eps)) / (2 * eps);
      value.copy_(Tensor::from_vector(base, value.shape(), value.dtype()));
      const double err = std::abs(numeric - got[j]);
      if (!(err <= atol + rtol * std::abs(numeric)) && result.ok) {
        result.ok = false;
        std::ostringstream os;
        os << "variable '" << vars[i].name() << "' element " << j << ": analytic " << got[j]
           << " vs numeric " << numeric;
        result.message = os.str();
      }
    }
  }
  return result;
}

}  // namespace strata::testing
