#include <strata/train/nn/activations.h>

#include <strata/core/ops.h>

namespace strata::nn {

ReLU::ReLU()
    : ModuleHolder(std::make_shared<ActivationImpl>("re_lu", [](const Tensor& x) { return relu(x); })) {}

GELU::GELU(bool approximate)
    : ModuleHolder(std::make_shared<ActivationImpl>(
          "gelu", [approximate](const Tensor& x) { return gelu(x, approximate); })) {}

Tanh::Tanh()
    : ModuleHolder(std::make_shared<ActivationImpl>("tanh", [](const Tensor& x) { return tanh(x); })) {}

Sigmoid::Sigmoid()
    : ModuleHolder(
          std::make_shared<ActivationImpl>("sigmoid", [](const Tensor& x) { return sigmoid(x); })) {}

Softmax::Softmax(int64_t axis)
    : ModuleHolder(std::make_shared<ActivationImpl>("softmax", [axis](const Tensor& x) {
        // In float32 under a half compute dtype (mixed precision), cast back after.
        if (!is_half(x.dtype())) return softmax(x, axis);
        return cast(softmax(cast(x, kFloat32), axis), x.dtype());
      })) {}

}  // namespace strata::nn
