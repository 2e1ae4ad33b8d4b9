#include <strata/distribute/distributed_variable.h>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/cross_worker.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

using autograd::VariableAggregation;
using autograd::VariableSynchronization;

namespace {
// TensorFlow's values_util.aggregation_error_msg, shortened.
[[noreturn]] void fail_no_aggregation(const std::string& kind, const std::string& name) {
  fail(kind, " '", name, "': you must specify an aggregation method to update a ", kind,
       " in replica context: pass VariableOptions::aggregation (Sum, Mean or OnlyFirstReplica) when creating it. "
       "This is required because ", kind, "s are kept in sync: updates in replica context are aggregated across "
       "replicas before they are applied. Alternatively update it in cross-replica context (outside run(), or "
       "inside merge_call / StrategyExtended::update).");
}

// A view of `t`'s memory that names `device` (a logical device of the same memory), so
// that a replica's ops see its own device.
Tensor view_on(const Tensor& t, Device device) {
  auto impl = std::make_shared<TensorImpl>(t.impl());
  impl->device = device;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

// Whether MirroredStrategy-style variables of `strategy` are one copy: several local
// replicas, all on logical CPU devices, and the strategy's option on.
bool one_copy_for(const Strategy& strategy) {
  const std::vector<Device> devices = strategy.parameter_devices();
  if (devices.size() < 2 || !strategy.share_cpu_variables()) return false;
  for (const Device& d : devices)
    if (!d.is_cpu()) return false;
  return true;
}
}  // namespace

// ---- base ----

DistributedVariableImpl::DistributedVariableImpl(Strategy& strategy, const Tensor& initial,
                                                 autograd::VariableOptions options, const std::vector<Device>& devices,
                                                 bool one_copy)
    : VariableImpl(std::move(options)), strategy_(strategy), one_copy_(one_copy) {
  STRATA_CHECK(initial.defined(), "Variable '", options_.name, "': undefined initial value");
  autograd::StopRecording no_tape;
  for (const Device& d : devices) {
    if (one_copy && !components_.empty()) {
      STRATA_CHECK(same_memory(components_[0].device(), d), "Variable '", options_.name, "': devices ",
                   components_[0].device(), " and ", d, " do not share memory (internal error)");
      components_.push_back(view_on(components_[0], d));
      continue;
    }
    Tensor c = Tensor::empty(initial.shape(), initial.dtype(), d);
    c.copy_(initial);
    components_.push_back(c);
  }
}

LocalReplicaContext* DistributedVariableImpl::replica() const { return strategy_.current_local_context(); }

Device DistributedVariableImpl::device() const {
  LocalReplicaContext* ctx = replica();
  return components_[ctx && components_.size() > 1 ? size_t(ctx->local_index()) : 0].device();
}

void DistributedVariableImpl::require_own_strategy(const char* what) const {
  // Without this, inside another strategy's run() every one of its replica threads would
  // take the cross-replica path and write all of this variable's components at once (a
  // data race), and a sync-on-read aggregate would start a collective on each of them.
  const Strategy* other = nullptr;
  const char* where = "";
  if (ReplicaContext* ctx = detail::current_replica_context(); ctx && &ctx->strategy() != &strategy_) {
    other = &ctx->strategy();
    where = "inside run() of";
  } else if (has_strategy() && &get_strategy() != &strategy_) {
    other = &get_strategy();  // its scope, or its merge_call / run_once
    where = "inside the scope of";
  }
  if (!other) return;
  fail(kind(), " '", options_.name, "'.", what, ": mixing different strategies: the variable belongs to the '",
       strategy_.name(), "' strategy (it was created in that strategy's scope) but is used ", where,
       " a different '", other->name(), "' strategy; update and read it under its own strategy (in its scope or "
       "its run()) or outside any strategy");
}

std::shared_ptr<autograd::VariableImpl> DistributedVariableImpl::make_like(const Tensor& initial,
                                                                           autograd::VariableOptions options) const {
  return strategy_.make_variable(initial, options);
}

const char* DistributedVariableImpl::update_name(Update kind) {
  switch (kind) {
    case Update::Assign: return "assign";
    case Update::Add: return "assign_add";
    case Update::Sub: return "assign_sub";
  }
  return "?";
}

void DistributedVariableImpl::apply(const Tensor& component, const Tensor& value, Update how) const {
  autograd::StopRecording no_tape;
  STRATA_CHECK(value.defined(), kind(), " '", options_.name, "'.", update_name(how), ": undefined value");
  if (how == Update::Assign) {
    STRATA_CHECK(value.shape() == component.shape(), kind(), " '", options_.name, "'.assign: shape ",
                 shape_str(value.shape()), " does not match the variable's shape ", shape_str(component.shape()));
    component.copy_(value);  // copies across devices itself
    return;
  }
  // add/sub need both inputs in one memory: a delta computed on another device (a host
  // value, another GPU's replica) is copied to the component's device first.
  const Tensor delta = same_memory(value.device(), component.device()) ? value : value.to(component.device());
  const Tensor result = how == Update::Add ? add(component, delta) : sub(component, delta);
  STRATA_CHECK(result.shape() == component.shape(), kind(), " '", options_.name, "'.", update_name(how),
               ": a delta of shape ", shape_str(value.shape()), " does not fit the variable's shape ",
               shape_str(component.shape()));
  // As a local variable: copy_ would cast the promoted result back, silently truncating
  // (an int64 variable plus 0.7 stays unchanged).
  STRATA_CHECK(result.dtype() == component.dtype(), kind(), " '", options_.name, "'.", update_name(how),
               ": a delta of dtype ", dtype_name(value.dtype()), " gives a result of dtype ",
               dtype_name(result.dtype()), ", which does not match the variable's dtype ",
               dtype_name(component.dtype()), " (cast it first)");
  component.copy_(result);
}

// ---- mirrored ----

MirroredVariableImpl::MirroredVariableImpl(Strategy& strategy, const Tensor& initial, autograd::VariableOptions options)
    : DistributedVariableImpl(strategy, initial, std::move(options), strategy.parameter_devices(),
                              one_copy_for(strategy)) {}

Tensor MirroredVariableImpl::value() const {
  LocalReplicaContext* ctx = replica();
  return components_[size_t(ctx ? ctx->local_index() : 0)];
}

void MirroredVariableImpl::restore_checkpoint_value(const Tensor& v) {
  for (const Tensor& c : copies()) apply(c, v, Update::Assign);
}

void MirroredVariableImpl::update(const Tensor& v, Update kind) {
  autograd::StopRecording no_tape;
  LocalReplicaContext* ctx = replica();
  if (!ctx) {  // cross-replica context: the same update on every copy
    require_own_strategy(update_name(kind));
    for (const Tensor& c : copies()) apply(c, v, kind);
    return;
  }
  STRATA_CHECK(v.defined(), "MirroredVariable '", options_.name, "'.", update_name(kind), ": undefined value");
  const Tensor& mine = components_[size_t(ctx->local_index())];
  const std::string what = "MirroredVariable(" + options_.name + ")." + update_name(kind);
  // One copy: the replicas agree on the value (a collective), then one of them applies it
  // while the others wait, so that each reads the update when its call returns.
  auto apply_agreed = [&](const Tensor& value) {
    if (!one_copy_) {
      apply(mine, value, kind);
      return;
    }
    ctx->run_once([&] { apply(components_[0], value, kind); });
  };
  switch (options_.aggregation) {
    case VariableAggregation::None:  // TensorFlow: the replica updates its own component
      STRATA_CHECK(!one_copy_, "MirroredVariable '", options_.name, "'.", update_name(kind),
                   " in replica context with aggregation None: this variable's replicas share one copy (the ",
                   strategy_.name(), " strategy on logical CPU devices), so a replica cannot change its own copy "
                   "alone. Create the variable with an aggregation (Sum, Mean or OnlyFirstReplica), update it in "
                   "cross-replica context, or call strategy.set_share_cpu_variables(false) before creating it to "
                   "give each replica its own copy");
      apply(mine, v, kind);
      return;
    case VariableAggregation::Sum: apply_agreed(ctx->all_reduce(ReduceOp::Sum, v)); return;
    case VariableAggregation::Mean: apply_agreed(ctx->all_reduce(ReduceOp::Mean, v)); return;
    case VariableAggregation::OnlyFirstReplica: {
      // A copy of replica 0's value, so that replica 0 may change its tensor afterwards.
      Tensor first = ctx->merge_call(what, [](const std::vector<Tensor>& values) { return values[0].clone(); }, v);
      apply_agreed(first);
      return;
    }
  }
}

// ---- sync on read ----

SyncOnReadVariableImpl::SyncOnReadVariableImpl(Strategy& strategy, const Tensor& initial,
                                               autograd::VariableOptions options)
    : DistributedVariableImpl(strategy, initial, std::move(options), strategy.parameter_devices()) {}

Tensor SyncOnReadVariableImpl::aggregate() const {
  autograd::StopRecording no_tape;
  require_own_strategy("read");
  Communicator* workers = strategy_.num_workers() > 1 ? strategy_.worker_communicator() : nullptr;
  if (!workers) {
    switch (options_.aggregation) {
      case VariableAggregation::Sum: return fold_reduce(components_, ReduceOp::Sum, components_[0].device());
      case VariableAggregation::Mean: return fold_reduce(components_, ReduceOp::Mean, components_[0].device());
      case VariableAggregation::OnlyFirstReplica:
      case VariableAggregation::None: return components_[0];
    }
    return components_[0];
  }
  // Several workers (MultiWorkerMirroredStrategy): as in TensorFlow, reading the aggregate
  // is a collective over every replica of every worker, so each worker must read its
  // sync-on-read variables in the same order (metrics at the end of an evaluation, saving
  // a checkpoint). Mean is the sum over all replicas divided by their total count.
  switch (options_.aggregation) {
    case VariableAggregation::Sum:
    case VariableAggregation::Mean: {
      Tensor local = fold_reduce(components_, ReduceOp::Sum, components_[0].device());
      const ReduceOp op = options_.aggregation == VariableAggregation::Sum ? ReduceOp::Sum : ReduceOp::Mean;
      return cross_worker_all_reduce(*workers, op, local, strategy_.num_replicas_in_sync());
    }
    case VariableAggregation::OnlyFirstReplica: {
      Tensor first = components_[0].clone();  // worker 0's first replica is replica 0 of the job
      workers->broadcast(first, 0);
      return first;
    }
    case VariableAggregation::None: return components_[0];
  }
  return components_[0];
}

Tensor SyncOnReadVariableImpl::value() const {
  LocalReplicaContext* ctx = replica();
  return ctx ? components_[size_t(ctx->local_index())] : aggregate();
}

Tensor SyncOnReadVariableImpl::checkpoint_value() const {
  STRATA_CHECK(options_.aggregation != VariableAggregation::None, "SyncOnReadVariable '", options_.name,
               "': cannot checkpoint a sync-on-read variable whose aggregation is None (its replicas' values have no "
               "single meaning); create it with aggregation Sum, Mean or OnlyFirstReplica");
  return aggregate();
}

void SyncOnReadVariableImpl::restore_checkpoint_value(const Tensor& v) { assign_cross_replica(v); }

void SyncOnReadVariableImpl::assign_cross_replica(const Tensor& v) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(v.defined(), "SyncOnReadVariable '", options_.name, "'.assign: undefined value");
  const Tensor& first = components_[0];
  STRATA_CHECK(v.shape() == first.shape(), "SyncOnReadVariable '", options_.name, "'.assign: shape ",
               shape_str(v.shape()), " does not match the variable's shape ", shape_str(first.shape()));
  const size_t n = components_.size();
  // Every replica of the job holds a share: with several workers each one assigns the same
  // total (every worker restores the same checkpoint) and keeps its replicas' shares.
  const int64_t parts = strategy_.num_replicas_in_sync();
  const int64_t first_index = int64_t(strategy_.worker_index()) * int64_t(n);  // of this worker's replicas
  if (options_.aggregation != VariableAggregation::Sum || parts == 1 || first.dtype() == kBool) {
    for (const Tensor& c : components_) apply(c, v, Update::Assign);
    return;
  }
  // To preserve a sum across save and restore, the total is divided across the replicas
  // (TensorFlow's on_read_assign_cross_replica). Integers are split exactly: the first
  // |remainder| replicas of the job take one more unit, so the sum reads back unchanged.
  if (is_floating(first.dtype())) {
    Tensor share = cast(v, first.dtype()) / double(parts);
    for (const Tensor& c : components_) c.copy_(share);
    return;
  }
  const std::vector<int64_t> total = v.to_vector<int64_t>();
  for (size_t i = 0; i < n; ++i) {
    const int64_t index = first_index + int64_t(i);
    std::vector<int64_t> share(total.size());
    for (size_t k = 0; k < total.size(); ++k) {
      const int64_t q = total[k] / parts, rem = total[k] % parts;  // rem has the sign of total
      const int64_t extra = index < (rem < 0 ? -rem : rem) ? (rem < 0 ? -1 : 1) : 0;
      share[k] = q + extra;
    }
    components_[i].copy_(Tensor::from_vector(share, first.shape(), first.dtype()));
  }
}

