#include <strata/train/nn/conv2d.h>

#include <strata/core/ops.h>

namespace strata::nn {

Conv2DImpl::Conv2DImpl(int64_t in_channels, int64_t filters, std::array<int64_t, 2> kernel_size,
                       Conv2DOptions options)
    : Module("conv2d"), in_channels_(in_channels), options_(std::move(options)) {
  STRATA_CHECK(in_channels > 0 && filters > 0 && kernel_size[0] > 0 && kernel_size[1] > 0,
               "nn::Conv2D: in_channels, filters and kernel_size must be positive, got ",
               in_channels, ", ", filters, ", [", kernel_size[0], ",", kernel_size[1], "]");
  STRATA_CHECK(options_.strides[0] > 0 && options_.strides[1] > 0,
               "nn::Conv2D: strides must be positive, got [", options_.strides[0], ",",
               options_.strides[1], "]");
  if (options_.dtype) set_dtype_policy(*options_.dtype);
  kernel_ = add_weight("kernel", {kernel_size[0], kernel_size[1], in_channels, filters},
                       variable_dtype(), options_.kernel_initializer, {}, options_.kernel_regularizer);
  if (options_.use_bias)
    bias_ = add_weight("bias", {filters}, variable_dtype(), options_.bias_initializer, {},
                       options_.bias_regularizer);
}

Tensor Conv2DImpl::forward(const Tensor& input) {
  const Tensor x = autocast(input);
  STRATA_CHECK(x.ndim() == 4 && x.dim(3) == in_channels_,
               "nn::Conv2D: expected an NHWC input [N, H, W, ", in_channels_, "], got ",
               shape_str(x.shape()));
  Tensor y = conv2d(x, read_variable(kernel_), options_.strides, options_.padding);
  if (bias_.defined()) y = add(y, read_variable(bias_));
  return y;
}

Conv2D::Conv2D(int64_t in_channels, int64_t filters, std::array<int64_t, 2> kernel_size,
               Conv2DOptions options)
    : ModuleHolder(std::make_shared<Conv2DImpl>(in_channels, filters, kernel_size,
                                                std::move(options))) {}

}  // namespace strata::nn
