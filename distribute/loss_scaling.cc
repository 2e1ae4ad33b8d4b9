#include <strata/distribute/loss_scaling.h>

#include <strata/core/ops.h>
#include <strata/distribute/replica_context.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

namespace {
// Keras' squeeze_or_expand_dimensions + broadcast_weights: the weight must broadcast to
// the loss's shape without changing it.
Tensor weighted(const Tensor& loss, const Tensor& sample_weight) {
  Tensor w = cast(sample_weight, loss.dtype());
  if (w.ndim() == loss.ndim() + 1 && w.dim(-1) == 1) {
    w = squeeze(w, -1);
  } else if (w.ndim() >= 1 && w.ndim() == loss.ndim() - 1) {
    w = expand_dims(w, -1);
  }
  bool fits = w.ndim() == 0 || w.ndim() == loss.ndim();
  for (int64_t i = 0; fits && i < w.ndim(); ++i) fits = w.dim(i) == 1 || w.dim(i) == loss.dim(i);
  STRATA_CHECK(fits, "compute_average_loss: sample_weight of shape ", shape_str(sample_weight.shape()),
               " does not broadcast to per_example_loss of shape ", shape_str(loss.shape()));
  return loss * w;
}
}  // namespace

Tensor compute_average_loss(const Tensor& per_example_loss, const Tensor& sample_weight,
                            std::optional<int64_t> global_batch_size) {
  STRATA_CHECK(per_example_loss.defined(), "compute_average_loss: per_example_loss is undefined");
  STRATA_CHECK(per_example_loss.ndim() >= 1,
               "compute_average_loss: invalid per_example_loss: expected a tensor with at least rank 1 (one loss per "
               "example), got shape ", shape_str(per_example_loss.shape()));
  Tensor loss = sample_weight.defined() ? weighted(per_example_loss, sample_weight) : per_example_loss;
  int64_t global = 0;
  if (global_batch_size) {
    global = *global_batch_size;
  } else {
    STRATA_CHECK(!in_cross_replica_context(),
                 "compute_average_loss: called in cross-replica context without global_batch_size, while it is "
                 "expected to be called in replica context (inside Strategy::run)");
    global = per_example_loss.dim(0) * get_strategy().num_replicas_in_sync();
  }
  STRATA_CHECK(global > 0, "compute_average_loss: global_batch_size must be positive, got ", global,
               global_batch_size ? "" : " (the local batch is empty; pass the global batch size explicitly)");
  return sum(loss) / double(global);
}

Tensor scale_regularization_loss(const Tensor& regularization_loss) {
  STRATA_CHECK(regularization_loss.defined(), "scale_regularization_loss: undefined loss");
  STRATA_CHECK(!in_cross_replica_context(),
               "scale_regularization_loss: called in cross-replica context, while it is expected to be called in "
               "replica context (inside Strategy::run)");
  return sum(regularization_loss) / double(get_strategy().num_replicas_in_sync());
}

Tensor scale_regularization_loss(const std::vector<Tensor>& regularization_losses) {
  STRATA_CHECK(!regularization_losses.empty(), "scale_regularization_loss: no losses given");
  Tensor total;
  for (const Tensor& l : regularization_losses) {
    STRATA_CHECK(l.defined(), "scale_regularization_loss: undefined loss");
    total = total.defined() ? total + sum(l) : sum(l);
  }
  return scale_regularization_loss(total);
}

}  // namespace strata::distribute
