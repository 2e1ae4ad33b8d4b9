// Asynchronous checkpoints (CheckpointOptions::enable_async_checkpoint, the Controller's
// enable_async_checkpointing): save() returns while a background thread writes the
// files, the values written are those of the save's step however training changes them
// afterwards, a failed write is raised by sync() or the next save and leaves the previous
// checkpoint the latest, and a Controller saving asynchronously under Mirrored(2) writes
// bitwise the checkpoints a synchronous one writes. The order of events is observed
// through the atomic writes' test hook, never through timing.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include <strata/train/checkpoint.h>
#include <strata/train/checkpoint_file.h>
#include "tests/train/controller_test_util.h"
#include "tests/train/weight_and_step.h"

using namespace strata;
using namespace strata::train;
using strata::testing::TempDir;
using Catch::Matchers::Contains;

namespace async_ckpt_test {

namespace fs = std::filesystem;

// A weight of 1000 floats and a step counter.
struct Run : strata::testing::WeightAndStep {
  Run() : WeightAndStep(1000) {}
};

// Hooks whose renames wait (at most 60 s, then fail the save) until `release` is set, and
// report on `writing` the thread they run on.
AtomicWriteHooks held_until(std::shared_future<void> release, std::promise<std::thread::id>* writing) {
  AtomicWriteHooks hooks;
  auto reported = std::make_shared<std::once_flag>();
  hooks.before_rename = [release, writing, reported](const fs::path&, const fs::path&) {
    std::call_once(*reported, [&] { writing->set_value(std::this_thread::get_id()); });
    if (release.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
      throw Error("test: the save was never released");
  };
  return hooks;
}

std::vector<float> saved_weight(const std::string& prefix) {
  return load_tensors(prefix).tensors.at("w").to_vector<float>();
}

TEST_CASE("CheckpointManager: an asynchronous save returns before its files are written and keeps its step's values",
          "[train][checkpoint]") {
  TempDir dir("async_ckpt");
  Run run;
  // Before the manager: a failed check below destroys the manager first, which waits
  // for the writer that is held on these.
  std::promise<void> release;
  std::promise<std::thread::id> writing;
  CheckpointManager manager(run.ckpt, dir.path, /*max_to_keep=*/2);
  run.at(1);
  REQUIRE(manager.save() == (dir.path / "ckpt-1").string());

  run.at(5);
  CheckpointOptions options;
  options.enable_async_checkpoint = true;
  options.write_hooks = held_until(release.get_future().share(), &writing);
  const std::string prefix = manager.save(std::nullopt, false, options);
  REQUIRE(prefix == (dir.path / "ckpt-2").string());  // one more than the latest
  // save() has returned while the writer is held before its first rename: nothing of the
  // new checkpoint is committed yet, and the writer is another thread.
  auto writer = writing.get_future();
  REQUIRE(writer.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(writer.get() != std::this_thread::get_id());
  CHECK_FALSE(checkpoint_exists(prefix));
  // Training goes on and changes the variables; the checkpoint keeps step 5's values.
  run.at(6);
  release.set_value();
  manager.sync();
  CHECK(checkpoint_exists(prefix));
  CHECK(saved_weight(prefix) == std::vector<float>(1000, 5.0f));
  CHECK(manager.latest_checkpoint() == prefix);
  CHECK(manager.checkpoints() == std::vector<std::string>{(dir.path / "ckpt-1").string(), prefix});

  // Queries wait for a save in flight: the third save drops ckpt-1 (max_to_keep 2).
  run.at(7);
  CheckpointOptions plain_async;
  plain_async.enable_async_checkpoint = true;
  const std::string third = manager.save(std::nullopt, false, plain_async);
  CHECK(manager.latest_checkpoint() == third);
  CHECK(manager.checkpoints() == std::vector<std::string>{prefix, third});
  CHECK(manager.last_checkpoint_step() == 3);

  // Restoring waits for a save in flight too, and reads what it wrote.
  run.at(8);
  manager.save(8, false, plain_async);
  run.at(0);
  manager.restore((dir.path / "ckpt-8").string());
  CHECK(run.w.value().to_vector<float>() == std::vector<float>(1000, 8.0f));
}

TEST_CASE("CheckpointManager: a failed asynchronous save is raised by sync or the next save and the previous stays latest",
          "[train][checkpoint]") {
  TempDir dir("async_ckpt_fail");
  Run run;
  auto manager = std::make_unique<CheckpointManager>(run.ckpt, dir.path, /*max_to_keep=*/0);
  run.at(1);
  manager->save(1);
  CheckpointOptions failing;
  failing.enable_async_checkpoint = true;
  failing.write_hooks.before_rename = [](const fs::path&, const fs::path&) { throw Error("disk full (test)"); };

  run.at(2);
  CHECK(manager->save(2, false, failing) == (dir.path / "ckpt-2").string());
  CHECK_THROWS_WITH(manager->sync(), Contains("disk full (test)"));
  manager->sync();  // raised once
  CHECK(manager->latest_checkpoint() == (dir.path / "ckpt-1").string());
  CHECK(manager->last_checkpoint_step() == 1);
  CHECK_FALSE(checkpoint_exists(dir.path / "ckpt-2"));
  // The state file lists the uncommitted ckpt-2 (it counts once committed) but never
  // names it the latest.
  std::ifstream state(dir.path / "checkpoint");
  const std::string listed((std::istreambuf_iterator<char>(state)), std::istreambuf_iterator<char>());
  CHECK_THAT(listed, Contains("\"ckpt-2\"") && Contains("\"latest\": \"ckpt-1\""));

  // Raised by the next save, which then does not happen; the one after does.
  manager->save(3, false, failing);
  CHECK_THROWS_WITH(manager->save(4), Contains("disk full (test)"));
  CHECK(manager->latest_checkpoint() == (dir.path / "ckpt-1").string());
  CHECK(manager->save(4) == (dir.path / "ckpt-4").string());
  CHECK(manager->latest_checkpoint() == (dir.path / "ckpt-4").string());

  // The destructor waits for a save in flight (and can only print a failure).
  run.at(5);
  CheckpointOptions async;
  async.enable_async_checkpoint = true;
  manager->save(5, false, async);
  manager.reset();
  CHECK(checkpoint_exists(dir.path / "ckpt-5"));
  CHECK(saved_weight((dir.path / "ckpt-5").string()) == std::vector<float>(1000, 5.0f));
  manager = std::make_unique<CheckpointManager>(run.ckpt, dir.path, 0);
  manager->save(6, false, failing);
  manager.reset();  // prints the failure, does not throw
  CHECK(CheckpointManager(run.ckpt, dir.path, 0).latest_checkpoint() == (dir.path / "ckpt-5").string());
}

TEST_CASE("Controller: enable_async_checkpointing writes bitwise the checkpoints of synchronous saving",
          "[train][checkpoint]") {
  using namespace strata::testing::orbit;
  JobOptions o;
  o.checkpoint_interval = 20;
  o.max_to_keep = 0;
  std::map<int64_t, std::map<std::string, std::vector<double>>> written[2];
  for (bool async : {false, true}) {
    TempDir dir(async ? "async_controller" : "sync_controller");
    Job job("mirrored", 2, dir.path, o);
    train::ControllerOptions co = job.controller_options(10);
    co.enable_async_checkpointing = async;
    train::Controller controller(co);
    controller.train(60);
    // train() returns with every checkpoint written.
    for (const std::string& prefix : job.manager->checkpoints()) {
      const TensorCheckpoint ck = load_tensors(prefix);
      REQUIRE(ck.step.has_value());
      for (const auto& [name, t] : ck.tensors) written[async][*ck.step][name] = t.to_vector<double>();
    }
  }
  CHECK(written[0].size() == 4);  // steps 10, 30, 50 and 60 (completion)
  REQUIRE(written[1].size() == written[0].size());
  for (const auto& [step, tensors] : written[0]) {
    INFO("step " << step);
    REQUIRE(written[1].count(step) == 1);
    CHECK(first_difference(tensors, written[1].at(step)).empty());
  }
}

}  // namespace async_ckpt_test