void SyncOnReadVariableImpl::update(const Tensor& v, Update kind) {
  autograd::StopRecording no_tape;
  if (LocalReplicaContext* ctx = replica()) {  // replica context: only this replica's component
    apply(components_[size_t(ctx->local_index())], v, kind);
    return;
  }
  require_own_strategy(update_name(kind));
  if (kind == Update::Assign) {
    assign_cross_replica(v);
    return;
  }
  STRATA_CHECK(options_.aggregation != VariableAggregation::Sum, "SyncOnReadVariable '", options_.name,
               "' does not support ", update_name(kind),
               " in cross-replica context when its aggregation is Sum (the change would be counted once per "
               "replica); update it inside run() or assign the new total");
  for (const Tensor& c : components_) apply(c, v, kind);
}

// ---- aggregating (central storage) ----

AggregatingVariableImpl::AggregatingVariableImpl(Strategy& strategy, const Tensor& initial,
                                                 autograd::VariableOptions options)
    : DistributedVariableImpl(strategy, initial, std::move(options), {strategy.parameter_devices().at(0)}) {}

void AggregatingVariableImpl::update(const Tensor& v, Update kind) {
  autograd::StopRecording no_tape;
  LocalReplicaContext* ctx = replica();
  if (!ctx) {
    require_own_strategy(update_name(kind));
    apply(components_[0], v, kind);
    return;
  }
  if (options_.aggregation == VariableAggregation::None) fail_no_aggregation("AggregatingVariable", options_.name);
  STRATA_CHECK(v.defined(), "AggregatingVariable '", options_.name, "'.", update_name(kind), ": undefined value");
  const std::string what = "AggregatingVariable(" + options_.name + ")." + update_name(kind);
  // The replicas' values are aggregated and the update applied once, by one replica,
  // while the others wait (TensorFlow's merge_call path).
  ctx->merge_call(
      what,
      [&](const std::vector<Tensor>& values) {
        const Tensor& target = components_[0];
        Tensor aggregated;
        switch (options_.aggregation) {
          case VariableAggregation::Sum: aggregated = fold_reduce(values, ReduceOp::Sum, target.device()); break;
          case VariableAggregation::Mean: aggregated = fold_reduce(values, ReduceOp::Mean, target.device()); break;
          default: aggregated = values[0]; break;
        }
        apply(target, aggregated, kind);
        return Tensor();
      },
      v);
}

// ---- creation ----

std::shared_ptr<autograd::VariableImpl> make_distributed_variable(Strategy& strategy, const Tensor& initial,
                                                                  const autograd::VariableOptions& options) {
  STRATA_CHECK(options.synchronization != VariableSynchronization::None,
               "Variable '", options.name, "': synchronization None is not supported with the '", strategy.name(),
               "' strategy; use Auto/OnWrite (mirrored) or OnRead (sync-on-read)");
  STRATA_CHECK(initial.defined(), "Variable '", options.name, "': undefined initial value");
  STRATA_CHECK(options.aggregation != VariableAggregation::Mean || is_floating(initial.dtype()),
               "Variable '", options.name, "': creating a distributed variable with aggregation Mean and the "
               "non-floating dtype ", dtype_name(initial.dtype()), " is not supported; use a different aggregation or "
               "dtype");
  if (options.synchronization == VariableSynchronization::OnRead) {
    return std::make_shared<SyncOnReadVariableImpl>(strategy, initial, options);
  }
  return std::make_shared<MirroredVariableImpl>(strategy, initial, options);
}

}  // namespace strata::distribute
