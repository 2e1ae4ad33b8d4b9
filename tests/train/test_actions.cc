// Orbit's controller actions (train/actions.h): NewBestMetric (higher or lower is better,
// NaN never best, a missing output named, the best value kept in a file across restarts),
// ConditionalAction, and the Controller calling eval_actions after each evaluation.
#include <fstream>

#include <strata/train/actions.h>
#include "tests/train/controller_test_util.h"

using namespace strata;
using namespace strata::testing::orbit;

TEST_CASE("NewBestMetric: strictly better values in either direction (NaN never) and a missing output named",
          "[train][actions]") {
  train::NewBestMetric accuracy("accuracy");
  CHECK(accuracy({{"accuracy", 0.5}}));  // the first value is the best so far
  CHECK_FALSE(accuracy({{"accuracy", 0.5}}));
  CHECK_FALSE(accuracy({{"accuracy", 0.4}}));
  CHECK(accuracy({{"accuracy", 0.6}}));
  CHECK_FALSE(accuracy({{"accuracy", std::nan("")}}));
  CHECK(accuracy.best_value() == 0.6);
  train::NewBestMetric loss("loss", /*higher_is_better=*/false);
  CHECK(loss({{"loss", 2.0}}));
  CHECK(loss({{"loss", 1.0}}));
  CHECK_FALSE(loss.test({{"loss", 1.5}}));
  CHECK(loss.best_value() == 1.0);
  CHECK_THROWS_WITH(loss({{"accuracy", 0.1}, {"examples", 96}}),
                    Catch::Contains("no 'loss'") && Catch::Contains("accuracy, examples"));
}

TEST_CASE("NewBestMetric: the best value survives a restart through its file", "[train][actions]") {
  TempDir dir;
  const auto file = dir.path / "best_accuracy.json";
  {
    train::NewBestMetric best("accuracy", true, file);
    CHECK(best({{"accuracy", 0.7}}));
    CHECK(best({{"accuracy", 0.8}}));
  }
  train::NewBestMetric again("accuracy", true, file);
  CHECK(again.best_value() == 0.8);
  CHECK_FALSE(again({{"accuracy", 0.75}}));
  CHECK(again({{"accuracy", 0.81}}));
  CHECK_THROWS_WITH(train::NewBestMetric("loss", false, file), Catch::Contains("holds the best value of 'accuracy'"));
  // Its directory is made up front (Orbit's JSONPersistedValue makes it).
  train::NewBestMetric nested("accuracy", true, dir.path / "best" / "of" / "accuracy.json");
  CHECK(nested({{"accuracy", 0.5}}));
  CHECK(fs::exists(dir.path / "best" / "of" / "accuracy.json"));
  std::ofstream(dir.path / "junk.json") << "{not json";
  CHECK_THROWS_WITH(train::NewBestMetric("accuracy", true, dir.path / "junk.json"),
                    Catch::Contains("is not a best-metric file"));
}

TEST_CASE("Controller eval_actions: a checkpoint of the best evaluation only", "[train][actions]") {
  TempDir dir;
  Job job("default", 0, dir.path / "ckpt");
  train::CheckpointManager best_manager(job.checkpoint, dir.path / "best", /*max_to_keep=*/1);
  // Accuracies the test decides, so that which evaluations are "best" is known: 0.5, 0.4,
  // 0.7, 0.7 after steps 10, 20, 30, 40.
  const std::vector<double> accuracies{0.5, 0.4, 0.7, 0.7};
  std::vector<int64_t> evaluated_at, saved_at;
  train::NewBestMetric best("accuracy");
  auto options = job.controller_options(10);
  options.eval_actions.push_back([&](const train::Outputs& o) {
    CHECK(o.count("accuracy") == 1);
    evaluated_at.push_back(job.step_value());
  });
  options.eval_actions.push_back(train::ConditionalAction(
      [&](const train::Outputs&) {
        return best({{"accuracy", accuracies[evaluated_at.size() - 1]}});
      },
      [&](const train::Outputs&) {
        saved_at.push_back(job.step_value());
        best_manager.save(job.step_value(), /*force=*/true);
      }));
  train::Controller controller(options);
  controller.train_and_evaluate(40, /*eval_steps=*/-1, /*eval_interval=*/10);
  CHECK(evaluated_at == std::vector<int64_t>{10, 20, 30, 40});
  CHECK(saved_at == std::vector<int64_t>{10, 30});
  CHECK(best_manager.latest_checkpoint() == (dir.path / "best" / "ckpt-30").string());
}
