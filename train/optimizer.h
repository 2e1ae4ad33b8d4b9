// Optimizer: applies gradients to variables, with an `iterations` counter, per-variable
// slot variables, a learning-rate schedule and optional clipping by global norm
// (strata::optim; Keras's OptimizerV2 shape with PyTorch's update rules).
//
// Optimizers are cheap copyable handles on shared state, so `opt = optim::Adam(1e-3)`
// rebinds a declared optimizer (inside a strategy's scope, to create its variables there).
//
// apply_gradients(grads, vars), in order:
//   1. In a replica context with more than one replica in sync, every defined gradient is
//      summed across replicas in one all_reduce (undefined gradients are skipped).
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
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "core/tensor.h"
#include "train/schedules.h"

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
  OptimizerImpl(std::string name, LearningRate learning_rate, double global_clipnorm);
  virtual ~OptimizerImpl() = default;
  OptimizerImpl(const OptimizerImpl&) = delete;
  OptimizerImpl& operator=(const OptimizerImpl&) = delete;

  // Slot names, in the order update() receives them ({"m", "v"} for Adam).
  virtual std::vector<std::string> slot_names() const = 0;
  // Updates `param` in place from `grad` (same shape and dtype) and the variable's slots
  // (same shape and dtype, updated in place too). Runs with tapes paused.
  virtual void update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                      const UpdateContext& ctx) const = 0;

  const std::string& name() const { return name_; }

 private:
  friend class Optimizer;
  struct SlotSet {
    Variable variable;            // the variable the slots belong to
    std::vector<Variable> slots;  // in slot_names() order
  };

  std::string name_;
  LearningRate learning_rate_;
  double global_clipnorm_;
  Variable iterations_;
  mutable std::mutex mu_;  // guards slots_ (replica threads update concurrently)
  std::map<const autograd::VariableImpl*, SlotSet> slots_;
};

class Optimizer {
 public:
  Optimizer() = default;  // empty handle
  explicit Optimizer(std::shared_ptr<OptimizerImpl> impl);

  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) const;

  // Creates the slots of every variable now (Keras's optimizer.build), e.g. before
  // restoring a checkpoint or so that they exist under a strategy's scope.
  void build(const std::vector<Variable>& vars) const;

  // The optimizer's step counter (int64 scalar) and its value in the current context.
  const Variable& iterations() const { return impl().iterations_; }
  int64_t iterations_value() const;
  // The learning rate the next update will use (the schedule at iterations_value()).
  double learning_rate() const;
  void set_learning_rate(LearningRate learning_rate) const;

  std::vector<std::string> slot_names() const { return impl().slot_names(); }
  // The named slot of `var`, when created.
  std::optional<Variable> find_slot(const Variable& var, const std::string& slot) const;
  // The variable's slots in slot_names() order, creating them when missing.
  std::vector<Variable> get_or_create_slots(const Variable& var) const;
  // Forgets the slots of `var` (the next update starts them from zero again).
  void drop_slots(const Variable& var) const;
  // Every variable that currently has slots, with its slots in slot_names() order.
  std::vector<std::pair<Variable, std::vector<Variable>>> all_slots() const;
  // iterations and every slot variable.
  std::vector<Variable> variables() const;

  const std::string& name() const { return impl().name(); }
  bool defined() const { return impl_ != nullptr; }
  OptimizerImpl& impl() const;
  const std::shared_ptr<OptimizerImpl>& ptr() const { return impl_; }

 private:
  std::shared_ptr<OptimizerImpl> impl_;
};

}  // namespace strata::optim
