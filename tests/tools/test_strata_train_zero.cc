// strata-train --shard-optimizer-state (ZeRO-1, docs/ZERO.md): a sharded Mirrored(2) run
// reports the same losses as the unsharded one, its optimizer-state bytes per replica are
// half of the total (report keys shard_optimizer_state, optimizer_state_bytes_per_replica,
// optimizer_state_bytes_total), its checkpoints resume unsharded runs and the other way
// round (the same tensors and names), and the strategies that cannot shard refuse it.
#include <filesystem>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/tools/strata_train_runner.h"
#include "tests/train/checkpoint_compare.h"

namespace {

using Run = strata::testing::ProgramRun;
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("strata_train_zero_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// One short mirrored(2) Adam run into `dir` up to `steps`, resuming what `dir` holds.
nlohmann::json train(const fs::path& dir, int steps, bool shard, int replicas = 2) {
  const fs::path report = dir / "report.json";
  const std::string args = "--model mlp --data synthetic --strategy mirrored --replicas " + std::to_string(replicas) +
                           " --global-batch 32 --steps-per-loop 10 --train-examples 256 --eval-examples 64 "
                           "--optimizer adam --quiet --steps " +
                           std::to_string(steps) + (shard ? " --shard-optimizer-state" : "") + " --model-dir " +
                           dir.string() + " --report " + report.string();
  Run r = strata::testing::run_strata_train(args);
  INFO(args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(std::ifstream(report));
}

using strata::testing::reported_checkpoint_tensors;
using strata::testing::same_tensors;

}  // namespace

TEST_CASE("strata-train --shard-optimizer-state: same losses, half the state per replica, and the report keys",
          "[zero]") {
  const fs::path plain_dir = fresh_dir("plain"), sharded_dir = fresh_dir("sharded");
  const nlohmann::json plain = train(plain_dir, 20, false);
  const nlohmann::json sharded = train(sharded_dir, 20, true);
  CHECK(plain["shard_optimizer_state"] == false);
  CHECK(sharded["shard_optimizer_state"] == true);
  // Bitwise the same training: the printed losses are equal to the last digit.
  CHECK(plain["final_train_loss"] == sharded["final_train_loss"]);
  CHECK(plain["eval_loss"] == sharded["eval_loss"]);
  CHECK(same_tensors(reported_checkpoint_tensors(plain), reported_checkpoint_tensors(sharded)));
  // Adam's m and v for the MLP, one whole copy: the same either way.
  const int64_t total = plain["optimizer_state_bytes_total"];
  CHECK(total > 0);
  CHECK(sharded["optimizer_state_bytes_total"] == total);
  CHECK(plain["optimizer_state_bytes_per_replica"] == total);
  // Every layer of the MLP has an even number of elements: exactly half per replica.
  CHECK(sharded["optimizer_state_bytes_per_replica"] == total / 2);
  fs::remove_all(plain_dir);
  fs::remove_all(sharded_dir);
}

TEST_CASE("strata-train --shard-optimizer-state: checkpoints resume across sharded, plain and replica counts",
          "[zero]") {
  const fs::path whole = fresh_dir("whole"), a = fresh_dir("a"), b = fresh_dir("b");
  const nlohmann::json reference = train(whole, 20, false);
  // Sharded for 10 steps, then plain to 20; plain for 10, then sharded to 20.
  train(a, 10, true);
  const nlohmann::json a20 = train(a, 20, false);
  train(b, 10, false);
  const nlohmann::json b20 = train(b, 20, true);
  CHECK(a20["eval_loss"] == reference["eval_loss"]);
  CHECK(b20["eval_loss"] == reference["eval_loss"]);
  CHECK(same_tensors(reported_checkpoint_tensors(a20), reported_checkpoint_tensors(reference)));
  CHECK(same_tensors(reported_checkpoint_tensors(b20), reported_checkpoint_tensors(reference)));
  // A sharded 2-replica checkpoint resumed sharded over 4 replicas trains on (state whole).
  const nlohmann::json four = train(a, 30, true, 4);
  CHECK(four["steps"] == 30);
  // The 10 biases of the last layer split 3+3+3+1: replica 0 holds a few bytes over 1/4.
  const int64_t per_replica = four["optimizer_state_bytes_per_replica"], total = four["optimizer_state_bytes_total"];
  CHECK(per_replica >= total / 4);
  CHECK(per_replica <= total / 4 + 2 * 3 * int64_t(sizeof(float)));
  fs::remove_all(whole);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("strata-train --shard-optimizer-state: refused where there is no replicated state", "[zero]") {
  const fs::path dir = fresh_dir("refused");
  Run central = strata::testing::run_strata_train(
      "--strategy central_storage --replicas 2 --steps 1 --shard-optimizer-state --quiet --model-dir " + dir.string());
  CHECK(central.status == 1);
  CHECK(central.output.find("central_storage") != std::string::npos);
  CHECK(central.output.find("shard_optimizer_state") != std::string::npos);
  Run ps = strata::testing::run_strata_train("--strategy parameter_server --steps 1 --shard-optimizer-state --quiet");
  CHECK(ps.status == 1);
  CHECK(ps.output.find("--shard-optimizer-state applies to the synchronous strategies") != std::string::npos);
  fs::remove_all(dir);
}
