#include <strata/distribute/strategy.h>

#include <algorithm>
#include <thread>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/thread_pool.h>
#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/collective/peer_failure.h>
#include <strata/distribute/collective/nccl_communicator.h>
#include <strata/distribute/cross_worker.h>
#include <strata/distribute/device_fetch.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/distributed_variable.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/replica_pipelines_stage.h>
#include <strata/distribute/replica_threads.h>

namespace strata::distribute {

namespace {
// The strategies whose scopes are active on this thread, innermost last.
thread_local std::vector<Strategy*> t_strategies;
// The strategy owning the calling replica thread (nullptr on other threads).
thread_local const Strategy* t_replica_thread_of = nullptr;

std::string quoted(const Strategy& s) { return "'" + s.name() + "'"; }
}  // namespace

Strategy& get_strategy() {
  return t_strategies.empty() ? static_cast<Strategy&>(DefaultStrategy::instance()) : *t_strategies.back();
}

bool has_strategy() { return !t_strategies.empty() && !t_strategies.back()->is_default(); }

// ---- scope ----

StrategyScope::StrategyScope(Strategy& strategy) : strategy_(&strategy) {
  if (strategy.is_default()) {
    STRATA_CHECK(!has_strategy(), "Strategy::scope: cannot enter the default strategy's scope inside the scope of the ",
                 quoted(*t_strategies.back()), " strategy (strategy scopes must not be nested)");
  } else {
    for (const Strategy* s : t_strategies) {
      STRATA_CHECK(s == &strategy || s->is_default(), "Strategy::scope: mixing different strategies: cannot enter the ",
                   quoted(strategy), " strategy's scope inside the scope of a different ", quoted(*s), " strategy");
    }
  }
  enter();
}

StrategyScope::StrategyScope(Strategy& strategy, Unchecked) : strategy_(&strategy) { enter(); }

void StrategyScope::enter() {
  t_strategies.push_back(strategy_);
  creator_ = std::make_unique<autograd::VariableCreatorScope>(
      [s = strategy_](const Tensor& initial, const autograd::VariableOptions& options) {
        return s->make_variable(initial, options);
      });
}

StrategyScope::StrategyScope(StrategyScope&& other) noexcept
    : strategy_(other.strategy_), creator_(std::move(other.creator_)) {
  other.strategy_ = nullptr;
}

StrategyScope::~StrategyScope() {
  if (!strategy_) return;
  creator_.reset();
  auto it = std::find(t_strategies.rbegin(), t_strategies.rend(), strategy_);
  if (it != t_strategies.rend()) t_strategies.erase(std::next(it).base());
}

// ---- Strategy ----

Strategy::Strategy(std::vector<Device> devices, CommunicationOptions options, CrossDeviceOps cross_device_ops,
                   double local_timeout_seconds)
    : devices_(std::move(devices)), options_(options), extended_(*this) {
  STRATA_CHECK(!devices_.empty(), "Strategy: at least one device is required");
  for (size_t i = 0; i < devices_.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      // A GPU listed again is one more logical replica on it (virtual GPUs); logical CPU
      // devices are free to name (cpu:N), so a repeated one is a mistake.
      STRATA_CHECK(!(devices_[i] == devices_[j]) || devices_[i].is_cuda(), "Strategy: device ", devices_[i],
                   " is listed twice");
    }
  }
  STRATA_CHECK(options_.timeout_seconds > 0, "Strategy: CommunicationOptions::timeout_seconds must be positive, got ",
               options_.timeout_seconds);
  STRATA_CHECK(options_.bytes_per_pack >= 0, "Strategy: CommunicationOptions::bytes_per_pack must be >= 0, got ",
               options_.bytes_per_pack);
  cross_device_ops_ = resolve_cross_device_ops(cross_device_ops, devices_);
  group_ = std::make_shared<InProcessGroup>(int(devices_.size()),
                                            local_timeout_seconds > 0 ? local_timeout_seconds : options_.timeout_seconds,
                                            in_process_algorithm(cross_device_ops_));
  gradient_group_ = std::make_shared<InProcessGroup>(group_->size(), group_->timeout_seconds(), group_->algorithm());
  if (cross_device_ops_ == CrossDeviceOps::NcclAllReduce && devices_.size() > 1) {
    CommunicationOptions local = options_;
    if (local_timeout_seconds > 0) local.timeout_seconds = local_timeout_seconds;
    local_collectives_ = nccl_backend()->local_group(devices_, local);
  }
  for (size_t r = 0; r < devices_.size(); ++r) {
    contexts_.push_back(std::make_unique<LocalReplicaContext>(*this, int(r), devices_[r], group_, gradient_group_));
  }
}

