#include <strata/train/schedules.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <strata/core/error.h>

namespace strata::optim {

LearningRate::LearningRate(double constant)
    : fn_([constant](int64_t) { return constant; }), is_constant_(true) {
  STRATA_CHECK(std::isfinite(constant) && constant >= 0.0,
               "optim::LearningRate: the learning rate must be finite and >= 0, got ", constant);
}

double LearningRate::operator()(int64_t step) const {
  STRATA_CHECK(step >= 0, "optim::LearningRate: step must be >= 0, got ", step);
  const double lr = fn_(step);
  STRATA_CHECK(std::isfinite(lr) && lr >= 0.0, "optim::LearningRate: the schedule returned ", lr,
               " at step ", step, " (expected a finite rate >= 0)");
  return lr;
}

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<int64_t> boundaries,
                                               std::vector<double> values)
    : boundaries_(std::move(boundaries)), values_(std::move(values)) {
  STRATA_CHECK(values_.size() == boundaries_.size() + 1, "optim::PiecewiseConstantDecay: ",
               values_.size(), " values for ", boundaries_.size(),
               " boundaries (expected one more value than boundaries)");
  for (size_t i = 1; i < boundaries_.size(); ++i)
    STRATA_CHECK(boundaries_[i - 1] < boundaries_[i],
                 "optim::PiecewiseConstantDecay: boundaries must increase strictly, got ",
                 boundaries_[i - 1], " then ", boundaries_[i]);
}

double PiecewiseConstantDecay::operator()(int64_t step) const {
  // The first boundary >= step selects its value; past them all, the last value.
  const auto it = std::lower_bound(boundaries_.begin(), boundaries_.end(), step);
  return values_[size_t(it - boundaries_.begin())];
}

PolynomialDecay::PolynomialDecay(double initial_learning_rate, int64_t decay_steps,
                                 double end_learning_rate, double power, bool cycle)
    : initial_(initial_learning_rate),
      end_(end_learning_rate),
      power_(power),
      decay_steps_(decay_steps),
      cycle_(cycle) {
  STRATA_CHECK(decay_steps > 0, "optim::PolynomialDecay: decay_steps must be positive, got ",
               decay_steps);
}

double PolynomialDecay::operator()(int64_t step) const {
  double horizon = double(decay_steps_);
  double s = double(step);
  if (cycle_) {
    // Keras: the horizon is decay_steps * ceil(step / decay_steps), at least decay_steps.
    const double multiplier = step == 0 ? 1.0 : std::ceil(s / double(decay_steps_));
    horizon *= multiplier;
  } else {
    s = std::min(s, horizon);
  }
  return (initial_ - end_) * std::pow(1.0 - s / horizon, power_) + end_;
}

CosineDecay::CosineDecay(double initial_learning_rate, int64_t decay_steps, double alpha)
    : initial_(initial_learning_rate), alpha_(alpha), decay_steps_(decay_steps) {
  STRATA_CHECK(decay_steps > 0, "optim::CosineDecay: decay_steps must be positive, got ",
               decay_steps);
}

double CosineDecay::operator()(int64_t step) const {
  const double done = std::min(double(step), double(decay_steps_)) / double(decay_steps_);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * done));
  return initial_ * ((1.0 - alpha_) * cosine + alpha_);
}

WarmUp::WarmUp(double initial_learning_rate, LearningRate after, int64_t warmup_steps, double power)
    : initial_(initial_learning_rate),
      power_(power),
      after_(std::move(after)),
      warmup_steps_(warmup_steps) {
  STRATA_CHECK(warmup_steps >= 0, "optim::WarmUp: warmup_steps must be >= 0, got ", warmup_steps);
}

double WarmUp::operator()(int64_t step) const {
  if (step < warmup_steps_)
    return initial_ * std::pow(double(step) / double(warmup_steps_), power_);
  return after_(step);
}

LearningRate polynomial_decay_with_warmup(double init_lr, int64_t num_train_steps,
                                          int64_t num_warmup_steps, double end_learning_rate,
                                          double power) {
  return WarmUp(init_lr, PolynomialDecay(init_lr, num_train_steps, end_learning_rate, power),
                num_warmup_steps);
}

}  // namespace strata::optim
