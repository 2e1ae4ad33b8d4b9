// Saving a checkpoint when the job is about to be preempted, then stopping it
// (tf.distribute.experimental.PreemptionCheckpointHandler, and Orbit's
// SaveCheckpointIfPreempted train action).
//
//   train::PreemptionCheckpointHandler preemption(strategy, manager);
//   ControllerOptions co;  ...
//   co.train_actions.push_back(train::SaveCheckpointIfPreempted(preemption));
//   try { controller.train(steps); } catch (const train::PreemptedError& e) { return e.exit_code(); }
//
// Clouds and schedulers announce a preemption with SIGTERM, then SIGKILL after a grace
// period. While a handler lives, SIGTERM only marks this process as preempted (and
// TerminationConfig::termination_watcher_fn, called at each check, can report a notice
// from elsewhere: a metadata server, a file). save_checkpoint_if_preempted() then finds out
// whether any worker of the job was preempted: across workers it is a collective (every
// worker's flag is gathered, so every worker calls it at the same step, as the Controller
// does after each train loop through SaveCheckpointIfPreempted). If one was, every worker
// saves a checkpoint of the current step through its CheckpointManager (the chief to the
// model directory, the others to their temporary ones, as for every save) and calls
// exit_fn. The default exit_fn throws PreemptedError, which unwinds the training loop:
// strata-train (--checkpoint-on-preemption) then exits with kPreemptedExitCode, and a
// restarted job (strata-launch --max-restarts, or the platform) resumes from that
// checkpoint exactly, its input position included.
//
// One handler at a time in a process: it owns SIGTERM's disposition and restores the
// previous one when destroyed. (A program that reports the preemption should do it from
// exit_fn, while the handler still holds SIGTERM: once PreemptedError has unwound past the
// handler, a launcher stopping the other workers may end the process first.) A process that is told to stop while it is blocked (in a
// collective whose peer died) does not reach a check; the launcher's SIGKILL after its
// grace period ends it, as without a handler.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <strata/core/error.h>
#include <strata/distribute/strategy.h>
#include <strata/train/checkpoint.h>
#include <strata/train/trainer.h>

namespace strata::train {

// The exit status of a job stopped after its preemption checkpoint (EX_TEMPFAIL: "try
// again later").
inline constexpr int kPreemptedExitCode = 75;

// Thrown by the default exit_fn after the preemption checkpoint was saved.
class PreemptedError : public Error {
 public:
  PreemptedError(const std::string& message, std::string checkpoint, int64_t step)
      : Error(message), checkpoint_(std::move(checkpoint)), step_(step) {}
  const std::string& checkpoint() const { return checkpoint_; }
  int64_t step() const { return step_; }
  int exit_code() const { return kPreemptedExitCode; }

 private:
  std::string checkpoint_;
  int64_t step_;
};

struct TerminationConfig {
  // Called at each check besides SIGTERM: true when a termination notice is out. Must be
  // quick and must not block.
  std::function<bool()> termination_watcher_fn;
  // Called after the checkpoint was saved, with what happened (the message, the
  // checkpoint's path and step); default: throw it. If it returns,
  // save_checkpoint_if_preempted() returns true and training may go on.
  std::function<void(const PreemptedError& preemption)> exit_fn;
};

class PreemptionCheckpointHandler {
 public:
  // Installs the SIGTERM handler; throws strata::Error when another handler is alive.
  // `manager` must outlive this. `checkpoint_number` (Orbit's; usually the global step)
  // numbers the checkpoint; undefined: the manager's step counter, or the step given to
  // save_checkpoint_if_preempted.
  PreemptionCheckpointHandler(distribute::Strategy& strategy, CheckpointManager& manager,
                              TerminationConfig config = {}, Variable checkpoint_number = Variable());
  ~PreemptionCheckpointHandler();
  PreemptionCheckpointHandler(const PreemptionCheckpointHandler&) = delete;
  PreemptionCheckpointHandler& operator=(const PreemptionCheckpointHandler&) = delete;

  // The check (above): false when no worker was preempted; otherwise saves the
  // checkpoint of `step` (default: checkpoint_number, else the manager's step counter)
  // and calls exit_fn. A collective across workers.
  bool save_checkpoint_if_preempted(std::optional<int64_t> step = std::nullopt);

  // Whether this process got SIGTERM (or the watcher reported a notice) since the handler
  // was installed; no collective.
  bool preempted_here() const;

 private:
  distribute::Strategy& strategy_;
  CheckpointManager& manager_;
  TerminationConfig config_;
  Variable checkpoint_number_;
  struct SavedDisposition;
  std::unique_ptr<SavedDisposition> previous_;
};

// Orbit's SaveCheckpointIfPreempted: a Controller train action that runs the handler's
// check after each train loop.
class SaveCheckpointIfPreempted {
 public:
  explicit SaveCheckpointIfPreempted(PreemptionCheckpointHandler& handler) : handler_(&handler) {}
  void operator()(const Outputs&) const { handler_->save_checkpoint_if_preempted(); }

 private:
  PreemptionCheckpointHandler* handler_;
};

}  // namespace strata::train
