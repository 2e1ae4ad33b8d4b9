#include "train/nn/dense.h"

#include "core/ops.h"

namespace strata::nn {

DenseImpl::DenseImpl(int64_t in_features, int64_t units, DenseOptions options)
    : Module("dense"), in_features_(in_features), units_(units) {
  STRATA_CHECK(in_features > 0 && units > 0, "nn::Dense: in_features and units must be positive, got ",
               in_features, " and ", units);
  kernel_ = add_weight("kernel", {in_features, units}, options.dtype, options.kernel_initializer);
  if (options.use_bias)
    bias_ = add_weight("bias", {units}, options.dtype, options.bias_initializer);
}

Tensor DenseImpl::forward(const Tensor& x) {
  STRATA_CHECK(x.ndim() >= 1 && x.dim(-1) == in_features_, "nn::Dense: expected input [..., ",
               in_features_, "], got ", shape_str(x.shape()));
  Tensor y;
  if (x.ndim() == 2) {
    y = matmul(x, kernel_.read());
  } else {
    Shape out_shape = x.shape();
    out_shape.back() = units_;
    y = matmul(reshape(x, {-1, in_features_}), kernel_.read()).reshape(out_shape);
  }
  if (bias_.defined()) y = add(y, bias_.read());
  return y;
}

Dense::Dense(int64_t in_features, int64_t units, DenseOptions options)
    : ModuleHolder(std::make_shared<DenseImpl>(in_features, units, std::move(options))) {}

}  // namespace strata::nn
