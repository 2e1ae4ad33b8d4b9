#include "core/op_common.h"

namespace strata::detail {

Device op_device(const char* op, const Tensor* const* inputs, size_t n) {
  Device d;
  bool found = false;
  for (size_t i = 0; i < n; ++i) {
    const Tensor* t = inputs[i];
    STRATA_CHECK(t->defined(), op, ": input ", i, " is an undefined tensor");
    if (t->ndim() == 0 && t->device().is_cpu()) continue;
    if (!found) {
      d = t->device();
      found = true;
    } else if (!same_memory(d, t->device())) {
      fail(op, ": inputs are on different devices: ", d, " and ", t->device(),
           " (move them with Tensor::to first)");
    }
  }
  if (!found && n > 0) d = inputs[0]->device();
  return d;
}

Tensor on_device(const Tensor& t, Device device) {
  return same_memory(t.device(), device) ? t : t.to(device);
}

void require_float(const char* op, const Tensor& t) {
  STRATA_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor, got ",
               t.dtype(), " with shape ", shape_str(t.shape()));
}

void require_defined(const char* op, const Tensor& t) {
  STRATA_CHECK(t.defined(), op, ": undefined input tensor");
}

Tensor compute1(OpId op, const OpAttrs& attrs, std::initializer_list<Tensor> in,
                const Shape& shape, DType dtype, Device device) {
  const Tensor out[1] = {Tensor::empty(shape, dtype, device)};
  compute(op, attrs, std::span<const Tensor>(in.begin(), in.size()), out);
  return out[0];
}

Tensor make_view(OpId op, const OpAttrs& attrs, const Tensor& x, Shape shape, Strides strides,
                 int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = x.dtype();
  impl->device = x.device();
  impl->id = next_tensor_id();
  const Tensor out[1] = {Tensor(std::move(impl))};
  const Tensor in[1] = {x};
  record_op(op, attrs, in, out);
  return out[0];
}

}  // namespace strata::detail
