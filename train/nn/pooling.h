// MaxPool2D and AvgPool2D over NHWC inputs (Keras's MaxPooling2D / AveragePooling2D).
// Strides default to the pool size, padding to VALID.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include <strata/core/op_attrs.h>
#include <strata/train/nn/module.h>

namespace strata::nn {

struct Pool2DOptions {
  std::optional<std::array<int64_t, 2>> strides;  // default: the pool size
  Padding padding = Padding::Valid;
};

class Pool2DImpl : public Module {
 public:
  enum class Mode { Max, Average };
  Pool2DImpl(Mode mode, std::array<int64_t, 2> pool_size, Pool2DOptions options);
  Tensor forward(const Tensor& x) override;

 private:
  Mode mode_;
  std::array<int64_t, 2> pool_size_, strides_;
  Padding padding_;
};

class MaxPool2D : public ModuleHolder<Pool2DImpl> {
 public:
  explicit MaxPool2D(std::array<int64_t, 2> pool_size = {2, 2}, Pool2DOptions options = {});
  explicit MaxPool2D(int64_t pool_size, Pool2DOptions options = {})
      : MaxPool2D({pool_size, pool_size}, options) {}
};

class AvgPool2D : public ModuleHolder<Pool2DImpl> {
 public:
  explicit AvgPool2D(std::array<int64_t, 2> pool_size = {2, 2}, Pool2DOptions options = {});
  explicit AvgPool2D(int64_t pool_size, Pool2DOptions options = {})
      : AvgPool2D({pool_size, pool_size}, options) {}
};

}  // namespace strata::nn
