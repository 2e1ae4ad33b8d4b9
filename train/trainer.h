// Orbit's trainer and evaluator interfaces (orbit.AbstractTrainer / AbstractEvaluator),
// and the Standard implementations that own the loop over a distributed dataset
// (orbit.StandardTrainer / StandardEvaluator).
//
//   class MyTrainer : public train::StandardTrainer {
//    public:
//     explicit MyTrainer(distribute::DistributedDataset ds)    // Orbit's shape: the
//         : StandardTrainer(std::move(ds), {}) {}             // strategy is get_strategy()
//     void train_loop_begin() override { train_loss.reset_state(); }
//     void train_step(distribute::DistributedIterator& it) override {
//       auto batch = next_batch(it);                      // throws when the data ends
//       strategy().run(step_fn, batch);
//     }
//     train::Outputs train_loop_end() override { return {{"loss", train_loss.result()}}; }
//   };
//
// Construct trainers and evaluators inside the strategy's scope (Orbit reads
// tf.distribute.get_strategy() there too), or name the strategy in the options. The
// older form StandardTrainer(strategy, dataset, global_step) still works.
//
// StandardTrainer::train(n) calls train_loop_begin(), then train_step(iterator) n times,
// then returns train_loop_end(). The train iterator is created on first use and persists
// across train() calls, so input continues where the last loop stopped; input_state()
// puts its position into a Checkpoint for exact resumption.
//
// The global step: the Controller owns it (ControllerOptions::global_step) and lends it to
// a trainer constructed without one (use_global_step). A train_step may advance it itself,
// as Orbit trainers do (`global_step.assign_add(1)` inside strategy.run, where the
// variable's OnlyFirstReplica aggregation makes the replicas' increments count once); when
// a step leaves it unchanged, StandardTrainer advances it by one after the step. Advancing
// it by anything else is an error.
//
// StandardEvaluator::evaluate(n) recreates its iterator (unless the options say
// otherwise), calls eval_begin(), then eval_step(iterator) up to n times (-1: until the
// data ends) passing each step's outputs to eval_reduce(), and returns eval_end().
// eval_step returns std::nullopt when the iterator is exhausted (no step ran).
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <strata/autograd/variable.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/strategy.h>
#include <strata/train/checkpoint.h>

namespace strata::train {

// One value of a loop's outputs: a number, or a one-element tensor (a metric's result(),
// a reduced loss) read as a double.
class OutputValue {
 public:
  template <typename T>
    requires(std::is_arithmetic_v<T> && !std::same_as<T, bool>)
  OutputValue(T value) : value_(static_cast<double>(value)) {}  // NOLINT(google-explicit-constructor)
  OutputValue(const Tensor& value);                             // NOLINT(google-explicit-constructor)
  double value() const { return value_; }

 private:
  double value_;
};

// Named scalar results of a loop ("loss", "accuracy", ...), written to summaries: a map of
// doubles that can be written from tensors too, as Orbit's dict of tensors is:
//   return {{"loss", train_loss.result()}, {"learning_rate", 1e-3}};
class Outputs : public std::map<std::string, double> {
 public:
  Outputs() = default;
  Outputs(std::initializer_list<std::pair<const std::string, OutputValue>> values);
  Outputs(std::map<std::string, double> values) : std::map<std::string, double>(std::move(values)) {}  // NOLINT
};

// A distributed iterator's input position (DistributedIterator::save_job_position) as
// checkpoint extra state: the IteratorState's string when the workers share a position
// (one worker, Data auto-sharding), an array of them in worker order when each worker's is
// its own (File/Off auto-sharding) — every worker's save is then a collective. `iterator`
// is called at each save and restore.
ExtraState distributed_input_state(std::function<distribute::DistributedIterator&()> iterator);

class AbstractTrainer {
 public:
  virtual ~AbstractTrainer() = default;
  // Runs num_steps training steps (advancing the global step by num_steps) and returns
  // the loop's outputs.
  virtual Outputs train(int64_t num_steps) = 0;
  // Examples consumed per step (for examples/s in progress reports), 0 when unknown.
  virtual int64_t examples_per_step() const { return 0; }
  // The Controller's global step, offered when the Controller is constructed: a trainer
  // that counts steps itself adopts it (StandardTrainer does when it has none) or checks
  // that it is its own.
  virtual void use_global_step(const Variable& global_step) { (void)global_step; }
};

class AbstractEvaluator {
 public:
  virtual ~AbstractEvaluator() = default;
  // Evaluates num_steps steps (-1: until the evaluation data ends) and returns the outputs.
  virtual Outputs evaluate(int64_t num_steps) = 0;
};

struct StandardTrainerOptions {
  // The strategy whose run() the trainer's steps use; nullptr: get_strategy() when the
  // trainer is constructed (construct it inside the strategy's scope).
  distribute::Strategy* strategy = nullptr;
};

class StandardTrainer : public AbstractTrainer {
 public:
  // Orbit's form: the global step comes from the Controller (use_global_step); without a
  // Controller, train() counts no steps. A plain dataset is distributed by the strategy.
  explicit StandardTrainer(distribute::DistributedDataset train_dataset, StandardTrainerOptions options = {});
  explicit StandardTrainer(const data::Dataset& train_dataset, StandardTrainerOptions options = {});
  // The trainer owns its global step (integer scalar; the Controller must use the same).
  StandardTrainer(distribute::Strategy& strategy, distribute::DistributedDataset train_dataset,
                  Variable global_step);
  Outputs train(int64_t num_steps) override;
  // Adopts the Controller's global step when the trainer has none; otherwise it must be
  // the trainer's own (strata::Error).
  void use_global_step(const Variable& global_step) override;

