// Keras's EarlyStopping and ReduceLROnPlateau: fit callbacks (train/fit.h) that watch one
// logged value, "val_loss" by default, at the end of every epoch.
//
// Under a distribution strategy the logs are reduced over every replica of every worker,
// so every worker sees the same values and makes the same decision at the same epoch: the
// workers stop together, and their learning rates stay equal.
//
// A monitored name missing from an epoch's logs (a typo, or "val_loss" without
// validation_data) is an error naming the logged values, where Keras warns and the
// callback then never acts. A fit resumed from model_dir starts the callbacks afresh
// (their waits, bests and a reduced learning rate are not checkpointed; the optimizer
// resumes with the learning rate it was built with).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/tensor.h>
#include <strata/train/fit.h>

namespace strata::train {

// Whether a smaller or a larger monitored value is better. Auto: larger for names that
// contain "acc" (accuracy) or "auc", smaller for the others (Keras's rule).
enum class MonitorMode { Auto, Min, Max };

// A monitored value's best so far and the test for improving on it: by more than
// min_delta, downwards (Min) or upwards (Max).
class MonitoredValue {
 public:
  MonitoredValue(std::string monitor, MonitorMode mode, double min_delta, const char* owner);
  // The value in `logs`; throws strata::Error naming the logged values when it is absent.
  double read(const Outputs& logs) const;
  bool improves_on(double value, double reference) const;
  // The starting best: +inf (Min) or -inf (Max).
  double worst() const;
  const std::string& name() const { return monitor_; }

 private:
  std::string monitor_;
  bool larger_is_better_;
  double min_delta_;
  const char* owner_;
};

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0;  // an improvement must exceed this (its absolute value)
  int64_t patience = 0;  // epochs without improvement before training stops
  MonitorMode mode = MonitorMode::Auto;
  // When set, training stops after `patience` epochs unless the value improves on it; an
  // improvement on the best that does not beat the baseline does not reset the wait.
  std::optional<double> baseline = std::nullopt;
  // When training stops, the model's variables get back the values of the best epoch.
  bool restore_best_weights = false;
  int64_t start_from_epoch = 0;  // epochs before this one are not watched (warm-up)
};

// Stops fit once the monitored value has not improved for `patience` epochs (never at
// epoch 0). With restore_best_weights the model ends with the best epoch's values, kept
// in host memory meanwhile; the checkpoint fit wrote in model_dir at the last epoch still
// holds that epoch's, so a fit run again on the same model_dir resumes from them.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void on_train_begin() override;
  void on_epoch_end(int64_t epoch, const Outputs& logs) override;

  // The epoch after which training stopped, or -1 when it did not stop.
  int64_t stopped_epoch() const { return stopped_epoch_; }
  // The best epoch and its value so far (-1 and nullopt before one was watched).
  int64_t best_epoch() const { return best_epoch_; }
  std::optional<double> best() const;

 private:
  // Every model variable's checkpoint value (mirrored: one value; sync-on-read: the
  // aggregate) by object path, in host memory.
  std::map<std::string, Tensor> snapshot() const;

  EarlyStoppingOptions options_;
  MonitoredValue value_;
  int64_t wait_ = 0;
  double best_ = 0;
  int64_t best_epoch_ = -1;
  int64_t stopped_epoch_ = -1;
  std::map<std::string, Tensor> best_weights_;
};

struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;     // new rate = rate * factor; 0 < factor < 1
  int64_t patience = 10;   // epochs without improvement before the rate is reduced
  MonitorMode mode = MonitorMode::Auto;
  double min_delta = 1e-4;  // an improvement must exceed this
  int64_t cooldown = 0;     // epochs after a reduction during which epochs are not counted
  double min_lr = 0;        // the rate is never reduced below this
};

// Multiplies the optimizer's learning rate by `factor` once the monitored value has not
// improved for `patience` epochs. The optimizer's rate must be a constant, not a schedule.
class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options = {});
  void on_train_begin() override;
  void on_epoch_end(int64_t epoch, const Outputs& logs) override;

  // The epochs after which the rate was reduced.
  const std::vector<int64_t>& reductions() const { return reductions_; }

 private:
  ReduceLROnPlateauOptions options_;
  MonitoredValue value_;
  int64_t wait_ = 0;
  int64_t cooldown_left_ = 0;
  double best_ = 0;
  std::vector<int64_t> reductions_;
};

}  // namespace strata::train
