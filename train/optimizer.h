// Optimizer: applies gradients to variables, with an `iterations` counter, per-variable
// slot variables, a learning-rate schedule and optional clipping by global norm
// (strata::optim; Keras's OptimizerV2 shape with PyTorch's update rules).
//
// Optimizers are cheap copyable handles on shared state, so `opt = optim::Adam(1e-3)`
// rebinds a declared optimizer (inside a strategy's scope, to create its variables there).
//
// Under a strategy with shard_optimizer_state (ZeRO-1, docs/ZERO.md) apply_gradients
// reduce-scatters instead, and each replica keeps and updates only its shard of the slots
// (train/sharded_optimizer_state.h); the results are bitwise those described here.
//
// apply_gradients(grads, vars), in order:
//   1. In a replica context with more than one replica in sync, every defined gradient is
//      summed across replicas (ReplicaContext::sum_gradients: the buckets the gradient
//      reducer started during backward, the rest in one all_reduce; undefined gradients
//      are skipped), unless aggregate_gradients is false (all_reduce_sum_gradients below).
//   2. With global_clipnorm > 0, the gradients are clipped by their global norm.
//   3. Each variable with a defined gradient is updated in place on its current component
//      (`var.value().copy_(...)`, never var.assign: distributed variables reject
//      un-aggregated assignment from a replica context, as in TensorFlow), so every
//      replica applies the same update to its own copy. A variable that the local
//      replicas share instead of replicating (impl().is_replicated() false: a plain
//      variable, or CentralStorageStrategy's) is updated once, inside run_once.
//   4. `iterations` (a non-trainable int64 variable, aggregation ONLY_FIRST_REPLICA) is
//      incremented in place, on every replica alike (once when shared).
// Calling it in cross-replica context (inside a strategy's scope, outside run) throws, as
// TensorFlow does.
// The learning rate is the schedule at `iterations` before the increment. All the update
// math runs with tapes paused.
//
// Slot variables are created the first time a variable is updated (or by build()), with
// var.impl().make_like(...) so that they are placed and synchronised like the variable.
//
// With EmaOptions::use_ema (train/ema.h) each updated variable also has an "average" slot,
// moved right after the variable's update (in every path above, sharded included).
//
// An optimizer may wrap another (optim::LossScaleOptimizer, train/loss_scale_optimizer.h):
// its handle then forwards the step counter, learning rate, slots and build() to the
// wrapped optimizer, and apply_gradients to the wrapper, which applies through the wrapped
// optimizer with aggregate_gradients = false once it has reduced the gradients itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/autograd/variable.h>
#include <strata/core/tensor.h>
#include <strata/train/ema.h>
#include <strata/train/schedules.h>

namespace strata::optim {

// What one update of one variable needs besides its tensors.
struct UpdateContext {
  double learning_rate = 0;
  int64_t step = 1;  // 1 for the first update (iterations + 1)
};

// The optimizer's state and update rule. Subclass it (and wrap it in an Optimizer handle)
// to add an optimizer.
class OptimizerImpl {
 public:
  OptimizerImpl(std::string name, LearningRate learning_rate, double global_clipnorm, EmaOptions ema = {});
  virtual ~OptimizerImpl() = default;
  OptimizerImpl(const OptimizerImpl&) = delete;
  OptimizerImpl& operator=(const OptimizerImpl&) = delete;

  // Slot names, in the order update() receives them ({"m", "v"} for Adam).
  virtual std::vector<std::string> slot_names() const = 0;
  // Updates `param` in place from `grad` (same shape and dtype) and the variable's slots
  // (same shape and dtype, updated in place too). Runs with tapes paused.
  virtual void update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                      const UpdateContext& ctx) const = 0;

  // Every slot a variable has: slot_names(), then "average" with use_ema.
  std::vector<std::string> all_slot_names() const;
  // update() on the optimizer's own slots, then, with use_ema, the average's step on the
  // last one (`slots` in all_slot_names() order).
  void apply_update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                    const UpdateContext& ctx) const;

  const std::string& name() const { return name_; }
  double global_clipnorm() const { return global_clipnorm_; }
  const EmaOptions& ema() const { return ema_; }
  // True when update() treats every element on its own (param, grad and slots elementwise,
  // no reduction over the tensor): such an update may run on any flat range of a variable,
  // which is what ZeRO-1 needs (train/sharded_optimizer_state.h). SGD, Adam and AdamW.
  virtual bool elementwise() const { return false; }

  // ---- for optimizers that wrap another (LossScaleOptimizer) ----
  // The wrapped optimizer's state; nullptr for an optimizer that updates variables itself.
  virtual std::shared_ptr<OptimizerImpl> wrapped() const { return nullptr; }
  // apply_gradients of a wrapper (only called when wrapped() is set).
  virtual void apply_wrapped(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                             bool aggregate_gradients);
  // The wrapper's own variables by checkpoint key (e.g. "loss_scale"), saved as
  // "<tracked name>/<key>" beside "<tracked name>/iterations".
  virtual std::vector<std::pair<std::string, Variable>> wrapper_variables() const { return {}; }
  // Throws (saying why) when `value`, read from a checkpoint for the wrapper variable
  // `key`, is not a state the wrapper can be in; called before anything is restored.
  virtual void check_restored(const std::string& key, const Tensor& value) const { (void)key, (void)value; }

 protected:
  // A wrapper's state: no step counter, learning rate or slots of its own.
  explicit OptimizerImpl(std::string name);

 private:
  friend class Optimizer;
  struct SlotSet {
    Variable variable;            // the variable the slots belong to
    std::vector<Variable> slots;  // in slot_names() order
  };

  std::string name_;
  LearningRate learning_rate_;
  double global_clipnorm_;
  EmaOptions ema_;
  // True between an odd and an even number of Optimizer::swap_ema_weights calls: the
  // model holds the averages and the "average" slots the trained weights.
  std::atomic<bool> ema_swapped_{false};
  Variable iterations_;
  mutable std::mutex mu_;  // guards slots_ (replica threads update concurrently)
  std::map<const autograd::VariableImpl*, SlotSet> slots_;
};

