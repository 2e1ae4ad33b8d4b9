// Strategy methods common to every strategy: the assertions of TensorFlow's
// strategy_common_test.py that apply, plus contexts, scopes and make_strategy.
#include <atomic>
#include <set>
#include <thread>

#include <strata/autograd/autograd.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/make_strategy.h>
#include <strata/distribute/strategy.h>
#include "tests/distribute/strategy_cases.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;
using strata::distribute::testing::all_strategy_cases;

TEST_CASE("reduce: SUM of one per replica is num_replicas_in_sync, in and out of scope (ReduceTest.testBasic)") {
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const int n = strategy->num_replicas_in_sync();
    auto per_replica = strategy->experimental_distribute_values_from_function(
        [](const ValueContext&) { return Tensor::scalar(1.0); });
    {
      auto scope = strategy->scope();
      REQUIRE(strategy->reduce(ReduceOp::Sum, per_replica).item<float>() == float(n));
    }
    REQUIRE(strategy->reduce(ReduceOp::Sum, per_replica).item<float>() == float(n));
  }
}

TEST_CASE("reduce with an axis (ReduceTest.testAxis) and all_reduce in replica context") {
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const int n = strategy->num_replicas_in_sync();
    auto x = strategy->run([] { return tensor({1, 2}); });
    REQUIRE(strategy->reduce(ReduceOp::Mean, x, 0).item<float>() == 1.5f);
    REQUIRE(strategy->reduce(ReduceOp::Sum, x, 0).item<float>() == float(3 * n));
    // ReplicaCtxAllReduceTest.testBasic
    auto reduced = strategy->run([] { return get_replica_context()->all_reduce(ReduceOp::Sum, Tensor::scalar(1.0)); });
    for (const Tensor& t : strategy->experimental_local_results(reduced)) REQUIRE(t.item<float>() == float(n));
  }
}

TEST_CASE("reduce MEAN along an axis divides by the true element count of an uneven split") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  // A short last batch of 6 split [4, 2]: the mean over all 6 rows, not the mean of means.
  PerReplica<Tensor> losses({tensor({1, 2, 3, 4}), tensor({5, 9})});
  REQUIRE(strategy.reduce(ReduceOp::Mean, losses, 0).item<float>() == Approx(24.0 / 6));
  REQUIRE(strategy.reduce(ReduceOp::Sum, losses, 0).item<float>() == 24.0f);
  REQUIRE(strategy.reduce(ReduceOp::Max, losses, 0).item<float>() == 9.0f);
  REQUIRE(strategy.reduce(ReduceOp::Min, losses, -1).item<float>() == 1.0f);
  // A replica with no examples contributes nothing (and no division by its zero count).
  PerReplica<Tensor> with_empty({tensor({2, 4, 6}), zeros({0})});
  REQUIRE(strategy.reduce(ReduceOp::Mean, with_empty, 0).item<float>() == 4.0f);
  REQUIRE(strategy.reduce(ReduceOp::Max, with_empty, 0).item<float>() == 6.0f);
  PerReplica<Tensor> all_empty({zeros({0}), zeros({0})});
  REQUIRE_THROWS_WITH(strategy.reduce(ReduceOp::Max, all_empty, 0), Catch::Contains("empty along axis"));
  // Per-example rows reduce along axis 0 to a vector.
  PerReplica<Tensor> rows({tensor({{1, 2}, {3, 4}}), tensor({{5, 6}})});
  REQUIRE_ALLCLOSE(strategy.reduce(ReduceOp::Mean, rows, 0), tensor({3, 4}));
  // Integers average to float64.
  PerReplica<Tensor> ints({Tensor::from_vector<int32_t>({1, 2}), Tensor::from_vector<int32_t>({4})});
  Tensor m = strategy.reduce(ReduceOp::Mean, ints, 0);
  REQUIRE(m.dtype() == kFloat64);
  REQUIRE(m.item<double>() == Approx(7.0 / 3));
  Tensor mi = strategy.reduce(ReduceOp::Mean, PerReplica<Tensor>({Tensor::scalar(1, kInt64), Tensor::scalar(2, kInt64)}));
  REQUIRE(mi.item<double>() == 1.5);
  REQUIRE_THROWS_WITH(strategy.reduce(ReduceOp::Sum, losses, 1), Catch::Contains("Strategy::reduce"));
  REQUIRE_THROWS_WITH(strategy.reduce(ReduceOp::Sum, PerReplica<Tensor>({tensor({1})})),
                      Catch::Contains("1 components") && Catch::Contains("2 local replicas"));
}

