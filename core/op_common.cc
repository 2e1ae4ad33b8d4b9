#include <strata/core/op_common.h>

#include <strata/core/checked_math.h>

namespace strata::detail {

void device_mismatch(const char* op, Device op_device, Device input_device) {
  fail(op, ": inputs are on different devices: ", op_device, " and ", input_device,
       " (move them with Tensor::to first; only rank-0 host scalars may mix)");
}

Device op_device(const char* op, const Tensor* const* inputs, size_t n) {
  Device d;
  bool found = false;
  for (size_t i = 0; i < n; ++i) {
    const Tensor* t = inputs[i];
    STRATA_CHECK(t->defined(), op, ": input ", i, " is an undefined tensor");
    if (is_host_scalar(*t)) continue;
    if (!found) {
      d = t->device();
      found = true;
    } else if (!usable_on(*t, d)) {
      device_mismatch(op, d, t->device());
    }
  }
  if (!found && n > 0) d = inputs[0]->device();
  return d;
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
  // Checked here too so that an overflowing output shape (a huge matmul or broadcast) is
  // reported under the op's own name rather than as "empty".
  checked_nbytes(shape, dtype_size(dtype), op_name(op));
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