class Optimizer {
 public:
  Optimizer() = default;  // empty handle
  explicit Optimizer(std::shared_ptr<OptimizerImpl> impl);

  // aggregate_gradients = false: the gradients are already summed across replicas (step 1
  // is skipped), as Keras's experimental_aggregate_gradients.
  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       bool aggregate_gradients = true) const;

  // Creates the slots of every variable now (Keras's optimizer.build), e.g. before
  // restoring a checkpoint or so that they exist under a strategy's scope.
  void build(const std::vector<Variable>& vars) const;

  // The optimizer's step counter (int64 scalar) and its value in the current context.
  const Variable& iterations() const { return state().iterations_; }
  int64_t iterations_value() const;
  // The learning rate the next update will use (the schedule at iterations_value()).
  double learning_rate() const;
  void set_learning_rate(LearningRate learning_rate) const;
  // False when the learning rate is a schedule of the step.
  bool learning_rate_is_constant() const;

  // The slots each variable gets, in order (the update's, then "average" with use_ema).
  std::vector<std::string> slot_names() const { return state().all_slot_names(); }
  // The named slot of `var`, when created.
  std::optional<Variable> find_slot(const Variable& var, const std::string& slot) const;
  // The variable's slots in slot_names() order, creating them when missing.
  std::vector<Variable> get_or_create_slots(const Variable& var) const;
  // Forgets the slots of `var` (the next update starts them from zero again).
  void drop_slots(const Variable& var) const;
  // Every variable that currently has slots, with its slots in slot_names() order.
  std::vector<std::pair<Variable, std::vector<Variable>>> all_slots() const;
  // iterations, every slot variable and a wrapper's own variables.
  std::vector<Variable> variables() const;
  // The variables a checkpoint saves under the optimizer's name, by key: "iterations",
  // plus a wrapper's own ("loss_scale", "good_steps"). Slots are saved by the variables
  // they belong to.
  std::vector<std::pair<std::string, Variable>> checkpoint_variables() const;

  // ---- the moving average of the weights (train/ema.h) ----
  bool use_ema() const { return state().ema_.use_ema; }
  const EmaOptions& ema() const { return state().ema_; }
  // The average of `var`, once the optimizer has updated it (or built its slots).
  std::optional<Variable> average(const Variable& var) const;
  // Keras's finalize_variable_values: with use_ema, each of `vars` that has an average
  // takes its value (after a swap_ema_weights, the model holds them already and the
  // averages get them back); without, nothing. Cross-replica context (or no strategy);
  // every worker calls it with the same variables in the same order.
  void finalize_variable_values(const std::vector<Variable>& vars) const;
  // Exchanges the values of `vars` and their averages (SwapEMAWeights); calling it again
  // with the same variables swaps back. apply_gradients refuses to run while swapped.
  // Raises without use_ema. Cross-replica context (or no strategy), as above.
  void swap_ema_weights(const std::vector<Variable>& vars) const;
  // True while the model holds the averages (an odd number of swaps).
  bool ema_weights_swapped() const { return state().ema_swapped_.load(); }

  const std::string& name() const { return impl().name(); }
  bool defined() const { return impl_ != nullptr; }
  OptimizerImpl& impl() const;
  const std::shared_ptr<OptimizerImpl>& ptr() const { return impl_; }

 private:
  friend class LossScaleOptimizerImpl;
  // The state that updates variables: impl(), or what a wrapper wraps.
  OptimizerImpl& state() const;
  // Advances `iterations` by one without updating any variable (a step a wrapper
  // skipped), on every replica alike (once when the counter is shared).
  void increment_iterations() const;
  // apply_gradients under a strategy that shards the optimizer state (ZeRO-1; defined in
  // train/sharded_optimizer_state.cc).
  void apply_sharded(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                     bool aggregate_gradients) const;

  std::shared_ptr<OptimizerImpl> impl_;
};

// In a replica context with more than one replica in sync, each defined gradient summed
// across the replicas (one all_reduce; undefined gradients stay undefined); otherwise the
// gradients themselves. What apply_gradients does first (tf's all_reduce_sum_gradients).
std::vector<Tensor> all_reduce_sum_gradients(const std::vector<Tensor>& grads);

namespace detail {
// apply_gradients' argument checks (sizes, undefined or repeated variables, gradient
// shapes and dtypes, cross-replica context), reported as `optimizer`::apply_gradients.
void check_apply_arguments(const std::string& optimizer, const std::vector<Tensor>& grads,
                           const std::vector<Variable>& vars);
}  // namespace detail

}  // namespace strata::optim