TEST_CASE("reduce of a non-distributed value follows TensorFlow (MEAN returns it, SUM needs one replica)") {
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const int n = strategy->num_replicas_in_sync();
    Tensor v = tensor({1, 2});
    REQUIRE_ALLCLOSE(strategy->reduce(ReduceOp::Mean, v), v);
    if (n == 1) {
      REQUIRE_ALLCLOSE(strategy->reduce(ReduceOp::Sum, v), v);
    } else {
      REQUIRE_THROWS_WITH(strategy->reduce(ReduceOp::Sum, v), Catch::Contains("non-distributed value"));
    }
    // With an axis every replica reduces its copy (strategy.run on the value), as TF does.
    REQUIRE(strategy->reduce(ReduceOp::Sum, v, 0).item<float>() == float(3 * n));
    REQUIRE(strategy->reduce(ReduceOp::Mean, v, 0).item<float>() == 1.5f);
  }
}

TEST_CASE("gather concatenates replicas' values along an axis, local results") {
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const int n = strategy->num_local_replicas();
    // Replica r contributes r + 1 rows of value r (uneven extents along the axis).
    auto values = strategy->run([] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      return full({r + 1, 2}, double(r));
    });
    Tensor g = strategy->gather(values, 0);
    REQUIRE(g.dim(0) == n * (n + 1) / 2);
    std::vector<float> want;
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < (r + 1) * 2; ++k) want.push_back(float(r));
    }
    REQUIRE(g.to_vector<float>() == want);
    auto local = strategy->experimental_local_results(values);
    REQUIRE(int(local.size()) == n);
    for (int r = 0; r < n; ++r) {
      REQUIRE(local[size_t(r)].dim(0) == r + 1);
    }
    // A plain tensor gathers to itself; in replica context gather is an error.
    REQUIRE_ALLCLOSE(strategy->gather(tensor({7}), 0), tensor({7}));
    REQUIRE_THROWS_WITH(strategy->run([&] { strategy->gather(tensor({1}), 0); }),
                        Catch::Contains("use get_replica_context()->all_gather()"));
    // all_gather in replica context gives every replica the same concatenation.
    auto gathered = strategy->run([] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      return get_replica_context()->all_gather(full({r + 1, 2}, double(r)), 0);
    });
    for (const Tensor& t : gathered) REQUIRE(t.to_vector<float>() == want);
  }
}

TEST_CASE("run passes each replica its component of PerReplica arguments and the rest unchanged") {
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const int n = strategy->num_local_replicas();
    auto per_replica = strategy->experimental_distribute_values_from_function([](const ValueContext& ctx) {
      REQUIRE(ctx.num_replicas_in_sync >= 1);
      return Tensor::scalar(10.0 * ctx.replica_id_in_sync_group);
    });
    for (int r = 0; r < n; ++r) REQUIRE(per_replica[size_t(r)].device() == strategy->devices()[size_t(r)]);
    auto out = strategy->run([](const Tensor& mine, double shared, int k) { return mine + shared + double(k); },
                             per_replica, 0.5, 2);
    for (int r = 0; r < n; ++r) REQUIRE(out[size_t(r)].item<float>() == float(10 * r) + 2.5f);
    std::atomic<int> calls{0};
    strategy->run([&] { ++calls; });  // a void step function
    REQUIRE(calls == n);
    // Replica ids, devices and the replica count as the step function sees them.
    auto ids = strategy->run([&] {
      ReplicaContext* ctx = get_replica_context();
      REPLICA_REQUIRE(ctx != nullptr);
      REPLICA_REQUIRE(&ctx->strategy() == strategy.get());
      REPLICA_REQUIRE(ctx->num_replicas_in_sync() == n);
      REPLICA_REQUIRE(ctx->device() == strategy->devices()[size_t(ctx->replica_id_in_sync_group())]);
      return ctx->replica_id_in_sync_group();
    });
    for (int r = 0; r < n; ++r) REQUIRE(ids[size_t(r)] == r);
  }
}

