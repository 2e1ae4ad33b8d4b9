// Gradient clipping by global norm (tf.clip_by_global_norm).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace strata::optim {

struct ClippedGradients {
  std::vector<Tensor> gradients;  // undefined entries stay undefined
  double global_norm = 0;         // of the gradients before clipping
};

// global_norm = sqrt(sum of every element squared, over all defined gradients); each
// gradient is scaled by clip_norm / max(global_norm, clip_norm), so nothing changes when
// the norm is within clip_norm. A non-finite global norm makes every gradient NaN, as in
// TensorFlow. clip_norm must be > 0.
ClippedGradients clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm);

// sqrt(sum of squares) over all defined tensors, accumulated in float64.
double global_norm(const std::vector<Tensor>& tensors);

}  // namespace strata::optim
