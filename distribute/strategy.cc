#include "distribute/strategy.h"

#include <algorithm>
#include <mutex>
#include <thread>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/ops.h"
#include "core/thread_pool.h"
#include "distribute/distributed_dataset.h"
#include "distribute/distributed_variable.h"
#include "distribute/local_replica_context.h"
#include "distribute/replica_threads.h"

namespace strata::distribute {

const char* cross_device_ops_name(CrossDeviceOps ops) {
  switch (ops) {
    case CrossDeviceOps::Default: return "default";
    case CrossDeviceOps::ReductionToOneDevice: return "ReductionToOneDevice";
    case CrossDeviceOps::HierarchicalCopyAllReduce: return "HierarchicalCopyAllReduce";
    case CrossDeviceOps::NcclAllReduce: return "NcclAllReduce";
  }
  return "?";
}

namespace {
// The strategies whose scopes are active on this thread, innermost last.
thread_local std::vector<Strategy*> t_strategies;
}  // namespace

Strategy& get_strategy() {
  return t_strategies.empty() ? static_cast<Strategy&>(DefaultStrategy::instance()) : *t_strategies.back();
}

bool has_strategy() {
  return !t_strategies.empty() && t_strategies.back() != &DefaultStrategy::instance();
}

StrategyScope::StrategyScope(Strategy& strategy) : strategy_(&strategy) {
  for (Strategy* s : t_strategies) {
    STRATA_CHECK(s == &strategy || s == &DefaultStrategy::instance(),
                 "Strategy::scope: cannot enter the scope of a '", strategy.name(),
                 "' strategy inside the scope of a different '", s->name(),
                 "' strategy (mixing different strategies is not allowed)");
  }
  t_strategies.push_back(strategy_);
  creator_ = std::make_unique<autograd::VariableCreatorScope>(
      [s = strategy_](const Tensor& initial, const autograd::VariableOptions& options) {
        return s->create_variable(initial, options);
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

Strategy::Strategy(std::vector<Device> devices, CommunicationOptions options)
    : devices_(std::move(devices)), options_(options), extended_(*this) {
  STRATA_CHECK(!devices_.empty(), "Strategy: at least one device is required");
  for (size_t i = 0; i < devices_.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      STRATA_CHECK(!(devices_[i] == devices_[j]), "Strategy: device ", devices_[i], " listed twice");
    }
  }
  group_ = std::make_shared<InProcessGroup>(int(devices_.size()), options_.timeout_seconds);
  for (size_t r = 0; r < devices_.size(); ++r) {
    contexts_.push_back(std::make_unique<LocalReplicaContext>(*this, int(r), devices_[r], group_));
  }
}

Strategy::~Strategy() = default;

LocalReplicaContext& Strategy::replica_context(int replica) const { return *contexts_[size_t(replica)]; }

void Strategy::run_replicas(const std::function<void(int)>& body) {
  const int n = num_local_replicas();
  if (n == 1) {
    // One replica runs on the caller's thread, in replica context.
    ReplicaContext* saved = detail::current_replica_context();
    detail::set_replica_context(contexts_[0].get());
    StrategyScope scope(*this);
    try {
      body(0);
    } catch (...) {
      detail::set_replica_context(saved);
      throw;
    }
    detail::set_replica_context(saved);
    return;
  }
  if (!threads_) {
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    threads_ = std::make_unique<ReplicaThreads>(n, [this, n, cores](int r) {
      // Replica threads and the intra-op pool share the cores (PLATFORM.md).
      set_thread_parallelism_limit(std::max(1, cores / n));
      detail::set_replica_context(contexts_[size_t(r)].get());
      t_strategies.push_back(this);
      static thread_local std::unique_ptr<autograd::VariableCreatorScope> creator;
      creator = std::make_unique<autograd::VariableCreatorScope>(
          [this](const Tensor& initial, const autograd::VariableOptions& options) {
            return create_variable(initial, options);
          });
    });
  }
  std::mutex error_mutex;
  std::string first_error;
  int first_replica = -1;
  threads_->run([&](int r) {
    try {
      ComputeSlot slot;
      body(r);
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (first_replica < 0) {
          first_replica = r;
          first_error = e.what();
        }
      }
      group_->abort("replica " + std::to_string(r) + " failed: " + e.what());
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (first_replica < 0) {
          first_replica = r;
          first_error = "unknown exception";
        }
      }
      group_->abort("replica " + std::to_string(r) + " failed");
    }
  });
  if (first_replica >= 0) {
    group_->reset();
    throw Error("replica " + std::to_string(first_replica) + ": " + first_error);
  }
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int64_t> axis) {
  STRATA_CHECK(value.size() > 0, "Strategy::reduce: empty per-replica value");
  autograd::StopRecording no_tape;
  Tensor total;
  int64_t count = 0;
  for (const Tensor& v0 : value) {
    Tensor v = v0;
    if (axis) {
      const int64_t a = normalize_axis(*axis, v.ndim(), "Strategy::reduce");
      count += v.dim(a);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Mean: v = sum(v, std::vector<int64_t>{a}); break;
        case ReduceOp::Max:
          if (v.dim(a) == 0) continue;
          v = max(v, std::vector<int64_t>{a});
          break;
        case ReduceOp::Min:
          if (v.dim(a) == 0) continue;
          v = min(v, std::vector<int64_t>{a});
          break;
      }
    }
    if (!total.defined()) {
      total = v.to(devices_[0]).clone();
      continue;
    }
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean: total = add(total, v); break;
      case ReduceOp::Max: total = maximum(total, v); break;
      case ReduceOp::Min: total = minimum(total, v); break;
    }
  }
  STRATA_CHECK(total.defined(), "Strategy::reduce: every replica's value is empty along axis ", *axis);
  if (op == ReduceOp::Mean) {
    const double n = axis ? double(count) : double(value.size());
    total = is_floating(total.dtype()) ? total / n : cast(total, kFloat32) / n;
  }
  return total;
}