TEST_CASE("contexts: default, cross-replica (scope), replica (run) and merge_call, as in TensorFlow") {
  // No scope: the default strategy and its replica context.
  REQUIRE(!has_strategy());
  REQUIRE(!in_cross_replica_context());
  REQUIRE(&get_strategy() == &DefaultStrategy::instance());
  REQUIRE(get_replica_context() != nullptr);
  REQUIRE(get_replica_context()->num_replicas_in_sync() == 1);
  REQUIRE(&get_replica_context()->strategy() == &DefaultStrategy::instance());
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const bool is_default = strategy->is_default();
    {
      auto scope = strategy->scope();
      REQUIRE(&get_strategy() == strategy.get());
      REQUIRE(has_strategy() == !is_default);
      REQUIRE(in_cross_replica_context() == !is_default);
      REQUIRE((get_replica_context() == nullptr) == !is_default);
      // Entering the same scope again is allowed.
      auto again = strategy->scope();
      REQUIRE(&get_strategy() == strategy.get());
    }
    REQUIRE(!has_strategy());
    std::atomic<int> merged{0};
    strategy->run([&] {
      REPLICA_REQUIRE(&get_strategy() == strategy.get());
      REPLICA_REQUIRE(!in_cross_replica_context());
      ReplicaContext* ctx = get_replica_context();
      REPLICA_REQUIRE(ctx != nullptr);
      Tensor r = ctx->merge_call(
          [&](const std::vector<Tensor>& values) {
            ++merged;
            // merge_call's function runs once, in cross-replica context, with every value.
            if (!is_default) {
              REPLICA_REQUIRE(get_replica_context() == nullptr);
              REPLICA_REQUIRE(in_cross_replica_context());
            }
            REPLICA_REQUIRE(int(values.size()) == strategy->num_local_replicas());
            Tensor total = values[0].clone();
            for (size_t i = 1; i < values.size(); ++i) total = total + values[i];
            return total;
          },
          Tensor::scalar(double(ctx->replica_id_in_sync_group() + 1)));
      const int n = ctx->num_replicas_in_sync();
      REPLICA_REQUIRE(r.item<float>() == float(n * (n + 1) / 2));
      REPLICA_REQUIRE(get_replica_context() == ctx);  // back in replica context
    });
    REQUIRE(merged == 1);
  }
  REQUIRE(!has_strategy());
}