Strategy::~Strategy() = default;

LocalReplicaContext& Strategy::replica_context(int replica) const {
  STRATA_CHECK(replica >= 0 && replica < num_local_replicas(), "Strategy::replica_context: replica ", replica,
               " out of range for ", num_local_replicas(), " local replicas");
  return *contexts_[size_t(replica)];
}

LocalReplicaContext* Strategy::current_local_context() const {
  auto* ctx = dynamic_cast<LocalReplicaContext*>(detail::current_replica_context());
  return ctx && &ctx->strategy() == this ? ctx : nullptr;
}

Device Strategy::reduce_device() const { return devices_[0].is_cpu() ? Device() : devices_[0]; }

void Strategy::require_cross_replica(const std::string& method, const std::string& hint) const {
  if (ReplicaContext* ctx = detail::current_replica_context()) {
    if (&ctx->strategy() == this) {
      fail(method, ": called in replica context (inside run() of the ", quoted(*this), " strategy); it needs cross-replica context",
           hint.empty() ? std::string(", use get_replica_context()->merge_call()") : ", " + hint);
    }
    fail(method, ": mixing different strategies: called on the ", quoted(*this), " strategy inside run() of the ",
         quoted(ctx->strategy()), " strategy");
  }
  for (const Strategy* s : t_strategies) {
    STRATA_CHECK(s == this || s->is_default(), method, ": mixing different strategies: called on the ", quoted(*this),
                 " strategy inside the scope of a different ", quoted(*s), " strategy");
  }
}

void Strategy::set_shard_optimizer_state(bool on) {
  require_cross_replica("Strategy::set_shard_optimizer_state", "set it before run()");
  STRATA_CHECK(!on || dynamic_cast<const CentralStorageStrategy*>(this) == nullptr,
               "Strategy::set_shard_optimizer_state: the ", quoted(*this),
               " strategy keeps a single copy of every variable and of its optimizer slots on the parameter device, "
               "so there is no replicated optimizer state to shard (ZeRO-1 applies to mirrored and multi_worker)");
  shard_optimizer_state_.store(on, std::memory_order_relaxed);
}

void Strategy::set_share_cpu_variables(bool on) {
  require_cross_replica("Strategy::set_share_cpu_variables", "set it before run()");
  share_cpu_variables_.store(on, std::memory_order_relaxed);
}

void Strategy::check_run_allowed() const {
  require_cross_replica("Strategy::run", "call run() from cross-replica context only");
  STRATA_CHECK(t_replica_thread_of == nullptr, "Strategy::run: called on a replica thread of the ",
               quoted(*t_replica_thread_of), " strategy (inside merge_call or run_once); run() cannot be nested");
}

