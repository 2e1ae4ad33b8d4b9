// BatchNormalization(synchronized): under a strategy with several replicas, each
// replica's part of the global batch is normalised with the global batch's statistics, so
// the replicas together compute exactly what one BatchNormalization computes on the whole
// batch: the outputs (each replica's rows), the input gradients (each replica's rows),
// the summed gamma and beta gradients and the moving statistics — checked in float64
// against the Default strategy, with uneven and empty replica parts. Without
// synchronized each replica keeps its own statistics (the outputs differ).
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/replica_split_stage.h>
#include <strata/distribute/strategy.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;

namespace sync_bn_test {

constexpr int64_t kFeatures = 3;

Tensor random_batch(int64_t rows, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(2.0, 3.0);
  std::vector<double> v(size_t(rows * kFeatures));
  for (auto& e : v) e = normal(gen);
  return Tensor::from_vector(v, {rows, kFeatures}, kFloat64, Device());
}

// What one step computes: the output rows, the input's gradient rows, the gradients of
// gamma and beta (summed over replicas) and the moving statistics afterwards.
struct StepResult {
  Tensor y, dx, dgamma, dbeta, moving_mean, moving_variance;
};

// One training forward and backward of BatchNormalization on `x` (the global batch) under
// `strategy`, loss = sum(y * target) over the global batch, the layer in `dtype`.
StepResult step(Strategy& strategy, const Tensor& x, const Tensor& target, bool synchronized,
                DType dtype = kFloat64) {
  nn::BatchNormalization bn;
  {
    auto scope = strategy.scope();
    nn::BatchNormalizationOptions o;
    o.synchronized = synchronized;
    o.momentum = 0.5;
    o.dtype = mixed_precision::Policy(dtype);
    bn = nn::BatchNormalization(kFeatures, o);
  }
  const int n = strategy.num_replicas_in_sync();
  const std::vector<int64_t> sizes = split_sizes(x.dim(0), x.dim(0), n);
  auto part = [&](const Tensor& global) {
    return strategy.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
      int64_t start = 0;
      for (int r = 0; r < ctx.replica_id_in_sync_group; ++r) start += sizes[size_t(r)];
      return global.slice(0, start, start + sizes[size_t(ctx.replica_id_in_sync_group)]);
    });
  };
  std::vector<Variable> params{bn->gamma(), bn->beta()};
  auto per_replica = strategy.run(
      [&](const Tensor& xr, const Tensor& tr) {
        autograd::GradientTape tape(/*persistent=*/true);
        tape.watch(xr);
        const Tensor y = bn(xr);
        const Tensor loss = sum(y * tr);
        const Tensor g = tape.gradient(loss, xr, autograd::UnconnectedGradients::Zero);
        const std::vector<Tensor> gp = tape.gradient(loss, params, {}, autograd::UnconnectedGradients::Zero);
        return std::vector<Tensor>{y, g, gp[0], gp[1]};
      },
      part(x), part(target));
  StepResult out;
  std::vector<Tensor> ys, dxs;
  for (const auto& r : per_replica) {
    ys.push_back(r[0].to(Device()));
    dxs.push_back(r[1].to(Device()));
    out.dgamma = out.dgamma.defined() ? out.dgamma + r[2].to(Device()) : r[2].to(Device());
    out.dbeta = out.dbeta.defined() ? out.dbeta + r[3].to(Device()) : r[3].to(Device());
  }
  out.y = concat(ys, 0);
  out.dx = concat(dxs, 0);
  out.moving_mean = bn->moving_mean().value().to(Device());
  out.moving_variance = bn->moving_variance().value().to(Device());
  return out;
}

