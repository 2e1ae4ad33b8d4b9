#include <strata/autograd/gradient_registry.h>

#include <array>
#include <mutex>

#include <strata/core/ops.h>

namespace strata::autograd {

void register_elementwise_gradients();
void register_reduce_shape_gradients();
void register_nn_gradients();
void register_optimizer_gradients();

namespace {
std::array<GradientDef, kNumOps>& table() {
  static std::array<GradientDef, kNumOps> t{};
  return t;
}
std::array<bool, kNumOps>& present() {
  static std::array<bool, kNumOps> p{};
  return p;
}
}  // namespace

void ensure_gradients_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_gradients();
    register_reduce_shape_gradients();
    register_nn_gradients();
    register_optimizer_gradients();
  });
}

void register_gradient(OpId op, GradientDef def) {
  table()[size_t(op)] = def;
  present()[size_t(op)] = true;
}

void mark_not_differentiable(OpId op) {
  GradientDef def;
  def.differentiable = false;
  def.needs_inputs = false;
  register_gradient(op, def);
}

const GradientDef* find_gradient(OpId op) {
  ensure_gradients_registered();
  return present()[size_t(op)] ? &table()[size_t(op)] : nullptr;
}

Tensor unbroadcast(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.ndim() - int64_t(shape.size());
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < grad.ndim(); ++i) {
    if (i < lead || (shape[size_t(i - lead)] == 1 && grad.shape()[size_t(i)] != 1)) axes.push_back(i);
  }
  Tensor g = axes.empty() ? grad : sum(grad, axes, /*keepdims=*/true);
  return reshape(g, shape);
}

}  // namespace strata::autograd
