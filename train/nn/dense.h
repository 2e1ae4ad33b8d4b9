// Dense: y = x @ kernel + bias over the last axis of x (Keras's Dense, with the number of
// input features given up front so that variables exist as soon as the layer does, inside
// whichever strategy scope is active).
#pragma once

#include <cstdint>
#include <optional>

#include <strata/train/nn/module.h>

namespace strata::nn {

struct DenseOptions {
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

class DenseImpl : public Module {
 public:
  DenseImpl(int64_t in_features, int64_t units, DenseOptions options = {});
  // x: [..., in_features] -> [..., units].
  Tensor forward(const Tensor& x) override;

  int64_t in_features() const { return in_features_; }
  int64_t units() const { return units_; }
  const Variable& kernel() const { return kernel_; }  // [in_features, units]
  const Variable& bias() const { return bias_; }      // [units]; undefined without bias

 private:
  int64_t in_features_, units_;
  Variable kernel_, bias_;
};

class Dense : public ModuleHolder<DenseImpl> {
 public:
  Dense() = default;
  Dense(int64_t in_features, int64_t units, DenseOptions options = {});
};

}  // namespace strata::nn
