// Adam and AdamW with PyTorch's update rules (torch.optim.Adam / AdamW, amsgrad off):
//   AdamW only: p *= 1 - lr * weight_decay             (decoupled decay, applied first)
//   Adam only:  g += weight_decay * p                  (L2 penalty; 0 by default)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// with t the 1-based step. Slots: "m" and "v".
//
// keras_epsilon = true switches to TensorFlow/Keras's form (tf.keras.optimizers.Adam /
// AdamW, whose epsilon is the paper's "epsilon hat", default 1e-7):
//   p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
// which is the form above with eps / sqrt(1 - beta2^t) in place of eps: with the same
// epsilon the two differ by up to a factor 1/sqrt(1 - beta2^t) (~32 at step 1) in
// epsilon's weight. Use it to reproduce a TensorFlow run (bench/compare/tf_trajectory.py).
#pragma once

#include <strata/train/optimizer.h>

namespace strata::optim {

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient
  double global_clipnorm = 0.0;
  bool keras_epsilon = false;  // TensorFlow/Keras's placement of epsilon (above)
  EmaOptions ema = {};           // a moving average of the weights (train/ema.h)
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;  // decoupled, PyTorch's default
  double global_clipnorm = 0.0;
  bool keras_epsilon = false;  // TensorFlow/Keras's placement of epsilon (above)
  EmaOptions ema = {};           // a moving average of the weights (train/ema.h)
};

class AdamImpl : public OptimizerImpl {
 public:
  AdamImpl(std::string name, LearningRate learning_rate, AdamOptions options, bool decoupled);
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  bool elementwise() const override { return true; }
  void update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
              const UpdateContext& ctx) const override;
  const AdamOptions& options() const { return options_; }
  bool decoupled_weight_decay() const { return decoupled_; }

 private:
  AdamOptions options_;
  bool decoupled_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(LearningRate learning_rate = 0.001, AdamOptions options = {});
};

class AdamW : public Optimizer {
 public:
  explicit AdamW(LearningRate learning_rate = 0.001, AdamWOptions options = {});
};

}  // namespace strata::optim
