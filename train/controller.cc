#include <strata/train/controller.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/train/checkpoint.h>
#include <strata/train/checkpoint_file.h>
#include <strata/train/summary_writer.h>

namespace strata::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The thread's current summary target while a Controller runs a loop (train::summary).
struct SummaryTarget {
  SummaryWriter* writer = nullptr;
  Variable step;
  bool training = false;
  std::optional<int64_t> interval;  // training only
};
thread_local SummaryTarget t_summary;

class SummaryScope {
 public:
  explicit SummaryScope(SummaryTarget target) : saved_(std::move(t_summary)) { t_summary = std::move(target); }
  ~SummaryScope() { t_summary = std::move(saved_); }
  SummaryScope(const SummaryScope&) = delete;
  SummaryScope& operator=(const SummaryScope&) = delete;

 private:
  SummaryTarget saved_;
};

int64_t read_step(const Variable& step) {
  autograd::StopRecording no_tape;
  return step.value().item<int64_t>();
}

std::string format_outputs(const Outputs& outputs) {
  std::ostringstream os;
  for (const auto& [name, value] : outputs) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", value);
    os << " | " << name << ' ' << buf;
  }
  return os.str();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

// ---- train::summary ----

namespace summary {

int64_t current_step() { return t_summary.step.defined() ? read_step(t_summary.step) : 0; }

bool should_record() {
  if (!t_summary.writer) return false;
  if (!t_summary.training) return true;
  return t_summary.interval && current_step() % *t_summary.interval == 0;
}

bool scalar(const std::string& tag, double value) {
  if (!should_record()) return false;
  t_summary.writer->scalar(tag, value, current_step());
  return true;
}

bool histogram(const std::string& tag, const Tensor& values) {
  if (!should_record()) return false;
  t_summary.writer->histogram(tag, values, current_step());
  return true;
}

bool text(const std::string& tag, const std::string& text) {
  if (!should_record()) return false;
  t_summary.writer->text(tag, text, current_step());
  return true;
}

bool image(const std::string& tag, const Tensor& images, int64_t max_outputs) {
  if (!should_record()) return false;
  t_summary.writer->image(tag, images, current_step(), max_outputs);
  return true;
}

}  // namespace summary

// ---- Controller ----

