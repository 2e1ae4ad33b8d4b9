// PreemptionCheckpointHandler and Orbit's SaveCheckpointIfPreempted action
// (train/preemption.h) in one process: SIGTERM during training saves a checkpoint at the
// end of that train loop and stops with PreemptedError, and a job restarted from it ends
// bitwise like an uninterrupted one; a watcher's notice; an exit_fn that lets training go
// on; one handler at a time; SIGTERM's disposition restored; a save after an earlier
// failed asynchronous one. The multi-worker case (every worker saves at the same step when
// one of them is told) is in tests/distribute/test_launch_restart.cc.
#include <signal.h>

#include <algorithm>

#include <strata/train/preemption.h>
#include "tests/train/controller_test_util.h"

using namespace strata;
using namespace strata::testing::orbit;

namespace {

void (*sigterm_handler_now())(int) {
  struct sigaction current {};
  ::sigaction(SIGTERM, nullptr, &current);
  return current.sa_handler;
}

}  // namespace

TEST_CASE("preemption: SIGTERM saves a checkpoint after the loop and stops and the restart ends bitwise the same",
          "[train][preemption]") {
  for (const auto& [strategy, replicas] : {std::pair<const char*, int>{"default", 0}, {"mirrored", 2}}) {
    INFO(strategy);
    TempDir dir;
    Job straight(strategy, replicas, dir.path / "straight");
    train::Controller(straight.controller_options(10)).train(40);
    const Snapshot want = snapshot(straight.checkpoint);

    {
      Job job(strategy, replicas, dir.path / "preempted");
      train::PreemptionCheckpointHandler handler(*job.strategy, *job.manager, {}, job.step);
      auto options = job.controller_options(10);
      options.train_actions.push_back(train::SaveCheckpointIfPreempted(handler));
      train::Controller controller(options);
      controller.train(20, /*checkpoint_at_completion=*/false);  // no notice: nothing saved
      CHECK(job.manager->latest_checkpoint() == std::nullopt);
      ::raise(SIGTERM);  // the handler only marks the process
      try {
        controller.train(40);
        FAIL("training went on after SIGTERM");
      } catch (const train::PreemptedError& e) {
        CHECK(e.step() == 30);  // the end of the loop during which the notice came
        CHECK(e.exit_code() == train::kPreemptedExitCode);
        CHECK(e.checkpoint() == (dir.path / "preempted" / "ckpt-30").string());
        CHECK_THAT(e.what(), Catch::Contains("this process got a termination notice") &&
                                 Catch::Contains("saved the checkpoint of step 30"));
      }
      CHECK(job.step_value() == 30);
    }
    // The restart: the latest checkpoint is the preemption's; training ends as if never stopped.
    Job resumed(strategy, replicas, dir.path / "preempted");
    train::Controller controller(resumed.controller_options(10));
    CHECK(resumed.step_value() == 30);
    controller.train(40);
    const Snapshot got = snapshot(resumed.checkpoint);
    CHECK(first_difference(want, got) == "");
  }
}

TEST_CASE("preemption: a watcher's notice and an exit_fn that returns and one handler at a time", "[train][preemption]") {
  TempDir dir;
  Job job("default", 0, dir.path / "ckpt");
  const auto before = sigterm_handler_now();
  {
    bool notice = false;
    std::vector<std::pair<std::string, int64_t>> exits;
    train::TerminationConfig config;
    config.termination_watcher_fn = [&] { return notice; };
    config.exit_fn = [&](const train::PreemptedError& e) { exits.emplace_back(e.checkpoint(), e.step()); };
    train::PreemptionCheckpointHandler handler(*job.strategy, *job.manager, config, job.step);
    CHECK(sigterm_handler_now() != before);
    REQUIRE_THROWS_WITH(train::PreemptionCheckpointHandler(*job.strategy, *job.manager),
                        Catch::Contains("another handler is alive"));
    auto options = job.controller_options(5);
    options.train_actions.push_back(train::SaveCheckpointIfPreempted(handler));
    options.train_actions.push_back([&](const train::Outputs&) { notice = job.step_value() == 10; });
    train::Controller controller(options);
    controller.train(25, /*checkpoint_at_completion=*/false);
    // The notice set after the loop to step 10 was seen after the loop to step 15; the
    // exit_fn returned, so training went on to the end.
    REQUIRE(exits.size() == 1);
    CHECK(exits[0].second == 15);
    CHECK(exits[0].first == (dir.path / "ckpt" / "ckpt-15").string());
    CHECK(job.step_value() == 25);
    CHECK_FALSE(handler.preempted_here());
    CHECK_FALSE(handler.save_checkpoint_if_preempted());
  }
  CHECK(sigterm_handler_now() == before);  // restored
  // A new handler may be made once the first is gone, and starts without a notice.
  train::PreemptionCheckpointHandler again(*job.strategy, *job.manager);
  CHECK_FALSE(again.preempted_here());
}

TEST_CASE("preemption: one SIGTERM is handled once and the checkpoint is numbered by the global step",
          "[train][preemption]") {
  TempDir dir;
  JobOptions jo;
  jo.checkpoint_interval = 10;  // the manager has no step counter: the Controller lends its global step
  Job job("default", 0, dir.path / "ckpt", jo);
  std::vector<int64_t> exits;
  train::TerminationConfig config;
  config.exit_fn = [&](const train::PreemptedError& e) { exits.push_back(e.step()); };
  train::PreemptionCheckpointHandler handler(*job.strategy, *job.manager, config);  // no checkpoint_number
  auto options = job.controller_options(5);
  options.train_actions.push_back(train::SaveCheckpointIfPreempted(handler));
  options.train_actions.push_back([&](const train::Outputs&) {
    if (job.step_value() == 20) ::raise(SIGTERM);
  });
  train::Controller controller(options);
  controller.train(40, /*checkpoint_at_completion=*/false);
  // The notice raised after the loop to step 20 is seen after the loop to 25, once: the
  // exit_fn let training go on, and later loops neither save nor call it again.
  CHECK(exits == std::vector<int64_t>{25});
  // The interval counts from the preemption checkpoint: 35 next, not 30 or 40.
  CHECK(job.manager->latest_checkpoint() == (dir.path / "ckpt" / "ckpt-35").string());
  const auto all = job.manager->checkpoints();
  CHECK(std::count(all.begin(), all.end(), (dir.path / "ckpt" / "ckpt-25").string()) == 1);
  CHECK_FALSE(handler.preempted_here());
}

TEST_CASE("preemption: the checkpoint is saved even after an earlier asynchronous save failed", "[train][preemption]") {
  TempDir dir;
  Job job("default", 0, dir.path / "ckpt");
  train::CheckpointOptions failing;
  failing.enable_async_checkpoint = true;
  failing.write_hooks.before_rename = [](const fs::path&, const fs::path&) { throw Error("disk full (test)"); };
  job.manager->save(5, /*force=*/false, failing);  // fails on its writer thread
  std::vector<std::string> exits;
  train::TerminationConfig config;
  config.termination_watcher_fn = [] { return true; };
  config.exit_fn = [&](const train::PreemptedError& e) { exits.push_back(e.checkpoint()); };
  train::PreemptionCheckpointHandler handler(*job.strategy, *job.manager, config);
  // The earlier failure is printed, not raised: the preemption's own save happens.
  CHECK(handler.save_checkpoint_if_preempted(7));
  REQUIRE(exits == std::vector<std::string>{(dir.path / "ckpt" / "ckpt-7").string()});
  CHECK(job.manager->latest_checkpoint() == exits[0]);
}
