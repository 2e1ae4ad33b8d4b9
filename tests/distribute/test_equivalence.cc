// Strategy equivalence: K steps of an MLP (train's nn::Dense + optim::SGD / optim::Adam)
// on the same global batches end with the same weights under every strategy (relative
// difference <= 1e-5 in float32), and bitwise the same weights when a strategy is run
// twice. compute_average_loss with the step's global batch size makes the math identical;
// the global batch (10) splits unevenly over 3 and 4 replicas, and the short last batch
// (6) leaves some replicas of Mirrored(4) empty.
#include <cstring>
#include <random>

#include <strata/autograd/autograd.h>
#include <strata/data/dataset.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/losses.h>
#include <strata/train/nn/activations.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>
#include "tests/distribute/equivalence_helpers.h"

using namespace strata;
using namespace strata::distribute;

namespace {
constexpr int64_t kFeatures = 12, kHidden = 16, kClasses = 4, kGlobalBatch = 10, kExamples = 56;

// 5 batches of 10 and a last one of 6.
data::Dataset make_dataset() { return strata::distribute::testing::classification_dataset(42, kExamples, kFeatures, kGlobalBatch); }

enum class Opt { SGD, Adam };

// Trains under `strategy` and returns the final weights (cross-replica values), after
// checking that every replica's copy of every variable is the same.
std::vector<Tensor> train(Strategy& strategy, Opt which, int epochs = 2) {
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = nn::Sequential{nn::Dense(kFeatures, kHidden, {.kernel_initializer = nn::glorot_uniform(1)}), nn::ReLU(),
                           nn::Dense(kHidden, kClasses, {.kernel_initializer = nn::glorot_uniform(2)})};
    if (which == Opt::SGD) {
      opt = optim::SGD(0.1, {.momentum = 0.9});
    } else {
      opt = optim::Adam(0.01);
    }
  }
  const auto vars = model.trainable_variables();
  auto step = [&](const data::Batch& b, int64_t global_batch) {
    autograd::GradientTape tape;
    Tensor logits = model(b[0]);
    Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
    Tensor loss = compute_average_loss(per_example, global_batch);
    auto grads = tape.gradient(loss, vars);
    opt.apply_gradients(grads, vars);
    return loss;
  };
  auto dist = strategy.experimental_distribute_dataset(make_dataset());
  int steps = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : dist) {
      int64_t global = 0;
      for (const auto& part : batch) global += part[0].dim(0);
      auto losses = strategy.run(step, batch, global);
      const Tensor loss = strategy.reduce(ReduceOp::Sum, losses);
      REQUIRE(std::isfinite(loss.item<float>()));
      ++steps;
    }
  }
  REQUIRE(steps == 12);
  REQUIRE(opt.iterations().value().item<int64_t>() == 12);  // once per step, whatever the replicas
  std::vector<Tensor> out;
  for (const Variable& v : vars) {
    auto comps = strategy.experimental_local_results(v);
    for (const Tensor& c : comps) {
      REQUIRE(c.shape() == comps[0].shape());
      REQUIRE(std::memcmp(c.contiguous().raw_data(), comps[0].contiguous().raw_data(), c.nbytes()) == 0);
    }
    out.push_back(v.value().clone());
  }
  return out;
}

double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    double diff = 0, scale = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      diff = std::max(diff, std::abs(x[k] - y[k]));
      scale = std::max(scale, std::abs(y[k]));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-12));
  }
  return worst;
}

bool bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape() ||
        std::memcmp(a[i].contiguous().raw_data(), b[i].contiguous().raw_data(), a[i].nbytes()) != 0) {
      return false;
    }
  }
  return a.size() == b.size();
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
    REQUIRE(bitwise_equal(reference, again));
    // The weights moved: the test compares trained models, not initial values.
    {
      auto scope = DefaultStrategy::instance().scope();
      nn::Dense fresh(kFeatures, kHidden, {.kernel_initializer = nn::glorot_uniform(1)});
      REQUIRE(max_relative_difference(std::vector<Tensor>{fresh->kernel().value()},
                                      std::vector<Tensor>{reference[0]}) > 1e-2);
    }
    std::map<std::string, std::vector<Tensor>> results;
    for (const auto& c : cases()) {
      INFO(c.label);
      auto first = c.make();
      const std::vector<Tensor> weights = train(*first, which);
      const double rel = max_relative_difference(weights, reference);
      INFO("max relative difference to the default strategy: " << rel);
      REQUIRE(rel <= 1e-5);
      auto second = c.make();
      REQUIRE(bitwise_equal(weights, train(*second, which)));  // deterministic
      results[c.label] = weights;
    }
    // The cross-device ops change who reduces, not the result.
    REQUIRE(bitwise_equal(results["mirrored(2)"], results["mirrored(2, hierarchical)"]));
    REQUIRE(bitwise_equal(results["mirrored(4)"], results["mirrored(4, hierarchical)"]));
  }
}