TEST_CASE("BatchNormalization(synchronized): the replicas compute what one layer computes on the global batch",
          "[train][distribute]") {
  struct Case {
    int replicas;
    int64_t rows;
  };
  // Even parts, uneven parts (4 + 3), and a replica with no rows (1 + 1 + 0).
  for (const Case c : {Case{2, 8}, Case{2, 7}, Case{3, 2}}) {
    INFO(c.replicas << " replicas, global batch " << c.rows);
    const Tensor x = random_batch(c.rows, 5), target = random_batch(c.rows, 6);
    const StepResult whole = step(DefaultStrategy::instance(), x, target, true);
    MirroredStrategy mirrored(MirroredStrategy::cpu_devices(c.replicas));
    const StepResult synced = step(mirrored, x, target, true);
    REQUIRE_ALLCLOSE(synced.y, whole.y, 1e-9, 1e-9);
    REQUIRE_ALLCLOSE(synced.dx, whole.dx, 1e-9, 1e-9);
    REQUIRE_ALLCLOSE(synced.dgamma, whole.dgamma, 1e-9, 1e-9);
    REQUIRE_ALLCLOSE(synced.dbeta, whole.dbeta, 1e-9, 1e-9);
    // One forward pass moved them once, alike on every replica.
    REQUIRE_ALLCLOSE(synced.moving_mean, whole.moving_mean, 1e-9, 1e-9);
    REQUIRE_ALLCLOSE(synced.moving_variance, whole.moving_variance, 1e-9, 1e-9);
  }
  // An empty global batch (every part empty) normalises nothing and leaves the moving
  // statistics as they were (a plain layer refuses an empty batch).
  {
    MirroredStrategy mirrored(MirroredStrategy::cpu_devices(2));
    const StepResult empty = step(mirrored, random_batch(0, 5), random_batch(0, 6), true);
    REQUIRE(empty.y.shape() == Shape{0, kFeatures});
    REQUIRE(empty.moving_mean.to_vector<double>() == std::vector<double>(kFeatures, 0.0));
    REQUIRE(empty.moving_variance.to_vector<double>() == std::vector<double>(kFeatures, 1.0));
    REQUIRE(empty.dgamma.to_vector<double>() == std::vector<double>(kFeatures, 0.0));
  }
  // Without synchronized, each replica normalises its part with its own statistics.
  const Tensor x = random_batch(8, 5), target = random_batch(8, 6);
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(2));
  const StepResult local = step(mirrored, x, target, false);
  const StepResult whole = step(DefaultStrategy::instance(), x, target, false);
  REQUIRE(max(abs(local.y - whole.y)).item<double>() > 1e-3);
}

TEST_CASE("BatchNormalization(synchronized): a feature whose mean is large against its spread keeps its variance in "
          "float32",
          "[train][distribute]") {
  // Features of mean 1e4 and standard deviation 3 in float32: E[x^2] - E[x]^2 from summed
  // squares (about 1e8, where float32 steps by 8) would leave no digit of the variance
  // (9); the replicas' means and squared deviations combined keep it. Compared with one
  // float64 layer on the same values.
  const Tensor x = (random_batch(16, 7) + 1e4).cast(kFloat32), target = random_batch(16, 8);
  const StepResult whole = step(DefaultStrategy::instance(), x.cast(kFloat64), target, true);
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(2));
  const StepResult synced = step(mirrored, x, target.cast(kFloat32), true, kFloat32);
  REQUIRE_ALLCLOSE(synced.y.cast(kFloat64), whole.y, 1e-3, 1e-3);
  REQUIRE_ALLCLOSE(synced.moving_variance.cast(kFloat64), whole.moving_variance, 1e-3, 1e-3);
  REQUIRE_ALLCLOSE(synced.dgamma.cast(kFloat64), whole.dgamma, 1e-3, 1e-3);
}

