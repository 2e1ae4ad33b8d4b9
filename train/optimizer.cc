#include <strata/train/optimizer.h>

#include <algorithm>
#include <unordered_set>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/replica_context.h>
#include <strata/distribute/sharded_collectives.h>
#include <strata/distribute/strategy.h>
#include <strata/train/clip.h>
#include <strata/train/sharded_optimizer_state.h>

namespace strata::optim {

using autograd::VariableAggregation;
using autograd::VariableOptions;

OptimizerImpl::OptimizerImpl(std::string name, LearningRate learning_rate, double global_clipnorm, EmaOptions ema)
    : name_(std::move(name)), learning_rate_(std::move(learning_rate)), global_clipnorm_(global_clipnorm), ema_(ema) {
  STRATA_CHECK(global_clipnorm >= 0.0, "optim::", name_, ": global_clipnorm must be >= 0, got ",
               global_clipnorm);
  check_ema_options(name_, ema_);
  VariableOptions options;
  options.name = name_ + "/iterations";
  options.trainable = false;
  options.aggregation = VariableAggregation::OnlyFirstReplica;
  iterations_ = Variable(Tensor::scalar(0, kInt64), options);
}

// A wrapper never uses its own learning rate (the handle reads the wrapped one).
OptimizerImpl::OptimizerImpl(std::string name) : name_(std::move(name)), learning_rate_(0.0), global_clipnorm_(0) {}

std::vector<std::string> OptimizerImpl::all_slot_names() const {
  std::vector<std::string> names = slot_names();
  if (ema_.use_ema) names.emplace_back(kAverageSlot);
  return names;
}

void OptimizerImpl::apply_update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                                 const UpdateContext& ctx) const {
  const size_t own = slots.size() - (ema_.use_ema ? 1 : 0);
  update(param, grad, slots.first(own), ctx);
  if (ema_.use_ema) update_moving_average(param, slots[own], ema_, ctx.step);
}

void OptimizerImpl::apply_wrapped(const std::vector<Tensor>&, const std::vector<Variable>&, bool) {
  fail("optim::", name_, ": apply_wrapped called on an optimizer that wraps none (internal error)");
}

Optimizer::Optimizer(std::shared_ptr<OptimizerImpl> impl) : impl_(std::move(impl)) {}

OptimizerImpl& Optimizer::impl() const {
  STRATA_CHECK(impl_ != nullptr, "optim: use of an empty optimizer handle");
  return *impl_;
}

OptimizerImpl& Optimizer::state() const {
  OptimizerImpl* s = &impl();
  // The wrapper keeps what it wraps alive, so the raw pointer stays valid.
  while (auto inner = s->wrapped()) s = inner.get();
  return *s;
}

int64_t Optimizer::iterations_value() const { return iterations().value().item<int64_t>(); }

double Optimizer::learning_rate() const {
  const int64_t step = iterations_value();
  std::lock_guard<std::mutex> lock(state().mu_);
  return state().learning_rate_(step);
}

bool Optimizer::learning_rate_is_constant() const {
  std::lock_guard<std::mutex> lock(state().mu_);
  return state().learning_rate_.is_constant();
}

void Optimizer::set_learning_rate(LearningRate learning_rate) const {
  std::lock_guard<std::mutex> lock(state().mu_);
  state().learning_rate_ = std::move(learning_rate);
}

std::optional<Variable> Optimizer::find_slot(const Variable& var, const std::string& slot) const {
  const auto names = slot_names();
  size_t index = names.size();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == slot) index = i;
  STRATA_CHECK(index < names.size(), "optim::", name(), ": no slot named '", slot, "'");
  std::lock_guard<std::mutex> lock(state().mu_);
  auto it = state().slots_.find(var.impl_ptr().get());
  if (it == state().slots_.end()) return std::nullopt;
  return it->second.slots[index];
}

std::optional<Variable> Optimizer::average(const Variable& var) const {
  STRATA_CHECK(use_ema(), "optim::", name(), "::average: the optimizer keeps no moving average (use_ema is off)");
  return find_slot(var, kAverageSlot);
}

