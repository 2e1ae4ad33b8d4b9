#include <strata/train/sgd.h>

#include <strata/core/ops.h>

namespace strata::optim {

SGDImpl::SGDImpl(LearningRate learning_rate, SGDOptions options)
    : OptimizerImpl("SGD", std::move(learning_rate), options.global_clipnorm, options.ema), options_(options) {
  STRATA_CHECK(options_.momentum >= 0.0, "optim::SGD: momentum must be >= 0, got ", options_.momentum);
  STRATA_CHECK(options_.weight_decay >= 0.0, "optim::SGD: weight_decay must be >= 0, got ",
               options_.weight_decay);
  STRATA_CHECK(!options_.nesterov || options_.momentum > 0.0,
               "optim::SGD: Nesterov momentum requires momentum > 0");
}

std::vector<std::string> SGDImpl::slot_names() const {
  if (options_.momentum == 0.0) return {};
  return {options_.keras_momentum ? "velocity" : "momentum"};
}

void SGDImpl::update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                     const UpdateContext& ctx) const {
  if (options_.keras_momentum && options_.momentum != 0.0) {
    // Keras's form, from elementwise ops (any device; no fused kernel).
    const Tensor g = options_.weight_decay != 0.0 ? grad + param * options_.weight_decay : grad;
    const Tensor& velocity = slots[0];
    const Tensor step = g * -ctx.learning_rate;
    velocity.copy_(velocity * options_.momentum + step);
    param.copy_(param + (options_.nesterov ? velocity * options_.momentum + step : velocity));
    return;
  }
  SgdAttrs attrs;
  attrs.learning_rate = ctx.learning_rate;
  attrs.momentum = options_.momentum;
  attrs.weight_decay = options_.weight_decay;
  attrs.nesterov = options_.nesterov;
  sgd_update(param, grad, options_.momentum != 0.0 ? slots[0] : Tensor(), attrs);
}

SGD::SGD(LearningRate learning_rate, SGDOptions options)
    : Optimizer(std::make_shared<SGDImpl>(std::move(learning_rate), options)) {}

}  // namespace strata::optim