void Strategy::run_replicas(const std::function<void(int)>& body) {
  check_run_allowed();
  const int n = num_local_replicas();
  if (n == 1) {
    // One replica runs on the caller's thread, in replica context; its exceptions
    // propagate unchanged. Nothing is shared between callers (the context's collectives
    // are identities), so threads may run a single-replica strategy concurrently.
    StrategyScope scope(*this, StrategyScope::Unchecked{});
    struct ContextGuard {
      ReplicaContext* saved = detail::current_replica_context();
      ~ContextGuard() { detail::set_replica_context(saved); }
    } guard;
    detail::set_replica_context(contexts_[0].get());
    DeviceGuard on_device(devices_[0]);  // as TensorFlow does inside strategy.run
    LocalReplicaContext& ctx = *contexts_[0];
    GradientReducer* reducer = ctx.gradient_hook();  // several workers only
    if (!reducer) {
      body(0);
      return;
    }
    autograd::GradientHookScope hook(reducer);
    try {
      body(0);
    } catch (...) {
      ctx.end_step(/*failed=*/true);  // the buckets in flight end within their timeouts
      throw;
    }
    ctx.end_step(/*failed=*/false);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mutex_);  // one multi-replica run at a time
  if (!threads_) {
    const int cores = ComputeSlot::capacity();
    threads_ = std::make_unique<ReplicaThreads>(n, [this, n, cores](int) -> std::shared_ptr<void> {
      // Replica threads and the intra-op pool share the cores (PLATFORM.md).
      set_thread_parallelism_limit(std::max(1, cores / n));
      t_replica_thread_of = this;
      return std::shared_ptr<StrategyScope>(new StrategyScope(*this, StrategyScope::Unchecked{}));
    });
  }
  group_->begin_round();
  gradient_group_->begin_round();
  if (local_collectives_) local_collectives_->begin_round();
  std::mutex error_mutex;
  std::string first_error;
  int first_replica = -1;
  // A failure of another worker, kept as such (launchers tell causes by it). It wins over
  // an earlier-recorded local error: with hierarchical reduction, the replica that runs the
  // cross-worker call may record its PeerFailure after a sibling recorded the local abort
  // that this same failure caused.
  std::optional<PeerFailure> peer_failure;
  int peer_replica = -1;
  std::string peer_error;
  auto record = [&](int r, const std::string& what, const PeerFailure* peer = nullptr) {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (first_replica < 0) {
        first_replica = r;
        first_error = what;
      }
      if (peer && !peer_failure) {
        peer_failure = *peer;
        peer_replica = r;
        peer_error = what;
      }
    }
    group_->abort("replica " + std::to_string(r) + " failed: " + what);
    gradient_group_->abort("replica " + std::to_string(r) + " failed: " + what);
    if (local_collectives_) local_collectives_->abort("replica " + std::to_string(r) + " failed: " + what);
  };
  threads_->run([&](int r) {
    {
      ComputeSlot slot;  // compute only while holding one of the cores
      detail::set_replica_context(contexts_[size_t(r)].get());
      // The replica's device is current: creation ops and temporaries land on it.
      DeviceGuard on_device(devices_[size_t(r)]);
      LocalReplicaContext& ctx = *contexts_[size_t(r)];
      // Runs fn, recording its failure (which aborts the groups); true when it threw.
      auto guarded = [&](const std::function<void()>& fn) {
        try {
          fn();
          return false;
        } catch (const PeerFailure& e) {
          record(r, e.what(), &e);
        } catch (const std::exception& e) {
          record(r, e.what());
        } catch (...) {
          record(r, "unknown exception");
        }
        return true;
      };
      const bool failed = guarded([&] {
        autograd::GradientHookScope hook(ctx.gradient_hook());
        body(r);
      });
      // The gradient buckets still in flight: waited for after a finished step; after a
      // failed one, released by the abort record() made, and forgotten.
      guarded([&] { ctx.end_step(failed); });
      detail::set_replica_context(nullptr);
    }
    group_->finish(r);
    gradient_group_->finish(r);
    if (local_collectives_) local_collectives_->finish(r);
  });
  if (peer_failure) throw peer_failure->with_message("replica " + std::to_string(peer_replica) + ": " + peer_error);
  if (first_replica >= 0) throw Error("replica " + std::to_string(first_replica) + ": " + first_error);
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int64_t> axis) {
  require_cross_replica("Strategy::reduce");
  autograd::StopRecording no_tape;
  STRATA_CHECK(int(value.size()) == num_local_replicas(), "Strategy::reduce: the per-replica value has ", value.size(),
               " components but the ", quoted(*this), " strategy has ", num_local_replicas(), " local replicas");
  for (size_t r = 0; r < value.size(); ++r) {
    STRATA_CHECK(value[r].defined(), "Strategy::reduce: replica ", r, "'s value is undefined");
  }
  const DType dtype = value[0].dtype();
  if (worker_comm_) return cross_worker_reduce(*worker_comm_, cross_device_ops_, op, value.values(), axis,
                                               num_replicas_in_sync(), reduce_device());
  if (!axis) {
    if (op == ReduceOp::Mean && !is_floating(dtype)) {
      return cast(extended_.reduce_to(ReduceOp::Sum, value, reduce_device()), kFloat64) / double(value.size());
    }
    return extended_.reduce_to(op, value, reduce_device());
  }
  std::vector<Tensor> partial;
  int64_t count = 0;
  for (const Tensor& v : value) {
    const int64_t a = normalize_axis(*axis, v.ndim(), "Strategy::reduce");
    count += v.dim(a);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean: partial.push_back(sum(v, std::vector<int64_t>{a})); break;
      case ReduceOp::Max:
        if (v.dim(a) > 0) partial.push_back(max(v, std::vector<int64_t>{a}));
        break;
      case ReduceOp::Min:
        if (v.dim(a) > 0) partial.push_back(min(v, std::vector<int64_t>{a}));
        break;
    }
  }
  STRATA_CHECK(!partial.empty(), "Strategy::reduce(", reduce_op_name(op), "): every replica's value is empty along axis ",
               *axis, ", so there is nothing to take the ", reduce_op_name(op), " of");
  const ReduceOp across = op == ReduceOp::Mean ? ReduceOp::Sum : op;
  Tensor total = cross_device_reduce(cross_device_ops_, across, partial, reduce_device());
  if (op != ReduceOp::Mean) return total;
  // The true element count, not the replica count: an uneven split averages right.
  return is_floating(total.dtype()) ? total / double(count) : cast(total, kFloat64) / double(count);
}

