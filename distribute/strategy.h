// Strategy: how a training step written once runs on one device, on several replicas of
// one machine, or across workers — tf.distribute.Strategy in C++.
//
//   distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
//   { auto scope = strategy.scope(); model = ...; opt = ...; }   // mirrored variables
//   for (auto& batch : strategy.experimental_distribute_dataset(ds)) {
//     auto per_replica = strategy.run(step, batch);            // step(batch) per replica
//     Tensor loss = strategy.reduce(ReduceOp::Sum, per_replica);
//   }
//
// run() executes fn once per local replica, each on its own long-lived replica thread
// with a thread-local ReplicaContext and that replica's device (a single replica runs on
// the caller's thread). Replica threads share the cores with the intra-op pool: a replica
// computes only while it holds one of the machine's compute slots (one per core) and gives
// it up while it waits in a collective, and its ops use at most cores/replicas intra-op
// threads — Mirrored(N) never keeps more threads busy than there are cores. If a replica
// throws, every replica blocked in a collective is released and run() rethrows the first
// error, prefixed with its replica id ("replica 1: ..."); the strategy stays usable.
//
// Contexts follow TensorFlow: reduce, gather, run and the dataset functions need
// cross-replica context (outside run, or inside merge_call); calling them from replica
// context, or using a strategy inside the scope of a different one, throws.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/autograd/variable.h>
#include <strata/core/tensor.h>
#include <strata/data/dataset.h>
#include <strata/data/input_context.h>
#include <strata/distribute/collective/communicator.h>
#include <strata/distribute/cross_device_ops.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/input_options.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/replica_context.h>
#include <strata/distribute/values.h>

namespace strata::distribute {

class Strategy;
class ReplicaThreads;
class InProcessGroup;
class LocalCollectiveGroup;

// RAII: makes a strategy current on this thread (variables created inside are created by
// it). Entering a different strategy's scope inside another raises, as in TensorFlow
// (the default strategy's scope may not be entered inside any other).
class StrategyScope {
 public:
  explicit StrategyScope(Strategy& strategy);
  ~StrategyScope();
  StrategyScope(StrategyScope&& other) noexcept;
  StrategyScope(const StrategyScope&) = delete;
  StrategyScope& operator=(const StrategyScope&) = delete;
  StrategyScope& operator=(StrategyScope&&) = delete;

 private:
  friend class Strategy;
  struct Unchecked {};
  StrategyScope(Strategy& strategy, Unchecked);  // replica threads: no nesting checks
  void enter();

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
  // Reduces a per-replica value onto `destination` through the strategy's cross-device
  // ops (cross-replica context); with several workers, over every replica of every worker
  // (a collective: each worker calls it in the same order, as batch_reduce_to and the
  // Variable overload, which reduces once).
  Tensor reduce_to(ReduceOp op, const PerReplica<Tensor>& value, Device destination) const;
  // A value that is the same on every replica (tf's reduce_non_distributed_value): Mean
  // (and Max/Min) return it; Sum raises with more than one replica.
  Tensor reduce_to(ReduceOp op, const Tensor& value, Device destination) const;
  // Reduces onto every component device of `destination`: one result per component.
  Mirrored<Tensor> reduce_to(ReduceOp op, const PerReplica<Tensor>& value, const Variable& destination) const;
  std::vector<Tensor> batch_reduce_to(ReduceOp op, const std::vector<PerReplica<Tensor>>& values,
                                      Device destination) const;
  // Applies fn(component, index) to every component of var. In cross-replica context it
  // runs here; in replica context every replica must call it and the components are
  // updated once (tf's merge_call path).
  void update(const Variable& var, const std::function<void(const Tensor& component, int index)>& fn) const;
  // The value of var as cross-replica code sees it (the aggregate for sync-on-read).
  Tensor read_var(const Variable& var) const;
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
  // True for the pass-through default strategy (its scope is "no strategy").
  virtual bool is_default() const { return false; }
  StrategyScope scope() { return StrategyScope(*this); }
  int num_replicas_in_sync() const { return int(devices_.size()) * num_workers_; }
  int num_local_replicas() const { return int(devices_.size()); }
  // The replicas' devices (tf's extended.worker_devices).
  const std::vector<Device>& devices() const { return devices_; }
  StrategyExtended& extended() { return extended_; }
  // The resolved cross-device ops (never Default).
  CrossDeviceOps cross_device_ops() const { return cross_device_ops_; }

