#include "train/sgd.h"

#include "core/ops.h"

namespace strata::optim {

SGDImpl::SGDImpl(LearningRate learning_rate, SGDOptions options)
    : OptimizerImpl("SGD", std::move(learning_rate), options.global_clipnorm), options_(options) {
  STRATA_CHECK(options_.momentum >= 0.0, "optim::SGD: momentum must be >= 0, got ", options_.momentum);
  STRATA_CHECK(options_.weight_decay >= 0.0, "optim::SGD: weight_decay must be >= 0, got ",
               options_.weight_decay);
  STRATA_CHECK(!options_.nesterov || options_.momentum > 0.0,
               "optim::SGD: Nesterov momentum requires momentum > 0");
}

std::vector<std::string> SGDImpl::slot_names() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum"};
}

void SGDImpl::update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                     const UpdateContext& ctx) const {
  Tensor d = grad;
  if (options_.weight_decay != 0.0) d = d + param * options_.weight_decay;
  if (options_.momentum != 0.0) {
    const Tensor& buf = slots[0];
    buf.copy_(buf * options_.momentum + d);
    d = options_.nesterov ? d + buf * options_.momentum : buf;
  }
  param.copy_(param - d * ctx.learning_rate);
}

SGD::SGD(LearningRate learning_rate, SGDOptions options)
    : Optimizer(std::make_shared<SGDImpl>(std::move(learning_rate), options)) {}

}  // namespace strata::optim
