// strata-train refuses bad inputs before it trains and never reports a result it did not
// measure: integer flags say "not an integer"; an unwritable --report or --model-dir and a
// model directory held by another job fail at once; a finished run started again (or
// --steps 0) evaluates and reports true values; a NaN loss exits non-zero unless
// --no-terminate-on-nan; resuming with another optimizer is refused; a damaged latest
// checkpoint is refused naming the intact one, which --restore-checkpoint resumes from.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <strata/train/directory_lock.h>
#include "tests/tools/strata_train_runner.h"

namespace train_guards_test {

namespace fs = std::filesystem;
using strata::testing::ProgramRun;

ProgramRun run_train(const std::string& args) { return strata::testing::run_strata_train(args); }

struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& tag) {
    path = fs::temp_directory_path() / ("strata_train_guard_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A small quick job; the model directory and report are the caller's.
std::string job(const fs::path& model_dir, const fs::path& report, const std::string& extra = "") {
  return "--model mlp --data synthetic --global-batch 32 --steps-per-loop 10 --train-examples 256 "
         "--eval-examples 64 --quiet --model-dir " + model_dir.string() + " --report " + report.string() + " " + extra;
}

nlohmann::json read_report(const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); }

// Overwrites the last bytes of a checkpoint's data file (its checksum then fails).
void damage_checkpoint(const fs::path& prefix) {
  fs::path data = prefix.string() + ".safetensors";
  if (!fs::exists(data)) data = prefix.string() + ".alt.safetensors";
  std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekp(-8, std::ios::end);
  f.write("\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a", 8);
}

}  // namespace train_guards_test

using namespace train_guards_test;
using Catch::Matchers::Contains;

TEST_CASE("strata-train guards: integer flags say 'not an integer'") {
  for (const char* flag : {"--steps", "--global-batch", "--seed", "--eval-steps"}) {
    INFO(flag);
    const ProgramRun r = run_train(std::string(flag) + " abc");
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains(flag) && Contains("'abc' is not an integer"));
  }
  const ProgramRun r = run_train("--steps 1.5");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("not an integer"));
}

TEST_CASE("strata-train guards: an unwritable --report or --model-dir fails before training") {
  Scratch s("unwritable");
  std::ofstream(s.path / "plain") << "x";
  // Under a regular file nothing can be created, whoever runs the test (root included).
  ProgramRun r = run_train(job(s.path / "m1", s.path / "plain" / "r.json", "--steps 100000"));
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("--report") && Contains("cannot be written"));
  CHECK_FALSE(fs::exists(s.path / "m1" / "checkpoints"));  // nothing trained
  r = run_train(job(s.path / "plain" / "m2", s.path / "r.json", "--steps 100000"));
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("plain/m2"));
  CHECK_FALSE(fs::exists(s.path / "r.json"));  // the probe left nothing behind
}

TEST_CASE("strata-train guards: a model directory held by another job is refused, naming it") {
  Scratch s("locked");
  const fs::path model = s.path / "model";
  {
    strata::train::DirectoryLock held(model, "another-job");
    const ProgramRun r = run_train(job(model, s.path / "r.json", "--steps 10"));
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("in use by another-job") && Contains("pid " + std::to_string(::getpid())));
    CHECK_FALSE(fs::exists(model / "checkpoints"));
  }
  // Released: the directory is usable, and the run releases its own lock at exit.
  const ProgramRun r = run_train(job(model, s.path / "r.json", "--steps 10"));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_FALSE(fs::exists(strata::train::DirectoryLock::lock_path(model)));
}

TEST_CASE("strata-train guards: a finished run started again evaluates and reports the truth") {
  Scratch s("rerun");
  const fs::path model = s.path / "model", report = s.path / "r.json";
  ProgramRun r = run_train(job(model, report, "--steps 20"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json first = read_report(report);
  REQUIRE(first["trained_steps"] == 20);
  REQUIRE(first["eval_loss"].is_number());

  r = run_train(job(model, report, "--steps 20"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("nothing to train"));
  const nlohmann::json again = read_report(report);
  CHECK(again["steps"] == 20);
  CHECK(again["trained_steps"] == 0);
  CHECK(again["final_train_loss"].is_null());   // not measured by this run
  CHECK(again["examples_per_sec"].is_null());
  CHECK(again["steady_examples_per_sec"].is_null());
  CHECK(again["eval_loss"] == first["eval_loss"]);  // the same model, evaluated again
  CHECK(again["eval_accuracy"] == first["eval_accuracy"]);

  // --steps 0 on a fresh directory evaluates the initial model.
  r = run_train(job(s.path / "fresh", report, "--steps 0"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json zero = read_report(report);
  CHECK(zero["steps"] == 0);
  CHECK(zero["eval_loss"].is_number());
  CHECK(zero["eval_loss"].get<double>() > 0.0);
}

TEST_CASE("strata-train guards: a NaN loss exits non-zero unless --no-terminate-on-nan") {
  Scratch s("nan");
  const fs::path report = s.path / "r.json";
  ProgramRun r = run_train(job(s.path / "m1", report, "--steps 20 --learning-rate 1e30"));
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("TerminateOnNaN") && Contains("--no-terminate-on-nan"));
  CHECK_FALSE(fs::exists(report));  // no report of a diverged run
  r = run_train(job(s.path / "m2", report, "--steps 20 --learning-rate 1e30 --no-terminate-on-nan"));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(read_report(report)["trained_steps"] == 20);
}

TEST_CASE("strata-train guards: another optimizer on resume is refused") {
  Scratch s("optimizer");
  const fs::path model = s.path / "model", report = s.path / "r.json";
  ProgramRun r = run_train(job(model, report, "--steps 10 --optimizer adam"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  r = run_train(job(model, report, "--steps 20 --optimizer sgd"));
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("Adam") && Contains("SGD"));
}

TEST_CASE("strata-train guards: a damaged latest checkpoint names the intact one, --restore-checkpoint resumes") {
  Scratch s("damaged");
  const fs::path model = s.path / "model", report = s.path / "r.json";
  for (const char* steps : {"--steps 10", "--steps 20"}) {
    const ProgramRun r = run_train(job(model, report, steps));
    INFO(r.output);
    REQUIRE(r.status == 0);
  }
  const fs::path ckpts = model / "checkpoints";
  damage_checkpoint(ckpts / "ckpt-20");
  ProgramRun r = run_train(job(model, report, "--steps 30"));
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("ckpt-20") && Contains("newest intact checkpoint is " + (ckpts / "ckpt-10").string()) &&
                           Contains("--restore-checkpoint"));
  r = run_train(job(model, report, "--steps 30 --restore-checkpoint " + (ckpts / "ckpt-10").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json j = read_report(report);
  CHECK(j["steps"] == 30);
  CHECK(j["trained_steps"] == 20);
  r = run_train(job(model, report, "--steps 30 --restore-checkpoint " + (ckpts / "nope").string()));
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("--restore-checkpoint") && Contains("no checkpoint there"));
}
