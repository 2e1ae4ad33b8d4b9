#include <strata/train/loss_scale_optimizer.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/replica_context.h>
#include <strata/distribute/strategy.h>

namespace strata::optim {

using autograd::VariableAggregation;
using autograd::VariableOptions;

namespace {

constexpr const char* kName = "LossScaleOptimizer";

// True when every defined gradient holds only finite values: one all_finite op per device
// the gradients live on (normally one) and a single host read.
bool gradients_all_finite(const std::vector<Tensor>& grads) {
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& group) { return same_memory(group[0].device(), g.device()); });
    if (it == groups.end()) {
      groups.push_back({g});
    } else {
      it->push_back(g);
    }
  }
  Tensor result;
  for (const auto& group : groups) {
    Tensor finite = all_finite(group);
    if (!result.defined()) {
      result = finite;
      continue;
    }
    if (!same_memory(finite.device(), result.device())) finite = finite.to(result.device());
    result = logical_and(result, finite);
  }
  return !result.defined() || result.item<bool>();
}

Variable state_variable(const std::string& name, const Tensor& initial) {
  VariableOptions options;
  options.name = std::string(kName) + "/" + name;
  options.trainable = false;
  // Every replica computes the same new value; reading takes the first replica's.
  options.aggregation = VariableAggregation::OnlyFirstReplica;
  return Variable(initial, options);
}

}  // namespace

LossScaleOptimizerImpl::LossScaleOptimizerImpl(Optimizer inner, bool dynamic,
                                               std::optional<double> initial_scale,
                                               std::optional<int64_t> dynamic_growth_steps)
    : OptimizerImpl(kName), inner_(std::move(inner)), dynamic_(dynamic) {
  STRATA_CHECK(inner_.defined(), "optim::LossScaleOptimizer: the inner optimizer is an empty handle");
  STRATA_CHECK(inner_.impl().wrapped() == nullptr,
               "optim::LossScaleOptimizer: cannot wrap another LossScaleOptimizer (the inner optimizer '",
               inner_.name(), "' already wraps '", inner_.impl().wrapped()->name(),
               "'); wrap the plain optimizer once");
  if (dynamic_) {
    initial_scale_ = initial_scale.value_or(LossScaleOptimizer::kDefaultInitialScale);
    growth_steps_ = dynamic_growth_steps.value_or(LossScaleOptimizer::kDefaultGrowthSteps);
    STRATA_CHECK(growth_steps_ >= 1, "optim::LossScaleOptimizer: dynamic_growth_steps must be at least 1, got ",
                 growth_steps_);
  } else {
    STRATA_CHECK(initial_scale.has_value(),
                 "optim::LossScaleOptimizer: dynamic = false requires an initial_scale (the fixed loss scale)");
    STRATA_CHECK(!dynamic_growth_steps.has_value(),
                 "optim::LossScaleOptimizer: dynamic_growth_steps must be unset when dynamic = false, got ",
                 *dynamic_growth_steps);
    initial_scale_ = *initial_scale;
    growth_steps_ = 0;
  }
  STRATA_CHECK(std::isfinite(initial_scale_) && initial_scale_ > 0 &&
                   initial_scale_ <= double(std::numeric_limits<float>::max()),
               "optim::LossScaleOptimizer: initial_scale must be a positive finite float32, got ",
               initial_scale_);
  loss_scale_ = state_variable("loss_scale", Tensor::scalar(initial_scale_, kFloat32));
  good_steps_ = state_variable("good_steps", Tensor::scalar(0, kInt64));
}

std::vector<std::string> LossScaleOptimizerImpl::slot_names() const { return inner_.impl().slot_names(); }

void LossScaleOptimizerImpl::update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
                                    const UpdateContext& ctx) const {
  inner_.impl().update(param, grad, slots, ctx);
}

std::vector<std::pair<std::string, Variable>> LossScaleOptimizerImpl::wrapper_variables() const {
  // A fixed scale is a constant of the program, as in Keras (which tracks the scale only
  // when it is dynamic): not saved, and a saved one never replaces it.
  if (!dynamic_) return {};
  return {{"loss_scale", loss_scale_}, {"good_steps", good_steps_}};
}

