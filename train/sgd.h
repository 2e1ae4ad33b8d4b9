// SGD with momentum, Nesterov momentum and (L2) weight decay — PyTorch's torch.optim.SGD
// update rule with dampening 0:
//   g += weight_decay * p
//   b = momentum * b + g            (b starts at 0, so b = g on the first step)
//   p -= lr * (nesterov ? g + momentum * b : b)     (p -= lr * g without momentum)
// Slot: "momentum" (b).
//
// keras_momentum = true switches to TensorFlow/Keras's form (tf.keras.optimizers.SGD),
// which keeps the velocity with the learning rate folded in:
//   v = momentum * v - lr * g                       (after the weight decay above)
//   p += nesterov ? momentum * v - lr * g : v
// With a constant learning rate the two forms give the same steps (v = -lr * b); when a
// schedule changes the rate they differ (Keras's velocity keeps the old rates' steps).
// Its slot is named "velocity", so a checkpoint of one form is not read as the other.
#pragma once

#include <strata/train/optimizer.h>

namespace strata::optim {

struct SGDOptions {
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double global_clipnorm = 0.0;  // 0: no clipping
  bool keras_momentum = false;   // TensorFlow/Keras's velocity form (above)
  EmaOptions ema = {};           // a moving average of the weights (train/ema.h)
};

class SGDImpl : public OptimizerImpl {
 public:
  SGDImpl(LearningRate learning_rate, SGDOptions options);
  bool elementwise() const override { return true; }
  std::vector<std::string> slot_names() const override;
  void update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
              const UpdateContext& ctx) const override;
  const SGDOptions& options() const { return options_; }

 private:
  SGDOptions options_;
};

class SGD : public Optimizer {
 public:
  explicit SGD(LearningRate learning_rate = 0.01, SGDOptions options = {});
};

}  // namespace strata::optim
