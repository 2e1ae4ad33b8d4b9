#include "train/controller.h"

#include <chrono>
#include <sstream>
#include <filesystem>
#include <thread>

#include "core/ops.h"
#include "train/checkpoint.h"
#include "train/summary_writer.h"

namespace strata::train {

Controller::Controller(ControllerOptions options) : options_(std::move(options)) {
  strategy_ = options_.strategy ? options_.strategy : &distribute::get_strategy();
  STRATA_CHECK(options_.trainer || options_.evaluator,
               "Controller: `trainer` and `evaluator` should not both be null");
  STRATA_CHECK(options_.global_step.defined(), "Controller: a global_step variable is required "
               "(create it with train::create_global_step())");
  if (options_.trainer) {
    STRATA_CHECK(options_.steps_per_loop > 0 || options_.steps_per_loop_fn,
                 "Controller: steps_per_loop must be a positive integer (or a function of the step) "
                 "when a trainer is given, got ", options_.steps_per_loop);
  }
  STRATA_CHECK(options_.steps_per_loop >= 0, "Controller: steps_per_loop must be positive, got ",
               options_.steps_per_loop);
  if (options_.summary_interval > 0 && options_.steps_per_loop > 0) {
    STRATA_CHECK(options_.summary_interval % options_.steps_per_loop == 0,
                 "Controller: summary_interval (", options_.summary_interval,
                 ") must be a multiple of steps_per_loop (", options_.steps_per_loop, ")");
  }
  STRATA_CHECK(options_.summary_interval >= 0, "Controller: summary_interval must be >= 0");
  // Only the chief writes summaries (TensorFlow's chief duties).
  const bool chief = strategy_->worker_index() == 0;
  if (chief && !options_.summary_dir.empty() && options_.trainer) {
    train_writer_ = std::make_unique<SummaryWriter>(options_.summary_dir);
  }
  std::string eval_dir = options_.eval_summary_dir;
  if (eval_dir.empty() && !options_.summary_dir.empty()) eval_dir = (std::filesystem::path(options_.summary_dir) / "eval").string();
  if (chief && !eval_dir.empty() && options_.evaluator) eval_writer_ = std::make_unique<SummaryWriter>(eval_dir);
  progress_ = std::make_unique<ProgressReporter>(options_.progress);
  restore_checkpoint();
}

Controller::~Controller() = default;

int64_t Controller::global_step() const { return options_.global_step.value().item<int64_t>(); }

int64_t Controller::steps_per_loop_at(int64_t step) const {
  const int64_t n = options_.steps_per_loop_fn ? options_.steps_per_loop_fn(step) : options_.steps_per_loop;
  STRATA_CHECK(n > 0, "Controller: steps_per_loop must be positive, got ", n, " at step ", step);
  return n;
}

void Controller::train_n_steps(int64_t n, int64_t target) {
  const int64_t before = global_step();
  const auto t0 = std::chrono::steady_clock::now();
  last_train_outputs_ = options_.trainer->train(n);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t step = global_step();
  STRATA_CHECK(step == before + n, "Controller: the trainer ran ", n, " steps but the global step moved from ",
               before, " to ", step, " (the trainer must advance global_step once per step)");
  const double steps_per_second = seconds > 0 ? double(n) / seconds : 0;
  const double examples = double(options_.trainer->examples_per_step()) * steps_per_second;
  last_train_outputs_["steps_per_second"] = steps_per_second;
  const bool summary_due = options_.summary_interval == 0 ||
                           step / options_.summary_interval != last_summary_step_ / options_.summary_interval ||
                           step >= target;
  if (train_writer_ && summary_due) {
    for (const auto& [tag, value] : last_train_outputs_) train_writer_->scalar(tag, value, step);
    train_writer_->flush();
    last_summary_step_ = step;
  }
  progress_->update(step, target, last_train_outputs_, examples);
}

void Controller::maybe_save_checkpoint(bool force) {
  if (!options_.checkpoint_manager) return;
  const std::string path = options_.checkpoint_manager->save(global_step(), force);
  if (!path.empty()) last_checkpoint_ = path;
}

void Controller::train(int64_t steps, bool checkpoint_at_completion) {
  STRATA_CHECK(options_.trainer != nullptr, "Controller::train: no trainer was given");
  int64_t step = global_step();
  while (step < steps) {
    const int64_t n = std::min(steps - step, steps_per_loop_at(step));
    train_n_steps(n, steps);
    maybe_save_checkpoint(false);
    step = global_step();
  }
  if (checkpoint_at_completion) maybe_save_checkpoint(true);
}

Outputs Controller::evaluate(int64_t steps) {
  STRATA_CHECK(options_.evaluator != nullptr, "Controller::evaluate: no evaluator was given");
  STRATA_CHECK(steps >= -1, "Controller::evaluate: steps must be -1 (until the data ends) or >= 0, got ", steps);
  const auto t0 = std::chrono::steady_clock::now();
  last_eval_outputs_ = options_.evaluator->evaluate(steps);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t step = global_step();
  if (eval_writer_) {
    for (const auto& [tag, value] : last_eval_outputs_) eval_writer_->scalar(tag, value, step);
    eval_writer_->flush();
  }
  std::ostringstream os;
  os << "eval at step " << step << " (" << seconds << " s):";
  for (const auto& [k, v] : last_eval_outputs_) os << "  " << k << ' ' << v;
  progress_->message(os.str());
  return last_eval_outputs_;
}

void Controller::train_and_evaluate(int64_t train_steps, int64_t eval_steps, int64_t eval_interval) {
  const int64_t interval = eval_interval > 0 ? eval_interval : train_steps;
  int64_t step = global_step();
  while (step < train_steps) {
    const int64_t next = std::min(train_steps, step + interval);
    train(next, /*checkpoint_at_completion=*/false);
    evaluate(eval_steps);
    step = global_step();
  }
  maybe_save_checkpoint(true);
}

void Controller::evaluate_continuously(int64_t steps, double timeout_seconds, std::optional<int64_t> stop_at_step) {
  STRATA_CHECK(options_.checkpoint_manager != nullptr,
               "Controller::evaluate_continuously: needs a checkpoint_manager to watch");
  std::string last;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto latest = options_.checkpoint_manager->latest_checkpoint();
    if (latest && *latest != last) {
      last = *latest;
      restore_checkpoint(last);
      evaluate(steps);
      if (stop_at_step && global_step() >= *stop_at_step) return;
      deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string Controller::save_checkpoint() {
  if (!options_.checkpoint_manager) return "";
  maybe_save_checkpoint(true);
  return last_checkpoint_;
}

std::string Controller::restore_checkpoint(const std::string& path) {
  if (!options_.checkpoint_manager) return "";
  if (path.empty()) {
    const std::string restored = options_.checkpoint_manager->restore_or_initialize();
    if (!restored.empty()) {
      last_checkpoint_ = restored;
      progress_->message("restored checkpoint " + restored + " at step " + std::to_string(global_step()));
    }
    return restored;
  }
  options_.checkpoint_manager->restore(path);
  last_checkpoint_ = path;
  return path;
}

}  // namespace strata::train
