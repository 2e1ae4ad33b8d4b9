#include <chrono>

#include <strata/autograd/autograd.h>
#include <strata/distribute/distributed_variable.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include "tests/distribute/strategy_cases.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;

TEST_CASE("mirrored: run gives one result per replica and all_reduce sums") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  auto per_replica = strategy.run([](int base) {
    ReplicaContext* ctx = get_replica_context();
    REPLICA_REQUIRE(ctx != nullptr);  // Catch2's REQUIRE is not thread-safe
    Tensor v = full({2}, double(ctx->replica_id_in_sync_group() + base));
    return ctx->all_reduce(ReduceOp::Sum, v);
  }, 1);
  REQUIRE(per_replica.size() == 3);
  for (const Tensor& t : per_replica) REQUIRE_ALLCLOSE(t, full({2}, 6.0));
  REQUIRE_ALLCLOSE(strategy.reduce(ReduceOp::Mean, per_replica), full({2}, 6.0));
}

TEST_CASE("mirrored: each replica runs with its device current, so creation ops land there") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  auto devices = strategy.run([]() {
    // zeros() defaults to the current device, as tf.zeros inside strategy.run does.
    const Tensor z = zeros({2});
    REPLICA_REQUIRE(z.device() == current_device());
    return Tensor::scalar(double(current_device().index), kInt64, cpu(0));
  });
  REQUIRE(devices.size() == 3);
  for (size_t r = 0; r < devices.size(); ++r) CHECK(devices[r].item<int64_t>() == int64_t(r));
  CHECK(current_device() == cpu(0));  // the caller's context is untouched
  OneDeviceStrategy one(cpu(2));
  auto single = one.run([]() { return Tensor::scalar(double(current_device().index), kInt64, cpu(0)); });
  CHECK(single[0].item<int64_t>() == 2);
}

TEST_CASE("mirrored: a failing replica releases the others blocked in all_reduce") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(strategy.run([]() {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 1) fail("boom");
    ctx->all_reduce(ReduceOp::Sum, ones({4}));
  }), Catch::Contains("replica 1: boom"));
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  // The strategy is usable again afterwards.
  auto r = strategy.run([]() { return get_replica_context()->all_reduce(ReduceOp::Sum, ones({1})); });
  REQUIRE(r[2].item<float>() == 3.0f);
}

TEST_CASE("mirrored: variables are mirrored and gradients flow per replica") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  Variable w;
  {
    auto scope = strategy.scope();
    w = Variable(tensor({1, 2}), {.name = "w"});
  }
  REQUIRE(w.impl().kind() == "MirroredVariable");
  auto grads = strategy.run([&]() {
    autograd::GradientTape tape;
    Tensor loss = sum(w.read() * w.read());
    return tape.gradient(loss, std::vector<Variable>{w})[0];
  });
  REQUIRE_ALLCLOSE(grads[0], tensor({2, 4}));
  REQUIRE_ALLCLOSE(grads[1], tensor({2, 4}));
}
