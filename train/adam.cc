#include <strata/train/adam.h>

#include <cmath>

#include <strata/core/ops.h>

namespace strata::optim {

AdamImpl::AdamImpl(std::string name, LearningRate learning_rate, AdamOptions options, bool decoupled)
    : OptimizerImpl(std::move(name), std::move(learning_rate), options.global_clipnorm, options.ema),
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
  AdamAttrs attrs;
  attrs.learning_rate = ctx.learning_rate;
  attrs.beta1 = options_.beta1;
  attrs.beta2 = options_.beta2;
  // Keras's form folds sqrt(1 - beta2^t) into the step size and adds epsilon to the
  // uncorrected sqrt(v); dividing epsilon by the same factor gives the identical update
  // through the one fused kernel (CPU and CUDA alike).
  attrs.epsilon = options_.keras_epsilon
                      ? options_.epsilon / std::sqrt(1.0 - std::pow(options_.beta2, double(ctx.step)))
                      : options_.epsilon;
  attrs.weight_decay = options_.weight_decay;
  attrs.decoupled = decoupled_;
  attrs.step = ctx.step;
  adam_update(param, grad, slots[0], slots[1], attrs);
}

Adam::Adam(LearningRate learning_rate, AdamOptions options)
    : Optimizer(std::make_shared<AdamImpl>("Adam", std::move(learning_rate), options, false)) {}

AdamW::AdamW(LearningRate learning_rate, AdamWOptions options)
    : Optimizer(std::make_shared<AdamImpl>(
          "AdamW", std::move(learning_rate),
          AdamOptions{options.beta1, options.beta2, options.epsilon, options.weight_decay,
                      options.global_clipnorm, options.keras_epsilon, options.ema},
          true)) {}

}  // namespace strata::optim
