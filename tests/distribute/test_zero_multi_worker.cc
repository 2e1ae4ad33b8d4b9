// ZeRO-1 across 2 worker processes (MultiWorkerMirroredStrategy over Gloo on 127.0.0.1,
// started by strata-launch with bounded waits): strata-train --strategy multi_worker
// --shard-optimizer-state over 2 workers x 2 local replicas (hierarchical reduce-scatter
// and all-gather) trains bitwise as without it (same checkpoint tensors, same losses), holds
// a quarter of the optimizer state per replica, and its checkpoints (the whole slots,
// gathered from both workers) resume unsharded jobs and the other way round; with each
// worker's replicas sharing one copy of the variables (--share-cpu-variables), the same,
// and with the gradients aggregated in backward (--aggregate-gradients-in-backward).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.h"
#include <strata/distribute/collective/gloo_communicator.h>
#include "tests/train/checkpoint_compare.h"
#include "tests/temp_dir.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

using strata::testing::TempDir;

// strata-train under strata-launch: 2 workers x 2 replicas, Adam, up to `steps` (resuming
// what `model_dir` holds); returns the chief's report.
nlohmann::json train_job(const fs::path& model_dir, int steps, bool shard, bool one_copy = false,
                         bool aggregate = false) {
  const fs::path report = model_dir.string() + "-report.json";
  std::vector<std::string> argv{STRATA_LAUNCH_BIN, "--workers", "2", "--replicas-per-worker", "2", "--timeout", "150",
                                "--",
                                STRATA_TRAIN_BIN, "--strategy", "multi_worker", "--model", "mlp", "--optimizer", "adam",
                                "--steps", std::to_string(steps), "--steps-per-loop", "10", "--global-batch", "32",
                                "--train-examples", "256", "--eval-examples", "64", "--quiet", "--model-dir",
                                model_dir.string(), "--report", report.string()};
  if (shard) argv.push_back("--shard-optimizer-state");
  if (one_copy) argv.push_back("--share-cpu-variables");
  if (aggregate) argv.push_back("--aggregate-gradients-in-backward");
  auto r = strata::testing::run_process(argv, {}, 180.0);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(std::ifstream(report));
}

using strata::testing::reported_checkpoint_tensors;
using strata::testing::same_tensors;

}  // namespace

TEST_CASE("ZeRO-1 across 2 workers x 2 replicas: bitwise as without it, and checkpoints both ways",
          "[zero][mwms][multiprocess]") {
  if (!distribute::gloo_available()) {
    WARN("skipped: strata was built without Gloo");
    return;
  }
  TempDir dir;
  const nlohmann::json plain = train_job(dir.path / "plain", 20, false);
  const nlohmann::json sharded = train_job(dir.path / "sharded", 20, true);
  CHECK(sharded["workers"] == 2);
  CHECK(sharded["replicas"] == 4);
  CHECK(sharded["shard_optimizer_state"] == true);
  CHECK(plain["final_train_loss"] == sharded["final_train_loss"]);
  CHECK(plain["eval_loss"] == sharded["eval_loss"]);
  CHECK(same_tensors(reported_checkpoint_tensors(plain), reported_checkpoint_tensors(sharded)));
  // A quarter per replica (the MLP's last bias, 10 elements, splits 3+3+3+1).
  const int64_t total = sharded["optimizer_state_bytes_total"], per_replica = sharded["optimizer_state_bytes_per_replica"];
  CHECK(plain["optimizer_state_bytes_per_replica"] == total);
  CHECK(per_replica >= total / 4);
  CHECK(per_replica <= total / 4 + 2 * 3 * int64_t(sizeof(float)));
  // Sharded to step 10 then plain to 20, and plain then sharded: the uninterrupted run.
  train_job(dir.path / "a", 10, true);
  const nlohmann::json a20 = train_job(dir.path / "a", 20, false);
  train_job(dir.path / "b", 10, false);
  const nlohmann::json b20 = train_job(dir.path / "b", 20, true);
  CHECK(same_tensors(reported_checkpoint_tensors(a20), reported_checkpoint_tensors(plain)));
  CHECK(same_tensors(reported_checkpoint_tensors(b20), reported_checkpoint_tensors(plain)));
  CHECK(a20["eval_loss"] == plain["eval_loss"]);
  CHECK(b20["eval_loss"] == plain["eval_loss"]);
  // Each worker's 2 replicas sharing one copy of the variables (their updates split, the
  // other worker's chunks copied in by one replica each): the same bits, sharded or not.
  const nlohmann::json one_copy = train_job(dir.path / "one_copy", 20, false, true);
  const nlohmann::json one_copy_sharded = train_job(dir.path / "one_copy_sharded", 20, true, true);
  CHECK(one_copy["share_cpu_variables"] == true);
  // The gradient tape returning the sums (aggregate_gradients_in_backward): the same bits.
  const nlohmann::json aggregated = train_job(dir.path / "aggregated", 20, false, true, true);
  CHECK(aggregated["aggregate_gradients_in_backward"] == true);
  for (const nlohmann::json* run : {&one_copy, &one_copy_sharded, &aggregated}) {
    CHECK((*run)["final_train_loss"] == plain["final_train_loss"]);
    CHECK(same_tensors(reported_checkpoint_tensors(*run), reported_checkpoint_tensors(plain)));
  }
}
