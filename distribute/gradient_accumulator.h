// GradientAccumulator: gradient accumulation over micro-batches with the last one's
// reduction overlapped with its backward pass, as PyTorch DDP does it (no_sync() for all
// but the last micro-batch, whose backward then reduces the accumulated .grad bucket by
// bucket).
//
// no_sync (distribute/no_sync.h) gives TensorFlow's accumulation: every micro-batch's
// gradients stay the replica's own and apply_gradients reduces their sum afterwards, in
// one go. The accumulator instead hands the replica's gradient reducer, during the last
// micro-batch's backward, each variable's total (what the earlier micro-batches summed,
// plus this one's) the moment backward has finished it, so the buckets are reduced while
// backward goes on and apply_gradients takes their sums:
//
//   strategy.run([&](const data::Batch& batch) {
//     distribute::GradientAccumulator accumulated(vars);
//     for (size_t i = 0; i < micro.size(); ++i) {
//       autograd::GradientTape tape;
//       accumulated.add(tape, loss_fn(micro[i]), /*last=*/i + 1 == micro.size());
//     }
//     optimizer.apply_gradients(accumulated.gradients(), vars);
//   }, batch);
//
// The sums are bitwise those of no_sync's accumulation (each replica's total is the same
// ((g1 + g2) + g3), and the reducer sums bitwise as apply_gradients does). Under
// CommunicationOptions::aggregate_gradients_in_backward the last add() leaves the
// replicas' sums of the totals in gradients(), as apply_gradients then expects (where
// no_sync is refused). A variable that the last micro-batch does not reach still has its
// total reduced (handed over at the end of that backward). Without a reducer (one
// replica, overlap off, outside replica context) it simply sums.
#pragma once

#include <vector>

#include <strata/autograd/tape.h>
#include <strata/autograd/variable.h>
#include <strata/core/tensor.h>

namespace strata::distribute {

class GradientAccumulator {
 public:
  explicit GradientAccumulator(std::vector<autograd::Variable> variables);

  // Adds d loss / d variables, computed by `tape`. With last false nothing is communicated
  // (as under no_sync); with last true the totals go to the replica's gradient reducer as
  // backward finishes them. Nothing may be added after the last.
  void add(autograd::GradientTape& tape, const Tensor& loss, bool last);

  // The totals, one per variable (undefined for a variable no micro-batch reached); after
  // the last add(), what apply_gradients takes: the totals, or under
  // aggregate_gradients_in_backward their sums over the replicas.
  // Before the last add() under aggregate_gradients_in_backward, raises (apply_gradients
  // would take this replica's totals for the replicas' sums).
  const std::vector<Tensor>& gradients() const;
  const std::vector<autograd::Variable>& variables() const { return variables_; }

 private:
  std::vector<autograd::Variable> variables_;
  std::vector<Tensor> totals_;
  bool finished_ = false;
  bool failed_ = false;  // the last add() threw: its totals may be in the reducer's buckets
};

}  // namespace strata::distribute