Controller::Controller(ControllerOptions options) : options_(std::move(options)) {
  strategy_ = options_.strategy ? options_.strategy : &distribute::get_strategy();
  STRATA_CHECK(options_.trainer || options_.evaluator,
               "Controller: `trainer` and `evaluator` should not both be null");
  if (options_.trainer) {
    STRATA_CHECK(options_.steps_per_loop || options_.steps_per_loop_fn,
                 "Controller: `steps_per_loop` is required when a trainer is given (a positive integer, or "
                 "steps_per_loop_fn)");
    STRATA_CHECK(!(options_.steps_per_loop && options_.steps_per_loop_fn),
                 "Controller: give either `steps_per_loop` (", *options_.steps_per_loop,
                 ") or `steps_per_loop_fn`, not both");
    if (options_.steps_per_loop) {
      STRATA_CHECK(*options_.steps_per_loop >= 1, "Controller: `steps_per_loop` (", *options_.steps_per_loop,
                   ") must be a positive integer");
    }
    if (options_.summary_interval) {
      STRATA_CHECK(*options_.summary_interval > 0, "Controller: `summary_interval` (", *options_.summary_interval,
                   ") must be larger than 0");
      if (options_.steps_per_loop) {
        STRATA_CHECK(*options_.summary_interval % *options_.steps_per_loop == 0, "Controller: `summary_interval` (",
                     *options_.summary_interval, ") must be a multiple of `steps_per_loop` (",
                     *options_.steps_per_loop, ")");
      }
    }
  }
  STRATA_CHECK(options_.global_step.defined(),
               "Controller: `global_step` is required (create it with train::create_global_step() in the "
               "strategy's scope)");
  STRATA_CHECK(is_integral(options_.global_step.dtype()) && options_.global_step.shape().empty(),
               "Controller: `global_step` must be an integer scalar variable, got ",
               dtype_name(options_.global_step.dtype()), " ", shape_str(options_.global_step.shape()));
  // The Controller owns the global step (Orbit): a trainer built without one counts with it.
  if (options_.trainer) options_.trainer->use_global_step(options_.global_step);
  if (options_.checkpoint_manager) {
    bool tracked = false;
    for (const auto& [path, v] : options_.checkpoint_manager->checkpoint().variables_by_path()) {
      tracked = tracked || v == options_.global_step;
    }
    STRATA_CHECK(tracked, "Controller: the checkpoint manager's Checkpoint (", options_.checkpoint_manager->directory(),
                 ") does not track `global_step`; track it (e.g. {\"global_step\", global_step}) so that a "
                 "restored run resumes at its step");
    // Saves that name no step (a preemption checkpoint, a user's) are numbered by the
    // global step, as Orbit passes it, not by one more than the last checkpoint's.
    if (!options_.checkpoint_manager->step_counter().defined())
      options_.checkpoint_manager->set_step_counter(options_.global_step);
  }

  // Summaries: only the chief writes (TensorFlow's chief duties).
  const bool chief = strategy_->worker_index() == 0;
  if (chief && options_.trainer && !options_.summary_dir.empty()) {
    train_writer_ = std::make_unique<SummaryWriter>(options_.summary_dir);
  }
  if (chief && options_.evaluator) {
    const std::string eval_dir = options_.eval_summary_dir.empty() ? options_.summary_dir : options_.eval_summary_dir;
    if (!eval_dir.empty()) {
      if (train_writer_ && fs::weakly_canonical(eval_dir) == fs::weakly_canonical(options_.summary_dir)) {
        eval_writer_ = train_writer_.get();  // Orbit reuses the writer for the same directory
      } else {
        own_eval_writer_ = std::make_unique<SummaryWriter>(eval_dir);
        eval_writer_ = own_eval_writer_.get();
      }
    }
  }
  progress_ = std::make_unique<ProgressReporter>(options_.progress);
  STRATA_CHECK(options_.initial_checkpoint.empty() || options_.checkpoint_manager,
               "Controller: `initial_checkpoint` (", options_.initial_checkpoint, ") needs a `checkpoint_manager`");
  if (options_.checkpoint_manager) restore_checkpoint(options_.initial_checkpoint);
}

Controller::~Controller() = default;

void Controller::require(const void* member, const char* name, const char* method) const {
  STRATA_CHECK(member != nullptr, "Controller::", method, ": requires a `", name, "` (none was given)");
}

int64_t Controller::global_step() const { return read_step(options_.global_step); }

int64_t Controller::steps_per_loop_at(int64_t step) const {
  const int64_t n = options_.steps_per_loop_fn ? options_.steps_per_loop_fn(step) : *options_.steps_per_loop;
  STRATA_CHECK(n >= 1, "Controller: steps_per_loop_fn returned ", n, " at step ", step,
               " (it must return a positive integer)");
  return n;
}

void Controller::train(int64_t steps, bool checkpoint_at_completion) {
  require(options_.trainer, "trainer", "train");
  progress_->begin(global_step(), steps);
  train_until(steps, checkpoint_at_completion);
}

void Controller::train_until(int64_t steps, bool checkpoint_at_completion) {
  int64_t step = global_step();
  progress_->detail("train | step " + std::to_string(step) + " | training until step " + std::to_string(steps) +
                    "...");
  while (step < steps) {
    train_n_steps(std::min(steps - step, steps_per_loop_at(step)));
    maybe_save_checkpoint(/*check_interval=*/true);
    step = global_step();
  }
  if (checkpoint_at_completion) maybe_save_checkpoint(/*check_interval=*/false);
  // Orbit's _sync_on_async_checkpointing: train() returns with its checkpoints written
  // (and a failed asynchronous write raised).
  if (options_.checkpoint_manager) options_.checkpoint_manager->sync();
}