std::vector<Variable> Optimizer::get_or_create_slots(const Variable& var) const {
  OptimizerImpl& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu_);
    auto it = s.slots_.find(var.impl_ptr().get());
    if (it != s.slots_.end()) return it->second.slots;
  }
  // Created without holding the lock: inside Strategy::run a distributed variable's
  // make_like is a rendezvous that every local replica joins (the strategy builds the
  // slot once and hands it to all), so replicas must not wait on each other here. No
  // replica can find the slots inserted before it has joined that rendezvous itself, so
  // every replica takes this path for the same variables in the same order.
  autograd::StopRecording no_tape;
  OptimizerImpl::SlotSet set;
  set.variable = var;
  if (slots_are_sharded(var)) {
    // ZeRO-1: each replica holds its chunk only (train/sharded_optimizer_state.h).
    set.slots = create_sharded_slots(s.all_slot_names(), var);
  } else {
    for (const auto& slot : s.all_slot_names()) {
      VariableOptions options;
      options.name = var.name() + "/" + slot;
      options.trainable = false;
      // The moving average starts as a copy of the variable (train/ema.h), the rest at 0.
      const Tensor initial = slot == kAverageSlot ? var.value().clone() : zeros_like(var.value());
      set.slots.emplace_back(var.impl().make_like(initial, options));
    }
  }
  std::lock_guard<std::mutex> lock(s.mu_);
  auto [it, inserted] = s.slots_.emplace(var.impl_ptr().get(), std::move(set));
  return it->second.slots;
}

void Optimizer::drop_slots(const Variable& var) const {
  std::lock_guard<std::mutex> lock(state().mu_);
  state().slots_.erase(var.impl_ptr().get());
}

std::vector<std::pair<Variable, std::vector<Variable>>> Optimizer::all_slots() const {
  std::lock_guard<std::mutex> lock(state().mu_);
  std::vector<std::pair<Variable, std::vector<Variable>>> out;
  for (const auto& [key, set] : state().slots_) out.emplace_back(set.variable, set.slots);
  return out;
}

std::vector<Variable> Optimizer::variables() const {
  std::vector<Variable> out{iterations()};
  for (auto& [var, slots] : all_slots()) out.insert(out.end(), slots.begin(), slots.end());
  for (auto& [key, v] : impl().wrapper_variables()) out.push_back(v);
  return out;
}

std::vector<std::pair<std::string, Variable>> Optimizer::checkpoint_variables() const {
  std::vector<std::pair<std::string, Variable>> out{{"iterations", iterations()}};
  for (auto& kv : impl().wrapper_variables()) out.push_back(kv);
  return out;
}

namespace {
// The averages of `vars` that exist, paired with their variables, for finalize and swap:
// checked to be called outside Strategy::run (the assignments below are cross-replica).
std::vector<std::pair<Variable, Variable>> averaged(const Optimizer& opt, const std::vector<Variable>& vars,
                                                    const char* what) {
  const distribute::ReplicaContext* ctx = distribute::get_replica_context();
  STRATA_CHECK(ctx == nullptr || ctx->strategy().is_default(), "optim::", opt.name(), "::", what,
               ": call it outside Strategy::run (it assigns every replica's copy), as after training");
  std::vector<std::pair<Variable, Variable>> out;
  for (const Variable& var : vars) {
    STRATA_CHECK(var.defined(), "optim::", opt.name(), "::", what, ": undefined variable");
    if (auto average = opt.find_slot(var, kAverageSlot)) out.emplace_back(var, *average);
  }
  return out;
}
}  // namespace

void Optimizer::finalize_variable_values(const std::vector<Variable>& vars) const {
  if (!use_ema()) return;
  autograd::StopRecording no_tape;
  const auto pairs = averaged(*this, vars, "finalize_variable_values");
  OptimizerImpl& s = state();
  // After a swap the model holds the averages already; the averages get the model's
  // values so that both agree, and the swap is over.
  const bool swapped = s.ema_swapped_.load();
  for (const auto& [var, average] : pairs) {
    if (swapped)
      average.assign(var.value());
    else
      var.assign(average.value());
  }
  s.ema_swapped_.store(false);
}

void Optimizer::swap_ema_weights(const std::vector<Variable>& vars) const {
  STRATA_CHECK(use_ema(), "optim::", name(), "::swap_ema_weights: the optimizer keeps no moving average; "
               "create it with use_ema (EmaOptions) to evaluate with averaged weights");
  autograd::StopRecording no_tape;
  for (const auto& [var, average] : averaged(*this, vars, "swap_ema_weights")) {
    const Tensor weights = var.value().clone();
    var.assign(average.value());
    average.assign(weights);
  }
  OptimizerImpl& s = state();
  s.ema_swapped_.store(!s.ema_swapped_.load());
}

void Optimizer::build(const std::vector<Variable>& vars) const {
  for (const auto& v : vars) {
    STRATA_CHECK(v.defined(), "optim::", name(), "::build: undefined variable");
    get_or_create_slots(v);
  }
}

