// compute_average_loss and scale_regularization_loss with tf.nn's semantics.
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include "tests/distribute/strategy_cases.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;

TEST_CASE("compute_average_loss without a strategy: sum / batch, weights, explicit global batch") {
  // tf.nn.compute_average_loss([1, 2, 3]) == 2; with global_batch_size=6 it is 1.
  REQUIRE(compute_average_loss(tensor({1, 2, 3})).item<float>() == 2.0f);
  REQUIRE(compute_average_loss(tensor({1, 2, 3}), 6).item<float>() == 1.0f);
  // Weights: rank 0, same shape, a trailing axis of 1, or one axis fewer.
  REQUIRE(compute_average_loss(tensor({1, 2, 3}), Tensor::scalar(2.0)).item<float>() == 4.0f);
  REQUIRE(compute_average_loss(tensor({1, 2, 3}), tensor({1, 0, 1})).item<float>() == Approx(4.0 / 3));
  REQUIRE(compute_average_loss(tensor({1, 2, 3}), tensor({1, 0, 1}).reshape({3, 1}), 4).item<float>() == 1.0f);
  REQUIRE(compute_average_loss(tensor({{1, 2}, {3, 4}}), tensor({1, 0})).item<float>() == 1.5f);  // [2,2] * [2,1]
  // The loss's dtype is kept (weights are cast to it).
  Tensor d = compute_average_loss(cast(tensor({1, 2}), kFloat64), tensor({1, 1}));
  REQUIRE(d.dtype() == kFloat64);
  REQUIRE(d.item<double>() == 1.5);
  // Errors as in TensorFlow.
  REQUIRE_THROWS_WITH(compute_average_loss(Tensor::scalar(1.0)), Catch::Contains("at least rank 1"));
  REQUIRE_THROWS_WITH(compute_average_loss(tensor({1, 2, 3}), 0), Catch::Contains("must be positive, got 0"));
  REQUIRE_THROWS_WITH(compute_average_loss(tensor({1, 2}), tensor({1, 2, 3})),
                      Catch::Contains("does not broadcast to per_example_loss"));
  REQUIRE_THROWS_WITH(compute_average_loss(zeros({0})), Catch::Contains("the local batch is empty"));
  REQUIRE(compute_average_loss(zeros({0}), 8).item<float>() == 0.0f);  // an empty replica with a global batch
  REQUIRE(scale_regularization_loss(tensor({1, 2})).item<float>() == 3.0f);
}

TEST_CASE("compute_average_loss in replica context: default global batch = local batch x replicas") {
  for (const auto& c : strata::distribute::testing::all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const int n = strategy->num_replicas_in_sync();
    auto losses = strategy->run([] {
      return std::vector<Tensor>{compute_average_loss(tensor({1, 2, 3})), compute_average_loss(tensor({1, 2, 3}), 12),
                                 scale_regularization_loss(tensor({1, 2, 3})),
                                 scale_regularization_loss(std::vector<Tensor>{Tensor::scalar(1.0), tensor({2, 3})})};
    });
    for (const auto& l : losses) {
      REQUIRE(l[0].item<float>() == Approx(6.0 / (3 * n)));
      REQUIRE(l[1].item<float>() == 0.5f);
      REQUIRE(l[2].item<float>() == Approx(6.0 / n));
      REQUIRE(l[3].item<float>() == Approx(6.0 / n));
    }
    // The replicas' averaged losses add up to the global mean.
    REQUIRE(strategy->reduce(ReduceOp::Sum, strategy->run([] { return compute_average_loss(tensor({1, 2, 3})); }))
                .item<float>() == Approx(2.0));
    // In cross-replica context the global batch cannot be inferred (TensorFlow raises);
    // scale_regularization_loss always needs replica context.
    auto scope = strategy->scope();
    if (has_strategy()) {
      REQUIRE_THROWS_WITH(compute_average_loss(tensor({1, 2})), Catch::Contains("cross-replica context"));
      REQUIRE_THROWS_WITH(scale_regularization_loss(tensor({1, 2})), Catch::Contains("cross-replica context"));
      REQUIRE(compute_average_loss(tensor({1, 2}), 4).item<float>() == 0.75f);  // explicit global batch: allowed
    }
  }
}

TEST_CASE("compute_average_loss with the global batch makes an uneven split add up to the global mean") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  // 8 examples split [3, 3, 2], and a short last batch of 5 split [3, 2, 0].
  for (int64_t batch : {int64_t(8), int64_t(5)}) {
    Tensor losses = arange(1, double(batch) + 1);
    auto parts = split_batch({losses}, 3, 8);
    auto per_replica = strategy.run(
        [](const data::Batch& b) { return compute_average_loss(b[0], /*global_batch_size=*/int64_t(8)); },
        PerReplica<data::Batch>(parts));
    REQUIRE(strategy.reduce(ReduceOp::Sum, per_replica).item<float>() ==
            Approx(double(batch * (batch + 1) / 2) / 8.0));
  }
  // Without it, a replica with an empty split raises (global batch 0), as in TensorFlow.
  REQUIRE_THROWS_WITH(strategy.run([](const data::Batch& b) { return compute_average_loss(b[0]); },
                                   PerReplica<data::Batch>(split_batch({arange(1, 6)}, 3, 8))),
                      Catch::Contains("replica 2") && Catch::Contains("must be positive"));
}
