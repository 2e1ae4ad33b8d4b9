#include "distribute/loss_scaling.h"

#include "core/ops.h"
#include "distribute/replica_context.h"

namespace strata::distribute {

Tensor compute_average_loss(const Tensor& per_example_loss, const Tensor& sample_weight,
                            std::optional<int64_t> global_batch_size) {
  ReplicaContext* ctx = get_replica_context();
  STRATA_CHECK(ctx != nullptr, "compute_average_loss: called in cross-replica context; call it "
               "inside Strategy::run (replica context)");
  STRATA_CHECK(per_example_loss.defined() && per_example_loss.ndim() >= 1,
               "compute_average_loss: per_example_loss must have rank >= 1, got ",
               per_example_loss.defined() ? shape_str(per_example_loss.shape()) : "undefined");
  Tensor loss = per_example_loss;
  if (sample_weight.defined()) loss = loss * cast(sample_weight, loss.dtype());
  const int64_t global = global_batch_size.value_or(per_example_loss.dim(0) * ctx->num_replicas_in_sync());
  STRATA_CHECK(global > 0 || per_example_loss.dim(0) == 0, "compute_average_loss: global_batch_size must be positive, got ", global);
  Tensor total = sum(loss);
  return global > 0 ? total / double(global) : total;
}

Tensor scale_regularization_loss(const Tensor& regularization_loss) {
  ReplicaContext* ctx = get_replica_context();
  STRATA_CHECK(ctx != nullptr, "scale_regularization_loss: called in cross-replica context; call it "
               "inside Strategy::run (replica context)");
  return regularization_loss / double(ctx->num_replicas_in_sync());
}

}  // namespace strata::distribute
