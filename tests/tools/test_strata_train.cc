// strata-train's command-line contract: flag errors exit 2 with a one-line message, a short
// run writes the report keys users rely on, and an existing model dir is resumed.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include "tests/tools/strata_train_runner.h"
#include "tests/train/checkpoint_compare.h"

namespace {

using Run = strata::testing::ProgramRun;
inline Run run(const std::string& args) { return strata::testing::run_strata_train(args); }

std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("strata_train_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("strata-train: unknown flags and bad values exit 2 with one line") {
  for (const char* args : {"--no-such-flag", "--model resnet", "--strategy nope", "--steps -3", "--global-batch 0",
                           "--replicas 0", "--data mnist"}) {
    INFO(args);
    Run r = run(args);
    // The program name prefixes each message once, whoever raised it.
    REQUIRE_THAT(r.output, !Catch::Contains("strata-train: strata-train:"));
    if (std::string(args) == "--data mnist") {
      REQUIRE(r.status != 0);  // rejected when the data is loaded
      REQUIRE_THAT(r.output, Catch::Contains("--data"));
      continue;
    }
    REQUIRE(r.status == 2);
    REQUIRE(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}

TEST_CASE("strata-train: a short mirrored run reports the contract keys and resumes") {
  const auto dir = fresh_dir("resume");
  const auto report = dir / "r.json";
  const std::string common = "--model mlp --data synthetic --strategy mirrored --replicas 2 --global-batch 64 "
                             "--steps-per-loop 10 --train-examples 512 --eval-examples 128 --quiet --model-dir " +
                             dir.string() + " --report " + report.string();
  Run r = run("--steps 20 " + common);
  INFO(r.output);
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(report));
  for (const char* key : {"steps", "final_train_loss", "eval_loss", "eval_accuracy", "examples_per_sec",
                          "wall_seconds", "replicas", "workers", "strategy", "precision", "checkpoint"}) {
    INFO(key);
    REQUIRE(j.contains(key));
  }
  REQUIRE(j["steps"] == 20);
  REQUIRE(j["replicas"] == 2);
  REQUIRE(j["strategy"] == "mirrored");
  // Two inner loops of 10 steps: their median rate, times the global batch.
  REQUIRE(j["steady_examples_per_sec"].is_number());
  REQUIRE(j["steady_examples_per_sec"].get<double>() > 0);
  REQUIRE(std::filesystem::exists(std::string(j["checkpoint"]) + ".safetensors"));
  // Running again with more steps resumes from step 20 instead of starting over.
  Run r2 = run("--steps 30 " + common);
  INFO(r2.output);
  REQUIRE(r2.status == 0);
  nlohmann::json j2 = nlohmann::json::parse(std::ifstream(report));
  REQUIRE(j2["steps"] == 30);
  std::filesystem::remove_all(dir);
}

TEST_CASE("strata-train --gradient-accumulation-steps: the same training as one pass per batch") {
  // Micro-batches' gradients summed without communication, the totals reduced in the last
  // one's backward and applied once: the update of the whole batch up to the order of the
  // float sums, so the runs end within rounding of each other.
  const auto dir = fresh_dir("accumulate");
  auto train = [&](int steps_of_accumulation, const std::string& flags = "") {
    const auto sub = dir / (std::to_string(steps_of_accumulation) + (flags.empty() ? "" : "-flags"));
    const auto report = sub / "r.json";
    Run r = run("--model mlp --data synthetic --strategy mirrored --replicas 2 --global-batch 64 --steps 60 "
                "--steps-per-loop 20 --train-examples 512 --eval-examples 128 --quiet --model-dir " + sub.string() +
                " --report " + report.string() + " --gradient-accumulation-steps " +
                std::to_string(steps_of_accumulation) + flags);
    INFO(r.output);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(std::ifstream(report));
  };
  const nlohmann::json one = train(1), three = train(3);
  CHECK(one["gradient_accumulation_steps"] == 1);
  CHECK(three["gradient_accumulation_steps"] == 3);
  const double a = one["final_train_loss"].get<double>(), b = three["final_train_loss"].get<double>();
  CHECK(std::abs(a - b) <= 1e-3 * std::abs(a));
  CHECK(std::abs(one["eval_loss"].get<double>() - three["eval_loss"].get<double>()) <=
        1e-3 * std::abs(one["eval_loss"].get<double>()));
  // With the tape returning the replicas' sums (the last micro-batch's backward reduces
  // the totals), the same training bitwise.
  const nlohmann::json aggregated = train(3, " --aggregate-gradients-in-backward");
  CHECK(aggregated["final_train_loss"] == three["final_train_loss"]);
  CHECK(aggregated["eval_loss"] == three["eval_loss"]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("strata-train --async-checkpoint: the checkpoints of a synchronous run") {
  // Checkpoints written on a background thread while training goes on hold the values of
  // their steps: bitwise those a synchronous run writes at the same steps.
  const auto dir = fresh_dir("async_checkpoint");
  auto train = [&](const std::string& name, const std::string& flag) {
    const auto sub = dir / name;
    Run r = run("--model mlp --data synthetic --strategy mirrored --replicas 2 --global-batch 64 --steps 60 "
                "--steps-per-loop 5 --train-examples 512 --eval-examples 128 --quiet --model-dir " + sub.string() +
                " --report " + (sub / "r.json").string() + flag);
    INFO(r.output);
    REQUIRE(r.status == 0);
    return sub / "checkpoints";
  };
  const auto sync_dir = train("sync", ""), async_dir = train("async", " --async-checkpoint");
  // The interval is 5 loops: saves at steps 5, 30, 55 and 60 (completion); 3 kept.
  for (const char* name : {"ckpt-30", "ckpt-55", "ckpt-60"}) {
    INFO(name);
    CHECK(strata::testing::same_tensors(strata::testing::checkpoint_tensors(sync_dir / name),
                                        strata::testing::checkpoint_tensors(async_dir / name)));
  }
  std::filesystem::remove_all(dir);
}
