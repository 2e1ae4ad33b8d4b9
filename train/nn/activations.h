// Activation layers: ReLU, GELU, Tanh, Sigmoid, Softmax (Keras's layers of those names).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <strata/train/nn/module.h>

namespace strata::nn {

// A parameter-free elementwise (or per-axis) function as a layer.
class ActivationImpl : public Module {
 public:
  ActivationImpl(std::string kind, std::function<Tensor(const Tensor&)> fn)
      : Module(std::move(kind)), fn_(std::move(fn)) {}
  Tensor forward(const Tensor& x) override { return fn_(x); }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};

class ReLU : public ModuleHolder<ActivationImpl> {
 public:
  ReLU();
};

class GELU : public ModuleHolder<ActivationImpl> {
 public:
  // approximate: the tanh approximation instead of the exact erf form.
  explicit GELU(bool approximate = false);
};

class Tanh : public ModuleHolder<ActivationImpl> {
 public:
  Tanh();
};

class Sigmoid : public ModuleHolder<ActivationImpl> {
 public:
  Sigmoid();
};

// Computes in float32 when its input is float16/bfloat16 (mixed precision) and returns
// the compute dtype; give an output Softmax the "float32" policy for float32 probabilities,
// as Keras recommends.
class Softmax : public ModuleHolder<ActivationImpl> {
 public:
  explicit Softmax(int64_t axis = -1);
};

}  // namespace strata::nn
