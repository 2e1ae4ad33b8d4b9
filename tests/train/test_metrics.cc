// Metrics: Keras's documented results, streaming, reset, and sync-on-read state under a
// two-replica MirroredStrategy.
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"
#include <strata/train/metrics.h>

using namespace strata;

namespace {
Tensor f32(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }
double value(const metrics::Metric& m) { return m.result().item<double>(); }
}  // namespace

TEST_CASE("Mean and Sum", "[train][metrics]") {
  metrics::Mean mean("loss");
  CHECK(value(mean) == 0.0);  // nothing seen yet
  mean.update_state(f32({1, 3, 5, 7}, {4}));
  CHECK(value(mean) == 4.0);
  mean.reset_state();
  mean.update_state(f32({1, 3, 5, 7}, {4}), f32({1, 1, 0, 0}, {4}));
  CHECK(value(mean) == 2.0);
  // Streaming: a scalar and a weighted batch accumulate.
  mean.update_state(Tensor::scalar(8.0));
  CHECK(value(mean) == Approx((1 + 3 + 8) / 3.0));
  mean.reset_state();
  CHECK(value(mean) == 0.0);
  CHECK(mean.name() == "loss");
  REQUIRE(mean.variables().size() == 2);
  for (const auto& [name, v] : mean.variables()) {
    CHECK_FALSE(v.trainable());
    CHECK(v.synchronization() == autograd::VariableSynchronization::OnRead);
    CHECK(v.aggregation() == autograd::VariableAggregation::Sum);
  }
  CHECK(mean.variables()[0].first == "total");
  CHECK(mean.variables()[1].first == "count");

  metrics::Sum sum;
  sum.update_state(f32({1, 3, 5, 7}, {4}));
  CHECK(value(sum) == 16.0);
  // Weights one rank short weigh whole rows, as in Keras.
  sum.update_state(f32({1, 3, 5, 7}, {2, 2}), f32({0, 2}, {2}));
  CHECK(value(sum) == 16.0 + 10 + 14);
  sum.update_state(f32({1, 3, 5, 7}, {2, 2}), f32({0, 2}, {1, 2}));  // per column
  CHECK(value(sum) == 40.0 + 6 + 14);
  sum.reset_state();
  CHECK(value(sum) == 0.0);
  CHECK_THROWS_AS(sum.update_state(f32({1, 2, 3}, {3}), f32({1, 2}, {2})), Error);
}

TEST_CASE("Accuracy and SparseCategoricalAccuracy: Keras documentation values",
          "[train][metrics]") {
  metrics::Accuracy acc;
  acc.update_state(f32({1, 2, 3, 4}, {4, 1}), f32({0, 2, 3, 4}, {4, 1}));
  CHECK(value(acc) == 0.75);
  acc.reset_state();
  acc.update_state(f32({1, 2, 3, 4}, {4, 1}), f32({0, 2, 3, 4}, {4, 1}), f32({1, 1, 0, 0}, {4}));
  CHECK(value(acc) == 0.5);
  CHECK_THROWS_AS(acc.update_state(f32({1, 2}, {2}), f32({1, 2, 3}, {3})), Error);

  metrics::SparseCategoricalAccuracy sca;
  Tensor probs = f32({0.1f, 0.6f, 0.3f, 0.05f, 0.95f, 0.f}, {2, 3});
  sca.update_state(f32({2, 1}, {2, 1}), probs);
  CHECK(value(sca) == 0.5);
  sca.reset_state();
  sca.update_state(f32({2, 1}, {2, 1}), probs, f32({0.7f, 0.3f}, {2}));
  CHECK(value(sca) == Approx(0.3));
  // Integer labels [N], streamed over two batches.
  sca.reset_state();
  sca.update_state(Tensor::from_vector<int64_t>({1, 1}, {2}), probs);
  sca.update_state(Tensor::from_vector<int64_t>({0}, {1}), f32({0.9f, 0.1f, 0.f}, {1, 3}));
  CHECK(value(sca) == 1.0);
  CHECK(sca.name() == "sparse_categorical_accuracy");
  CHECK_THROWS_AS(sca.update_state(Tensor::from_vector<int64_t>({1, 1, 1}, {3}), probs), Error);
  metrics::Metric empty;
  CHECK_THROWS_AS(empty.result(), Error);

  // Keras compares in the labels' dtype: float predictions are cast to integer labels.
  metrics::Accuracy cast_acc;
  cast_acc.update_state(Tensor::from_vector<int64_t>({0, 1}, {2}), f32({0.9f, 1.0f}, {2}));
  CHECK(value(cast_acc) == 1.0);
}

TEST_CASE("Metrics are sync-on-read under MirroredStrategy", "[train][metrics][distribute]") {
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  metrics::Mean loss;
  metrics::SparseCategoricalAccuracy acc;
  {
    auto scope = strategy.scope();
    loss = metrics::Mean("loss");
    acc = metrics::SparseCategoricalAccuracy();
  }
  // Replica 0 sees {1, 2}, replica 1 sees {3, 4, 5}: the aggregate is their joint mean.
  std::vector<Tensor> values{f32({1, 2}, {2}), f32({3, 4, 5}, {3})};
  std::vector<Tensor> labels{Tensor::from_vector<int64_t>({0, 1}, {2}),
                             Tensor::from_vector<int64_t>({1}, {1})};
  std::vector<Tensor> preds{f32({1, 0, 1, 0}, {2, 2}), f32({0, 1}, {1, 2})};
  strategy.run([&] {
    const size_t r = size_t(distribute::get_replica_context()->replica_id_in_sync_group());
    loss.update_state(values[r]);
    acc.update_state(labels[r], preds[r]);
  });
  CHECK(value(loss) == 3.0);
  CHECK(value(acc) == Approx(2.0 / 3.0));
  // Each replica kept its own partial sums.
  auto totals = strategy.experimental_local_results(loss.variables()[0].second);
  REQUIRE(totals.size() == 2);
  CHECK(totals[0].item<double>() == 3.0);
  CHECK(totals[1].item<double>() == 12.0);
  loss.reset_state();
  CHECK(value(loss) == 0.0);
  for (const Tensor& t : strategy.experimental_local_results(loss.variables()[0].second))
    CHECK(t.item<double>() == 0.0);

  // Outside run the replicas' sums cannot take an update (reading them makes a new sum):
  // refused as TensorFlow refuses assign_add on a sync-on-read Sum variable there, not lost.
  CHECK_THROWS_WITH(loss.update_state(f32({1, 2, 3}, {3})), Catch::Contains("cross-replica"));
  {
    auto scope = strategy.scope();
    CHECK_THROWS_WITH(loss.update_state(f32({1, 2, 3}, {3})), Catch::Contains("cross-replica"));
  }
  CHECK(value(loss) == 0.0);
}
