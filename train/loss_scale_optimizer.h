// LossScaleOptimizer: loss scaling for mixed-precision training
// (tf.keras.mixed_precision.LossScaleOptimizer, TensorFlow 2's semantics).
//
// float16 gradients of a small loss underflow to zero. Scaling the loss by S before the
// backward pass scales every gradient by S; dividing the (float32) variable gradients by S
// afterwards gives the true gradients:
//
//   optim::LossScaleOptimizer opt(optim::Adam(1e-3));        // dynamic, S = 2^15
//   ...in the step function:
//   Tensor loss = distribute::compute_average_loss(per_example, global_batch);
//   auto grads = tape.gradient(opt.get_scaled_loss(loss), vars);
//   grads = opt.get_unscaled_gradients(grads);
//   opt.apply_gradients(grads, vars);
//
// apply_gradients(grads, vars):
//   1. in a replica context with several replicas in sync, sums the gradients across the
//      replicas (unless aggregate_gradients is false), so one replica's inf/NaN reaches
//      every replica;
//   2. checks that every reduced gradient is finite;
//   3. finite: applies them through the inner optimizer (which does not reduce again).
//      Not finite: skips the update; the inner optimizer's `iterations` still advances;
//   4. dynamic scaling: after `dynamic_growth_steps` consecutive finite steps the scale
//      doubles (only when the doubled value is finite) and the counter resets; a
//      non-finite step halves the scale (never below 1) and resets the counter. A fixed
//      scale (dynamic = false) never changes, but non-finite steps are still skipped.
// The scale (float32) and the counter of good steps (int64) are non-trainable variables
// with aggregation ONLY_FIRST_REPLICA: created inside a strategy's scope they are mirrored,
// and every replica (and worker) applies the same change, decided from the same reduced
// gradients, so they stay identical everywhere. A train::Checkpoint tracking a dynamic
// optimizer saves them as "<name>/loss_scale" and "<name>/good_steps" (a restored scale
// must be positive and finite); a fixed scale is the program's constant, as in Keras: not
// saved, and one in the checkpoint (from a dynamic run) is left unused.
//
// The handle is an optim::Optimizer: iterations(), learning_rate(), slots and build()
// are the inner optimizer's, and a copy stored as an optim::Optimizer still scales (use
// LossScaleOptimizer::of to get the loss-scaling view back). Wrapping a
// LossScaleOptimizer in another is an error.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <strata/train/optimizer.h>

namespace strata::optim {

class LossScaleOptimizerImpl final : public OptimizerImpl {
 public:
  LossScaleOptimizerImpl(Optimizer inner, bool dynamic, std::optional<double> initial_scale,
                         std::optional<int64_t> dynamic_growth_steps);

  std::vector<std::string> slot_names() const override;
  void update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
              const UpdateContext& ctx) const override;
  std::shared_ptr<OptimizerImpl> wrapped() const override { return inner_.ptr(); }
  void apply_wrapped(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                     bool aggregate_gradients) override;
  std::vector<std::pair<std::string, Variable>> wrapper_variables() const override;
  void check_restored(const std::string& key, const Tensor& value) const override;

  const Optimizer& inner() const { return inner_; }
  bool dynamic() const { return dynamic_; }
  double initial_scale() const { return initial_scale_; }
  int64_t dynamic_growth_steps() const { return growth_steps_; }
  const Variable& loss_scale() const { return loss_scale_; }
  const Variable& good_steps() const { return good_steps_; }

 private:
  Optimizer inner_;
  bool dynamic_;
  double initial_scale_;
  int64_t growth_steps_;
  Variable loss_scale_;  // float32 scalar
  Variable good_steps_;  // int64 scalar: consecutive finite steps since the last change
};

class LossScaleOptimizer : public Optimizer {
 public:
  static constexpr double kDefaultInitialScale = 32768.0;  // 2^15
  static constexpr int64_t kDefaultGrowthSteps = 2000;

  // dynamic: initial_scale defaults to 2^15 and dynamic_growth_steps to 2000.
  // dynamic = false: initial_scale is required and dynamic_growth_steps must be unset.
  // initial_scale must be finite and positive; dynamic_growth_steps at least 1. Variables
  // are created through the current variable creator (create it inside the strategy's
  // scope, like the inner optimizer).
  explicit LossScaleOptimizer(const Optimizer& inner, bool dynamic = true,
                              std::optional<double> initial_scale = std::nullopt,
                              std::optional<int64_t> dynamic_growth_steps = std::nullopt);

  // The loss-scaling view of `optimizer` when it is a LossScaleOptimizer (also one stored
  // as a plain optim::Optimizer), else nullopt.
  static std::optional<LossScaleOptimizer> of(const Optimizer& optimizer);

  // loss * scale, in the loss's dtype (recorded by active tapes).
  Tensor get_scaled_loss(const Tensor& loss) const;
  // Each defined gradient * (1 / scale), in its dtype; undefined ones stay undefined.
  std::vector<Tensor> get_unscaled_gradients(const std::vector<Tensor>& grads) const;

  // The current scale and good-step counter (this replica's copy in a replica context).
  double loss_scale() const;
  int64_t dynamic_counter() const;
  const Variable& loss_scale_variable() const { return lso().loss_scale(); }
  const Variable& dynamic_counter_variable() const { return lso().good_steps(); }

  bool dynamic() const { return lso().dynamic(); }
  double initial_scale() const { return lso().initial_scale(); }
  // 0 for a fixed scale.
  int64_t dynamic_growth_steps() const { return lso().dynamic_growth_steps(); }
  const Optimizer& inner_optimizer() const { return lso().inner(); }

 private:
  explicit LossScaleOptimizer(std::shared_ptr<LossScaleOptimizerImpl> impl);
  LossScaleOptimizerImpl& lso() const;
};

}  // namespace strata::optim