void Controller::train_n_steps(int64_t num_steps) {
  const int64_t before = global_step();
  const auto t0 = Clock::now();
  Outputs outputs;
  {
    SummaryScope scope({train_writer_.get(), options_.global_step, /*training=*/true, options_.summary_interval});
    outputs = options_.trainer->train(num_steps);
  }
  const double seconds = seconds_since(t0);
  const int64_t step = global_step();
  STRATA_CHECK(step == before + num_steps, "Controller: trainer.train(", num_steps,
               ") did not advance the global step by ", num_steps, ": it was ", before, ", expected ",
               before + num_steps, ", got ", step);
  if (options_.terminate_on_nan) {
    for (const auto& [name, value] : outputs) {
      if (name.find("loss") == std::string::npos || std::isfinite(value)) continue;
      fail("Controller: training stopped at step ", step, ": the '", name, "' output is ", value, " after steps ",
           before + 1, "..", step, " (TerminateOnNaN; a learning rate too high is the usual cause). Nothing of "
           "this state was checkpointed; set ControllerOptions::terminate_on_nan = false "
           "(strata-train: --no-terminate-on-nan) to keep training regardless");
    }
  }
  const double steps_per_second = seconds > 0 ? double(num_steps) / seconds : 0.0;
  outputs["steps_per_second"] = steps_per_second;
  if (steps_per_second > 0) train_loop_steps_per_second_.push_back(steps_per_second);
  last_train_outputs_ = outputs;
  if (train_writer_) {
    for (const auto& [tag, value] : outputs) train_writer_->scalar(tag, value, step);
    train_writer_->flush();
  }
  progress_->update(step, outputs, double(options_.trainer->examples_per_step()) * steps_per_second);
  for (const auto& action : options_.train_actions) action(outputs);
}

std::string Controller::maybe_save_checkpoint(bool check_interval) {
  CheckpointManager* manager = options_.checkpoint_manager;
  if (!manager) return "";
  const int64_t step = global_step();
  CheckpointOptions save_options;
  save_options.enable_async_checkpoint = options_.enable_async_checkpointing;
  std::string path;
  if (check_interval) {
    if (manager->checkpoint_interval() == 0) return "";  // periodic saving is off
    path = manager->save(step, /*force=*/false, save_options);
  } else {
    if (manager->last_checkpoint_step() == step) return "";  // this step has one already
    path = manager->save(step, /*force=*/true, save_options);
  }
  if (!path.empty()) {
    last_checkpoint_ = path;
    progress_->detail("saved checkpoint " + path);
  }
  return path;
}