Tensor Strategy::reduce(ReduceOp op, const Tensor& value, std::optional<int64_t> axis) {
  return reduce(op, PerReplica<Tensor>({value}), axis);
}

Tensor Strategy::gather(const PerReplica<Tensor>& value, int64_t axis) {
  autograd::StopRecording no_tape;
  return concat(value.values(), axis);
}

DistributedDataset Strategy::experimental_distribute_dataset(const data::Dataset& dataset) {
  data::Dataset ds = dataset;
  if (num_workers_ > 1) ds = ds.auto_shard(num_workers_, worker_index_, data::AutoShardPolicy::Auto);
  return DistributedDataset(*this, ds, /*per_replica_elements=*/false);
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const data::InputContext&)>& fn) {
  data::InputContext ctx(num_workers_, worker_index_, num_replicas_in_sync());
  return DistributedDataset(*this, fn(ctx), /*per_replica_elements=*/true);
}

PerReplica<Tensor> Strategy::experimental_distribute_values_from_function(
    const std::function<Tensor(const ValueContext&)>& fn) {
  std::vector<Tensor> values;
  for (int r = 0; r < num_local_replicas(); ++r) {
    values.push_back(fn(ValueContext{worker_index_ * num_local_replicas() + r, num_replicas_in_sync()}));
  }
  return PerReplica<Tensor>(std::move(values));
}

// ---- StrategyExtended ----

Tensor StrategyExtended::reduce_to(ReduceOp op, const PerReplica<Tensor>& value, Device destination) const {
  return strategy_.reduce(op, value).to(destination);
}

std::vector<Tensor> StrategyExtended::batch_reduce_to(ReduceOp op, const std::vector<PerReplica<Tensor>>& values,
                                                      Device destination) const {
  std::vector<Tensor> out;
  for (const auto& v : values) out.push_back(reduce_to(op, v, destination));
  return out;
}

