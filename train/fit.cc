#include <strata/train/fit.h>

#include <filesystem>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/distributed_variable.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/train/checkpoint.h>
#include <strata/train/controller.h>
#include <strata/train/metrics.h>

namespace strata::train {

namespace fs = std::filesystem;

namespace {

// The strategy a call runs under: the requested one (its scope entered) or the current.
distribute::Strategy& enter_strategy(distribute::Strategy* requested, std::optional<distribute::StrategyScope>& scope,
                                     const char* fn) {
  distribute::Strategy& s = requested ? *requested : distribute::get_strategy();
  if (s.is_default()) {
    STRATA_CHECK(!distribute::has_strategy(), fn, ": the default strategy was requested inside the scope of the '",
                 distribute::get_strategy().name(), "' strategy");
  } else {
    scope.emplace(s.scope());
  }
  return s;
}

// The model's variables must belong to the strategy the loop runs under.
void check_variables(const nn::AnyModule& model, const distribute::Strategy& strategy, const char* fn) {
  STRATA_CHECK(model.defined(), fn, ": the model is an empty handle");
  for (const auto& nv : model.named_variables()) {
    const auto* dv = dynamic_cast<const distribute::DistributedVariableImpl*>(&nv.variable.impl());
    if (dv) {
      STRATA_CHECK(&dv->strategy() == &strategy, fn, ": the model's variable '", nv.path, "' (",
                   nv.variable.impl().kind(), ") belongs to the '", dv->strategy().name(),
                   "' strategy but the loop runs under the '", strategy.name(), "' strategy: call ", fn,
                   " inside the scope of the strategy the model was created under (or pass it in the options)");
    } else {
      STRATA_CHECK(strategy.num_local_replicas() == 1, fn, ": the model's variable '", nv.path,
                   "' is a plain Variable but the loop runs under the '", strategy.name(), "' strategy with ",
                   strategy.num_local_replicas(), " replicas: create the model inside strategy.scope()");
    }
  }
}

// Sets a model's training flag for a scope and restores it afterwards.
class TrainingFlag {
 public:
  TrainingFlag(nn::AnyModule model, bool training) : model_(std::move(model)), saved_(model_.training()) {
    model_.set_training(training);
  }
  ~TrainingFlag() { model_.set_training(saved_); }
  TrainingFlag(const TrainingFlag&) = delete;
  TrainingFlag& operator=(const TrainingFlag&) = delete;

 private:
  nn::AnyModule model_;
  bool saved_;
};

// The loss mean and the requested metrics; create it in the strategy's scope (its
// variables are sync-on-read there).
class MetricSet {
 public:
  explicit MetricSet(const std::vector<std::string>& names, const char* fn) : loss_("loss") {
    for (const auto& name : names) {
      STRATA_CHECK(name == "accuracy" || name == "sparse_categorical_accuracy", fn, ": unknown metric '", name,
                   "' (expected \"accuracy\" or \"sparse_categorical_accuracy\")");
      for (const auto& [n, m] : accuracies_) STRATA_CHECK(n != name, fn, ": metric '", name, "' is listed twice");
      accuracies_.emplace_back(name, metrics::SparseCategoricalAccuracy(name));
    }
  }
  void reset() const {
    loss_.reset_state();
    for (const auto& [name, m] : accuracies_) m.reset_state();
  }
  // In replica context: this replica's examples.
  void update(const Tensor& y_true, const Tensor& y_pred, const Tensor& per_example) const {
    loss_.update_state(per_example);
    for (const auto& [name, m] : accuracies_) m.update_state(y_true, y_pred);
  }
  // In cross-replica context: the aggregates over every replica.
  Outputs results() const {
    Outputs out{{"loss", loss_.result().item<double>()}};
    for (const auto& [name, m] : accuracies_) out[name] = m.result().item<double>();
    return out;
  }