  // Runs fn(args...) once per local replica; PerReplica arguments give each replica its
  // component, other arguments are passed to every replica. Returns a PerReplica of the
  // results (nothing for a void fn). Cross-replica context only. The constraints
  // (distribute/values.h) reject, by name, an argument that is an std::optional of a
  // per-replica value (RunArgument) and a fn that cannot take what each replica
  // receives (ReplicaCallable).
  template <typename Fn, RunArgument... Args>
    requires ReplicaCallable<Fn, Args...>
  auto run(Fn&& fn, const Args&... args) {
    using R = std::decay_t<std::invoke_result_t<Fn&, decltype(select_replica(args, 0))...>>;
    (check_run_argument(args), ...);
    if constexpr (std::is_void_v<R>) {
      run_replicas([&]([[maybe_unused]] int r) { fn(select_replica(args, r)...); });
    } else {
      std::vector<std::optional<R>> results(static_cast<size_t>(num_local_replicas()));
      run_replicas([&]([[maybe_unused]] int r) { results[size_t(r)].emplace(fn(select_replica(args, r)...)); });
      std::vector<R> out;
      out.reserve(results.size());
      for (auto& v : results) out.push_back(std::move(*v));
      return PerReplica<R>(std::move(out));
    }
  }

  // Reduces across replicas (cross-replica context). With an axis, each replica's value
  // is first reduced along it and MEAN divides by the true number of elements over all
  // replicas, so an uneven last batch (e.g. split [4, 2]) averages correctly. MEAN of
  // integers gives float64. A plain Tensor is a value the same on every replica
  // (TensorFlow's rules: MEAN returns it, SUM without an axis raises with > 1 replica).
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int64_t> axis = std::nullopt);
  Tensor reduce(ReduceOp op, const Tensor& value, std::optional<int64_t> axis = std::nullopt);
  // Concatenates every replica's value along axis (cross-replica context; extents along
  // axis may differ, e.g. an uneven last batch).
  Tensor gather(const PerReplica<Tensor>& value, int64_t axis);
  Tensor gather(const Tensor& value, int64_t axis);
  // The local components: of a per-replica value, of a variable (one per replica for
  // mirrored and sync-on-read, one for others), or the tensor itself.
  std::vector<Tensor> experimental_local_results(const PerReplica<Tensor>& value) const;
  std::vector<Tensor> experimental_local_results(const Tensor& value) const { return {value}; }
  std::vector<Tensor> experimental_local_results(const Variable& var) const;

  // Splits each global batch of `dataset` across the replicas (see distributed_dataset.h).
  DistributedDataset experimental_distribute_dataset(const data::Dataset& dataset, const InputOptions& options = {});
  // Calls fn once per input pipeline with its InputContext: per worker, the dataset
  // yielding per-replica batches handed to the local replicas in turn; or per replica
  // (InputOptions::experimental_replication_mode = PerReplica), each replica reading its own.
  DistributedDataset distribute_datasets_from_function(
      const std::function<data::Dataset(const data::InputContext&)>& fn, const InputOptions& options = {});
  // fn(ValueContext) for every local replica, placed on that replica's device.
  PerReplica<Tensor> experimental_distribute_values_from_function(const std::function<Tensor(const ValueContext&)>& fn);

  // Creates the impl of a variable created in this strategy's scope. Inside run() with
  // several replicas, every replica must create the same variables in the same order:
  // the first replica's creates it (in cross-replica context) and all receive it.
  std::shared_ptr<autograd::VariableImpl> make_variable(const Tensor& initial, const autograd::VariableOptions& options);
  // Devices holding variables (the replicas' for mirrored, the parameter device for central).
  virtual std::vector<Device> parameter_devices() const { return devices_; }
  // The local replica context of replica r (valid for the strategy's lifetime).
  LocalReplicaContext& replica_context(int replica) const;
  // The calling thread's replica context of this strategy, or nullptr (cross-replica
  // context, or another strategy's replica).
  LocalReplicaContext* current_local_context() const;