  // The persistent input iterator (created on first use).
  distribute::DistributedIterator& train_iterator();
  // The iterator's position as checkpoint extra state: track it in the Checkpoint
  // ({"train_input", trainer.input_state()}) so a resumed run reads exactly the batches
  // the uninterrupted run would have read (distributed_input_state). Valid while the
  // trainer lives.
  ExtraState input_state();
  // Replaces the dataset; the next train() starts a new iterator over it.
  void set_train_dataset(distribute::DistributedDataset dataset);
  const distribute::DistributedDataset& train_dataset() const { return dataset_; }

 protected:
  virtual void train_loop_begin() {}
  // One step: typically strategy().run(step_fn, next_batch(iterator)).
  virtual void train_step(distribute::DistributedIterator& iterator) = 0;
  virtual Outputs train_loop_end() { return {}; }

  // The next element, or a strata::Error saying the training data ended (repeat() it).
  static distribute::PerReplica<data::Batch> next_batch(distribute::DistributedIterator& iterator);
  distribute::Strategy& strategy() const { return strategy_; }
  // The step given at construction or lent by a Controller; undefined otherwise.
  const Variable& global_step() const { return global_step_; }

 private:
  distribute::Strategy& strategy_;
  distribute::DistributedDataset dataset_;
  Variable global_step_;
  std::unique_ptr<distribute::DistributedIterator> iterator_;
};

struct StandardEvaluatorOptions {
  // A fresh iterator for every evaluate() (orbit's default); false continues the same
  // iterator across evaluations (for an infinite or very large eval set).
  bool recreate_iterator_for_each_eval = true;
};

class StandardEvaluator : public AbstractEvaluator {
 public:
  // Orbit's form: the strategy is get_strategy() when the evaluator is constructed.
  explicit StandardEvaluator(distribute::DistributedDataset eval_dataset, StandardEvaluatorOptions options = {});
  explicit StandardEvaluator(const data::Dataset& eval_dataset, StandardEvaluatorOptions options = {});
  StandardEvaluator(distribute::Strategy& strategy, distribute::DistributedDataset eval_dataset,
                    StandardEvaluatorOptions options = {});
  Outputs evaluate(int64_t num_steps) override;

  const distribute::DistributedDataset& eval_dataset() const { return dataset_; }

 protected:
  virtual void eval_begin() {}
  // One step; std::nullopt when the iterator is exhausted (no step was run). The
  // returned outputs (often empty: metrics carry the state) go to eval_reduce.
  virtual std::optional<Outputs> eval_step(distribute::DistributedIterator& iterator) = 0;
  // Folds one step's outputs into the evaluation's state (orbit's eval_reduce).
  virtual void eval_reduce(const Outputs& step_outputs) { (void)step_outputs; }
  virtual Outputs eval_end() = 0;
  distribute::Strategy& strategy() const { return strategy_; }

 private:
  distribute::Strategy& strategy_;
  distribute::DistributedDataset dataset_;
  StandardEvaluatorOptions options_;
  std::unique_ptr<distribute::DistributedIterator> iterator_;
};

// An int64 scalar, non-trainable variable named "global_step" with OnlyFirstReplica
// aggregation, created through the current strategy (orbit.utils.create_global_step()):
// create it inside the strategy's scope.
Variable create_global_step();

}  // namespace strata::train