TEST_CASE("BatchNormalization(synchronized): Mirrored training ends where training on the global batch does",
          "[train][distribute]") {
  // Dense -> synchronized BatchNormalization -> ReLU -> Dense, SGD, float64, 5 steps of a
  // global batch of 12: Mirrored(2) (with the overlapped gradient reduction, whose buckets
  // are in flight while backward runs the layer's all-reduce, and without) against Default.
  auto train = [](Strategy& strategy) {
    nn::Sequential model;
    optim::Optimizer opt;
    {
      auto scope = strategy.scope();
      nn::DenseOptions dense;
      dense.dtype = mixed_precision::Policy(kFloat64);
      dense.kernel_initializer = nn::glorot_uniform(3);
      nn::BatchNormalizationOptions bn;
      bn.synchronized = true;
      bn.dtype = mixed_precision::Policy(kFloat64);
      model = nn::Sequential{nn::Dense(kFeatures, 8, dense), nn::BatchNormalization(8, bn), nn::ReLU(),
                             nn::Dense(8, 2, dense)};
      opt = optim::SGD(0.1);
    }
    const int n = strategy.num_replicas_in_sync();
    for (uint32_t s = 0; s < 5; ++s) {
      const Tensor x = random_batch(12, 10 + s), t = random_batch(12, 20 + s).slice(1, 0, 2);
      auto part = [&](const Tensor& global) {
        return strategy.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
          const int64_t rows = 12 / n;
          return global.slice(0, ctx.replica_id_in_sync_group * rows, (ctx.replica_id_in_sync_group + 1) * rows);
        });
      };
      strategy.run(
          [&](const Tensor& xr, const Tensor& tr) {
            autograd::GradientTape tape;
            const Tensor loss = sum(square(model(xr) - tr)) / 12.0;
            const auto vars = model.trainable_variables();
            opt.apply_gradients(tape.gradient(loss, vars), vars);
          },
          part(x), part(t));
    }
    std::vector<Tensor> out;
    for (const Variable& v : model.variables()) out.push_back(v.value().to(Device()));
    return out;
  };
  const std::vector<Tensor> whole = train(DefaultStrategy::instance());
  MirroredStrategy overlapped(MirroredStrategy::cpu_devices(2));
  MirroredStrategy after_backward(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default,
                                  {.overlap_gradient_reduction = false});
  for (Strategy* strategy : {static_cast<Strategy*>(&overlapped), static_cast<Strategy*>(&after_backward)}) {
    const std::vector<Tensor> mirrored = train(*strategy);
    REQUIRE(mirrored.size() == whole.size());
    for (size_t i = 0; i < whole.size(); ++i) REQUIRE_ALLCLOSE(mirrored[i], whole[i], 1e-9, 1e-9);
  }
}

}  // namespace sync_bn_test

TEST_CASE("BatchNormalization: moving statistics move once per step under every kind of variable") {
  // Momentum 0.5 from 0: Keras's assign_sub((moving - batch) * 0.5) through the variable.
  auto layer = [] { return nn::BatchNormalization(1, {.momentum = 0.5, .dtype = kFloat64}); };
  auto column = [](double v) { return Tensor::from_vector(std::vector<double>{v, v}, {2, 1}, kFloat64, Device()); };

  // CentralStorage(2): one shared copy takes the replicas' mean delta once (their batch
  // means 2 and 4: 1.5), not each replica's delta in turn, racing.
  CentralStorageStrategy central({cpu(0), cpu(1)});
  nn::BatchNormalization shared_bn = [&] {
    auto scope = central.scope();
    return layer();
  }();
  central.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    return shared_bn(column(r == 0 ? 2.0 : 4.0));
  });
  CHECK(shared_bn->moving_mean().value().item<double>() == 1.5);

  // Mirrored(2), a training call outside run(): every replica's copy moves (writing the
  // aggregated read in place lost it).
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(2));
  nn::BatchNormalization mirrored_bn = [&] {
    auto scope = mirrored.scope();
    return layer();
  }();
  mirrored_bn(column(3.0));
  for (const Tensor& c : mirrored.experimental_local_results(mirrored_bn->moving_mean()))
    CHECK(c.item<double>() == 1.5);
}