Tensor Strategy::reduce(ReduceOp op, const Tensor& value, std::optional<int64_t> axis) {
  require_cross_replica("Strategy::reduce");
  STRATA_CHECK(value.defined(), "Strategy::reduce: undefined value");
  if (axis) {
    // As TensorFlow: run() would give every replica the same value, so reduce n copies.
    return reduce(op, PerReplica<Tensor>(std::vector<Tensor>(size_t(num_local_replicas()), value)), axis);
  }
  return extended_.reduce_to(op, value, reduce_device());
}

Tensor Strategy::gather(const PerReplica<Tensor>& value, int64_t axis) {
  require_cross_replica("Strategy::gather", "use get_replica_context()->all_gather() in replica context");
  autograd::StopRecording no_tape;
  STRATA_CHECK(int(value.size()) == num_local_replicas(), "Strategy::gather: the per-replica value has ", value.size(),
               " components but the ", quoted(*this), " strategy has ", num_local_replicas(), " local replicas");
  std::vector<Tensor> parts;
  const Device dest = reduce_device();
  for (const Tensor& v : value) {
    STRATA_CHECK(v.defined(), "Strategy::gather: undefined component");
    normalize_axis(axis, v.ndim(), "Strategy::gather");
    parts.push_back(same_memory(v.device(), dest) ? v : v.to(dest));
  }
  Tensor out = concat(parts, axis);
  if (!(out.device() == dest)) out = out.to(dest);
  if (worker_comm_) out = cross_worker_concat(*worker_comm_, out, axis);
  return out;
}

Tensor Strategy::gather(const Tensor& value, int64_t axis) {
  require_cross_replica("Strategy::gather", "use get_replica_context()->all_gather() in replica context");
  STRATA_CHECK(value.defined(), "Strategy::gather: undefined value");
  normalize_axis(axis, value.ndim(), "Strategy::gather");
  return value.clone();
}

std::vector<Tensor> Strategy::experimental_local_results(const PerReplica<Tensor>& value) const {
  return value.values();
}

