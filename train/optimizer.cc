#include "train/optimizer.h"

#include <unordered_set>

#include "autograd/tape.h"
#include "core/ops.h"
#include "distribute/replica_context.h"
#include "train/clip.h"

namespace strata::optim {

using autograd::VariableAggregation;
using autograd::VariableOptions;

OptimizerImpl::OptimizerImpl(std::string name, LearningRate learning_rate, double global_clipnorm)
    : name_(std::move(name)), learning_rate_(std::move(learning_rate)), global_clipnorm_(global_clipnorm) {
  STRATA_CHECK(global_clipnorm >= 0.0, "optim::", name_, ": global_clipnorm must be >= 0, got ",
               global_clipnorm);
  VariableOptions options;
  options.name = name_ + "/iterations";
  options.trainable = false;
  options.aggregation = VariableAggregation::OnlyFirstReplica;
  iterations_ = Variable(Tensor::scalar(0, kInt64), options);
}

Optimizer::Optimizer(std::shared_ptr<OptimizerImpl> impl) : impl_(std::move(impl)) {}

OptimizerImpl& Optimizer::impl() const {
  STRATA_CHECK(impl_ != nullptr, "optim: use of an empty optimizer handle");
  return *impl_;
}

int64_t Optimizer::iterations_value() const { return iterations().value().item<int64_t>(); }

double Optimizer::learning_rate() const { return impl().learning_rate_(iterations_value()); }

void Optimizer::set_learning_rate(LearningRate learning_rate) const {
  std::lock_guard<std::mutex> lock(impl().mu_);
  impl().learning_rate_ = std::move(learning_rate);
}

std::optional<Variable> Optimizer::find_slot(const Variable& var, const std::string& slot) const {
  const auto names = slot_names();
  size_t index = names.size();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == slot) index = i;
  STRATA_CHECK(index < names.size(), "optim::", name(), ": no slot named '", slot, "'");
  std::lock_guard<std::mutex> lock(impl().mu_);
  auto it = impl().slots_.find(var.impl_ptr().get());
  if (it == impl().slots_.end()) return std::nullopt;
  return it->second.slots[index];
}

std::vector<Variable> Optimizer::get_or_create_slots(const Variable& var) const {
  OptimizerImpl& s = impl();
  {
    std::lock_guard<std::mutex> lock(s.mu_);
    auto it = s.slots_.find(var.impl_ptr().get());
    if (it != s.slots_.end()) return it->second.slots;
  }
  // Created without holding the lock: inside Strategy::run every replica gets here for the
  // same variable, and a distributed variable's make_like is a collective (one replica
  // creates, all receive the same variable), so the lock must not keep replicas out.
  autograd::StopRecording no_tape;
  OptimizerImpl::SlotSet set;
  set.variable = var;
  for (const auto& slot : s.slot_names()) {
    VariableOptions options;
    options.name = var.name() + "/" + slot;
    options.trainable = false;
    set.slots.emplace_back(var.impl().make_like(zeros_like(var.value()), options));
  }
  std::lock_guard<std::mutex> lock(s.mu_);
  // Another thread may have created them meanwhile (replicas receive the same objects).
  auto [it, inserted] = s.slots_.emplace(var.impl_ptr().get(), std::move(set));
  return it->second.slots;
}

void Optimizer::drop_slots(const Variable& var) const {
  std::lock_guard<std::mutex> lock(impl().mu_);
  impl().slots_.erase(var.impl_ptr().get());
}

std::vector<std::pair<Variable, std::vector<Variable>>> Optimizer::all_slots() const {
  std::lock_guard<std::mutex> lock(impl().mu_);
  std::vector<std::pair<Variable, std::vector<Variable>>> out;
  for (const auto& [key, set] : impl().slots_) out.emplace_back(set.variable, set.slots);
  return out;
}

std::vector<Variable> Optimizer::variables() const {
  std::vector<Variable> out{iterations()};
  for (auto& [var, slots] : all_slots()) out.insert(out.end(), slots.begin(), slots.end());
  return out;
}

void Optimizer::build(const std::vector<Variable>& vars) const {
  for (const auto& v : vars) {
    STRATA_CHECK(v.defined(), "optim::", name(), "::build: undefined variable");
    get_or_create_slots(v);
  }
}

void Optimizer::apply_gradients(const std::vector<Tensor>& grads,
                                const std::vector<Variable>& vars) const {
  OptimizerImpl& s = impl();
  STRATA_CHECK(grads.size() == vars.size(), "optim::", s.name(), "::apply_gradients: ", grads.size(),
               " gradients for ", vars.size(), " variables");
  std::unordered_set<const autograd::VariableImpl*> seen;
  for (size_t i = 0; i < vars.size(); ++i) {
    STRATA_CHECK(vars[i].defined(), "optim::", s.name(), "::apply_gradients: variable ", i,
                 " is undefined");
    STRATA_CHECK(seen.insert(vars[i].impl_ptr().get()).second, "optim::", s.name(),
                 "::apply_gradients: variable '", vars[i].name(), "' appears more than once");
    if (!grads[i].defined()) continue;
    STRATA_CHECK(grads[i].shape() == vars[i].shape(), "optim::", s.name(),
                 "::apply_gradients: gradient ", shape_str(grads[i].shape()), " for variable '",
                 vars[i].name(), "' of shape ", shape_str(vars[i].shape()));
    STRATA_CHECK(grads[i].dtype() == vars[i].dtype(), "optim::", s.name(),
                 "::apply_gradients: gradient dtype ", grads[i].dtype(), " for variable '",
                 vars[i].name(), "' of dtype ", vars[i].dtype());
  }
  autograd::StopRecording no_tape;

  std::vector<Tensor> g = grads;
  if (auto* ctx = distribute::get_replica_context(); ctx && ctx->num_replicas_in_sync() > 1) {
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
    if (!to_reduce.empty()) reduced = ctx->all_reduce(distribute::ReduceOp::Sum, to_reduce);
    STRATA_CHECK(reduced.size() == defined.size(), "optim::", s.name(),
                 "::apply_gradients: all_reduce returned ", reduced.size(), " tensors for ",
                 defined.size());
    for (size_t k = 0; k < defined.size(); ++k) g[defined[k]] = reduced[k];
  }
  if (s.global_clipnorm_ > 0) g = clip_by_global_norm(g, s.global_clipnorm_).gradients;

  Tensor iterations = s.iterations_.value();
  const int64_t count = iterations.item<int64_t>();
  UpdateContext ctx;
  {
    std::lock_guard<std::mutex> lock(s.mu_);
    ctx.learning_rate = s.learning_rate_(count);
  }
  ctx.step = count + 1;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!g[i].defined()) continue;
    const std::vector<Variable> slot_vars = get_or_create_slots(vars[i]);
    std::vector<Tensor> slots;
    slots.reserve(slot_vars.size());
    for (const auto& sv : slot_vars) slots.push_back(sv.value());
    s.update(vars[i].value(), g[i], slots, ctx);
  }
  iterations.copy_(Tensor::scalar(double(ctx.step), kInt64));
}

}  // namespace strata::optim
