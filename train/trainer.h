// Orbit's trainer and evaluator interfaces, and their Standard implementations that own
// the loop over a distributed dataset (orbit.AbstractTrainer / orbit.StandardTrainer).
//
// A StandardTrainer subclass supplies train_step(iterator) (which calls strategy.run);
// the train iterator persists across train() calls so input continues where it stopped.
// A StandardEvaluator subclass supplies eval_step; its iterator is recreated for every
// evaluation unless the options say otherwise.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "autograd/variable.h"
#include "distribute/distributed_dataset.h"
#include "distribute/strategy.h"

namespace strata::train {

// Named scalar results of a loop ("loss", "accuracy", ...), written to summaries.
using Outputs = std::map<std::string, double>;

class AbstractTrainer {
 public:
  virtual ~AbstractTrainer() = default;
  // Runs num_steps training steps and returns the loop's outputs.
  virtual Outputs train(int64_t num_steps) = 0;
  // Examples consumed per step (for examples/s), 0 when unknown.
  virtual int64_t examples_per_step() const { return 0; }
};

class AbstractEvaluator {
 public:
  virtual ~AbstractEvaluator() = default;
  // Evaluates num_steps steps (-1: until the evaluation data ends).
  virtual Outputs evaluate(int64_t num_steps) = 0;
};

class StandardTrainer : public AbstractTrainer {
 public:
  StandardTrainer(distribute::Strategy& strategy, distribute::DistributedDataset train_dataset,
                  Variable global_step);
  Outputs train(int64_t num_steps) override;

  // The persistent input iterator (its state goes into checkpoints for exact resume).
  distribute::DistributedIterator& train_iterator();

 protected:
  virtual void train_loop_begin() {}
  // One step: typically strategy().run(step_fn, *iterator.next()).
  virtual void train_step(distribute::DistributedIterator& iterator) = 0;
  virtual Outputs train_loop_end() { return {}; }
  distribute::Strategy& strategy() const { return strategy_; }
  const Variable& global_step() const { return global_step_; }

 private:
  distribute::Strategy& strategy_;
  distribute::DistributedDataset dataset_;
  Variable global_step_;
  std::unique_ptr<distribute::DistributedIterator> iterator_;
};

class StandardEvaluator : public AbstractEvaluator {
 public:
  StandardEvaluator(distribute::Strategy& strategy, distribute::DistributedDataset eval_dataset,
                    bool reuse_iterator = false);
  Outputs evaluate(int64_t num_steps) override;

 protected:
  virtual void eval_begin() {}
  // One step; returns false when the iterator is exhausted (no step was run).
  virtual bool eval_step(distribute::DistributedIterator& iterator) = 0;
  virtual void eval_reduce() {}
  virtual Outputs eval_end() = 0;
  distribute::Strategy& strategy() const { return strategy_; }

 private:
  distribute::Strategy& strategy_;
  distribute::DistributedDataset dataset_;
  bool reuse_iterator_;
  std::unique_ptr<distribute::DistributedIterator> iterator_;
};

// An int64 non-trainable variable with OnlyFirstReplica aggregation, created through the
// current strategy (Orbit's create_global_step()).
Variable create_global_step();

}  // namespace strata::train