TEST_CASE("scopes: mixing different strategies raises, like TensorFlow") {
  MirroredStrategy a(MirroredStrategy::cpu_devices(2));
  MirroredStrategy b(MirroredStrategy::cpu_devices(2));
  CentralStorageStrategy c(MirroredStrategy::cpu_devices(2));
  {
    auto scope = a.scope();
    REQUIRE_THROWS_WITH(b.scope(), Catch::Contains("mixing different strategies"));
    REQUIRE_THROWS_WITH(c.scope(), Catch::Contains("'mirrored' strategy"));
    REQUIRE_THROWS_WITH(DefaultStrategy::instance().scope(), Catch::Contains("must not be nested"));
    // Using another strategy's methods inside this scope raises too.
    REQUIRE_THROWS_WITH(b.run([] {}), Catch::Contains("mixing different strategies"));
    REQUIRE_THROWS_WITH(c.reduce(ReduceOp::Sum, PerReplica<Tensor>({ones({1}), ones({1})})),
                        Catch::Contains("mixing different strategies"));
    REQUIRE(&get_strategy() == &a);  // the failed scopes left nothing behind
  }
  {
    // A non-default strategy may be entered inside the default strategy's scope.
    auto outer = DefaultStrategy::instance().scope();
    auto inner = a.scope();
    REQUIRE(&get_strategy() == &a);
  }
  // Inside run of one strategy, another strategy's run is an error (never a deadlock).
  REQUIRE_THROWS_WITH(a.run([&] { b.run([] {}); }), Catch::Contains("mixing different strategies"));
  REQUIRE(!has_strategy());
}

TEST_CASE("cross-replica methods raise in replica context, run cannot be nested") {
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    auto per_replica = strategy->experimental_distribute_values_from_function(
        [](const ValueContext&) { return ones({2}); });
    REQUIRE_THROWS_WITH(strategy->run([&] { strategy->run([] {}); }), Catch::Contains("replica context"));
    REQUIRE_THROWS_WITH(strategy->run([&] { strategy->reduce(ReduceOp::Sum, per_replica); }),
                        Catch::Contains("Strategy::reduce: called in replica context"));
    REQUIRE_THROWS_WITH(strategy->run([&] { strategy->extended().reduce_to(ReduceOp::Sum, per_replica, cpu(0)); }),
                        Catch::Contains("replica context"));
    if (strategy->num_local_replicas() > 1) {
      // merge_call's function is cross-replica context on a replica thread: run is refused.
      REQUIRE_THROWS_WITH(strategy->run([&] {
        get_replica_context()->merge_call(
            [&](const std::vector<Tensor>& v) {
              strategy->run([] {});
              return v[0];
            },
            ones({1}));
      }),
                          Catch::Contains("cannot be nested"));
    }
    // The strategy still works after every refused call.
    auto r = strategy->run([] { return get_replica_context()->all_reduce(ReduceOp::Sum, ones({1})); });
    REQUIRE(r[0].item<float>() == float(strategy->num_replicas_in_sync()));
  }
}

