// Loss helpers with tf.nn's exact semantics for per-replica losses.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace strata::distribute {

// sum(per_example_loss * sample_weight) / global_batch_size. Without a global batch size it
// is the local batch (leading extent) x num_replicas_in_sync. Must be called in replica
// context; rank-0 losses are an error (as in TensorFlow).
Tensor compute_average_loss(const Tensor& per_example_loss, const Tensor& sample_weight = Tensor(),
                            std::optional<int64_t> global_batch_size = std::nullopt);
inline Tensor compute_average_loss(const Tensor& per_example_loss, int64_t global_batch_size) {
  return compute_average_loss(per_example_loss, Tensor(), global_batch_size);
}
// regularization_loss / num_replicas_in_sync.
Tensor scale_regularization_loss(const Tensor& regularization_loss);

}  // namespace strata::distribute
