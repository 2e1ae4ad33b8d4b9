#include "distribute/distributed_variable.h"

#include "autograd/tape.h"
#include "core/ops.h"
#include "distribute/local_replica_context.h"
#include "distribute/strategy.h"

namespace strata::distribute {

namespace {
LocalReplicaContext* local_context_of(const Strategy& strategy) {
  auto* ctx = dynamic_cast<LocalReplicaContext*>(detail::current_replica_context());
  return ctx && &ctx->strategy() == &strategy ? ctx : nullptr;
}
}  // namespace

DistributedVariableImpl::DistributedVariableImpl(Strategy& strategy, const Tensor& initial,
                                                 autograd::VariableOptions options)
    : VariableImpl(std::move(options)), strategy_(strategy) {
  STRATA_CHECK(initial.defined(), "Variable '", options_.name, "': undefined initial value");
  for (const Device& d : strategy.parameter_devices()) {
    Tensor c = Tensor::empty(initial.shape(), initial.dtype(), d);
    c.copy_(initial);
    components_.push_back(c);
  }
}

int DistributedVariableImpl::current_replica() const {
  LocalReplicaContext* ctx = local_context_of(strategy_);
  return ctx ? ctx->communicator().rank() : -1;
}

std::shared_ptr<autograd::VariableImpl> DistributedVariableImpl::make_like(
    const Tensor& initial, autograd::VariableOptions options) const {
  return make_distributed_variable(strategy_, initial, options);
}

// ---- mirrored ----

Tensor MirroredVariableImpl::value() const {
  const int r = current_replica();
  return components_[size_t(r >= 0 ? r : 0)];
}

void MirroredVariableImpl::assign(const Tensor& v) { update(v, Update::Assign); }
void MirroredVariableImpl::assign_add(const Tensor& d) { update(d, Update::Add); }
void MirroredVariableImpl::assign_sub(const Tensor& d) { update(d, Update::Sub); }

void MirroredVariableImpl::update(const Tensor& v, Update kind) {
  autograd::StopRecording no_tape;
  auto apply = [&](const Tensor& component, const Tensor& value) {
    switch (kind) {
      case Update::Assign: component.copy_(value); break;
      case Update::Add: component.copy_(add(component, value)); break;
      case Update::Sub: component.copy_(sub(component, value)); break;
    }
  };
  STRATA_CHECK(v.defined(), "MirroredVariable '", options_.name, "': undefined value");
  STRATA_CHECK(v.shape() == components_[0].shape() || v.numel() == 1,
               "MirroredVariable '", options_.name, "': value shape ", shape_str(v.shape()),
               " does not match the variable's shape ", shape_str(components_[0].shape()));
  const int r = current_replica();
  if (r < 0) {  // cross-replica context: the same update on every component
    for (const Tensor& c : components_) apply(c, v);
    return;
  }
  LocalReplicaContext* ctx = local_context_of(strategy_);
  Tensor reduced;
  switch (options_.aggregation) {
    case autograd::VariableAggregation::None:
      fail("MirroredVariable '", options_.name, "': updating a mirrored variable in replica context "
           "needs an aggregation method; pass VariableOptions::aggregation (Sum, Mean or "
           "OnlyFirstReplica) when creating it, or update it in cross-replica context");
    case autograd::VariableAggregation::Sum: reduced = ctx->all_reduce(ReduceOp::Sum, v.contiguous()); break;
    case autograd::VariableAggregation::Mean: reduced = ctx->all_reduce(ReduceOp::Mean, v.contiguous()); break;
    case autograd::VariableAggregation::OnlyFirstReplica:
      reduced = ctx->merge_call([](const std::vector<Tensor>& values) { return values[0]; }, v);
      break;
  }
  apply(components_[size_t(r)], reduced);
}

// ---- sync on read ----

Tensor SyncOnReadVariableImpl::aggregate() const {
  autograd::StopRecording no_tape;
  switch (options_.aggregation) {
    case autograd::VariableAggregation::Sum:
    case autograd::VariableAggregation::Mean: {
      Tensor acc = components_[0].clone();
      for (size_t i = 1; i < components_.size(); ++i) acc = add(acc, components_[i]);
      if (options_.aggregation == autograd::VariableAggregation::Mean && components_.size() > 1) {
        acc = is_floating(acc.dtype()) ? acc / double(components_.size())
                                       : cast(cast(acc, kFloat64) / double(components_.size()), acc.dtype());
      }
      return acc;
    }
    default: return components_[0];
  }
}

Tensor SyncOnReadVariableImpl::value() const {
  const int r = current_replica();
  return r >= 0 ? components_[size_t(r)] : aggregate();
}

void SyncOnReadVariableImpl::assign(const Tensor& v) {
  autograd::StopRecording no_tape;
  const int r = current_replica();
  if (r >= 0) {
    components_[size_t(r)].copy_(v);
    return;
  }
  restore_checkpoint_value(v);
}

void SyncOnReadVariableImpl::restore_checkpoint_value(const Tensor& v) {
  autograd::StopRecording no_tape;
  if (options_.aggregation != autograd::VariableAggregation::Sum || components_.size() == 1) {
    for (const Tensor& c : components_) c.copy_(v);
    return;
  }
  // A sum spread over the replicas so that reading it back gives v.
  if (is_floating(v.dtype())) {
    Tensor share = v / double(components_.size());
    for (const Tensor& c : components_) c.copy_(share);
  } else {
    components_[0].copy_(v);
    for (size_t i = 1; i < components_.size(); ++i) components_[i].copy_(zeros_like(components_[i]));
  }
}

void SyncOnReadVariableImpl::assign_add(const Tensor& delta) {
  autograd::StopRecording no_tape;
  const int r = current_replica();
  if (r >= 0) {
    components_[size_t(r)].copy_(add(components_[size_t(r)], delta));
    return;
  }
  STRATA_CHECK(options_.aggregation != autograd::VariableAggregation::Sum, "SyncOnReadVariable '",
               options_.name, "' does not support assign_add in cross-replica context when its "
               "aggregation is Sum");
  for (const Tensor& c : components_) c.copy_(add(c, delta));
}

void SyncOnReadVariableImpl::assign_sub(const Tensor& delta) {
  autograd::StopRecording no_tape;
  const int r = current_replica();
  if (r >= 0) {
    components_[size_t(r)].copy_(sub(components_[size_t(r)], delta));
    return;
  }
  STRATA_CHECK(options_.aggregation != autograd::VariableAggregation::Sum, "SyncOnReadVariable '",
               options_.name, "' does not support assign_sub in cross-replica context when its "
               "aggregation is Sum");
  for (const Tensor& c : components_) c.copy_(sub(c, delta));
}

std::shared_ptr<autograd::VariableImpl> make_distributed_variable(Strategy& strategy, const Tensor& initial,
                                                                  const autograd::VariableOptions& options) {
  auto create = [&]() -> std::shared_ptr<autograd::VariableImpl> {
    if (options.synchronization == autograd::VariableSynchronization::OnRead) {
      return std::make_shared<SyncOnReadVariableImpl>(strategy, initial, options);
    }
    return std::make_shared<MirroredVariableImpl>(strategy, initial, options);
  };
  // Created inside run(): one replica creates it, every replica gets the same variable
  // (TensorFlow creates variables in cross-replica context through merge_call).
  if (LocalReplicaContext* ctx = local_context_of(strategy); ctx && strategy.num_local_replicas() > 1) {
    return std::static_pointer_cast<autograd::VariableImpl>(ctx->run_once_shared([&] {
      detail::set_replica_context(nullptr);  // cross-replica context while creating
      auto impl = create();
      detail::set_replica_context(ctx);
      return std::static_pointer_cast<void>(impl);
    }));
  }
  return create();
}

}  // namespace strata::distribute