TEST_CASE("StrategyExtended: reduce_to, batch_reduce_to, update, read_var, devices") {
  for (const auto& c : all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    const int n = strategy->num_replicas_in_sync();
    auto& ext = strategy->extended();
    auto value = strategy->run([] { return Tensor::scalar(1.0); });
    REQUIRE(ext.reduce_to(ReduceOp::Sum, value, cpu(0)).item<float>() == float(n));
    Tensor on1 = ext.reduce_to(ReduceOp::Mean, value, cpu(1));
    REQUIRE(on1.item<float>() == 1.0f);
    REQUIRE(on1.device() == cpu(1));
    auto batch = ext.batch_reduce_to(ReduceOp::Sum, {value, value}, cpu(0));
    REQUIRE(batch.size() == 2);
    REQUIRE(batch[1].item<float>() == float(n));
    // A non-distributed value (TF: reduce_non_distributed_value).
    REQUIRE(ext.reduce_to(ReduceOp::Mean, Tensor::scalar(3.0), cpu(0)).item<float>() == 3.0f);
    if (n > 1) REQUIRE_THROWS_WITH(ext.reduce_to(ReduceOp::Sum, Tensor::scalar(3.0), cpu(0)), Catch::Contains("SUM"));
    REQUIRE(ext.worker_devices() == strategy->devices());
    Variable v;
    {
      auto scope = strategy->scope();
      v = Variable(zeros({2}), {.name = "v"});
    }
    const auto params = ext.parameter_devices();
    REQUIRE(int(strategy->experimental_local_results(v).size()) == (strategy->name() == "mirrored" ? n : 1));
    if (strategy->name() == "central_storage") {
      REQUIRE(params == std::vector<Device>{cpu(0)});
    } else {
      REQUIRE(params == strategy->devices());
    }
    // reduce_to a variable: one result per component, on the component's device.
    Mirrored<Tensor> onto = ext.reduce_to(ReduceOp::Sum, value, v);
    REQUIRE(onto.size() == strategy->experimental_local_results(v).size());
    for (size_t i = 0; i < onto.size(); ++i) {
      REQUIRE(onto[i].item<float>() == float(n));
      REQUIRE(onto[i].device() == strategy->experimental_local_results(v)[i].device());
    }
    // update: fn on every component, in cross-replica context...
    ext.update(v, [](const Tensor& component, int index) { component.copy_(full({2}, index + 1.0)); });
    auto comps = strategy->experimental_local_results(v);
    for (size_t i = 0; i < comps.size(); ++i) REQUIRE_ALLCLOSE(comps[i], full({2}, double(i) + 1));
    // ... and once per component when every replica calls it in replica context.
    std::atomic<int> calls{0};
    strategy->run([&] {
      ext.update(v, [&](const Tensor& component, int) {
        ++calls;
        component.copy_(component + 1.0);
      });
    });
    REQUIRE(calls == int(comps.size()));
    for (size_t i = 0; i < comps.size(); ++i) REQUIRE_ALLCLOSE(comps[i], full({2}, double(i) + 2));
    REQUIRE_ALLCLOSE(ext.read_var(v), full({2}, 2.0));
  }
}

TEST_CASE("experimental_local_results of a variable and of a plain tensor") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  Variable v;
  {
    auto scope = strategy.scope();
    v = Variable(tensor({1, 2}), {.name = "w"});
  }
  auto comps = strategy.experimental_local_results(v);
  REQUIRE(comps.size() == 3);
  for (int r = 0; r < 3; ++r) {
    REQUIRE(comps[size_t(r)].device() == cpu(r));
    REQUIRE_ALLCLOSE(comps[size_t(r)], tensor({1, 2}));
  }
  REQUIRE(!comps[0].shares_storage(comps[1]));  // each replica owns its copy
  REQUIRE(strategy.experimental_local_results(tensor({3})).size() == 1);
}

