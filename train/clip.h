// Gradient clipping by global norm (tf.clip_by_global_norm).
#pragma once

#include <vector>

#include <strata/core/tensor.h>

namespace strata::optim {

struct ClippedGradients {
  std::vector<Tensor> gradients;  // undefined entries stay undefined
  double global_norm = 0;         // of the gradients before clipping
};

// global_norm = sqrt(sum of every element squared, over all defined gradients); each
// gradient is scaled by clip_norm / max(global_norm, clip_norm), so nothing changes when
// the norm is within clip_norm. A non-finite global norm makes every gradient NaN, as in
// TensorFlow. clip_norm must be > 0. Reads the norm to the host once.
ClippedGradients clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm);

// The same clipping with the norm and the scale kept on the gradients' device: no host
// read, so an optimizer step with global_clipnorm never waits for the device. The norm (a
// 0-d float64 tensor) is stored in *global_norm when given.
std::vector<Tensor> clip_gradients_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm,
                                                  Tensor* global_norm = nullptr);

// Each gradient scaled by clip_norm / max(norm, clip_norm) (NaN for a non-finite norm):
// the second half of clip_gradients_by_global_norm, for a norm (0-d float64) computed
// elsewhere — ZeRO-1 adds the replicas' partial sums of squares of their shards.
std::vector<Tensor> scale_gradients_to_norm(const std::vector<Tensor>& gradients, const Tensor& norm,
                                            double clip_norm);

// The sum of every element squared over all defined tensors, accumulated in float64 (a
// 0-d tensor on the first one's device), or undefined when there is no element at all.
Tensor sum_of_squares(const std::vector<Tensor>& tensors);

// sqrt(sum of squares) over all defined tensors, accumulated in float64: as a 0-d float64
// tensor on the first defined tensor's device (the current device when there is none), or
// read to the host.
Tensor global_norm_tensor(const std::vector<Tensor>& tensors);
double global_norm(const std::vector<Tensor>& tensors);

}  // namespace strata::optim
