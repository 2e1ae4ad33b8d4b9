// Loss helpers with tf.nn's exact semantics for per-replica losses
// (tf.nn.compute_average_loss, tf.nn.scale_regularization_loss).
#pragma once

#include <optional>
#include <vector>

#include <strata/core/tensor.h>

namespace strata::distribute {

// sum(per_example_loss * sample_weight) / global_batch_size, in the loss's dtype.
//  - per_example_loss must have rank >= 1 (a rank-0 loss is an error, as in TensorFlow);
//  - sample_weight (optional) broadcasts to the loss: rank-0, the loss's shape, one more
//    trailing axis of extent 1, or one axis less (Keras' squeeze_or_expand_dimensions);
//  - without global_batch_size it is the local batch (leading extent) x
//    num_replicas_in_sync of the current strategy, which needs replica context (in
//    cross-replica context this raises, as in TensorFlow);
//  - global_batch_size must be positive (so an empty local batch without an explicit
//    global batch size raises, as in TensorFlow).
// Pass the global batch size explicitly when batches may be split unevenly: the replicas'
// losses then add up to the global mean exactly.
Tensor compute_average_loss(const Tensor& per_example_loss, const Tensor& sample_weight = Tensor(),
                            std::optional<int64_t> global_batch_size = std::nullopt);
inline Tensor compute_average_loss(const Tensor& per_example_loss, int64_t global_batch_size) {
  return compute_average_loss(per_example_loss, Tensor(), global_batch_size);
}

// sum(regularization_loss) / num_replicas_in_sync; raises in cross-replica context.
Tensor scale_regularization_loss(const Tensor& regularization_loss);
// The sum of several regularization losses, scaled the same way.
Tensor scale_regularization_loss(const std::vector<Tensor>& regularization_losses);

}  // namespace strata::distribute
