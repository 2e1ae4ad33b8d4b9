// fit / evaluate / predict: a Keras-like loop for simple models (one input, integer or
// dense labels), built on the Controller, that runs unchanged under any strategy.
//
//   auto strategy = distribute::MirroredStrategy(distribute::MirroredStrategy::cpu_devices(2));
//   auto scope = strategy.scope();                       // fit uses the current strategy
//   nn::Sequential model{nn::Dense(784, 128), nn::ReLU(), nn::Dense(128, 10)};
//   optim::Optimizer opt = optim::Adam(1e-3);
//   auto loss = [](const Tensor& y, const Tensor& logits) {
//     return losses::sparse_categorical_crossentropy(y, logits, /*from_logits=*/true);
//   };
//   train::FitOptions o;
//   o.epochs = 5;
//   o.validation_data = val_ds.batch(256);
//   o.metrics = {"accuracy"};
//   train::History h = train::fit(model, loss, opt, train_ds.batch(64), o);
//
// The dataset yields global batches {x, y}; each is split across the replicas. The loss
// function returns one loss per example; the step minimises their sum divided by the
// global batch's size (distribute::compute_average_loss), so every strategy computes the
// same mean and gradient. Reported "loss" (and the metrics) are averages over all the
// examples of the epoch, as Keras reports them; validation logs are prefixed "val_".
//
// An epoch is one pass over `dataset` (its cardinality must be known and finite) or
// `steps_per_epoch` steps over it repeated. With `model_dir`, fit checkpoints the model,
// optimizer, global step and input position at the end of every epoch (and every
// checkpoint_every_steps steps) and writes
// TensorBoard summaries to model_dir/train and model_dir/validation; running fit again
// with the same model_dir resumes at the saved epoch.
//
// With an optimizer that keeps a moving average of the weights (use_ema, train/ema.h),
// fit ends by putting the averages into the model's trainable variables, as Keras's fit
// does (Optimizer::finalize_variable_values; not when epochs is 0).
//
// Under a strategy's scope fit uses that strategy (or `strategy`, entering its scope);
// the model and optimizer must have been created under the same strategy — variables of
// another strategy, or plain variables under a multi-replica strategy, are an error.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <strata/data/dataset.h>
#include <strata/distribute/strategy.h>
#include <strata/train/losses.h>
#include <strata/train/nn/module.h>
#include <strata/train/optimizer.h>
#include <strata/train/progress.h>
#include <strata/train/trainer.h>

namespace strata::train {

// Per-example losses [batch] from (y_true, y_pred).
using LossFn = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred)>;

struct History {
  // Per metric ("loss", "accuracy", "val_loss", ...), one value per epoch run.
  std::map<std::string, std::vector<double>> history;
  // The epochs run by this call (0-based; a resumed fit starts after the saved one).
  std::vector<int64_t> epochs;
};

// Hooks around fit's epochs (Keras's Callback). A callback may call request_stop() to end
// training after the current epoch (Keras's model.stop_training = True). Keras's
// EarlyStopping and ReduceLROnPlateau are in train/callbacks.h, SwapEMAWeights in
// train/swap_ema_weights.h.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin() {}
  virtual void on_epoch_begin(int64_t epoch) { (void)epoch; }
  virtual void on_epoch_end(int64_t epoch, const Outputs& logs) { (void)epoch, (void)logs; }
  // Around the validation after each epoch (logs: its loss and metrics, unprefixed).
  virtual void on_test_begin() {}
  virtual void on_test_end(const Outputs& logs) { (void)logs; }
  virtual void on_train_end(const History& history) { (void)history; }

  void request_stop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }
  void clear_stop_request() { stop_requested_ = false; }

  // The model and optimizer fit is training (Keras's callback.model), set by fit from
  // before on_train_begin to after on_train_end; null outside fit.
  const nn::AnyModule* model() const { return model_; }
  const optim::Optimizer* optimizer() const { return optimizer_; }
  void set_training(const nn::AnyModule* model, const optim::Optimizer* optimizer) {
    model_ = model;
    optimizer_ = optimizer;
  }

 private:
  bool stop_requested_ = false;
  const nn::AnyModule* model_ = nullptr;
  const optim::Optimizer* optimizer_ = nullptr;
};

