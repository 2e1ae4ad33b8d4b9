#include "train/trainer.h"

#include "core/ops.h"

namespace strata::train {

StandardTrainer::StandardTrainer(distribute::Strategy& strategy, distribute::DistributedDataset train_dataset,
                                 Variable global_step)
    : strategy_(strategy), dataset_(std::move(train_dataset)), global_step_(std::move(global_step)) {
  STRATA_CHECK(global_step_.defined(), "StandardTrainer: a global step variable is required");
}

distribute::DistributedIterator& StandardTrainer::train_iterator() {
  if (!iterator_) iterator_ = std::make_unique<distribute::DistributedIterator>(dataset_.make_iterator());
  return *iterator_;
}

Outputs StandardTrainer::train(int64_t num_steps) {
  STRATA_CHECK(num_steps >= 0, "StandardTrainer::train: num_steps must be >= 0, got ", num_steps);
  train_loop_begin();
  distribute::DistributedIterator& it = train_iterator();
  for (int64_t i = 0; i < num_steps; ++i) {
    train_step(it);
    // Cross-replica context: every component of the step counter advances once.
    global_step_.assign_add(Tensor::scalar(1, kInt64));
  }
  return train_loop_end();
}

StandardEvaluator::StandardEvaluator(distribute::Strategy& strategy, distribute::DistributedDataset eval_dataset,
                                     bool reuse_iterator)
    : strategy_(strategy), dataset_(std::move(eval_dataset)), reuse_iterator_(reuse_iterator) {}

Outputs StandardEvaluator::evaluate(int64_t num_steps) {
  STRATA_CHECK(num_steps >= -1, "StandardEvaluator::evaluate: num_steps must be >= -1, got ", num_steps);
  if (!reuse_iterator_ || !iterator_) {
    iterator_ = std::make_unique<distribute::DistributedIterator>(dataset_.make_iterator());
  }
  eval_begin();
  for (int64_t i = 0; num_steps < 0 || i < num_steps; ++i) {
    if (!eval_step(*iterator_)) break;
  }
  eval_reduce();
  return eval_end();
}

Variable create_global_step() {
  autograd::VariableOptions options;
  options.name = "global_step";
  options.trainable = false;
  options.aggregation = autograd::VariableAggregation::OnlyFirstReplica;
  return Variable(zeros({}, kInt64), options);
}

}  // namespace strata::train
