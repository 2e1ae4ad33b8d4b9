// Adam / AdamW with keras_epsilon: TensorFlow/Keras's update rule (epsilon added to the
// uncorrected sqrt(v), the bias correction of v folded into the step size), by hand in
// double, next to the default (PyTorch) placement, which must differ from it.
#include <cmath>
#include <vector>

#include <strata/autograd/autograd.h>
#include <strata/train/adam.h>
#include "tests/test_util.h"

using namespace strata;

namespace {

Variable keras_eps_var(double value) {
  autograd::VariableOptions o;
  o.name = "w";
  return Variable(Tensor::from_vector(std::vector<double>{value}, {1}, kFloat64), o);
}

// keras/src/optimizers/adam.py (and adamw.py, whose decay comes first), step by step.
std::vector<double> keras_adam_steps(double p, const std::vector<double>& grads, double lr, double eps,
                                     double decoupled_wd) {
  const double b1 = 0.9, b2 = 0.999;
  double m = 0, v = 0;
  std::vector<double> out;
  for (size_t i = 0; i < grads.size(); ++i) {
    const double t = double(i + 1), g = grads[i];
    p -= p * lr * decoupled_wd;
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    m += (g - m) * (1 - b1);
    v += (g * g - v) * (1 - b2);
    p -= alpha * m / (std::sqrt(v) + eps);
    out.push_back(p);
  }
  return out;
}

}  // namespace

TEST_CASE("Adam keras_epsilon follows Keras's update, the default follows PyTorch's", "[train][optimizers]") {
  // A large epsilon against small gradients makes the two placements differ by percents.
  const double lr = 0.01, eps = 1e-3, p0 = 0.5;
  const std::vector<double> grads = {2e-3, -1e-3, 5e-4, 3e-3};
  const std::vector<double> want = keras_adam_steps(p0, grads, lr, eps, 0.0);

  Variable keras = keras_eps_var(p0), torch_form = keras_eps_var(p0);
  optim::Adam keras_opt(lr, {.epsilon = eps, .keras_epsilon = true});
  optim::Adam torch_opt(lr, {.epsilon = eps});
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor g = Tensor::from_vector(std::vector<double>{grads[i]}, {1}, kFloat64);
    keras_opt.apply_gradients({g}, {keras});
    torch_opt.apply_gradients({g}, {torch_form});
    INFO("step " << i + 1);
    CHECK(keras.value().item<double>() == Approx(want[i]).epsilon(1e-13));
    // The default's steps are smaller: its epsilon weighs 1/sqrt(1 - beta2^t) times more.
    CHECK(std::abs(torch_form.value().item<double>() - want[i]) > 1e-3 * std::abs(want[i] - p0));
  }
}

TEST_CASE("AdamW keras_epsilon: decoupled decay, then Keras's update", "[train][optimizers]") {
  const double lr = 0.01, eps = 1e-7, p0 = -0.75, wd = 0.004;  // Keras's defaults for eps and wd
  const std::vector<double> grads = {0.3, -0.2, 0.1};
  const std::vector<double> want = keras_adam_steps(p0, grads, lr, eps, wd);
  Variable w = keras_eps_var(p0);
  optim::AdamW opt(lr, {.epsilon = eps, .weight_decay = wd, .keras_epsilon = true});
  for (size_t i = 0; i < grads.size(); ++i) {
    opt.apply_gradients({Tensor::from_vector(std::vector<double>{grads[i]}, {1}, kFloat64)}, {w});
    CHECK(w.value().item<double>() == Approx(want[i]).epsilon(1e-13));
  }
}