std::vector<Tensor> Strategy::experimental_local_results(const Variable& var) const {
  if (auto* d = dynamic_cast<DistributedVariableImpl*>(&var.impl())) return d->components();
  return {var.value()};
}

DistributedDataset Strategy::experimental_distribute_dataset(const data::Dataset& dataset, const InputOptions& options) {
  require_cross_replica("Strategy::experimental_distribute_dataset");
  STRATA_CHECK(options.experimental_replication_mode == InputReplicationMode::PerWorker,
               "Strategy::experimental_distribute_dataset: InputOptions::experimental_replication_mode = ",
               input_replication_mode_name(options.experimental_replication_mode),
               " is only supported by distribute_datasets_from_function (a dataset of global batches is split "
               "between the replicas)");
  // Across workers, DistributedDataset shards by options.auto_shard_policy and splits each
  // global batch between the workers (see distributed_dataset.h).
  return DistributedDataset(*this, dataset, DistributedDataset::Mode::SplitGlobalBatches, options);
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const data::InputContext&)>& fn, const InputOptions& options) {
  require_cross_replica("Strategy::distribute_datasets_from_function");
  if (options.experimental_replication_mode == InputReplicationMode::PerReplica) {
    // One pipeline per replica of the job: this worker's replicas are pipelines
    // [worker * n, (worker + 1) * n) of num_replicas_in_sync.
    const int n = num_local_replicas();
    std::vector<data::Dataset> pipelines;
    for (int r = 0; r < n; ++r) {
      pipelines.push_back(fn(data::InputContext(num_replicas_in_sync(), worker_index_ * n + r, num_replicas_in_sync())));
    }
    return DistributedDataset(*this,
                              combine_replica_pipelines(pipelines, devices_, options.experimental_fetch_to_device),
                              DistributedDataset::Mode::PerReplicaPipelines, options);
  }
  data::InputContext ctx(num_workers_, worker_index_, num_replicas_in_sync());
  return DistributedDataset(*this, fn(ctx), DistributedDataset::Mode::PerReplicaElements, options);
}

PerReplica<Tensor> Strategy::experimental_distribute_values_from_function(
    const std::function<Tensor(const ValueContext&)>& fn) {
  require_cross_replica("Strategy::experimental_distribute_values_from_function");
  std::vector<Tensor> values;
  for (int r = 0; r < num_local_replicas(); ++r) {
    Tensor v = fn(ValueContext{worker_index_ * num_local_replicas() + r, num_replicas_in_sync()});
    STRATA_CHECK(v.defined(), "experimental_distribute_values_from_function: the function returned an undefined "
                 "tensor for replica ", r);
    // On a GPU an upload from the host goes on the device's input stream, ordered before
    // the replica's work, as distributed datasets fetch (device_fetch.h).
    values.push_back(place_on(v, devices_[size_t(r)], /*fetch=*/true));
  }
  return PerReplica<Tensor>(std::move(values));
}

std::shared_ptr<autograd::VariableImpl> Strategy::make_variable(const Tensor& initial,
                                                                const autograd::VariableOptions& options) {
  STRATA_CHECK(initial.defined(), "Variable '", options.name, "': undefined initial value");
  LocalReplicaContext* ctx = current_local_context();
  if (ctx && num_local_replicas() > 1) {
    // Every replica creates the variable; the first one's is built and shared (TensorFlow
    // creates variables in cross-replica context through merge_call). The description
    // makes replicas that create different variables fail instead of pairing them up.
    const std::string what = "create_variable(" + options.name + ", " + dtype_name(initial.dtype()) +
                             shape_str(initial.shape()) + ", " + autograd::synchronization_name(options.synchronization) +
                             ", " + autograd::aggregation_name(options.aggregation) + ")";
    return std::static_pointer_cast<autograd::VariableImpl>(
        ctx->run_once_shared(what, [&] { return std::static_pointer_cast<void>(create_variable(initial, options)); }));
  }
  return create_variable(initial, options);
}

// ---- StrategyExtended ----

