#include "train/sgd.h"

#include "core/ops.h"
#include "train/optim_fused.h"

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

namespace {

// The update below as one pass (train/optim_fused.h); scalars rounded to T as the ops do.
template <typename T>
void sgd_fused(const Tensor& param, const Tensor& grad, const Tensor* buf, const SGDOptions& o, double lr) {
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  T* b = buf ? buf->data<T>() : nullptr;
  const T wd = T(o.weight_decay), mom = T(o.momentum), rate = T(lr);
  const bool decay = o.weight_decay != 0.0, nesterov = o.nesterov;
  detail::fused_for(param.numel(), 1.0, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T d = g[i];
      if (decay) d = d + p[i] * wd;
      if (b) {
        b[i] = b[i] * mom + d;
        d = nesterov ? d + b[i] * mom : b[i];
      }
      p[i] = p[i] - d * rate;
    }
  });
}

}  // namespace

void SGDImpl::update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                     const UpdateContext& ctx) const {
  const bool momentum = options_.momentum != 0.0;
  if (auto f = detail::fused_operands(param, grad, momentum ? slots.first(1) : slots.first(0)); f.ok) {
    const Tensor* buf = momentum ? &slots[0] : nullptr;
    if (param.dtype() == kFloat32) {
      sgd_fused<float>(param, f.grad, buf, options_, ctx.learning_rate);
    } else {
      sgd_fused<double>(param, f.grad, buf, options_, ctx.learning_rate);
    }
    return;
  }
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