// A callback made of functions (Keras's LambdaCallback); empty ones do nothing.
class LambdaCallback : public Callback {
 public:
  std::function<void()> train_begin;
  std::function<void(int64_t epoch)> epoch_begin;
  std::function<void(int64_t epoch, const Outputs& logs)> epoch_end;
  std::function<void()> test_begin;
  std::function<void(const Outputs& logs)> test_end;
  std::function<void(const History&)> train_end;

  void on_train_begin() override {
    if (train_begin) train_begin();
  }
  void on_epoch_begin(int64_t epoch) override {
    if (epoch_begin) epoch_begin(epoch);
  }
  void on_epoch_end(int64_t epoch, const Outputs& logs) override {
    if (epoch_end) epoch_end(epoch, logs);
  }
  void on_test_begin() override {
    if (test_begin) test_begin();
  }
  void on_test_end(const Outputs& logs) override {
    if (test_end) test_end(logs);
  }
  void on_train_end(const History& h) override {
    if (train_end) train_end(h);
  }
};

struct FitOptions {
  int64_t epochs = 1;
  std::optional<data::Dataset> validation_data;  // batched {x, y}, evaluated after each epoch
  std::vector<Callback*> callbacks;              // not owned; called in order
  int64_t steps_per_epoch = 0;                   // 0: one pass over the dataset
  int64_t validation_steps = -1;                 // -1: the whole validation set
  // "accuracy" / "sparse_categorical_accuracy": argmax(y_pred) == integer y_true.
  std::vector<std::string> metrics;
  std::string model_dir;                         // "": no checkpoints or summaries
  // Keras's BackupAndRestore(save_freq=N): with model_dir, a checkpoint every N steps
  // within an epoch too (0: at epoch ends only). A fit that stopped part-way through an
  // epoch (preempted, killed) resumes from the last one, its input position included; the
  // interrupted epoch's logged averages then cover the steps after the resume only.
  int64_t checkpoint_every_steps = 0;
  // Checkpoints written on a background thread while training goes on
  // (ControllerOptions::enable_async_checkpointing); fit returns with them written.
  bool async_checkpoint = false;
  Verbosity verbose = Verbosity::Normal;
  distribute::Strategy* strategy = nullptr;      // default: the current strategy
};

History fit(const nn::AnyModule& model, const LossFn& loss, const optim::Optimizer& optimizer,
            const data::Dataset& dataset, const FitOptions& options = {});
History fit(const nn::AnyModule& model, const losses::Loss& loss, const optim::Optimizer& optimizer,
            const data::Dataset& dataset, const FitOptions& options = {});

struct EvaluateOptions {
  int64_t steps = -1;                  // -1: until the data ends
  std::vector<std::string> metrics;    // as FitOptions::metrics
  Verbosity verbose = Verbosity::Quiet;
  distribute::Strategy* strategy = nullptr;
};

// The mean per-example loss ("loss") and the metrics over `dataset` (batched {x, y}),
// with the model in inference mode (training flag off, restored afterwards).
Outputs evaluate(const nn::AnyModule& model, const LossFn& loss, const data::Dataset& dataset,
                 const EvaluateOptions& options = {});
Outputs evaluate(const nn::AnyModule& model, const losses::Loss& loss, const data::Dataset& dataset,
                 const EvaluateOptions& options = {});

struct PredictOptions {
  int64_t steps = -1;  // -1: until the data ends
  distribute::Strategy* strategy = nullptr;
};

// The model's outputs for every example of `dataset` (batched; component 0 is the input,
// others are ignored), concatenated in order along axis 0, in inference mode.
Tensor predict(const nn::AnyModule& model, const data::Dataset& dataset, const PredictOptions& options = {});

}  // namespace strata::train
