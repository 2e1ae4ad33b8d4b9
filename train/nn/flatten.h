// Flatten: [N, d1, d2, ...] -> [N, d1*d2*...] (Keras's Flatten; the batch axis is kept).
#pragma once

#include <strata/train/nn/module.h>

namespace strata::nn {

class FlattenImpl : public Module {
 public:
  FlattenImpl() : Module("flatten") {}
  Tensor forward(const Tensor& x) override;
};

class Flatten : public ModuleHolder<FlattenImpl> {
 public:
  Flatten() : ModuleHolder(std::make_shared<FlattenImpl>()) {}
};

}  // namespace strata::nn