  // Index of this worker and the number of workers (1 for single-process strategies).
  int worker_index() const { return worker_index_; }
  int num_workers() const { return num_workers_; }
  // The communicator joining the worker processes (MultiWorkerMirroredStrategy), or
  // nullptr for single-process strategies. When set, every reduction (replica-context
  // all_reduce / all_gather / barrier, and reduce / gather) is hierarchical: the local
  // replicas first, then across workers through it, and the result back to every local
  // replica. Only one thread at a time issues its collectives (the main thread in
  // cross-replica context, the first local replica inside run()).
  Communicator* worker_communicator() const { return worker_comm_.get(); }
  const CommunicationOptions& communication_options() const { return options_; }
  // Where cross-replica results (reduce, gather) are placed.
  Device reduce_device() const;
  // The NCCL communicators of the local replicas (one per GPU) when the cross-device ops
  // are NcclAllReduce with several local replicas; nullptr otherwise (the replicas then
  // reduce through the in-process backend, in device memory on GPUs).
  LocalCollectiveGroup* local_collectives() const { return local_collectives_.get(); }

  // ZeRO-1 (docs/ZERO.md): when on, optimizers whose update is elementwise keep on each
  // replica only its 1/num_replicas_in_sync() share of the slots of mirrored variables;
  // gradients are reduce-scattered, each replica updates its share of every variable and
  // the parameters are all-gathered (train/sharded_optimizer_state.h). Set it before the
  // optimizer creates its slots (its first step, build() or a restore). Cross-replica
  // context only; refused by CentralStorageStrategy, whose variables and slots already
  // have a single copy. No effect with one replica in sync.
  void set_shard_optimizer_state(bool on);
  bool shard_optimizer_state() const { return shard_optimizer_state_.load(std::memory_order_relaxed); }

  // Mirrored variables whose local replicas all run on logical CPU devices (cpu:0..N-1,
  // one memory). Off (the default, as TensorFlow): each replica has its own copy. On:
  // each such variable and its optimizer slots are one copy that every local replica
  // reads, and an elementwise optimizer update is split between the replicas (each
  // updates its own range, then they meet) instead of N identical copies each updated
  // whole: 1/N of the memory and of the update's work. What replicas read is the same
  // either way; what differs is where copies could be made to differ:
  //  - an update in replica context with aggregation None (the replica's own copy)
  //    raises, as TensorFlow's does;
  //  - StrategyExtended::update calls its function once, on component 0;
  //  - experimental_local_results gives N views of the one copy.
  // Set it before the variables are created; cross-replica context only.
  void set_share_cpu_variables(bool on);
  bool share_cpu_variables() const { return share_cpu_variables_.load(std::memory_order_relaxed); }

  // Throws unless the calling thread may call a cross-replica method of this strategy:
  // not in its replica context, not inside a different strategy's scope or replica.
  void require_cross_replica(const std::string& method, const std::string& hint = "") const;