void StrategyExtended::update(const Variable& var, const std::function<void(const Tensor&, int)>& fn) const {
  autograd::StopRecording no_tape;
  if (auto* d = dynamic_cast<DistributedVariableImpl*>(&var.impl())) {
    for (size_t i = 0; i < d->components().size(); ++i) fn(d->components()[i], int(i));
  } else {
    fn(var.value(), 0);
  }
}

const std::vector<Device>& StrategyExtended::worker_devices() const { return strategy_.devices(); }
std::vector<Device> StrategyExtended::parameter_devices() const { return strategy_.parameter_devices(); }

// ---- concrete strategies ----

DefaultStrategy::DefaultStrategy() : Strategy({Device()}) {}

DefaultStrategy& DefaultStrategy::instance() {
  static DefaultStrategy* s = new DefaultStrategy();  // never destroyed (used during exit)
  return *s;
}

std::shared_ptr<autograd::VariableImpl> DefaultStrategy::create_variable(const Tensor& initial,
                                                                         const autograd::VariableOptions& options) {
  return std::make_shared<autograd::LocalVariableImpl>(initial, options);
}

OneDeviceStrategy::OneDeviceStrategy(Device device) : Strategy({device}) {}

std::shared_ptr<autograd::VariableImpl> OneDeviceStrategy::create_variable(const Tensor& initial,
                                                                           const autograd::VariableOptions& options) {
  autograd::VariableOptions o = options;
  o.device = devices()[0];
  return std::make_shared<autograd::LocalVariableImpl>(initial, o);
}

std::vector<Device> MirroredStrategy::cpu_devices(int n) {
  STRATA_CHECK(n >= 1, "MirroredStrategy: the number of CPU replicas must be >= 1, got ", n);
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

MirroredStrategy::MirroredStrategy(std::vector<Device> devices, CrossDeviceOps cross_device_ops,
                                   CommunicationOptions options)
    : Strategy(devices.empty() ? cpu_devices(1) : devices, options), cross_device_ops_(cross_device_ops) {
  for (const Device& d : this->devices()) {
    STRATA_CHECK(d.is_cpu() || has_allocator(DeviceType::CUDA), "MirroredStrategy: device ", d,
                 " is not available (strata was built without the CUDA backend, or no GPU is present)");
  }
  STRATA_CHECK(cross_device_ops_ != CrossDeviceOps::NcclAllReduce || this->devices()[0].is_cuda(),
               "MirroredStrategy: NcclAllReduce needs GPU devices, got ", this->devices()[0]);
}

std::shared_ptr<autograd::VariableImpl> MirroredStrategy::create_variable(const Tensor& initial,
                                                                          const autograd::VariableOptions& options) {
  return make_distributed_variable(*this, initial, options);
}

CentralStorageStrategy::CentralStorageStrategy(std::vector<Device> compute_devices,
                                               std::optional<Device> parameter_device)
    : Strategy(compute_devices.empty() ? MirroredStrategy::cpu_devices(1) : compute_devices),
      parameter_device_(parameter_device.value_or(Device())) {}

std::shared_ptr<autograd::VariableImpl> CentralStorageStrategy::create_variable(
    const Tensor& initial, const autograd::VariableOptions& options) {
  autograd::VariableOptions o = options;
  o.device = parameter_device_;
  if (auto* ctx = dynamic_cast<LocalReplicaContext*>(detail::current_replica_context());
      ctx && &ctx->strategy() == this && num_local_replicas() > 1) {
    return std::static_pointer_cast<autograd::VariableImpl>(ctx->run_once_shared(
        [&] { return std::static_pointer_cast<void>(std::make_shared<autograd::LocalVariableImpl>(initial, o)); }));
  }
  return std::make_shared<autograd::LocalVariableImpl>(initial, o);
}

}  // namespace strata::distribute