namespace detail {

void check_apply_arguments(const std::string& optimizer, const std::vector<Tensor>& grads,
                           const std::vector<Variable>& vars) {
  STRATA_CHECK(grads.size() == vars.size(), "optim::", optimizer, "::apply_gradients: ", grads.size(),
               " gradients for ", vars.size(), " variables");
  std::unordered_set<const autograd::VariableImpl*> seen;
  for (size_t i = 0; i < vars.size(); ++i) {
    STRATA_CHECK(vars[i].defined(), "optim::", optimizer, "::apply_gradients: variable ", i,
                 " is undefined");
    STRATA_CHECK(seen.insert(vars[i].impl_ptr().get()).second, "optim::", optimizer,
                 "::apply_gradients: variable '", vars[i].name(), "' appears more than once");
    if (!grads[i].defined()) continue;
    STRATA_CHECK(grads[i].shape() == vars[i].shape(), "optim::", optimizer,
                 "::apply_gradients: gradient ", shape_str(grads[i].shape()), " for variable '",
                 vars[i].name(), "' of shape ", shape_str(vars[i].shape()));
    STRATA_CHECK(grads[i].dtype() == vars[i].dtype(), "optim::", optimizer,
                 "::apply_gradients: gradient dtype ", grads[i].dtype(), " for variable '",
                 vars[i].name(), "' of dtype ", vars[i].dtype());
  }
  // Keras's filter_empty_gradients: a step with no gradient at all is a mistake (a loss
  // that does not depend on the variables, or a tape that did not watch them).
  STRATA_CHECK(vars.empty() || std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); }),
               "optim::", optimizer, "::apply_gradients: no gradient provided for any of the ", vars.size(),
               " variables (the first is '", vars.empty() ? std::string() : vars[0].name(),
               "'): the loss does not depend on them, or the tape did not watch them");
  STRATA_CHECK(!distribute::in_cross_replica_context(), "optim::", optimizer,
               "::apply_gradients: cannot be called in cross-replica context (inside a "
               "strategy's scope but outside Strategy::run); call it from the step function "
               "passed to Strategy::run, as in TensorFlow");
}

}  // namespace detail

std::vector<Tensor> all_reduce_sum_gradients(const std::vector<Tensor>& grads) {
  distribute::ReplicaContext* ctx = distribute::get_replica_context();
  if (!ctx || ctx->num_replicas_in_sync() <= 1) return grads;
  autograd::StopRecording no_tape;
  std::vector<Tensor> g = grads;
  std::vector<size_t> defined;
  std::vector<Tensor> to_reduce;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i].defined()) {
      defined.push_back(i);
      to_reduce.push_back(g[i]);
    }
  // Which gradients are defined is structural (the same on every replica), so skipping
  // the collective when there is nothing to reduce keeps replicas matched.
  std::vector<Tensor> reduced;
  if (!to_reduce.empty()) reduced = ctx->sum_gradients(to_reduce);
  STRATA_CHECK(reduced.size() == defined.size(), "optim::all_reduce_sum_gradients: all_reduce returned ",
               reduced.size(), " tensors for ", defined.size());
  for (size_t k = 0; k < defined.size(); ++k) g[defined[k]] = reduced[k];
  return g;
}

void Optimizer::increment_iterations() const {
  OptimizerImpl& s = state();
  autograd::StopRecording no_tape;
  distribute::ReplicaContext* ctx = distribute::get_replica_context();
  auto increment = [&] {
    const Tensor it = s.iterations_.value();
    it.copy_(Tensor::scalar(double(it.item<int64_t>() + 1), kInt64));
  };
  if (ctx && ctx->strategy().num_local_replicas() > 1 && !s.iterations_.impl().is_replicated()) {
    ctx->run_once([&] {
      autograd::StopRecording paused;
      increment();
    });
  } else {
    increment();
  }
}

