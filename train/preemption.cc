#include <strata/train/preemption.h>

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>

#include <strata/core/ops.h>
#include <strata/distribute/cross_worker.h>

namespace strata::train {
namespace {

// Set by the signal handler (a lock-free atomic: async-signal-safe), read by the checks.
std::atomic<bool> g_sigterm{false};
// Whether a handler is alive (one at a time: it owns SIGTERM's disposition).
std::atomic<bool> g_installed{false};

static_assert(std::atomic<bool>::is_always_lock_free, "the SIGTERM flag must be lock-free");

extern "C" void on_sigterm(int) { g_sigterm.store(true); }

}  // namespace

struct PreemptionCheckpointHandler::SavedDisposition {
  struct sigaction action;
};

PreemptionCheckpointHandler::PreemptionCheckpointHandler(distribute::Strategy& strategy, CheckpointManager& manager,
                                                         TerminationConfig config, Variable checkpoint_number)
    : strategy_(strategy),
      manager_(manager),
      config_(std::move(config)),
      checkpoint_number_(std::move(checkpoint_number)) {
  STRATA_CHECK(!checkpoint_number_.defined() || (checkpoint_number_.value().numel() == 1 &&
                                                 is_integral(checkpoint_number_.value().dtype())),
               "PreemptionCheckpointHandler: checkpoint_number must be an integer scalar variable");
  bool expected = false;
  STRATA_CHECK(g_installed.compare_exchange_strong(expected, true),
               "PreemptionCheckpointHandler: another handler is alive in this process (one at a time: it owns "
               "SIGTERM's disposition)");
  g_sigterm.store(false);
  previous_ = std::make_unique<SavedDisposition>();
  struct sigaction action {};
  action.sa_handler = &on_sigterm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted system calls resume: only the flag changes
  if (::sigaction(SIGTERM, &action, &previous_->action) != 0) {
    g_installed.store(false);
    fail("PreemptionCheckpointHandler: cannot install the SIGTERM handler: ", std::strerror(errno));
  }
}

PreemptionCheckpointHandler::~PreemptionCheckpointHandler() {
  ::sigaction(SIGTERM, &previous_->action, nullptr);
  g_installed.store(false);
}

bool PreemptionCheckpointHandler::preempted_here() const {
  return g_sigterm.load() || (config_.termination_watcher_fn && config_.termination_watcher_fn());
}

bool PreemptionCheckpointHandler::save_checkpoint_if_preempted(std::optional<int64_t> step) {
  const bool here = preempted_here();
  // Every worker's flag, in worker order: the workers all save, or none does.
  std::vector<int> preempted;
  if (distribute::Communicator* workers = strategy_.worker_communicator()) {
    const Tensor mine = Tensor::from_vector(std::vector<int32_t>{here ? 1 : 0}, {1}, kInt32, Device());
    const std::vector<int32_t> flags = distribute::cross_worker_concat(*workers, mine, 0).to_vector<int32_t>();
    for (size_t w = 0; w < flags.size(); ++w)
      if (flags[w] != 0) preempted.push_back(int(w));
  } else if (here) {
    preempted.push_back(strategy_.worker_index());
  }
  if (preempted.empty()) return false;
  if (!step && checkpoint_number_.defined()) step = checkpoint_number_.value().to(cpu()).item<int64_t>();
  // An earlier asynchronous save that failed must not cost the job this one: it is told,
  // and the checkpoint of this step is saved all the same.
  try {
    manager_.sync();
  } catch (const std::exception& e) {
    std::cerr << ::strata::detail::concat("strata: preemption: an earlier asynchronous checkpoint failed (", e.what(),
                                          "); saving the checkpoint of this step anyway\n")
              << std::flush;
  }
  const std::string path = manager_.save(step, /*force=*/true);
  const int64_t saved_step = step ? *step : manager_.last_checkpoint_step().value_or(-1);
  std::string who;
  for (int w : preempted) who += (who.empty() ? "" : ", ") + std::to_string(w);
  const bool one_worker = strategy_.num_workers() == 1;
  const PreemptedError preemption(
      ::strata::detail::concat("preempted: ", one_worker ? std::string("this process") : "worker(s) " + who,
                               " got a termination notice; saved the checkpoint of step ", saved_step, " (", path,
                               ") and stopped so that the job can be restarted from it"),
      path, saved_step);
  if (!config_.exit_fn) throw preemption;
  // The notice is handled: an exit_fn that lets training go on (to stop at a step of its
  // choosing) is not called again, nor the checkpoint saved again, after every later loop;
  // only a new notice does that (TensorFlow clears its received step after saving).
  g_sigterm.store(false);
  config_.exit_fn(preemption);
  return true;
}

}  // namespace strata::train
