// Conv2D: 2-D convolution over NHWC inputs with an HWIO kernel (Keras's Conv2D with
// data_format "channels_last"), plus a per-filter bias.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include <strata/core/op_attrs.h>
#include <strata/train/nn/module.h>

namespace strata::nn {

struct Conv2DOptions {
  std::array<int64_t, 2> strides{1, 1};
  Padding padding = Padding::Valid;  // Same is TensorFlow's SAME (extra pad bottom/right)
  bool use_bias = true;
  // The layer's dtype policy (a mixed_precision::Policy, its name or a DType); by default
  // the global policy when the layer is constructed.
  std::optional<mixed_precision::Policy> dtype{};
  Initializer kernel_initializer = glorot_uniform();
  Initializer bias_initializer = zeros_initializer();
  // Penalties on the weights, listed by the model's losses() (Keras's kernel_regularizer /
  // bias_regularizer); empty: none.
  regularizers::Regularizer kernel_regularizer{};
  regularizers::Regularizer bias_regularizer{};
};

class Conv2DImpl : public Module {
 public:
  Conv2DImpl(int64_t in_channels, int64_t filters, std::array<int64_t, 2> kernel_size,
             Conv2DOptions options = {});
  // x: [N, H, W, in_channels] -> [N, H', W', filters].
  Tensor forward(const Tensor& x) override;

  const Variable& kernel() const { return kernel_; }  // [kh, kw, in_channels, filters]
  const Variable& bias() const { return bias_; }      // [filters]; undefined without bias
  const Conv2DOptions& options() const { return options_; }

 private:
  int64_t in_channels_;
  Conv2DOptions options_;
  Variable kernel_, bias_;
};

class Conv2D : public ModuleHolder<Conv2DImpl> {
 public:
  Conv2D() = default;
  Conv2D(int64_t in_channels, int64_t filters, std::array<int64_t, 2> kernel_size,
         Conv2DOptions options = {});
  // A square kernel.
  Conv2D(int64_t in_channels, int64_t filters, int64_t kernel_size, Conv2DOptions options = {})
      : Conv2D(in_channels, filters, {kernel_size, kernel_size}, std::move(options)) {}
};

}  // namespace strata::nn
