// Strategy equivalence: K steps of an MLP (train's nn::Dense + optim::SGD / optim::Adam)
// on the same global batches end with the same weights under every strategy (relative
// difference <= 1e-5 in float32), and bitwise the same weights when a strategy is run
// twice. compute_average_loss with the step's global batch size makes the math identical;
// the global batch (10) splits unevenly over 3 and 4 replicas, and the short last batch
// (6) leaves some replicas of Mirrored(4) empty.
#include <cmath>

#include <strata/distribute/strategy.h>
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>
#include "tests/distribute/equivalence_helpers.h"

using namespace strata;
using namespace strata::distribute;

namespace {
// The strategy-equivalence helpers (equivalence_helpers.h).
namespace eq = strata::distribute::testing;

constexpr int64_t kFeatures = 12, kHidden = 16, kClasses = 4, kGlobalBatch = 10, kExamples = 56;

// 5 batches of 10 and a last one of 6.
data::Dataset make_dataset() { return eq::classification_dataset(42, kExamples, kFeatures, kGlobalBatch); }

enum class Opt { SGD, Adam };

// Trains under `strategy` and returns the final weights (cross-replica values), after
// checking that every replica's copy of every variable is the same.
std::vector<Tensor> train(Strategy& strategy, Opt which, int epochs = 2) {
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = eq::classification_mlp(kFeatures, kHidden, kClasses, /*init_seed=*/1);
    if (which == Opt::SGD) {
      opt = optim::SGD(0.1, {.momentum = 0.9});
    } else {
      opt = optim::Adam(0.01);
    }
  }
  const std::vector<float> losses = eq::train_classifier(strategy, model, opt, make_dataset(), epochs);
  REQUIRE(losses.size() == 12);
  for (float loss : losses) REQUIRE(std::isfinite(loss));
  REQUIRE(opt.iterations().value().item<int64_t>() == 12);  // once per step, whatever the replicas
  const auto vars = model.trainable_variables();
  REQUIRE(eq::replicas_agree(strategy, vars));
  return eq::values_of(vars);
}

struct Case {
  std::string label;
  std::function<std::unique_ptr<Strategy>()> make;
};

std::vector<Case> cases() {
  auto mirrored = [](int n, CrossDeviceOps ops = CrossDeviceOps::Default) {
    return [n, ops] { return std::unique_ptr<Strategy>(new MirroredStrategy(MirroredStrategy::cpu_devices(n), ops)); };
  };
  return {
      {"one_device", [] { return std::unique_ptr<Strategy>(new OneDeviceStrategy(cpu(0))); }},
      {"mirrored(2)", mirrored(2)},
      {"mirrored(2, hierarchical)", mirrored(2, CrossDeviceOps::HierarchicalCopyAllReduce)},
      {"mirrored(3)", mirrored(3)},
      {"mirrored(4)", mirrored(4)},
      {"mirrored(4, hierarchical)", mirrored(4, CrossDeviceOps::HierarchicalCopyAllReduce)},
      {"central_storage(2)",
       [] { return std::unique_ptr<Strategy>(new CentralStorageStrategy(MirroredStrategy::cpu_devices(2))); }},
  };
}
}  // namespace

TEST_CASE("K steps of an MLP end with the same weights under every strategy, bitwise the same per strategy") {
  for (Opt which : {Opt::SGD, Opt::Adam}) {
    INFO((which == Opt::SGD ? "SGD(momentum 0.9)" : "Adam"));
    const std::vector<Tensor> reference = train(DefaultStrategy::instance(), which);
    const std::vector<Tensor> again = train(DefaultStrategy::instance(), which);
    REQUIRE(eq::bitwise_equal(reference, again));
    // The weights moved: the test compares trained models, not initial values.
    {
      auto scope = DefaultStrategy::instance().scope();
      nn::Dense fresh(kFeatures, kHidden, {.kernel_initializer = nn::glorot_uniform(1)});
      REQUIRE(eq::max_relative_difference(std::vector<Tensor>{fresh->kernel().value()},
                                      std::vector<Tensor>{reference[0]}) > 1e-2);
    }
    std::map<std::string, std::vector<Tensor>> results;
    for (const auto& c : cases()) {
      INFO(c.label);
      auto first = c.make();
      const std::vector<Tensor> weights = train(*first, which);
      const double rel = eq::max_relative_difference(weights, reference);
      INFO("max relative difference to the default strategy: " << rel);
      REQUIRE(rel <= 1e-5);
      auto second = c.make();
      REQUIRE(eq::bitwise_equal(weights, train(*second, which)));  // deterministic
      results[c.label] = weights;
    }
    // The cross-device ops change who reduces, not the result.
    REQUIRE(eq::bitwise_equal(results["mirrored(2)"], results["mirrored(2, hierarchical)"]));
    REQUIRE(eq::bitwise_equal(results["mirrored(4)"], results["mirrored(4, hierarchical)"]));
  }
}
