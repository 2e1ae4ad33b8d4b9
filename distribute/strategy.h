// Strategy: how a training step written once runs on one device, on several replicas of
// one machine, or across workers — tf.distribute.Strategy in C++.
//
//   auto strategy = distribute::MirroredStrategy();
//   { auto scope = strategy.scope(); model = ...; opt = ...; }   // mirrored variables
//   for (auto& batch : strategy.experimental_distribute_dataset(ds)) {
//     auto per_replica = strategy.run(step, batch);            // step(batch) per replica
//     Tensor loss = strategy.reduce(ReduceOp::Sum, per_replica);
//   }
//
// run() executes fn once per local replica, each on its own long-lived replica thread
// with a thread-local ReplicaContext and that replica's device. If a replica throws, every
// replica blocked in a collective is released and run() rethrows the first error, prefixed
// with its replica id.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd/variable.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/input_context.h"
#include "distribute/collective/communicator.h"
#include "distribute/replica_context.h"
#include "distribute/values.h"

namespace strata::distribute {

class Strategy;
class DistributedDataset;
class ReplicaThreads;
class LocalReplicaContext;
class InProcessGroup;

// Cross-device reduction used by Mirrored: how per-replica tensors are combined.
enum class CrossDeviceOps { Default, ReductionToOneDevice, HierarchicalCopyAllReduce, NcclAllReduce };
const char* cross_device_ops_name(CrossDeviceOps ops);

// RAII: makes a strategy current on this thread (variables created inside are created by
// it). Entering a different strategy's scope inside another raises, as in TensorFlow.
class StrategyScope {
 public:
  explicit StrategyScope(Strategy& strategy);
  ~StrategyScope();
  StrategyScope(StrategyScope&& other) noexcept;
  StrategyScope(const StrategyScope&) = delete;
  StrategyScope& operator=(const StrategyScope&) = delete;

 private:
  Strategy* strategy_;
  std::unique_ptr<autograd::VariableCreatorScope> creator_;
};

// Passed to experimental_distribute_values_from_function.
struct ValueContext {
  int replica_id_in_sync_group = 0;
  int num_replicas_in_sync = 1;
};

// tf.distribute.StrategyExtended: lower-level operations.
class StrategyExtended {
 public:
  explicit StrategyExtended(Strategy& s) : strategy_(s) {}
  // Reduces a per-replica value onto `destination` (cross-replica context).
  Tensor reduce_to(ReduceOp op, const PerReplica<Tensor>& value, Device destination) const;
  std::vector<Tensor> batch_reduce_to(ReduceOp op, const std::vector<PerReplica<Tensor>>& values,
                                      Device destination) const;
  // Applies fn to every component of var (cross-replica context): fn(component, index).
  void update(const Variable& var, const std::function<void(const Tensor&, int)>& fn) const;
  const std::vector<Device>& worker_devices() const;
  std::vector<Device> parameter_devices() const;

