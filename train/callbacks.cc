#include <strata/train/callbacks.h>

#include <cmath>
#include <limits>

#include <strata/core/error.h>
#include <strata/train/checkpoint.h>
#include <strata/train/nn/module.h>
#include <strata/train/optimizer.h>

namespace strata::train {

// ---- MonitoredValue ----

MonitoredValue::MonitoredValue(std::string monitor, MonitorMode mode, double min_delta, const char* owner)
    : monitor_(std::move(monitor)),
      larger_is_better_(mode == MonitorMode::Max ||
                        (mode == MonitorMode::Auto && (monitor_.find("acc") != std::string::npos ||
                                                       monitor_.find("auc") != std::string::npos))),
      min_delta_(std::abs(min_delta)),
      owner_(owner) {
  STRATA_CHECK(!monitor_.empty(), owner_, ": the monitored value's name is empty");
  STRATA_CHECK(std::isfinite(min_delta), owner_, ": min_delta must be finite, got ", min_delta);
}

double MonitoredValue::read(const Outputs& logs) const {
  const auto it = logs.find(monitor_);
  if (it != logs.end()) return it->second;
  std::string logged;
  for (const auto& [name, value] : logs) logged += (logged.empty() ? "" : ", ") + name;
  fail(owner_, ": monitors '", monitor_, "', which this epoch did not log (logged: ",
       logged.empty() ? "nothing" : logged, ")",
       monitor_.rfind("val_", 0) == 0 ? "; values named val_* need FitOptions::validation_data" : "");
}

bool MonitoredValue::improves_on(double value, double reference) const {
  return larger_is_better_ ? value - min_delta_ > reference : value + min_delta_ < reference;
}

double MonitoredValue::worst() const {
  return larger_is_better_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

// ---- EarlyStopping ----

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(std::move(options)), value_(options_.monitor, options_.mode, options_.min_delta, "EarlyStopping") {
  STRATA_CHECK(options_.patience >= 0, "EarlyStopping: patience must be >= 0, got ", options_.patience);
  STRATA_CHECK(options_.start_from_epoch >= 0, "EarlyStopping: start_from_epoch must be >= 0, got ",
               options_.start_from_epoch);
  best_ = value_.worst();
}

void EarlyStopping::on_train_begin() {
  STRATA_CHECK(!options_.restore_best_weights || model() != nullptr,
               "EarlyStopping: restore_best_weights needs the model (run it as a callback of train::fit)");
  wait_ = 0;
  best_ = value_.worst();
  best_epoch_ = -1;
  stopped_epoch_ = -1;
  best_weights_.clear();
}

std::optional<double> EarlyStopping::best() const {
  if (best_epoch_ < 0) return std::nullopt;
  return best_;
}

std::map<std::string, Tensor> EarlyStopping::snapshot() const {
  // Host copies of the model's checkpoint values, by object path, as a checkpoint takes
  // them (Keras's get_weights: not a second copy of the model on a GPU).
  return Checkpoint{{"model", *model()}}.snapshot(std::nullopt, /*own_copies=*/true).tensors;
}

void EarlyStopping::on_epoch_end(int64_t epoch, const Outputs& logs) {
  const double current = value_.read(logs);
  if (epoch < options_.start_from_epoch) return;
  ++wait_;
  const bool improved = value_.improves_on(current, best_);
  // The best epoch's weights; and the first watched epoch's, so that a run that never
  // improves (a NaN from the start) still has some.
  if (options_.restore_best_weights && (improved || best_weights_.empty())) {
    best_weights_.clear();  // the old copy goes before the new one is made
    best_weights_ = snapshot();
  }
  if (improved) {
    best_ = current;
    best_epoch_ = epoch;
    // The wait restarts only on a value that beats the baseline too.
    if (!options_.baseline || value_.improves_on(current, *options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    request_stop();
    if (options_.restore_best_weights) {
      // Restored as a checkpoint restores them: every replica's copy of a mirrored
      // variable, every worker the same values.
      for (const auto& [path, var] : Checkpoint{{"model", *model()}}.variables_by_path()) {
        const auto it = best_weights_.find(path);
        STRATA_CHECK(it != best_weights_.end(), "EarlyStopping: the model's variable '", path,
                     "' did not exist at its best epoch");
        var.impl().restore_checkpoint_value(it->second);
      }
    }
  }
}

// ---- ReduceLROnPlateau ----

ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions options)
    : options_(std::move(options)),
      value_(options_.monitor, options_.mode, options_.min_delta, "ReduceLROnPlateau") {
  STRATA_CHECK(options_.factor > 0 && options_.factor < 1, "ReduceLROnPlateau: factor must be in (0, 1), got ",
               options_.factor);
  STRATA_CHECK(options_.patience >= 0, "ReduceLROnPlateau: patience must be >= 0, got ", options_.patience);
  STRATA_CHECK(options_.cooldown >= 0, "ReduceLROnPlateau: cooldown must be >= 0, got ", options_.cooldown);
  STRATA_CHECK(options_.min_lr >= 0 && std::isfinite(options_.min_lr),
               "ReduceLROnPlateau: min_lr must be finite and >= 0, got ", options_.min_lr);
  best_ = value_.worst();
}

void ReduceLROnPlateau::on_train_begin() {
  STRATA_CHECK(optimizer() != nullptr, "ReduceLROnPlateau: needs the optimizer (run it as a callback of train::fit)");
  STRATA_CHECK(optimizer()->learning_rate_is_constant(),
               "ReduceLROnPlateau: the optimizer's learning rate is a schedule; it can reduce a constant rate only "
               "(give the optimizer a number, or leave the schedule to decide)");
  wait_ = 0;
  cooldown_left_ = 0;
  best_ = value_.worst();
  reductions_.clear();
}

void ReduceLROnPlateau::on_epoch_end(int64_t epoch, const Outputs& logs) {
  const double current = value_.read(logs);
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    wait_ = 0;
  }
  if (value_.improves_on(current, best_)) {
    best_ = current;
    wait_ = 0;
    return;
  }
  if (cooldown_left_ > 0) return;
  if (++wait_ < options_.patience) return;
  const double rate = optimizer()->learning_rate();
  if (rate > options_.min_lr) {
    optimizer()->set_learning_rate(std::max(rate * options_.factor, options_.min_lr));
    reductions_.push_back(epoch);
    cooldown_left_ = options_.cooldown;
    wait_ = 0;
  }
}

}  // namespace strata::train
