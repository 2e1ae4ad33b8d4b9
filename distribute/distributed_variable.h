// Distributed variables, with TensorFlow's semantics (values.py, ps_values.py):
//
// MirroredVariable (synchronization Auto/OnWrite under MirroredStrategy): one component per
// replica, kept equal. Reads see the replica's own component (the first one in
// cross-replica context). Updates:
//  - cross-replica context: the same update on every component;
//  - replica context, aggregation None: only the calling replica's component;
//  - replica context, Sum/Mean: the replicas' values are all-reduced, and every replica
//    applies the result to its component (all replicas must call it);
//  - replica context, OnlyFirstReplica: replica 0's value is applied everywhere.
// Checkpoints hold one value (the first component); restoring writes every component.
// On logical CPU devices with Strategy::share_cpu_variables on, the components are
// views of one copy: is_replicated() is false, every update above is applied once, and
// a replica-context update with aggregation None (which would make copies differ)
// raises, as TensorFlow's does.
//
// SyncOnReadVariable (synchronization OnRead): per-replica components, aggregated on read.
//  - replica context: reads and updates touch only the replica's own component;
//  - cross-replica reads: Sum or Mean over the components, or the first component for
//    OnlyFirstReplica (and None, where TensorFlow raises); shape(), dtype() and device()
//    never read the aggregate (no collective across workers);
//  - cross-replica assign: Sum divides the value by the replica count (so reading it back
//    gives the value; integers are split exactly), others write it to every component;
//    assign_add/assign_sub with Sum raise, others apply to every component;
//  - checkpoints hold the aggregate (None raises, as TensorFlow cannot save it either);
//    restoring is a cross-replica assign, so a restored Sum reads back as saved.
//
// AggregatingVariable (CentralStorageStrategy with several replicas): one copy on the
// parameter device shared by all replicas (is_replicated() is false). Updates in replica
// context need an aggregation (None raises, as TensorFlow): the replicas' values are
// aggregated and the update is applied once.
//
// Every kind is updated in cross-replica context, and a sync-on-read one aggregated, only
// under its own strategy (its scope, its merge_call) or outside any strategy; inside
// another strategy's run() or scope it raises, as TensorFlow's enter_or_assert_strategy.
//
// Creation rules (MirroredStrategy): synchronization None raises; Mean needs a floating
// dtype.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include <strata/autograd/variable.h>

namespace strata::distribute {

class Strategy;
class LocalReplicaContext;

class DistributedVariableImpl : public autograd::VariableImpl {
 public:
  // One component per device, each a private copy of `initial`; with `one_copy`, views of
  // one copy (the devices must share memory).
  DistributedVariableImpl(Strategy& strategy, const Tensor& initial, autograd::VariableOptions options,
                          const std::vector<Device>& devices, bool one_copy = false);
  bool is_replicated() const override { return true; }
  // The per-replica (per-device) tensors; updated in place, never replaced.
  const std::vector<Tensor>& components() const { return components_; }
  // The components that hold memory of their own: all of them, or the first when they
  // are views of one copy. An update of every replica's value writes each of these once.
  std::span<const Tensor> copies() const {
    return {components_.data(), one_copy_ ? std::min<size_t>(1, components_.size()) : components_.size()};
  }
  Strategy& strategy() const { return strategy_; }
  // From the components, never the aggregate: no collective (TensorFlow answers from the
  // primary). The device is the one value() reads on: the calling replica's component.
  Shape shape() const override { return components_[0].shape(); }
  DType dtype() const override { return components_[0].dtype(); }
  Device device() const override;
  // A slot variable placed and synchronised by the same strategy (created once across
  // replicas when called inside run()).
  std::shared_ptr<autograd::VariableImpl> make_like(const Tensor& initial,
                                                    autograd::VariableOptions options) const override;

 protected:
  enum class Update { Assign, Add, Sub };
  // The calling replica's context for this strategy, or nullptr in cross-replica context.
  LocalReplicaContext* replica() const;
  // Called where replica() is nullptr, before the variable is updated or aggregated there:
  // throws when the thread is under another strategy (its run(), scope or merge_call)
  // rather than in this one's cross-replica context or outside any strategy — as
  // TensorFlow's enter_or_assert_strategy. `what` is "assign_add", "read", ...
  void require_own_strategy(const char* what) const;
  // Applies one update to one component, checking the shape and (for assign_add/sub) the
  // result's dtype like a local variable does; a value in another device's memory is
  // copied to the component's first.
  void apply(const Tensor& component, const Tensor& value, Update kind) const;
  static const char* update_name(Update kind);

  Strategy& strategy_;
  std::vector<Tensor> components_;
  const bool one_copy_;
};

class MirroredVariableImpl final : public DistributedVariableImpl {
 public:
  MirroredVariableImpl(Strategy& strategy, const Tensor& initial, autograd::VariableOptions options);
  // False when the components are views of one copy (logical CPU devices).
  bool is_replicated() const override { return !one_copy_; }
  Tensor value() const override;
  void assign(const Tensor& v) override { update(v, Update::Assign); }
  void assign_add(const Tensor& delta) override { update(delta, Update::Add); }
  void assign_sub(const Tensor& delta) override { update(delta, Update::Sub); }
  Tensor checkpoint_value() const override { return components_[0]; }
  void restore_checkpoint_value(const Tensor& v) override;
  std::string kind() const override { return "MirroredVariable"; }

 private:
  void update(const Tensor& v, Update kind);
};

class SyncOnReadVariableImpl final : public DistributedVariableImpl {
 public:
  SyncOnReadVariableImpl(Strategy& strategy, const Tensor& initial, autograd::VariableOptions options);
  Tensor value() const override;
  void assign(const Tensor& v) override { update(v, Update::Assign); }
  void assign_add(const Tensor& delta) override { update(delta, Update::Add); }
  void assign_sub(const Tensor& delta) override { update(delta, Update::Sub); }
  Tensor checkpoint_value() const override;
  void restore_checkpoint_value(const Tensor& v) override;
  std::string kind() const override { return "SyncOnReadVariable"; }
  // The aggregate over replicas (Sum, Mean, or the first replica's value).
  Tensor aggregate() const;

 private:
  void update(const Tensor& v, Update kind);
  void assign_cross_replica(const Tensor& v);
};

class AggregatingVariableImpl final : public DistributedVariableImpl {
 public:
  // One copy on the strategy's parameter device.
  AggregatingVariableImpl(Strategy& strategy, const Tensor& initial, autograd::VariableOptions options);
  bool is_replicated() const override { return false; }
  Tensor value() const override { return components_[0]; }
  void assign(const Tensor& v) override { update(v, Update::Assign); }
  void assign_add(const Tensor& delta) override { update(delta, Update::Add); }
  void assign_sub(const Tensor& delta) override { update(delta, Update::Sub); }
  void restore_checkpoint_value(const Tensor& v) override { apply(components_[0], v, Update::Assign); }
  std::string kind() const override { return "AggregatingVariable"; }

 private:
  void update(const Tensor& v, Update kind);
};

// The variable MirroredStrategy creates for these options: SyncOnRead for OnRead,
// Mirrored for Auto/OnWrite; throws for None and for Mean with a non-floating dtype.
std::shared_ptr<autograd::VariableImpl> make_distributed_variable(Strategy& strategy, const Tensor& initial,
                                                                  const autograd::VariableOptions& options);

}  // namespace strata::distribute
