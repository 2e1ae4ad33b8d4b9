// Learning rates: a constant or a schedule of the optimizer's step (strata::optim), with
// Keras's schedule semantics. A schedule is evaluated at the optimizer's `iterations`
// before the update (0 for the first step), as Keras does.
//
//   optim::Adam opt(1e-3);                                           // constant
//   optim::SGD sgd(optim::PiecewiseConstantDecay({1000, 2000}, {0.1, 0.01, 0.001}));
//   optim::AdamW bert(optim::polynomial_decay_with_warmup(5e-5, 10000, 1000));
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace strata::optim {

// A learning rate: a constant, or any callable double(int64_t step).
class LearningRate {
 public:
  LearningRate(double constant);  // NOLINT: implicit, so optimizers take plain numbers
  template <typename F>
    requires(std::is_invocable_r_v<double, const F&, int64_t> && !std::is_arithmetic_v<F> &&
             !std::is_same_v<std::remove_cvref_t<F>, LearningRate>)
  LearningRate(F schedule)  // NOLINT
      : fn_([s = std::move(schedule)](int64_t step) { return double(s(step)); }) {}

  // The rate at `step` (>= 0); throws strata::Error when the schedule returns a negative or
  // non-finite rate.
  double operator()(int64_t step) const;
  bool is_constant() const { return is_constant_; }

 private:
  std::function<double(int64_t)> fn_;
  bool is_constant_ = false;
};

// values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <=
// boundaries[i], values.back() after the last boundary (Keras's PiecewiseConstantDecay).
class PiecewiseConstantDecay {
 public:
  PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<double> values);
  double operator()(int64_t step) const;

 private:
  std::vector<int64_t> boundaries_;
  std::vector<double> values_;
};

// (initial - end) * (1 - min(step, decay_steps) / decay_steps)^power + end; with cycle the
// horizon grows to the next multiple of decay_steps past step (Keras's PolynomialDecay).
class PolynomialDecay {
 public:
  PolynomialDecay(double initial_learning_rate, int64_t decay_steps,
                  double end_learning_rate = 0.0001, double power = 1.0, bool cycle = false);
  double operator()(int64_t step) const;

 private:
  double initial_, end_, power_;
  int64_t decay_steps_;
  bool cycle_;
};

// initial * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps)) + alpha)
// (Keras's CosineDecay).
class CosineDecay {
 public:
  CosineDecay(double initial_learning_rate, int64_t decay_steps, double alpha = 0.0);
  double operator()(int64_t step) const;

 private:
  double initial_, alpha_;
  int64_t decay_steps_;
};

// Linear (power 1) warmup from 0 to initial_learning_rate over warmup_steps, then
// `after(step)` evaluated at the global step — the WarmUp of TensorFlow's BERT
// fine-tuning code (official/nlp/optimization.py).
class WarmUp {
 public:
  WarmUp(double initial_learning_rate, LearningRate after, int64_t warmup_steps,
         double power = 1.0);
  double operator()(int64_t step) const;

 private:
  double initial_, power_;
  LearningRate after_;
  int64_t warmup_steps_;
};

// BERT's schedule: WarmUp over num_warmup_steps, then PolynomialDecay(init_lr,
// num_train_steps, end_learning_rate, power) of the global step.
LearningRate polynomial_decay_with_warmup(double init_lr, int64_t num_train_steps,
                                          int64_t num_warmup_steps, double end_learning_rate = 0.0,
                                          double power = 1.0);

}  // namespace strata::optim
