// strata-train --precision: each policy trains a short mirrored run to the float32 run's
// accuracy and says so in the report; mixed_float16 checkpoints carry the loss-scale state;
// an unknown precision exits 2.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include "tests/tools/strata_train_runner.h"

namespace {

using Run = strata::testing::ProgramRun;
inline Run run(const std::string& args) { return strata::testing::run_strata_train(args); }

}  // namespace

TEST_CASE("strata-train --precision: mixed policies train like float32 under mirrored") {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_train_precision_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::map<std::string, double> accuracy;
  for (const std::string precision : {"float32", "mixed_bfloat16", "mixed_float16"}) {
    INFO(precision);
    const auto model_dir = dir / precision;
    const auto report = dir / (precision + ".json");
    Run r = run("--model mlp --data synthetic --strategy mirrored --replicas 2 --global-batch 64 --steps 120 "
                "--steps-per-loop 30 --train-examples 1024 --eval-examples 256 --quiet --precision " +
                precision + " --model-dir " + model_dir.string() + " --report " + report.string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    nlohmann::json j = nlohmann::json::parse(std::ifstream(report));
    REQUIRE(j["precision"] == precision);
    REQUIRE(j["steps"] == 120);
    accuracy[precision] = j["eval_accuracy"].get<double>();
    // The checkpoint's manifest lists the loss-scale state only for mixed_float16.
    std::ifstream manifest(j["checkpoint"].get<std::string>() + ".manifest.json");
    const std::string text((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
    REQUIRE_FALSE(text.empty());
    CHECK((text.find("optimizer/loss_scale") != std::string::npos) == (precision == "mixed_float16"));
  }
  INFO("float32 " << accuracy["float32"] << ", mixed_bfloat16 " << accuracy["mixed_bfloat16"] << ", mixed_float16 "
                  << accuracy["mixed_float16"]);
  CHECK(accuracy["float32"] > 0.8);
  CHECK(accuracy["mixed_bfloat16"] > accuracy["float32"] - 0.03);
  CHECK(accuracy["mixed_float16"] > accuracy["float32"] - 0.03);
  std::filesystem::remove_all(dir);

  Run bad = run("--precision float8");
  CHECK(bad.status == 2);
}