 private:
  metrics::Mean loss_;
  std::vector<std::pair<std::string, metrics::SparseCategoricalAccuracy>> accuracies_;
};

void check_batch(const distribute::PerReplica<data::Batch>& batch, const char* fn) {
  for (const auto& part : batch) {
    STRATA_CHECK(part.size() == 2, fn, ": dataset elements must be {x, y} (2 components), got ", part.size());
  }
}

int64_t global_rows(const distribute::PerReplica<data::Batch>& batch) {
  int64_t n = 0;
  for (const auto& part : batch) n += part[0].ndim() >= 1 ? part[0].dim(0) : 1;
  return n;
}

Tensor per_example_loss(const LossFn& loss, const Tensor& y_true, const Tensor& y_pred, const char* fn) {
  Tensor per_example = loss(y_true, y_pred);
  STRATA_CHECK(per_example.defined() && per_example.ndim() == 1 && per_example.dim(0) == y_pred.dim(0), fn,
               ": the loss function must return one loss per example (shape [", y_pred.dim(0), "]), got ",
               per_example.defined() ? shape_str(per_example.shape()) : "an undefined tensor");
  return per_example;
}

class FitTrainer final : public StandardTrainer {
 public:
  FitTrainer(distribute::Strategy& strategy, distribute::DistributedDataset dataset, Variable step,
             nn::AnyModule model, LossFn loss, optim::Optimizer optimizer, const MetricSet& metrics)
      : StandardTrainer(strategy, std::move(dataset), std::move(step)),
        model_(std::move(model)),
        loss_(std::move(loss)),
        optimizer_(std::move(optimizer)),
        variables_(model_.trainable_variables()),
        metrics_(metrics) {}
  int64_t examples_per_step() const override { return examples_; }
  // The metrics average over the epoch, whose loops (several with checkpoint_every_steps)
  // each report the running averages: reset when an epoch begins, not per loop.
  void begin_epoch() { metrics_.reset(); }

 protected:
  void train_step(distribute::DistributedIterator& iterator) override {
    const auto batch = next_batch(iterator);
    check_batch(batch, "fit");
    // The mean over the global batch: sum(per-example) / rows, whatever the replica count.
    const int64_t rows = global_rows(batch);
    examples_ = rows;
    strategy().run(
        [&](const data::Batch& b) {
          autograd::GradientTape tape;
          Tensor y_pred = model_(b[0]);
          Tensor per_example = per_example_loss(loss_, b[1], y_pred, "fit");
          Tensor scaled = distribute::compute_average_loss(per_example, rows);
          auto grads = tape.gradient(scaled, variables_);
          optimizer_.apply_gradients(grads, variables_);
          metrics_.update(b[1], y_pred, per_example);
        },
        batch);
  }
  Outputs train_loop_end() override { return metrics_.results(); }

 private:
  nn::AnyModule model_;
  LossFn loss_;
  optim::Optimizer optimizer_;
  std::vector<Variable> variables_;
  const MetricSet& metrics_;
  int64_t examples_ = 0;
};

class FitEvaluator final : public StandardEvaluator {
 public:
  FitEvaluator(distribute::Strategy& strategy, distribute::DistributedDataset dataset, nn::AnyModule model,
               LossFn loss, const MetricSet& metrics, const char* fn)
      : StandardEvaluator(strategy, std::move(dataset)),
        model_(std::move(model)),
        loss_(std::move(loss)),
        metrics_(metrics),
        fn_(fn) {}

  Outputs evaluate(int64_t num_steps) override {
    TrainingFlag inference(model_, false);
    return StandardEvaluator::evaluate(num_steps);
  }

 protected:
  void eval_begin() override { metrics_.reset(); }
  std::optional<Outputs> eval_step(distribute::DistributedIterator& iterator) override {
    auto batch = iterator.next();
    if (!batch) return std::nullopt;
    check_batch(*batch, fn_);
    strategy().run(
        [&](const data::Batch& b) {
          autograd::StopRecording no_tape;
          Tensor y_pred = model_(b[0]);
          metrics_.update(b[1], y_pred, per_example_loss(loss_, b[1], y_pred, fn_));
        },
        *batch);
    return Outputs{};
  }
  Outputs eval_end() override { return metrics_.results(); }