 protected:
  // local_timeout_seconds bounds the waits among local replicas (0: the options'
  // timeout); a multi-worker strategy makes it longer than the cross-worker timeout so
  // that the cross-worker error (naming the lost worker) is the one reported.
  Strategy(std::vector<Device> devices, CommunicationOptions options = {},
           CrossDeviceOps cross_device_ops = CrossDeviceOps::ReductionToOneDevice, double local_timeout_seconds = 0);
  // Builds a variable's impl, called once in cross-replica context.
  virtual std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                                  const autograd::VariableOptions& options) = 0;
  void set_workers(int index, int count) { worker_index_ = index, num_workers_ = count; }
  void set_worker_communicator(std::shared_ptr<Communicator> comm) { worker_comm_ = std::move(comm); }
  // A PerReplica argument of run() must have one value per local replica.
  template <typename T>
  void check_run_argument(const T& arg) const {
    if constexpr (is_per_replica<T>::value) {
      STRATA_CHECK(int(arg.size()) == num_local_replicas(), "Strategy::run: a PerReplica argument has ", arg.size(),
                   " values but the '", name(), "' strategy has ", num_local_replicas(), " local replicas");
    }
  }
  void run_replicas(const std::function<void(int)>& body);

 private:
  friend class StrategyScope;
  void check_run_allowed() const;

  std::vector<Device> devices_;
  CommunicationOptions options_;
  CrossDeviceOps cross_device_ops_;
  int worker_index_ = 0, num_workers_ = 1;
  std::shared_ptr<Communicator> worker_comm_;
  StrategyExtended extended_;
  std::shared_ptr<InProcessGroup> group_;
  std::shared_ptr<InProcessGroup> gradient_group_;  // the local replicas' gradient reducers
  std::unique_ptr<LocalCollectiveGroup> local_collectives_;
  std::vector<std::unique_ptr<LocalReplicaContext>> contexts_;
  std::mutex run_mutex_;  // one run() at a time
  std::unique_ptr<ReplicaThreads> threads_;
  // Read by replica threads while they step; set from cross-replica context only.
  std::atomic<bool> shard_optimizer_state_{false};
  std::atomic<bool> share_cpu_variables_{false};
};

// The strategy of the innermost active scope on this thread, or the default strategy.
Strategy& get_strategy();
// True inside a non-default strategy's scope (or its replica threads).
bool has_strategy();

// ---- concrete strategies ----

// The pass-through strategy used when none is active: one replica on the default device,
// plain variables. instance() is the one get_strategy() returns; make_strategy("default")
// builds another instance behaving the same.
class DefaultStrategy final : public Strategy {
 public:
  DefaultStrategy();
  static DefaultStrategy& instance();
  std::string name() const override { return "default"; }
  bool is_default() const override { return true; }

 protected:
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;
};

// One replica on one device; variables placed there.
class OneDeviceStrategy final : public Strategy {
 public:
  explicit OneDeviceStrategy(Device device = Device());
  std::string name() const override { return "one_device"; }

 protected:
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;
};

// One replica per device, variables mirrored on every device and kept equal by identical
// updates. Without devices: one replica per visible GPU (reduced with NCCL when there are
// several), else one replica on cpu:0 — TensorFlow's choice; use cpu_devices(n) for n
// logical CPU devices. A GPU listed k times runs k logical replicas on it (TensorFlow's
// virtual GPUs; gpu_devices(k), strata-train --virtual-gpus k): they reduce in device
// memory, since NCCL refuses two ranks on one GPU (docs/GPU.md). cross_device_ops chooses
// how the replicas' tensors are combined (distribute/cross_device_ops.h).
class MirroredStrategy : public Strategy {
 public:
  explicit MirroredStrategy(std::vector<Device> devices = {},
                            CrossDeviceOps cross_device_ops = CrossDeviceOps::Default,
                            CommunicationOptions options = {});
  // cpu:0 .. cpu:n-1.
  static std::vector<Device> cpu_devices(int n);
  // Every visible GPU, each listed `replicas_per_gpu` times (logical GPUs); throws when
  // no GPU is visible (built without CUDA, or no device).
  static std::vector<Device> gpu_devices(int replicas_per_gpu = 1);
  // The number of GPUs visible to strata (0 without the CUDA backend or a device).
  static int visible_gpus();
  std::string name() const override { return "mirrored"; }

 protected:
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;
};

// Replicas compute on `compute_devices`; every variable has one copy on the parameter
// device (default cpu:0), read by all replicas. With several replicas the variables are
// aggregating variables: an update in replica context aggregates the replicas' values
// and is applied once (see distributed_variable.h).
class CentralStorageStrategy final : public Strategy {
 public:
  explicit CentralStorageStrategy(std::vector<Device> compute_devices = {},
                                  std::optional<Device> parameter_device = std::nullopt,
                                  CommunicationOptions options = {});
  std::string name() const override { return "central_storage"; }
  std::vector<Device> parameter_devices() const override { return {parameter_device_}; }
  Device parameter_device() const { return parameter_device_; }

 protected:
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;

 private:
  Device parameter_device_;
};

}  // namespace strata::distribute
