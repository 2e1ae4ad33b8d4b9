#include "train/adam.h"

#include <cmath>

#include "core/ops.h"

namespace strata::optim {

AdamImpl::AdamImpl(std::string name, LearningRate learning_rate, AdamOptions options, bool decoupled)
    : OptimizerImpl(std::move(name), std::move(learning_rate), options.global_clipnorm),
      options_(options),
      decoupled_(decoupled) {
  STRATA_CHECK(options_.beta1 >= 0.0 && options_.beta1 < 1.0, "optim::", this->name(),
               ": beta1 must be in [0, 1), got ", options_.beta1);
  STRATA_CHECK(options_.beta2 >= 0.0 && options_.beta2 < 1.0, "optim::", this->name(),
               ": beta2 must be in [0, 1), got ", options_.beta2);
  STRATA_CHECK(options_.epsilon >= 0.0, "optim::", this->name(), ": epsilon must be >= 0, got ",
               options_.epsilon);
  STRATA_CHECK(options_.weight_decay >= 0.0, "optim::", this->name(),
               ": weight_decay must be >= 0, got ", options_.weight_decay);
}

void AdamImpl::update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                      const UpdateContext& ctx) const {
  const double lr = ctx.learning_rate;
  const double b1 = options_.beta1, b2 = options_.beta2;
  Tensor g = grad;
  if (options_.weight_decay != 0.0) {
    if (decoupled_)
      param.copy_(param * (1.0 - lr * options_.weight_decay));
    else
      g = g + param * options_.weight_decay;
  }
  const Tensor& m = slots[0];
  const Tensor& v = slots[1];
  m.copy_(m * b1 + g * (1.0 - b1));
  v.copy_(v * b2 + g * g * (1.0 - b2));
  const double t = double(ctx.step);
  const double bias_correction1 = 1.0 - std::pow(b1, t);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(b2, t));
  const double step_size = lr / bias_correction1;
  const Tensor denom = sqrt(v) / bias_correction2_sqrt + options_.epsilon;
  param.copy_(param - (m / denom) * step_size);
}

Adam::Adam(LearningRate learning_rate, AdamOptions options)
    : Optimizer(std::make_shared<AdamImpl>("Adam", std::move(learning_rate), options, false)) {}

AdamW::AdamW(LearningRate learning_rate, AdamWOptions options)
    : Optimizer(std::make_shared<AdamImpl>(
          "AdamW", std::move(learning_rate),
          AdamOptions{options.beta1, options.beta2, options.epsilon, options.weight_decay,
                      options.global_clipnorm},
          true)) {}

}  // namespace strata::optim
