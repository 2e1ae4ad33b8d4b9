#include <strata/train/nn/dense.h>

#include <strata/core/ops.h>

namespace strata::nn {

DenseImpl::DenseImpl(int64_t in_features, int64_t units, DenseOptions options)
    : Module("dense"), in_features_(in_features), units_(units) {
  STRATA_CHECK(in_features > 0 && units > 0, "nn::Dense: in_features and units must be positive, got ",
               in_features, " and ", units);
  if (options.dtype) set_dtype_policy(*options.dtype);
  kernel_ = add_weight("kernel", {in_features, units}, variable_dtype(), options.kernel_initializer, {},
                       options.kernel_regularizer);
  if (options.use_bias)
    bias_ = add_weight("bias", {units}, variable_dtype(), options.bias_initializer, {},
                       options.bias_regularizer);
}

Tensor DenseImpl::forward(const Tensor& input) {
  const Tensor x = autocast(input);
  STRATA_CHECK(x.ndim() >= 1 && x.dim(-1) == in_features_, "nn::Dense: expected input [..., ",
               in_features_, "], got ", shape_str(x.shape()));
  Tensor y;
  if (x.ndim() == 2) {
    y = matmul(x, read_variable(kernel_));
  } else {
    Shape out_shape = x.shape();
    out_shape.back() = units_;
    y = matmul(reshape(x, {-1, in_features_}), read_variable(kernel_)).reshape(out_shape);
  }
  if (bias_.defined()) y = add(y, read_variable(bias_));
  return y;
}

Dense::Dense(int64_t in_features, int64_t units, DenseOptions options)
    : ModuleHolder(std::make_shared<DenseImpl>(in_features, units, std::move(options))) {}

}  // namespace strata::nn