Outputs Controller::evaluate(int64_t steps) {
  require(options_.evaluator, "evaluator", "evaluate");
  STRATA_CHECK(steps == -1 || steps > 0, "Controller::evaluate: `steps` (", steps,
               ") should be > 0, or == -1 (the whole evaluation set)");
  const int64_t step = global_step();
  progress_->detail(" eval | step " + std::to_string(step) + " | " +
                    (steps > 0 ? "running " + std::to_string(steps) + " steps of evaluation..."
                               : std::string("running complete evaluation...")));
  const auto t0 = Clock::now();
  Outputs outputs;
  {
    SummaryScope scope({eval_writer_, options_.global_step, /*training=*/false, std::nullopt});
    outputs = options_.evaluator->evaluate(steps);
  }
  const double seconds = seconds_since(t0);
  if (steps > 0 && seconds > 0) outputs["steps_per_second"] = double(steps) / seconds;
  last_eval_outputs_ = outputs;
  if (eval_writer_) {
    for (const auto& [tag, value] : outputs) eval_writer_->scalar(tag, value, step);
    eval_writer_->flush();
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", seconds);
  progress_->message(" eval | step " + std::to_string(step) + " | " + secs + " s" + format_outputs(outputs));
  for (const auto& action : options_.eval_actions) action(outputs);
  return outputs;
}

Outputs Controller::train_and_evaluate(int64_t train_steps, int64_t eval_steps, int64_t eval_interval) {
  require(options_.trainer, "trainer", "train_and_evaluate");
  require(options_.evaluator, "evaluator", "train_and_evaluate");
  STRATA_CHECK(eval_interval >= 0, "Controller::train_and_evaluate: `eval_interval` (", eval_interval,
               ") must be >= 0 (0: evaluate only at the end)");
  STRATA_CHECK(eval_steps == -1 || eval_steps > 0, "Controller::train_and_evaluate: `eval_steps` (", eval_steps,
               ") should be > 0, or == -1 (the whole evaluation set)");
  int64_t step = global_step();
  const int64_t interval = eval_interval > 0 ? eval_interval : std::max<int64_t>(train_steps - step, 1);
  progress_->begin(step, train_steps);
  Outputs outputs;
  // Nothing to train (a finished run started again): evaluate what was restored, so that
  // the outputs describe this model rather than being empty.
  if (step >= train_steps) outputs = evaluate(eval_steps);
  while (step < train_steps) {
    train_until(std::min(train_steps, step + interval), /*checkpoint_at_completion=*/false);
    outputs = evaluate(eval_steps);
    step = global_step();
  }
  maybe_save_checkpoint(/*check_interval=*/false);
  // The checkpoint at completion is written when this returns (an asynchronous write is
  // waited for, and its failure raised here rather than lost).
  if (options_.checkpoint_manager) options_.checkpoint_manager->sync();
  return outputs;
}

Outputs Controller::evaluate_continuously(int64_t steps, double timeout_seconds,
                                          const std::function<bool()>& timeout_fn) {
  require(options_.evaluator, "evaluator", "evaluate_continuously");
  require(options_.checkpoint_manager, "checkpoint_manager", "evaluate_continuously");
  STRATA_CHECK(std::isfinite(timeout_seconds) && timeout_seconds > 0,
               "Controller::evaluate_continuously: `timeout_seconds` must be positive and finite, got ",
               timeout_seconds);
  STRATA_CHECK(steps == -1 || steps > 0, "Controller::evaluate_continuously: `steps` (", steps,
               ") should be > 0, or == -1 (the whole evaluation set)");
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  std::string last;
  Outputs outputs;
  auto deadline = Clock::now() + timeout;
  for (;;) {
    const std::optional<std::string> latest = options_.checkpoint_manager->latest_checkpoint();
    if (latest && *latest != last) {
      last = *latest;
      try {
        restore_checkpoint(last);
      } catch (const Error&) {
        // The writer may delete an old checkpoint (max_to_keep) while we load it: wait
        // for the next one. Any other failure is real.
        if (checkpoint_exists(last)) throw;
        progress_->detail(" eval | checkpoint " + last + " was removed while it was read; waiting for the next");
        continue;
      }
      outputs = evaluate(steps);
      deadline = Clock::now() + timeout;
      continue;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      if (!timeout_fn || timeout_fn()) return outputs;
      deadline = now + timeout;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(50), deadline - now));
  }
}

std::string Controller::save_checkpoint() {
  require(options_.checkpoint_manager, "checkpoint_manager", "save_checkpoint");
  const std::string path = maybe_save_checkpoint(/*check_interval=*/false);
  options_.checkpoint_manager->sync();  // the path returned names a written checkpoint
  return path.empty() ? last_checkpoint_ : path;
}

std::string Controller::restore_checkpoint(const std::string& path) {
  require(options_.checkpoint_manager, "checkpoint_manager", "restore_checkpoint");
  // Restore inside the strategy's scope, as Orbit does (anything created on the way, such
  // as optimizer slots, belongs to the strategy).
  std::optional<distribute::StrategyScope> scope;
  if (!strategy_->is_default()) scope.emplace(strategy_->scope());
  std::string restored;
  if (path.empty()) {
    restored = options_.checkpoint_manager->restore_or_initialize();
  } else {
    options_.checkpoint_manager->restore(path);
    restored = path;
  }
  if (!restored.empty()) {
    last_checkpoint_ = restored;
    progress_->message("restored checkpoint " + restored + " at step " + std::to_string(global_step()));
  }
  return restored;
}

}  // namespace strata::train
