// no_sync: a scope in which the gradients a replica computes stay its own and nothing is
// communicated for them (PyTorch DDP's no_sync()), for gradient accumulation.
//
// Under a data-parallel strategy GradientTape::gradient hands each gradient, as backward
// finishes it, to the replica's gradient reducer, which starts summing it over the
// replicas at once (distribute/gradient_reducer.h). A step that accumulates several
// micro-batches before one update would pay that communication for every micro-batch
// and then again for the accumulated sum. Under no_sync the tape reports nothing:
//
//   strategy.run([&](const data::Batch& batch) {
//     std::vector<Tensor> total;
//     for (const data::Batch& micro : split(batch, 4)) {
//       auto local = distribute::no_sync();
//       autograd::GradientTape tape;
//       auto grads = tape.gradient(loss_fn(micro), vars);
//       total = total.empty() ? grads : add_each(total, grads);
//     }
//     optimizer.apply_gradients(total, vars);  // one reduction for the step
//   }, batch);
//
// apply_gradients then reduces the accumulated gradients in one go (not overlapped with a
// backward pass; distribute::GradientAccumulator, gradient_accumulator.h, overlaps it with
// the last micro-batch's backward). The scope may also be entered outside replica context,
// where it does nothing. Refused under CommunicationOptions::aggregate_gradients_in_backward, whose
// apply_gradients takes the gradients it is given as the replicas' sums already.
#pragma once

#include <strata/autograd/gradient_hook.h>

namespace strata::distribute {

class NoSyncScope {
 public:
  NoSyncScope();
  NoSyncScope(const NoSyncScope&) = delete;
  NoSyncScope& operator=(const NoSyncScope&) = delete;

 private:
  autograd::GradientHookScope no_hook_{nullptr};
};

// The scope, for `auto local = distribute::no_sync();`.
[[nodiscard]] inline NoSyncScope no_sync() { return {}; }

}  // namespace strata::distribute