void LossScaleOptimizerImpl::check_restored(const std::string& key, const Tensor& value) const {
  // A scale of 0, inf or NaN would make every step non-finite; a negative one would
  // flip the gradients' signs.
  if (key == "loss_scale") {
    const double scale = value.item<double>();
    STRATA_CHECK(std::isfinite(scale) && scale > 0, "the saved loss scale ", scale,
                 " is not a positive finite number");
  } else if (key == "good_steps") {
    const int64_t good = value.item<int64_t>();
    STRATA_CHECK(good >= 0, "the saved count of good steps ", good, " is negative");
  }
}

void LossScaleOptimizerImpl::apply_wrapped(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                           bool aggregate_gradients) {
  detail::check_apply_arguments(name(), grads, vars);
  autograd::StopRecording no_tape;
  // Reduced first: the finiteness of the sum is the same on every replica, so all of
  // them take the same branch below (and issue the same collectives).
  const std::vector<Tensor> g = aggregate_gradients ? all_reduce_sum_gradients(grads) : grads;
  const bool finite = gradients_all_finite(g);
  if (finite)
    inner_.apply_gradients(g, vars, /*aggregate_gradients=*/false);
  else
    inner_.increment_iterations();
  if (!dynamic_) return;

  // Keras's DynamicLossScale.update, in float32.
  auto update_state = [&] {
    const Tensor scale_t = loss_scale_.value();
    const Tensor count_t = good_steps_.value();
    float scale = scale_t.item<float>();
    int64_t count = count_t.item<int64_t>();
    if (finite) {
      if (count + 1 >= growth_steps_) {
        const float doubled = scale * 2.0f;
        if (std::isfinite(doubled)) scale = doubled;
        count = 0;
      } else {
        ++count;
      }
    } else {
      scale = std::max(scale / 2.0f, 1.0f);
      count = 0;
    }
    scale_t.copy_(Tensor::scalar(double(scale), kFloat32));
    count_t.copy_(Tensor::scalar(double(count), kInt64));
  };
  // Mirrored state: each replica updates its own copy in place (the same change
  // everywhere). State the local replicas share (created outside a mirrored scope, or by
  // CentralStorageStrategy) is updated once.
  distribute::ReplicaContext* ctx = distribute::get_replica_context();
  if (ctx && ctx->strategy().num_local_replicas() > 1 && !loss_scale_.impl().is_replicated()) {
    ctx->run_once([&] {
      autograd::StopRecording paused;
      update_state();
    });
  } else {
    update_state();
  }
}

LossScaleOptimizer::LossScaleOptimizer(const Optimizer& inner, bool dynamic, std::optional<double> initial_scale,
                                       std::optional<int64_t> dynamic_growth_steps)
    : Optimizer(std::make_shared<LossScaleOptimizerImpl>(inner, dynamic, initial_scale, dynamic_growth_steps)) {}

LossScaleOptimizer::LossScaleOptimizer(std::shared_ptr<LossScaleOptimizerImpl> impl) : Optimizer(std::move(impl)) {}

std::optional<LossScaleOptimizer> LossScaleOptimizer::of(const Optimizer& optimizer) {
  if (auto impl = std::dynamic_pointer_cast<LossScaleOptimizerImpl>(optimizer.ptr()))
    return LossScaleOptimizer(std::move(impl));
  return std::nullopt;
}

LossScaleOptimizerImpl& LossScaleOptimizer::lso() const { return static_cast<LossScaleOptimizerImpl&>(impl()); }

double LossScaleOptimizer::loss_scale() const { return lso().loss_scale().value().item<double>(); }

int64_t LossScaleOptimizer::dynamic_counter() const { return lso().good_steps().value().item<int64_t>(); }

Tensor LossScaleOptimizer::get_scaled_loss(const Tensor& loss) const {
  STRATA_CHECK(loss.defined(), "optim::LossScaleOptimizer::get_scaled_loss: the loss is undefined");
  STRATA_CHECK(is_floating(loss.dtype()), "optim::LossScaleOptimizer::get_scaled_loss: expected a floating loss, got ",
               loss.dtype());
  return loss * loss_scale();
}

std::vector<Tensor> LossScaleOptimizer::get_unscaled_gradients(const std::vector<Tensor>& grads) const {
  const double reciprocal = 1.0 / loss_scale();
  std::vector<Tensor> out;
  out.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    STRATA_CHECK(!g.defined() || is_floating(g.dtype()), "optim::LossScaleOptimizer::get_unscaled_gradients: gradient ",
                 i, " has non-floating dtype ", g.defined() ? g.dtype() : kFloat32);
    out.push_back(g.defined() ? g * reciprocal : Tensor());
  }
  return out;
}

}  // namespace strata::optim