 private:
  Strategy& strategy_;
};

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  virtual std::string name() const = 0;
  StrategyScope scope() { return StrategyScope(*this); }
  int num_replicas_in_sync() const { return int(devices_.size()) * num_workers_; }
  int num_local_replicas() const { return int(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }
  StrategyExtended& extended() { return extended_; }

  // Runs fn(args...) once per local replica; PerReplica arguments give each replica its
  // component. Returns a PerReplica of the results (or nothing for void fn).
  template <typename Fn, typename... Args>
  auto run(Fn&& fn, const Args&... args) {
    using R = std::invoke_result_t<Fn&, decltype(select_replica(args, 0))...>;
    if constexpr (std::is_void_v<R>) {
      run_replicas([&](int r) { fn(select_replica(args, r)...); });
    } else {
      std::vector<std::optional<R>> results(size_t(num_local_replicas()));
      run_replicas([&](int r) { results[size_t(r)].emplace(fn(select_replica(args, r)...)); });
      std::vector<R> out;
      out.reserve(results.size());
      for (auto& v : results) out.push_back(std::move(*v));
      return PerReplica<R>(std::move(out));
    }
  }

  // Reduces across replicas (cross-replica context). With an axis, also reduces along it;
  // MEAN then divides by the true number of elements over all replicas, so an uneven
  // last batch averages correctly.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int64_t> axis = std::nullopt);
  Tensor reduce(ReduceOp op, const Tensor& value, std::optional<int64_t> axis = std::nullopt);
  // Concatenates every replica's value along axis.
  Tensor gather(const PerReplica<Tensor>& value, int64_t axis);
  std::vector<Tensor> experimental_local_results(const PerReplica<Tensor>& value) const { return value.values(); }

  DistributedDataset experimental_distribute_dataset(const data::Dataset& dataset);
  DistributedDataset distribute_datasets_from_function(
      const std::function<data::Dataset(const data::InputContext&)>& fn);
  PerReplica<Tensor> experimental_distribute_values_from_function(
      const std::function<Tensor(const ValueContext&)>& fn);

  // Builds the impl of a variable created in this strategy's scope.
  virtual std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                                  const autograd::VariableOptions& options) = 0;
  // Devices holding variables (the replicas' for mirrored, the parameter device for central).
  virtual std::vector<Device> parameter_devices() const { return devices_; }
  // The local replica context of replica r (valid for the strategy's lifetime).
  LocalReplicaContext& replica_context(int replica) const;

  // Index of this worker and the number of workers (1 for single-process strategies).
  int worker_index() const { return worker_index_; }
  int num_workers() const { return num_workers_; }
  const CommunicationOptions& communication_options() const { return options_; }

 protected:
  Strategy(std::vector<Device> devices, CommunicationOptions options = {});
  void set_workers(int index, int count) { worker_index_ = index, num_workers_ = count; }
  void run_replicas(const std::function<void(int)>& body);

 private:
  friend class StrategyScope;
  std::vector<Device> devices_;
  CommunicationOptions options_;
  int worker_index_ = 0, num_workers_ = 1;
  StrategyExtended extended_;
  std::shared_ptr<InProcessGroup> group_;
  std::vector<std::unique_ptr<LocalReplicaContext>> contexts_;
  std::unique_ptr<ReplicaThreads> threads_;
};

// The strategy of the innermost active scope on this thread, or the default strategy.
Strategy& get_strategy();
// True inside a non-default strategy's scope (or its replica threads).
bool has_strategy();

// ---- concrete strategies ----

// The pass-through strategy used when none is active: one replica, no distribution.
class DefaultStrategy final : public Strategy {
 public:
  static DefaultStrategy& instance();
  std::string name() const override { return "default"; }
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;

 private:
  DefaultStrategy();
};

// One replica on one device; variables placed there.
class OneDeviceStrategy final : public Strategy {
 public:
  explicit OneDeviceStrategy(Device device = Device());
  std::string name() const override { return "one_device"; }
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;
};

// One replica per device, variables mirrored on every device and kept equal by identical
// updates. Without devices: every GPU if any, else `num_cpu_replicas` logical CPU devices
// (cpu:0..N-1; default 1).
class MirroredStrategy : public Strategy {
 public:
  explicit MirroredStrategy(std::vector<Device> devices = {},
                            CrossDeviceOps cross_device_ops = CrossDeviceOps::Default,
                            CommunicationOptions options = {});
  static std::vector<Device> cpu_devices(int n);
  std::string name() const override { return "mirrored"; }
  CrossDeviceOps cross_device_ops() const { return cross_device_ops_; }
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;

 private:
  CrossDeviceOps cross_device_ops_;
};

// Replicas compute on `compute_devices`; every variable has one copy on the parameter
// device, read by all replicas and updated once per step.
class CentralStorageStrategy final : public Strategy {
 public:
  explicit CentralStorageStrategy(std::vector<Device> compute_devices = {},
                                  std::optional<Device> parameter_device = std::nullopt);
  std::string name() const override { return "central_storage"; }
  std::vector<Device> parameter_devices() const override { return {parameter_device_}; }
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;

 private:
  Device parameter_device_;
};

}  // namespace strata::distribute
