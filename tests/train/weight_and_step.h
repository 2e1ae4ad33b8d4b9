// A weight and a step counter in one Checkpoint, set to a step's values by at(s): the
// smallest state whose checkpoints say which step they hold (the checkpoint-manager tests).
#pragma once

#include <strata/autograd/variable.h>
#include <strata/core/ops.h>
#include <strata/train/checkpoint.h>

namespace strata::testing {

struct WeightAndStep {
  explicit WeightAndStep(int64_t size = 3) : w(zeros({size})) {}
  Variable w;
  Variable step{Tensor::scalar(0, kInt64), [] {
                  autograd::VariableOptions o;
                  o.name = "step";
                  o.trainable = false;
                  return o;
                }()};
  train::Checkpoint ckpt{{"w", w}, {"step", step}};
  // w = s everywhere, step = s.
  void at(int64_t s) {
    step.assign(Tensor::scalar(double(s), kInt64));
    w.assign(full(w.shape(), double(s)));
  }
};

}  // namespace strata::testing