TEST_CASE("make_strategy builds the named strategies and refuses what does not apply") {
  auto d = make_strategy("default");
  REQUIRE(d->name() == "default");
  REQUIRE(d->is_default());
  REQUIRE(d->num_replicas_in_sync() == 1);
  {
    auto scope = d->scope();
    REQUIRE(!has_strategy());  // a default strategy instance is "no strategy"
    REQUIRE(&get_strategy() == d.get());
  }
  auto one = make_strategy("one_device", {.devices = {cpu(1)}});
  REQUIRE(one->name() == "one_device");
  REQUIRE(one->devices() == std::vector<Device>{cpu(1)});
  auto m = make_strategy("mirrored", {.replicas = 3, .cross_device_ops = CrossDeviceOps::HierarchicalCopyAllReduce});
  REQUIRE(m->name() == "mirrored");
  REQUIRE(m->num_replicas_in_sync() == 3);
  REQUIRE(m->cross_device_ops() == CrossDeviceOps::HierarchicalCopyAllReduce);
  auto m1 = make_strategy("mirrored");
  REQUIRE(m1->num_replicas_in_sync() == 1);
  REQUIRE(m1->cross_device_ops() == CrossDeviceOps::ReductionToOneDevice);  // TF's default on CPUs
  auto md = make_strategy("mirrored", {.devices = {cpu(2), cpu(5)}, .communication = {.timeout_seconds = 7}});
  REQUIRE(md->devices() == std::vector<Device>{cpu(2), cpu(5)});
  REQUIRE(md->communication_options().timeout_seconds == 7);
  auto cs = make_strategy("central_storage", {.replicas = 2, .parameter_device = cpu(3)});
  REQUIRE(cs->name() == "central_storage");
  REQUIRE(cs->parameter_devices() == std::vector<Device>{cpu(3)});
  REQUIRE(cs->num_replicas_in_sync() == 2);

  auto mw = make_strategy("multi_worker", {.replicas = 2});  // no cluster in the environment: one worker
  REQUIRE(mw->name() == "multi_worker");
  REQUIRE(mw->num_workers() == 1);
  REQUIRE(mw->num_replicas_in_sync() == 2);
  REQUIRE_THROWS_WITH(make_strategy("multi_worker", {.cross_device_ops = CrossDeviceOps::ReductionToOneDevice}),
                      Catch::Contains("cross_device_ops does not apply"));
  REQUIRE_THROWS_WITH(make_strategy("parameter_server"), Catch::Contains("ClusterCoordinator"));
  REQUIRE_THROWS_WITH(make_strategy("tpu"), Catch::Contains("unknown strategy 'tpu'") && Catch::Contains("mirrored"));
  REQUIRE_THROWS_WITH(make_strategy("one_device", {.replicas = 2}), Catch::Contains("runs one replica"));
  REQUIRE_THROWS_WITH(make_strategy("default", {.devices = {cpu(1)}}), Catch::Contains("one_device"));
  REQUIRE_THROWS_WITH(make_strategy("mirrored", {.replicas = 3, .devices = {cpu(0), cpu(1)}}),
                      Catch::Contains("3 replicas requested but 2 devices"));
  REQUIRE_THROWS_WITH(make_strategy("mirrored", {.devices = {cpu(1), cpu(1)}}), Catch::Contains("listed twice"));
  REQUIRE_THROWS_WITH(make_strategy("central_storage", {.cross_device_ops = CrossDeviceOps::ReductionToOneDevice}),
                      Catch::Contains("cross_device_ops does not apply"));
  REQUIRE_THROWS_WITH(make_strategy("mirrored", {.parameter_device = cpu(0)}), Catch::Contains("parameter_device"));
  REQUIRE_THROWS_WITH(make_strategy("mirrored", {.cross_device_ops = CrossDeviceOps::NcclAllReduce}),
                      Catch::Contains("NcclAllReduce is not available"));
  REQUIRE_THROWS_WITH(make_strategy("mirrored", {.replicas = -1}), Catch::Contains(">= 0"));
  REQUIRE_THROWS_WITH(make_strategy("mirrored", {.replicas = 2, .communication = {.timeout_seconds = 0}}),
                      Catch::Contains("timeout_seconds must be positive"));
  REQUIRE(strategy_names().size() == 6);
  REQUIRE(strategy_available("mirrored"));
  REQUIRE(strategy_available("multi_worker"));
  REQUIRE_FALSE(strategy_available("parameter_server"));
  REQUIRE(cross_device_ops_from_name("hierarchical_copy") == CrossDeviceOps::HierarchicalCopyAllReduce);
  REQUIRE(cross_device_ops_from_name("ReductionToOneDevice") == CrossDeviceOps::ReductionToOneDevice);
  REQUIRE_THROWS_WITH(cross_device_ops_from_name("ring"), Catch::Contains("unknown name 'ring'"));
}

TEST_CASE("run checks that PerReplica arguments have one value per replica") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  REQUIRE_THROWS_WITH(strategy.run([](const Tensor& t) { return t; }, PerReplica<Tensor>({ones({1})})),
                      Catch::Contains("a PerReplica argument has 1 values") && Catch::Contains("2 local replicas"));
  auto doubled = strategy.run([](const Tensor& t) { return t * 2.0; }, Mirrored<Tensor>({ones({1}), ones({1})}));
  REQUIRE(doubled[1].item<float>() == 2.0f);
}