Tensor StrategyExtended::reduce_to(ReduceOp op, const PerReplica<Tensor>& value, Device destination) const {
  strategy_.require_cross_replica("StrategyExtended::reduce_to");
  STRATA_CHECK(value.size() > 0, "StrategyExtended::reduce_to: empty per-replica value");
  Communicator* workers = strategy_.worker_communicator();
  if (!workers) return cross_device_reduce(strategy_.cross_device_ops(), op, value.values(), destination);
  // Several workers: over every replica of the job, as TensorFlow's collective reduce_to
  // (the local replicas first, Mean as a Sum divided by the job's replicas). Unlike
  // Strategy::reduce, the dtype is kept (a Mean of integers truncates, as fold_reduce).
  const ReduceOp local_op = op == ReduceOp::Mean ? ReduceOp::Sum : op;
  Tensor local = cross_device_reduce(strategy_.cross_device_ops(), local_op, value.values(), destination);
  return cross_worker_all_reduce(*workers, op, local, strategy_.num_replicas_in_sync());
}

Tensor StrategyExtended::reduce_to(ReduceOp op, const Tensor& value, Device destination) const {
  strategy_.require_cross_replica("StrategyExtended::reduce_to");
  STRATA_CHECK(value.defined(), "StrategyExtended::reduce_to: undefined value");
  STRATA_CHECK(op != ReduceOp::Sum || strategy_.num_replicas_in_sync() == 1,
               "StrategyExtended::reduce_to: a non-distributed value (a plain Tensor, the same on every replica) cannot "
               "be reduced with SUM across ", strategy_.num_replicas_in_sync(),
               " replicas; reduce the PerReplica value that run() returned");
  Tensor out = Tensor::empty(value.shape(), value.dtype(), destination);
  out.copy_(value);
  return out;
}

Mirrored<Tensor> StrategyExtended::reduce_to(ReduceOp op, const PerReplica<Tensor>& value,
                                             const Variable& destination) const {
  std::vector<Tensor> out;
  for (const Tensor& component : strategy_.experimental_local_results(destination)) {
    if (out.empty() || !strategy_.worker_communicator()) {
      out.push_back(reduce_to(op, value, component.device()));
      continue;
    }
    // Across workers: one collective, its result copied to the other components' devices.
    Tensor copy = Tensor::empty(out[0].shape(), out[0].dtype(), component.device());
    copy.copy_(out[0]);
    out.push_back(copy);
  }
  return Mirrored<Tensor>(std::move(out));
}

std::vector<Tensor> StrategyExtended::batch_reduce_to(ReduceOp op, const std::vector<PerReplica<Tensor>>& values,
                                                      Device destination) const {
  std::vector<Tensor> out;
  out.reserve(values.size());
  for (const auto& v : values) out.push_back(reduce_to(op, v, destination));
  return out;
}

void StrategyExtended::update(const Variable& var, const std::function<void(const Tensor&, int)>& fn) const {
  autograd::StopRecording no_tape;
  auto apply = [&] {
    const std::vector<Tensor> components = strategy_.experimental_local_results(var);
    // One copy (share_cpu_variables): the components are views of the first, updated once.
    const auto* d = dynamic_cast<const DistributedVariableImpl*>(&var.impl());
    const size_t n = d ? d->copies().size() : components.size();
    for (size_t i = 0; i < n; ++i) fn(components[i], int(i));
  };
  if (LocalReplicaContext* ctx = strategy_.current_local_context()) {
    ctx->run_once_shared("update(" + var.name() + ")", [&]() -> std::shared_ptr<void> {
      apply();
      return nullptr;
    });
    return;
  }
  strategy_.require_cross_replica("StrategyExtended::update");
  apply();
}

Tensor StrategyExtended::read_var(const Variable& var) const {
  strategy_.require_cross_replica("StrategyExtended::read_var");
  return var.value();
}

const std::vector<Device>& StrategyExtended::worker_devices() const { return strategy_.devices(); }
std::vector<Device> StrategyExtended::parameter_devices() const { return strategy_.parameter_devices(); }

}  // namespace strata::distribute
