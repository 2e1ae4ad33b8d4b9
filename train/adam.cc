#include "train/adam.h"

#include <cmath>

#include "core/ops.h"
#include "train/optim_fused.h"

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

namespace {

struct AdamScalars {
  double decay_factor;  // decoupled: p *= 1 - lr * wd
  double weight_decay;  // coupled: g += p * wd
  double b1, one_minus_b1, b2, one_minus_b2, bias_correction2_sqrt, epsilon, step_size;
  bool decoupled, decay;
};

// The update below as one pass (train/optim_fused.h), each scalar rounded to T as the ops
// round it, in the same order of operations.
template <typename T>
void adam_fused(const Tensor& param, const Tensor& grad, const Tensor& m_slot, const Tensor& v_slot,
                const AdamScalars& s) {
  T* p = param.data<T>();
  const T* gp = grad.data<T>();
  T* m = m_slot.data<T>();
  T* v = v_slot.data<T>();
  const T decay_factor = T(s.decay_factor), wd = T(s.weight_decay), b1 = T(s.b1), c1 = T(s.one_minus_b1),
          b2 = T(s.b2), c2 = T(s.one_minus_b2), bc2 = T(s.bias_correction2_sqrt), eps = T(s.epsilon),
          step = T(s.step_size);
  const bool decoupled = s.decoupled, decay = s.decay;
  detail::fused_for(param.numel(), 2.0, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T g = gp[i];
      if (decay) {
        if (decoupled) {
          p[i] = p[i] * decay_factor;
        } else {
          g = g + p[i] * wd;
        }
      }
      m[i] = m[i] * b1 + g * c1;
      v[i] = v[i] * b2 + g * g * c2;
      const T denom = std::sqrt(v[i]) / bc2 + eps;
      p[i] = p[i] - (m[i] / denom) * step;
    }
  });
}

}  // namespace

void AdamImpl::update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                      const UpdateContext& ctx) const {
  const double lr = ctx.learning_rate;
  const double b1 = options_.beta1, b2 = options_.beta2;
  if (auto f = detail::fused_operands(param, grad, slots.first(2)); f.ok) {
    const double t = double(ctx.step);
    AdamScalars s;
    s.decay_factor = 1.0 - lr * options_.weight_decay;
    s.weight_decay = options_.weight_decay;
    s.b1 = b1, s.one_minus_b1 = 1.0 - b1, s.b2 = b2, s.one_minus_b2 = 1.0 - b2;
    s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(b2, t));
    s.epsilon = options_.epsilon;
    s.step_size = lr / (1.0 - std::pow(b1, t));
    s.decoupled = decoupled_;
    s.decay = options_.weight_decay != 0.0;
    if (param.dtype() == kFloat32) {
      adam_fused<float>(param, f.grad, slots[0], slots[1], s);
    } else {
      adam_fused<double>(param, f.grad, slots[0], slots[1], s);
    }
    return;
  }
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