void Optimizer::apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                bool aggregate_gradients) const {
  STRATA_CHECK(!state().ema_swapped_.load(), "optim::", name(), "::apply_gradients: the model holds the moving "
               "averages (swap_ema_weights was called an odd number of times); swap them back before training");
  if (impl().wrapped()) {
    impl().apply_wrapped(grads, vars, aggregate_gradients);
    return;
  }
  if (sharded_step()) {  // ZeRO-1
    apply_sharded(grads, vars, aggregate_gradients);
    return;
  }
  OptimizerImpl& s = impl();
  detail::check_apply_arguments(s.name(), grads, vars);
  autograd::StopRecording no_tape;
  distribute::ReplicaContext* ctx = distribute::get_replica_context();

  std::vector<Tensor> g = aggregate_gradients ? all_reduce_sum_gradients(grads) : grads;
  if (s.global_clipnorm_ > 0) g = clip_gradients_by_global_norm(g, s.global_clipnorm_);

  const int64_t count = s.iterations_.value().item<int64_t>();
  UpdateContext uctx;
  {
    std::lock_guard<std::mutex> lock(s.mu_);
    uctx.learning_rate = s.learning_rate_(count);
  }
  uctx.step = count + 1;

  auto update_one = [&](size_t i) {
    const Tensor param = vars[i].value();
    Tensor grad = g[i];
    // Logical CPU devices share memory: a gradient summed into a bucket every replica
    // reads (gradient_reducer.h) is used where it is, not copied.
    if (!same_memory(grad.device(), param.device())) grad = grad.to(param.device());
    const std::vector<Variable> slot_vars = get_or_create_slots(vars[i]);
    std::vector<Tensor> slots;
    slots.reserve(slot_vars.size());
    for (const auto& sv : slot_vars) {
      // Slots made while shard_optimizer_state was on hold one replica's chunk only.
      STRATA_CHECK(dynamic_cast<const ShardedSlotImpl*>(&sv.impl()) == nullptr, "optim::", s.name(),
                   "::apply_gradients: the slot '", sv.name(), "' of variable '", vars[i].name(),
                   "' is sharded (made while shard_optimizer_state was on) but sharding is now off; turn it back on, "
                   "or restore the optimizer from a checkpoint into a fresh one");
      slots.push_back(sv.value());
    }
    s.apply_update(param, grad, slots, uctx);
  };
  // Range `part` of `parts` of variable i and of its slots (shard_range's split), through
  // flat views; false when a view would be a copy (a non-contiguous tensor).
  auto update_range = [&](size_t i, int parts, int part) {
    const Tensor param = vars[i].value();
    const std::vector<Variable> slot_vars = get_or_create_slots(vars[i]);
    std::vector<Tensor> slots;
    for (const auto& sv : slot_vars) {
      if (dynamic_cast<const ShardedSlotImpl*>(&sv.impl())) return false;  // update_one says why it cannot
      slots.push_back(sv.value());
    }
    if (!param.is_contiguous()) return false;
    for (const Tensor& t : slots)
      if (!t.is_contiguous() || t.numel() != param.numel()) return false;
    const auto [begin, end] = distribute::shard_range(param.numel(), parts, part);
    if (end <= begin) return true;
    auto range = [&](const Tensor& t) { return reshape(t, {t.numel()}).slice(0, begin, end); };
    Tensor grad = range(g[i].contiguous());
    if (!same_memory(grad.device(), param.device())) grad = grad.to(param.device());
    for (Tensor& t : slots) t = range(t);
    s.apply_update(range(param), grad, slots, uctx);
    return true;
  };
  auto increment = [&] {
    s.iterations_.value().copy_(Tensor::scalar(double(uctx.step), kInt64));
  };

  // Replicated variables (one component per replica): every replica updates its own
  // component in place, concurrently. A variable all local replicas share (a plain
  // variable, or a CentralStorageStrategy variable) is updated once, by one replica,
  // inside run_once while the others wait.
  const bool several_local = ctx && ctx->strategy().num_local_replicas() > 1;
  std::vector<size_t> shared;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!g[i].defined()) continue;
    if (several_local && !vars[i].impl().is_replicated())
      shared.push_back(i);
    else
      update_one(i);
  }
  const bool shared_iterations = several_local && !s.iterations_.impl().is_replicated();
  auto* local = dynamic_cast<distribute::LocalReplicaContext*>(ctx);
  if (!shared.empty() && local != nullptr && s.elementwise()) {
    // An elementwise update is split between the local replicas: each updates its own
    // range of every shared variable (and of its slots) at once, instead of one replica
    // updating them all while the others wait. The same kernels on the same elements, so
    // the bits are those of the whole update. The first rendezvous keeps a replica from
    // writing while another still reads the parameters (its own step code between backward
    // and apply_gradients); the second publishes the update before anyone reads it.
    const std::string what = "optim::" + s.name() + "::apply_gradients";
    local->local_barrier(what + " (before the shared update)");
    const int parts = ctx->strategy().num_local_replicas(), me = local->local_index();
    for (size_t i : shared) {
      if (!update_range(i, parts, me)) {
        local->run_once([&] {  // not contiguous: one replica updates it whole
          autograd::StopRecording paused;
          update_one(i);
        });
      }
    }
    if (shared_iterations && me == 0) increment();
    local->local_barrier(what + " (after the shared update)");
  } else if (!shared.empty() || shared_iterations) {
    ctx->run_once([&] {
      autograd::StopRecording paused;
      for (size_t i : shared) update_one(i);
      if (shared_iterations) increment();
    });
  }
  if (!shared_iterations) increment();
}

}  // namespace strata::optim
