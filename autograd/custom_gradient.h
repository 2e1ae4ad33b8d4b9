// custom_gradient: an op with a user-defined gradient, as tf.custom_gradient.
//
//   Tensor y = autograd::custom_gradient({x}, [](const std::vector<Tensor>& xs) {
//     Tensor out = strata::log(1.0 + strata::exp(xs[0]));
//     auto vjp = [=](const Tensor& g) { return std::vector<Tensor>{g * strata::sigmoid(xs[0])}; };
//     return autograd::CustomResult{out, vjp};
//   });
//
// The forward function runs with recording paused, so only the custom node is taped; the
// VJP runs under any outer tapes, so it may itself be differentiated.
#pragma once

#include <functional>
#include <vector>

#include <strata/core/tensor.h>

namespace strata::autograd {

using CustomVjp = std::function<std::vector<Tensor>(const Tensor& grad)>;

struct CustomResult {
  Tensor output;
  CustomVjp vjp;
};

Tensor custom_gradient(const std::vector<Tensor>& inputs,
                       const std::function<CustomResult(const std::vector<Tensor>&)>& fn);

}  // namespace strata::autograd
