// A variable or metric created outside any strategy's scope and updated by every replica
// inside Strategy::run: each update is atomic per variable (as TensorFlow's resource
// variables), so no update is lost, however the replica threads interleave.
#include <strata/autograd/autograd.h>
#include <strata/distribute/strategy.h>
#include <strata/train/metrics.h>
#include "tests/test_util.h"

namespace strata_replica_updates_test {

constexpr int kReplicas = 4;
constexpr int kIterations = 300;

}  // namespace strata_replica_updates_test

TEST_CASE("replica updates: a local variable counts every replica's assign_add exactly") {
  using namespace strata;
  using namespace strata_replica_updates_test;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(kReplicas));
  Variable counter(zeros({}, kInt64), {.name = "counter", .trainable = false});  // outside scope()
  Variable down(Tensor::scalar(double(kReplicas * kIterations), kFloat64), {.name = "down", .trainable = false});
  for (int i = 0; i < kIterations; ++i) {
    strategy.run([&] {
      counter.assign_add(Tensor::scalar(int64_t(1), kInt64));
      down.assign_sub(Tensor::scalar(1.0, kFloat64));
    });
  }
  REQUIRE(counter.value().item<int64_t>() == int64_t(kReplicas) * kIterations);
  REQUIRE(down.value().item<double>() == 0.0);
}

TEST_CASE("replica updates: metrics created outside scope() count every replica's examples") {
  using namespace strata;
  using namespace strata_replica_updates_test;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(kReplicas));
  metrics::Sum total("total");  // outside the scope: plain variables
  metrics::Mean mean("mean");
  metrics::SparseCategoricalAccuracy accuracy("accuracy");
  // Replica r sees labels [r, r] and predictions whose argmax is 0: replica 0 is always
  // right, the others always wrong.
  distribute::PerReplica<Tensor> labels = strategy.experimental_distribute_values_from_function(
      [](const distribute::ValueContext& c) { return full({2}, double(c.replica_id_in_sync_group), kInt64); });
  const Tensor logits = Tensor::from_vector(std::vector<float>{5, 0, 0, 0, 5, 0, 0, 0}, {2, kReplicas});
  for (int i = 0; i < kIterations; ++i) {
    strategy.run(
        [&](const Tensor& y) {
          total.update_state(ones({3}, kFloat64));
          mean.update_state(cast(y, kFloat64));
          accuracy.update_state(y, logits);
        },
        labels);
  }
  REQUIRE(total.result().item<double>() == 3.0 * kReplicas * kIterations);
  // The mean of the replica ids 0..3, weighted equally: exactly 1.5.
  REQUIRE(mean.result().item<double>() == 1.5);
  REQUIRE(accuracy.result().item<double>() == 1.0 / kReplicas);
}
