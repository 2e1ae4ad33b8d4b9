#include "train/optim_fused.h"

#include "core/thread_pool.h"

namespace strata::optim::detail {

namespace {

bool plain_cpu(const Tensor& t, DType dtype, const Shape& shape) {
  return t.defined() && t.device().type == DeviceType::CPU && t.dtype() == dtype && t.shape() == shape &&
         t.is_contiguous();
}

}  // namespace

FusedOperands fused_operands(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots) {
  FusedOperands f;
  const DType dt = param.dtype();
  if (dt != kFloat32 && dt != kFloat64) return f;
  if (!plain_cpu(param, dt, param.shape())) return f;
  if (!grad.defined() || grad.device().type != DeviceType::CPU || grad.dtype() != dt ||
      grad.shape() != param.shape()) {
    return f;
  }
  for (const Tensor& s : slots) {
    if (!plain_cpu(s, dt, param.shape()) || s.shares_storage(param)) return f;
  }
  // A gradient that is a broadcast view (the gradient of a sum) or that shares memory with
  // what the loop writes is read from a contiguous copy.
  bool aliases = grad.shares_storage(param);
  for (const Tensor& s : slots) aliases = aliases || grad.shares_storage(s);
  f.grad = aliases ? grad.clone() : grad.contiguous();
  f.ok = true;
  return f;
}

void fused_for(int64_t n, double ns_per_element, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for(n, ns_per_element, fn);
}

}  // namespace strata::optim::detail