 private:
  nn::AnyModule model_;
  LossFn loss_;
  const MetricSet& metrics_;
  const char* fn_;
};

// fit and evaluate take the mean over the global batch: what a SumOverBatchSize loss
// object means. Another reduction would be silently replaced by it, so it is refused.
LossFn wrap(const losses::Loss& loss, const char* fn) {
  STRATA_CHECK(loss.reduction() == losses::Reduction::SumOverBatchSize, fn, ": the loss '", loss.name(),
               "' has reduction ", losses::reduction_name(loss.reduction()), "; ", fn,
               " minimises and reports the mean over the global batch (SumOverBatchSize). For another "
               "reduction pass a function returning per-example losses scaled as needed");
  return [&loss](const Tensor& y_true, const Tensor& y_pred) { return loss.call(y_true, y_pred); };
}

Outputs without_rate(Outputs outputs) {
  outputs.erase("steps_per_second");
  return outputs;
}

}  // namespace

History fit(const nn::AnyModule& model, const LossFn& loss, const optim::Optimizer& optimizer,
            const data::Dataset& dataset, const FitOptions& options) {
  STRATA_CHECK(static_cast<bool>(loss), "fit: the loss function is empty");
  STRATA_CHECK(optimizer.defined(), "fit: the optimizer is an empty handle");
  STRATA_CHECK(options.epochs >= 0, "fit: epochs must be >= 0, got ", options.epochs);
  STRATA_CHECK(options.steps_per_epoch >= 0, "fit: steps_per_epoch must be >= 0 (0: one pass over the dataset), got ",
               options.steps_per_epoch);
  STRATA_CHECK(options.checkpoint_every_steps >= 0, "fit: checkpoint_every_steps must be >= 0 (0: at epoch ends), got ",
               options.checkpoint_every_steps);
  STRATA_CHECK(options.checkpoint_every_steps == 0 || !options.model_dir.empty(),
               "fit: checkpoint_every_steps (", options.checkpoint_every_steps, ") needs a model_dir");
  STRATA_CHECK(options.validation_steps == -1 || options.validation_steps > 0,
               "fit: validation_steps must be > 0, or -1 (the whole validation set), got ", options.validation_steps);
  for (const Callback* cb : options.callbacks) STRATA_CHECK(cb != nullptr, "fit: a callback is null");
  std::optional<distribute::StrategyScope> scope;
  distribute::Strategy& strategy = enter_strategy(options.strategy, scope, "fit");
  check_variables(model, strategy, "fit");

  int64_t steps_per_epoch = options.steps_per_epoch;
  if (steps_per_epoch == 0) {
    const int64_t cardinality = dataset.cardinality();
    STRATA_CHECK(cardinality >= 0, "fit: the dataset's length is ",
                 cardinality == data::kInfiniteCardinality ? "infinite" : "unknown",
                 ": give FitOptions::steps_per_epoch");
    STRATA_CHECK(cardinality > 0, "fit: the dataset is empty");
    steps_per_epoch = cardinality;
  }

  // Created in the strategy's scope: a mirrored step counter, sync-on-read metrics.
  Variable global_step = create_global_step();
  MetricSet train_metrics(options.metrics, "fit");
  MetricSet val_metrics(options.metrics, "fit");

  FitTrainer trainer(strategy, strategy.experimental_distribute_dataset(dataset.repeat()), global_step, model, loss,
                     optimizer, train_metrics);
  std::optional<FitEvaluator> evaluator;
  if (options.validation_data) {
    evaluator.emplace(strategy, strategy.experimental_distribute_dataset(*options.validation_data), model, loss,
                      val_metrics, "fit");
  }
  std::optional<CheckpointManager> manager;
  ControllerOptions co;
  co.strategy = &strategy;
  co.trainer = &trainer;
  co.evaluator = evaluator ? &*evaluator : nullptr;
  co.global_step = global_step;
  // Loops end at the mid-epoch checkpoints too, where the Controller saves.
  const int64_t every = options.checkpoint_every_steps;
  const int64_t steps_per_loop = every > 0 ? std::min(every, steps_per_epoch) : steps_per_epoch;
  co.steps_per_loop = steps_per_loop;
  co.enable_async_checkpointing = options.async_checkpoint;
  co.progress.verbosity = options.verbose;
  if (!options.model_dir.empty()) {
    Checkpoint checkpoint{{"model", model},
                          {"optimizer", optimizer},
                          {"global_step", global_step},
                          {"train_input", trainer.input_state()}};
    manager.emplace(checkpoint, fs::path(options.model_dir) / "checkpoints", /*max_to_keep=*/3,
                    /*checkpoint_interval=*/steps_per_loop);
    co.checkpoint_manager = &*manager;
    co.summary_dir = (fs::path(options.model_dir) / "train").string();
    co.eval_summary_dir = (fs::path(options.model_dir) / "validation").string();
  }
  Controller controller(co);  // restores the latest checkpoint of model_dir

  History history;
  // The callbacks see the model and optimizer for the length of this call, also when it
  // throws.
  struct Training {
    const std::vector<Callback*>& callbacks;
    ~Training() {
      for (Callback* cb : callbacks) cb->set_training(nullptr, nullptr);
    }
  } training{options.callbacks};
  for (Callback* cb : options.callbacks) cb->set_training(&model, &optimizer);
  for (Callback* cb : options.callbacks) cb->clear_stop_request();
  for (Callback* cb : options.callbacks) cb->on_train_begin();
  for (int64_t epoch = controller.global_step() / steps_per_epoch; epoch < options.epochs; ++epoch) {
    for (Callback* cb : options.callbacks) cb->on_epoch_begin(epoch);
    trainer.begin_epoch();
    controller.progress().message("Epoch " + std::to_string(epoch + 1) + "/" + std::to_string(options.epochs));
    controller.train((epoch + 1) * steps_per_epoch, /*checkpoint_at_completion=*/manager.has_value());
    Outputs logs = without_rate(controller.last_train_outputs());
    if (evaluator) {
      for (Callback* cb : options.callbacks) cb->on_test_begin();
      const Outputs val = without_rate(controller.evaluate(options.validation_steps));
      for (Callback* cb : options.callbacks) cb->on_test_end(val);
      for (const auto& [name, value] : val) logs["val_" + name] = value;
    }
    for (const auto& [name, value] : logs) history.history[name].push_back(value);
    history.epochs.push_back(epoch);
    bool stop = false;
    for (Callback* cb : options.callbacks) {
      cb->on_epoch_end(epoch, logs);
      stop = stop || cb->stop_requested();
    }
    if (stop) break;
  }
  if (options.epochs > 0) optimizer.finalize_variable_values(model.trainable_variables());
  for (Callback* cb : options.callbacks) cb->on_train_end(history);
  return history;
}

History fit(const nn::AnyModule& model, const losses::Loss& loss, const optim::Optimizer& optimizer,
            const data::Dataset& dataset, const FitOptions& options) {
  return fit(model, wrap(loss, "fit"), optimizer, dataset, options);
}

Outputs evaluate(const nn::AnyModule& model, const LossFn& loss, const data::Dataset& dataset,
                 const EvaluateOptions& options) {
  STRATA_CHECK(static_cast<bool>(loss), "evaluate: the loss function is empty");
  STRATA_CHECK(options.steps == -1 || options.steps > 0, "evaluate: steps must be > 0, or -1 (until the data ends), got ",
               options.steps);
  std::optional<distribute::StrategyScope> scope;
  distribute::Strategy& strategy = enter_strategy(options.strategy, scope, "evaluate");
  check_variables(model, strategy, "evaluate");
  MetricSet metrics(options.metrics, "evaluate");
  FitEvaluator evaluator(strategy, strategy.experimental_distribute_dataset(dataset), model, loss, metrics,
                         "evaluate");
  Outputs out = evaluator.evaluate(options.steps);
  ProgressOptions progress_options;
  progress_options.verbosity = options.verbose;
  ProgressReporter progress(progress_options);
  std::string line = "evaluate";
  for (const auto& [name, value] : out) line += " | " + name + " " + std::to_string(value);
  progress.message(line);
  return out;
}

Outputs evaluate(const nn::AnyModule& model, const losses::Loss& loss, const data::Dataset& dataset,
                 const EvaluateOptions& options) {
  return evaluate(model, wrap(loss, "evaluate"), dataset, options);
}

Tensor predict(const nn::AnyModule& model, const data::Dataset& dataset, const PredictOptions& options) {
  STRATA_CHECK(options.steps == -1 || options.steps > 0, "predict: steps must be > 0, or -1 (until the data ends), got ",
               options.steps);
  std::optional<distribute::StrategyScope> scope;
  distribute::Strategy& strategy = enter_strategy(options.strategy, scope, "predict");
  check_variables(model, strategy, "predict");
  TrainingFlag inference(model, false);
  auto dataset_ = strategy.experimental_distribute_dataset(dataset);
  auto it = dataset_.make_iterator();
  std::vector<Tensor> parts;
  for (int64_t i = 0; options.steps < 0 || i < options.steps; ++i) {
    auto batch = it.next();
    if (!batch) break;
    auto outputs = strategy.run(
        [&](const data::Batch& b) {
          STRATA_CHECK(!b.empty(), "predict: dataset elements have no components");
          autograd::StopRecording no_tape;
          return model(b[0]);
        },
        *batch);
    // Replica r holds the r-th slice of the global batch: gathering keeps the order.
    parts.push_back(strategy.gather(outputs, 0).to(cpu()));
  }
  STRATA_CHECK(!parts.empty(), "predict: the dataset yielded no batches");
  return parts.size() == 1 ? parts[0] : concat(parts, 0);
}

}  // namespace strata::train
