// Distributed variables: the assertions of TensorFlow's mirrored_variable_test.py and
// distributed_variable_test.py that apply — creation, replica- and cross-replica-context
// assign/assign_add/assign_sub for every aggregation, sync-on-read reads, and checkpoint
// round trips for every synchronization x aggregation x strategy.
#include <atomic>

#include <strata/autograd/autograd.h>
#include <strata/distribute/distributed_variable.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/strategy.h>
#include "tests/distribute/strategy_cases.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;
using autograd::VariableAggregation;
using autograd::VariableSynchronization;
using strata::distribute::testing::all_strategy_cases;

namespace {
const std::vector<VariableAggregation> kAggregations = {VariableAggregation::None, VariableAggregation::Sum,
                                                        VariableAggregation::Mean,
                                                        VariableAggregation::OnlyFirstReplica};

std::vector<float> local_values(Strategy& s, const Variable& v) {
  std::vector<float> out;
  for (const Tensor& t : s.experimental_local_results(v)) out.push_back(t.item<float>());
  return out;
}

Tensor replica_id_tensor() { return Tensor::scalar(double(get_replica_context()->replica_id_in_sync_group())); }
}  // namespace

TEST_CASE("variables created inside run are created once and shared by every replica") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto scope = strategy.scope();
  // testSingleVariable / testMultipleVariables / testWithVariableAndVariableScope
  auto result = strategy.run([] {
    std::vector<Variable> vs;
    for (int i = 0; i < 3; ++i) vs.push_back(Variable(Tensor::scalar(1.0), {.name = "foo" + std::to_string(i)}));
    get_replica_context()->merge_call([](const std::vector<Tensor>& v) { return v[0]; }, Tensor::scalar(0.0));
    vs.push_back(Variable(Tensor::scalar(1.0), {.name = "var2", .trainable = false,
                                                .synchronization = VariableSynchronization::OnRead,
                                                .aggregation = VariableAggregation::Sum}));
    vs.push_back(Variable(Tensor::scalar(1.0), {.name = "var3", .synchronization = VariableSynchronization::OnWrite,
                                                .aggregation = VariableAggregation::Mean}));
    return vs;
  });
  REQUIRE(result[0].size() == 5);
  for (size_t i = 0; i < 5; ++i) REQUIRE(result[0][i] == result[1][i]);  // the same variable object
  for (int i = 0; i < 3; ++i) {
    REQUIRE(result[0][size_t(i)].name() == "foo" + std::to_string(i));
    REQUIRE(result[0][size_t(i)].impl().kind() == "MirroredVariable");
  }
  REQUIRE(result[0][3].impl().kind() == "SyncOnReadVariable");
  REQUIRE(result[0][3].aggregation() == VariableAggregation::Sum);
  REQUIRE(result[0][4].impl().kind() == "MirroredVariable");
  REQUIRE(result[0][4].aggregation() == VariableAggregation::Mean);
  for (const Variable& v : result[0]) {
    auto comps = strategy.experimental_local_results(v);
    REQUIRE(comps.size() == 2);
    REQUIRE(comps[0].device() == cpu(0));
    REQUIRE(comps[1].device() == cpu(1));
    REQUIRE(&dynamic_cast<DistributedVariableImpl&>(v.impl()).strategy() == &strategy);
  }
  // testVariableWithTensorInitialValueInFunction: replica 0's initial value is used.
  auto made = strategy.run([] { return Variable(replica_id_tensor() + 5.0, {.name = "init"}); });
  REQUIRE(local_values(strategy, made[0]) == std::vector<float>{5, 5});
}

TEST_CASE("variable creation errors: None synchronization, Mean of integers, mismatched creation") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto scope = strategy.scope();
  REQUIRE_THROWS_WITH(Variable(ones({1}), {.name = "v", .synchronization = VariableSynchronization::None}),
                      Catch::Contains("Variable 'v': synchronization None is not supported with the 'mirrored'"));
  REQUIRE_THROWS_WITH(Variable(Tensor::scalar(1, kInt32), {.name = "i", .aggregation = VariableAggregation::Mean}),
                      Catch::Contains("aggregation Mean and the non-floating dtype int32"));
  // testNonMatchingVariableCreation: replicas creating different variables fail.
  REQUIRE_THROWS_WITH(strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Variable v(Tensor::scalar(1.0), {.name = r == 0 ? "foo" : "bar"});
  }),
                      Catch::Contains("create_variable(foo") && Catch::Contains("create_variable(bar"));
  REQUIRE_THROWS_WITH(strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Variable v(zeros({r + 1}), {.name = "w"});
  }),
                      Catch::Contains("float32[1]") && Catch::Contains("float32[2]"));
}

TEST_CASE("OnlyFirstReplica updates (testOnlyFirstReplicaUpdatesVariables)") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto scope = strategy.scope();
  auto created = strategy.run([] {
    return std::vector<Variable>{
        Variable(Tensor::scalar(2.0), {.name = "on_read", .trainable = false,
                                       .synchronization = VariableSynchronization::OnRead,
                                       .aggregation = VariableAggregation::OnlyFirstReplica}),
        Variable(Tensor::scalar(3.0), {.name = "on_write", .synchronization = VariableSynchronization::OnWrite,
                                       .aggregation = VariableAggregation::OnlyFirstReplica})};
  });
  Variable v0 = created[0][0], v1 = created[0][1];
  REQUIRE(local_values(strategy, v0) == std::vector<float>{2, 2});
  REQUIRE(strategy.extended().read_var(v0).item<float>() == 2.0f);
  REQUIRE(local_values(strategy, v1) == std::vector<float>{3, 3});
  REQUIRE(strategy.extended().read_var(v1).item<float>() == 3.0f);
  auto plus_one = [] { return replica_id_tensor() + 1.0; };
  strategy.run([&] {
    v0.assign_add(plus_one() * 5.0);
    v1.assign_add(plus_one() * 7.0);
  });
  // Writes are not synchronized for sync-on-read: replica 1 has a different value.
  REQUIRE(local_values(strategy, v0) == std::vector<float>{2 + 5, 2 + 2 * 5});
  REQUIRE(strategy.extended().read_var(v0).item<float>() == 7.0f);  // reads replica 0
  // Writes are synchronized for v1: only replica 0's argument is used.
  REQUIRE(local_values(strategy, v1) == std::vector<float>{3 + 7, 3 + 7});
  REQUIRE(strategy.extended().read_var(v1).item<float>() == 10.0f);
  strategy.run([&] {
    v0.assign_add(plus_one() * 11.0);
    v1.assign_add(plus_one() * 13.0);
  });
  REQUIRE(local_values(strategy, v0) == std::vector<float>{2 + 5 + 11, 2 + 2 * 5 + 2 * 11});
  REQUIRE(strategy.extended().read_var(v0).item<float>() == 18.0f);
  REQUIRE(local_values(strategy, v1) == std::vector<float>{3 + 7 + 13, 3 + 7 + 13});
}

TEST_CASE("SyncOnReadVariable reads aggregate in cross-replica context (testSyncOnReadVariable)") {
  for (int n : {1, 2, 3}) {
    INFO("replicas " << n);
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    auto scope = strategy.scope();
    auto made = strategy.run([] {
      Variable v_sum(Tensor::scalar(1.0), {.name = "v_sum", .trainable = false,
                                           .synchronization = VariableSynchronization::OnRead,
                                           .aggregation = VariableAggregation::Sum});
      Variable v_mean(Tensor::scalar(4.0), {.name = "v_mean", .trainable = false,
                                            .synchronization = VariableSynchronization::OnRead,
                                            .aggregation = VariableAggregation::Mean});
      const Tensor r = replica_id_tensor();
      v_sum.assign_add(r + 2.0);
      v_mean.assign(r * 6.0);
      // In replica context a read sees this replica's own component.
      REPLICA_REQUIRE(v_sum.value().item<float>() == r.item<float>() + 3.0f);
      return std::vector<Variable>{v_sum, v_mean};
    });
    Variable v_sum = made[0][0], v_mean = made[0][1];
    float expected_sum = 0, expected_mean = 0;
    for (int i = 0; i < n; ++i) {
      REQUIRE(strategy.experimental_local_results(v_sum)[size_t(i)].item<float>() == float(i + 3));
      REQUIRE(strategy.experimental_local_results(v_mean)[size_t(i)].item<float>() == float(i * 6));
      expected_sum += float(i + 3);
      expected_mean += float(i * 6);
    }
    expected_mean /= float(n);
    REQUIRE(strategy.extended().read_var(v_sum).item<float>() == expected_sum);
    REQUIRE(strategy.extended().read_var(v_mean).item<float>() == expected_mean);
    REQUIRE(v_sum.value().item<float>() == expected_sum);
    REQUIRE(v_mean.read().item<float>() == expected_mean);
  }
}

TEST_CASE("SyncOnReadVariable update through extended().update (testSyncOnReadVariableUpdate)") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  Variable v;
  {
    auto scope = strategy.scope();
    v = Variable(Tensor::scalar(1.0), {.trainable = false, .synchronization = VariableSynchronization::OnRead,
                                       .aggregation = VariableAggregation::Sum});
  }
  REQUIRE(strategy.experimental_local_results(v)[0].item<float>() == 1.0f);
  REQUIRE(v.value().item<float>() == 2.0f);
  strategy.extended().update(v, [](const Tensor& c, int) { c.copy_(Tensor::scalar(5.0)); });
  REQUIRE(strategy.experimental_local_results(v)[0].item<float>() == 5.0f);
  REQUIRE(v.value().item<float>() == 10.0f);
}

TEST_CASE("MirroredVariable: replica-context updates for every aggregation") {
  for (int n : {1, 2, 3}) {
    for (CrossDeviceOps ops : {CrossDeviceOps::ReductionToOneDevice, CrossDeviceOps::HierarchicalCopyAllReduce}) {
      MirroredStrategy strategy(MirroredStrategy::cpu_devices(n), ops);
      const float sum_ids = float(n * (n - 1) / 2), mean_ids = sum_ids / float(n);
      for (VariableAggregation agg : kAggregations) {
        INFO("replicas " << n << " " << cross_device_ops_name(ops) << " aggregation " << autograd::aggregation_name(agg));
        Variable v;
        {
          auto scope = strategy.scope();
          v = Variable(Tensor::scalar(1.0), {.name = "m", .aggregation = agg});
        }
        REQUIRE(v.impl().kind() == "MirroredVariable");
        auto expect = [&](float base, float sign) {
          std::vector<float> want;
          for (int r = 0; r < n; ++r) {
            float delta = 0;
            switch (agg) {
              case VariableAggregation::None: delta = float(r); break;  // own component only
              case VariableAggregation::Sum: delta = sum_ids; break;
              case VariableAggregation::Mean: delta = mean_ids; break;
              case VariableAggregation::OnlyFirstReplica: delta = 0; break;
            }
            want.push_back(base + sign * delta);
          }
          return want;
        };
        // assign(replica_id): testAssignMirroredVarReplicaContext (mean -> 0.5 with 2).
        strategy.run([&] { v.assign(replica_id_tensor()); });
        REQUIRE(local_values(strategy, v) == expect(0, 1));
        // Reset in cross-replica context (every component), then add and subtract.
        v.assign(Tensor::scalar(1.0));
        REQUIRE(local_values(strategy, v) == std::vector<float>(size_t(n), 1.0f));
        strategy.run([&] { v.assign_add(replica_id_tensor()); });
        REQUIRE(local_values(strategy, v) == expect(1, 1));
        v.assign(Tensor::scalar(1.0));
        strategy.run([&] { v.assign_sub(replica_id_tensor()); });
        REQUIRE(local_values(strategy, v) == expect(1, -1));
        // Cross-replica updates apply to every component.
        v.assign(Tensor::scalar(2.0));
        v.assign_add(Tensor::scalar(3.0));
        v.assign_sub(Tensor::scalar(1.0));
        REQUIRE(local_values(strategy, v) == std::vector<float>(size_t(n), 4.0f));
        REQUIRE(v.value().item<float>() == 4.0f);
        // Shapes are checked like a local variable's.
        REQUIRE_THROWS_WITH(v.assign(ones({2})), Catch::Contains("'m'.assign: shape [2]"));
      }
    }
  }
}

TEST_CASE("SyncOnReadVariable: replica- and cross-replica-context updates and reads for every aggregation") {
  for (int n : {1, 2, 3}) {
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    for (VariableAggregation agg : kAggregations) {
      INFO("replicas " << n << " aggregation " << autograd::aggregation_name(agg));
      Variable v;
      {
        auto scope = strategy.scope();
        v = Variable(tensor({1, 2}), {.name = "s", .trainable = false,
                                      .synchronization = VariableSynchronization::OnRead, .aggregation = agg});
      }
      REQUIRE(v.impl().kind() == "SyncOnReadVariable");
      // Replica context touches only the replica's own component.
      strategy.run([&] { v.assign_add(replica_id_tensor() * 10.0); });
      std::vector<float> comps;
      for (const Tensor& t : strategy.experimental_local_results(v)) comps.push_back(t.to_vector<float>()[0]);
      for (int r = 0; r < n; ++r) REQUIRE(comps[size_t(r)] == 1.0f + 10.0f * float(r));
      // Cross-replica reads aggregate.
      float sum = 0;
      for (float c : comps) sum += c;
      const float read = v.value().to_vector<float>()[0];
      switch (agg) {
        case VariableAggregation::Sum: REQUIRE(read == sum); break;
        case VariableAggregation::Mean: REQUIRE(read == Approx(sum / float(n))); break;
        default: REQUIRE(read == comps[0]); break;
      }
      // Cross-replica assign: Sum spreads the value so that it reads back unchanged.
      v.assign(tensor({6, 12}));
      REQUIRE_ALLCLOSE(v.value(), tensor({6, 12}));
      if (agg == VariableAggregation::Sum) {
        REQUIRE_ALLCLOSE(strategy.experimental_local_results(v)[0], tensor({6.0f / float(n), 12.0f / float(n)}));
        REQUIRE_THROWS_WITH(v.assign_add(ones({2})),
                            Catch::Contains("does not support assign_add in cross-replica context when its aggregation "
                                            "is Sum"));
        REQUIRE_THROWS_WITH(v.assign_sub(ones({2})), Catch::Contains("does not support assign_sub"));
      } else {
        for (const Tensor& t : strategy.experimental_local_results(v)) REQUIRE_ALLCLOSE(t, tensor({6, 12}));
        v.assign_add(ones({2}));
        v.assign_sub(tensor({0, 2}));
        REQUIRE_ALLCLOSE(v.value(), tensor({7, 11}));
      }
      // In replica context every aggregation accepts assign/assign_add/assign_sub
      // (testAssignSignature), each on the replica's own component.
      strategy.run([&] {
        v.assign(ones({2}));
        v.assign_add(ones({2}));
        v.assign_sub(tensor({0.5, 0.5}));
      });
      for (const Tensor& t : strategy.experimental_local_results(v)) REQUIRE_ALLCLOSE(t, full({2}, 1.5));
    }
  }
}

TEST_CASE("extended().update with per-replica values (testStrategyExtendedUpdate)") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  const PerReplica<Tensor> value({Tensor::scalar(1.0), Tensor::scalar(2.0)});
  for (auto sync : {VariableSynchronization::OnRead, VariableSynchronization::OnWrite}) {
    for (VariableAggregation agg : kAggregations) {
      if (sync == VariableSynchronization::OnWrite && agg != VariableAggregation::None) continue;  // n/a in TF
      Variable v;
      {
        auto scope = strategy.scope();
        v = Variable(Tensor::scalar(0.0), {.trainable = false, .synchronization = sync, .aggregation = agg});
      }
      auto& ext = strategy.extended();
      ext.update(v, [&](const Tensor& c, int i) { c.copy_(value[size_t(i)]); });
      REQUIRE(local_values(strategy, v) == std::vector<float>{1, 2});
      ext.update(v, [&](const Tensor& c, int i) { c.copy_(c + value[size_t(i)]); });
      REQUIRE(local_values(strategy, v) == std::vector<float>{2, 4});
      ext.update(v, [&](const Tensor& c, int i) { c.copy_(c - value[size_t(i)]); });
      REQUIRE(local_values(strategy, v) == std::vector<float>{1, 2});
      ext.update(v, [&](const Tensor& c, int) { c.copy_(c + c + c); });
      REQUIRE(local_values(strategy, v) == std::vector<float>{3, 6});
    }
  }
}

TEST_CASE("assign signatures work in both contexts for every strategy, synchronization and aggregation") {
  for (const auto& c : all_strategy_cases()) {
    auto strategy = c.make();
    for (auto sync : {VariableSynchronization::OnRead, VariableSynchronization::OnWrite}) {
      for (VariableAggregation agg : kAggregations) {
        INFO(c.label << " " << autograd::synchronization_name(sync) << " " << autograd::aggregation_name(agg));
        Variable v;
        {
          auto scope = strategy->scope();
          v = Variable(Tensor::scalar(0.0), {.trainable = false, .synchronization = sync, .aggregation = agg});
        }
        auto assign = [&] {
          const Tensor one = Tensor::scalar(1.0);
          v.assign(one);
          v.assign_add(one);
          v.assign_sub(one);
        };
        const bool sync_on_read_sum = strategy->name() == "mirrored" && sync == VariableSynchronization::OnRead &&
                                      agg == VariableAggregation::Sum;
        if (sync_on_read_sum) {
          REQUIRE_THROWS_WITH(assign(), Catch::Contains("does not support assign_add"));
        } else {
          assign();
          REQUIRE(v.value().item<float>() == 1.0f);
        }
        const bool aggregating_none = strategy->name() == "central_storage" && agg == VariableAggregation::None;
        if (aggregating_none) {
          // TensorFlow's AggregatingVariable needs an aggregation to be updated in replica context.
          REQUIRE_THROWS_WITH(strategy->run(assign), Catch::Contains("must specify an aggregation method"));
        } else {
          strategy->run(assign);
          // Replica-context updates of synchronized variables aggregate: with Sum the
          // replicas' ones add up (assign(1) then +1 then -1, each summed over replicas).
          const bool summed = agg == VariableAggregation::Sum &&
                              (strategy->name() == "central_storage" ||
                               (strategy->name() == "mirrored" && sync == VariableSynchronization::OnWrite));
          const float want = summed ? float(strategy->num_replicas_in_sync()) : 1.0f;
          for (const Tensor& t : strategy->experimental_local_results(v)) REQUIRE(t.item<float>() == want);
        }
      }
    }
  }
}

TEST_CASE("CentralStorageStrategy: one copy on the parameter device, replica updates aggregated and applied once") {
  CentralStorageStrategy strategy(MirroredStrategy::cpu_devices(3), cpu(5));
  REQUIRE(strategy.parameter_devices() == std::vector<Device>{cpu(5)});
  for (VariableAggregation agg : {VariableAggregation::Sum, VariableAggregation::Mean,
                                  VariableAggregation::OnlyFirstReplica}) {
    INFO(autograd::aggregation_name(agg));
    Variable v;
    {
      auto scope = strategy.scope();
      v = Variable(tensor({10, 20}), {.name = "c", .aggregation = agg});
    }
    REQUIRE(v.impl().kind() == "AggregatingVariable");
    REQUIRE(!v.impl().is_replicated());
    REQUIRE(v.device() == cpu(5));
    REQUIRE(strategy.experimental_local_results(v).size() == 1);
    // Every replica reads the same tensor.
    auto ids = strategy.run([&] { return v.value().id(); });
    REQUIRE(ids[0] == ids[1]);
    REQUIRE(ids[1] == ids[2]);
    strategy.run([&] { v.assign_add(full({2}, double(get_replica_context()->replica_id_in_sync_group() + 1))); });
    const float delta = agg == VariableAggregation::Sum ? 6.0f : agg == VariableAggregation::Mean ? 2.0f : 1.0f;
    REQUIRE_ALLCLOSE(v.value(), tensor({10 + delta, 20 + delta}));
    strategy.run([&] { v.assign(tensor({1, 1})); });
    REQUIRE_ALLCLOSE(v.value(), agg == VariableAggregation::Sum ? tensor({3, 3}) : tensor({1, 1}));
    v.assign_sub(tensor({1, 1}));  // cross-replica: applied directly
    REQUIRE_ALLCLOSE(v.value(), agg == VariableAggregation::Sum ? tensor({2, 2}) : tensor({0, 0}));
  }
  // One replica: a plain variable on the parameter device, as TensorFlow does.
  CentralStorageStrategy single(MirroredStrategy::cpu_devices(1), cpu(2));
  auto scope = single.scope();
  Variable w(ones({2}));
  REQUIRE(w.impl().kind() == "Variable");
  REQUIRE(w.device() == cpu(2));
}

TEST_CASE("checkpoint round trips for every synchronization x aggregation x strategy (testCheckpointing)") {
  for (const auto& c : all_strategy_cases()) {
    auto strategy = c.make();
    const int n = strategy->num_replicas_in_sync();
    for (auto sync : {VariableSynchronization::Auto, VariableSynchronization::OnWrite, VariableSynchronization::OnRead,
                      VariableSynchronization::None}) {
      for (VariableAggregation agg : kAggregations) {
        INFO(c.label << " " << autograd::synchronization_name(sync) << " " << autograd::aggregation_name(agg));
        Variable v;
        {
          auto scope = strategy->scope();
          auto make = [&] {
            v = Variable(tensor({1, 2, 3, 4}), {.trainable = sync != VariableSynchronization::OnRead,
                                                .synchronization = sync, .aggregation = agg});
          };
          if (sync == VariableSynchronization::None && strategy->name() == "mirrored") {
            REQUIRE_THROWS_WITH(make(), Catch::Contains("synchronization None is not supported"));
            continue;
          }
          make();
        }
        const bool on_read = strategy->name() == "mirrored" && sync == VariableSynchronization::OnRead;
        if (on_read && agg == VariableAggregation::None) {
          REQUIRE_THROWS_WITH(v.impl().checkpoint_value(), Catch::Contains("aggregation is None"));
          continue;
        }
        for (const auto& [first, second] : {std::pair{tensor({4, 3, 2, 1}), tensor({5, 6, 7, 8})},
                                           std::pair{tensor({8, 7, 6, 5}), tensor({0.5, 1, 1.5, 2})}}) {
          const Tensor before_save = v.value().clone();
          const Tensor saved = v.impl().checkpoint_value().clone();
          REQUIRE(saved.shape() == Shape{4});  // one value, whatever the replica count
          if (on_read && agg == VariableAggregation::Sum) {
            // Sync-on-read Sum saves the aggregate.
            REQUIRE_ALLCLOSE(saved, before_save);
          }
          v.assign(first);
          REQUIRE(!::strata::testing::allclose(v.value(), before_save));
          v.impl().restore_checkpoint_value(saved);
          REQUIRE_ALLCLOSE(v.value(), before_save);
          // Restoring a Sum divides by the replica count: each component holds a share.
          if (on_read && agg == VariableAggregation::Sum) {
            REQUIRE_ALLCLOSE(strategy->experimental_local_results(v)[0], before_save / double(n));
          } else {
            for (const Tensor& t : strategy->experimental_local_results(v)) REQUIRE_ALLCLOSE(t, before_save);
          }
          v.assign(second);
        }
      }
    }
  }
}

TEST_CASE("checkpoints restore under a different replica count, integer sums are split exactly") {
  Tensor saved;
  {
    MirroredStrategy three(MirroredStrategy::cpu_devices(3));
    auto scope = three.scope();
    Variable count(Tensor::from_vector<int64_t>({0, 0}), {.trainable = false,
                                                          .synchronization = VariableSynchronization::OnRead,
                                                          .aggregation = VariableAggregation::Sum});
    three.run([&] { count.assign_add(Tensor::from_vector<int64_t>({1, -2})); });
    saved = count.impl().checkpoint_value().clone();
    REQUIRE(saved.to_vector<int64_t>() == std::vector<int64_t>{3, -6});
  }
  MirroredStrategy two(MirroredStrategy::cpu_devices(2));
  auto scope = two.scope();
  Variable count(Tensor::from_vector<int64_t>({0, 0}), {.trainable = false,
                                                        .synchronization = VariableSynchronization::OnRead,
                                                        .aggregation = VariableAggregation::Sum});
  count.impl().restore_checkpoint_value(saved);
  REQUIRE(count.value().to_vector<int64_t>() == std::vector<int64_t>{3, -6});
  auto comps = two.experimental_local_results(count);
  REQUIRE(comps[0].to_vector<int64_t>() == std::vector<int64_t>{2, -3});
  REQUIRE(comps[1].to_vector<int64_t>() == std::vector<int64_t>{1, -3});
  count.assign(Tensor::from_vector<int64_t>({5, -5}));
  REQUIRE(two.experimental_local_results(count)[0].to_vector<int64_t>() == std::vector<int64_t>{3, -3});
  REQUIRE(count.value().to_vector<int64_t>() == std::vector<int64_t>{5, -5});
}

TEST_CASE("gradients flow per replica through mirrored variables, slots created inside run are shared") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  Variable w;
  {
    auto scope = strategy.scope();
    w = Variable(tensor({1, 2}), {.name = "w"});
  }
  auto grads = strategy.run([&] {
    autograd::GradientTape tape;
    const double scale = get_replica_context()->replica_id_in_sync_group() + 1.0;
    Tensor loss = sum(w.read() * w.read()) * scale;
    return tape.gradient(loss, std::vector<Variable>{w})[0];
  });
  REQUIRE_ALLCLOSE(grads[0], tensor({2, 4}));
  REQUIRE_ALLCLOSE(grads[1], tensor({4, 8}));
  // An optimizer creating a slot lazily inside run (make_like) gets one shared slot.
  auto slots = strategy.run([&] {
    return Variable(w.impl().make_like(zeros({2}), {.name = "w/momentum", .trainable = false}));
  });
  REQUIRE(slots[0] == slots[1]);
  REQUIRE(slots[0].impl().kind() == "MirroredVariable");
}

TEST_CASE("a distributed variable is updated and aggregated only under its own strategy (enter_or_assert_strategy)") {
  MirroredStrategy a(MirroredStrategy::cpu_devices(2)), b(MirroredStrategy::cpu_devices(2));
  CentralStorageStrategy central(MirroredStrategy::cpu_devices(2));
  Variable mirrored, on_read, aggregating;
  {
    auto scope = a.scope();
    mirrored = Variable(tensor({1, 1}), {.name = "m", .aggregation = VariableAggregation::Sum});
    on_read = Variable(tensor({1, 1}), {.name = "r", .trainable = false,
                                        .synchronization = VariableSynchronization::OnRead,
                                        .aggregation = VariableAggregation::Mean});
  }
  {
    auto scope = central.scope();
    aggregating = Variable(tensor({1, 1}), {.name = "c", .aggregation = VariableAggregation::Sum});
  }
  REQUIRE(aggregating.impl().kind() == "AggregatingVariable");
  // Inside b's run every one of b's replicas took the cross-replica path and wrote all of
  // the variable's components at once.
  for (const Variable& v : {mirrored, on_read, aggregating}) {
    INFO(v.impl().kind());
    const std::string owner = v == aggregating ? "central_storage" : "mirrored";
    REQUIRE_THROWS_WITH(b.run([&] { v.assign_add(tensor({1, 1})); }),
                        Catch::Contains("'.assign_add: mixing different strategies: the variable belongs to the '" +
                                        owner + "' strategy") &&
                            Catch::Contains("inside run() of a different 'mirrored' strategy"));
    REQUIRE_THROWS_WITH(b.run([&] { v.assign(tensor({5, 5})); }), Catch::Contains("mixing different strategies"));
    {
      auto scope = b.scope();
      REQUIRE_THROWS_WITH(v.assign_sub(tensor({1, 1})),
                          Catch::Contains("inside the scope of a different 'mirrored' strategy"));
      // Asking for the metadata aggregates nothing, so it is allowed anywhere.
      REQUIRE(v.shape() == Shape{2});
      REQUIRE(v.dtype() == kFloat32);
    }
    // In b's merge_call (b's cross-replica context) too.
    REQUIRE_THROWS_WITH(b.run([&] {
                          get_replica_context()->merge_call(
                              [&](const std::vector<Tensor>&) {
                                v.assign_add(tensor({1, 1}));
                                return Tensor();
                              },
                              Tensor::scalar(0.0));
                        }),
                        Catch::Contains("mixing different strategies"));
    for (const Tensor& c : a.experimental_local_results(v)) REQUIRE_ALLCLOSE(c, tensor({1, 1}));
  }
  // A sync-on-read aggregate is a read under the strategy too (a collective across workers).
  {
    auto scope = b.scope();
    REQUIRE_THROWS_WITH(on_read.value(), Catch::Contains("SyncOnReadVariable 'r'.read: mixing different strategies"));
  }
  // Its own strategy's contexts, and no strategy at all (a checkpoint restored outside any
  // scope, the default strategy's scope), still update it.
  a.run([&] { mirrored.assign_add(tensor({1, 1})); });  // Sum over 2 replicas
  a.run([&] {
    get_replica_context()->merge_call(
        [&](const std::vector<Tensor>&) {
          mirrored.assign_sub(tensor({1, 1}));
          return Tensor();
        },
        Tensor::scalar(0.0));
  });
  {
    auto scope = a.scope();
    mirrored.assign_add(tensor({1, 1}));
  }
  mirrored.assign_add(tensor({1, 1}));
  {
    auto scope = DefaultStrategy::instance().scope();
    mirrored.assign_add(tensor({1, 1}));
    REQUIRE_ALLCLOSE(on_read.value(), tensor({1, 1}));
  }
  for (const Tensor& c : a.experimental_local_results(mirrored)) REQUIRE_ALLCLOSE(c, tensor({5, 5}));
  central.run([&] { aggregating.assign_add(tensor({1, 1})); });
  REQUIRE_ALLCLOSE(aggregating.value(), tensor({3, 3}));
}

namespace {
// The communicator of a pretend second worker: it counts the collectives and leaves the
// buffers as they are (the other worker contributing zeros to a sum).
class CountingCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "counting"; }
  void all_reduce(const Tensor&, ReduceOp) override { ++collectives; }
  void broadcast(const Tensor&, int) override { ++collectives; }
  void all_gather(const Tensor&, const Tensor&) override { ++collectives; }
  void reduce_scatter(const Tensor&, const Tensor&, ReduceOp) override { ++collectives; }
  void barrier() override { ++collectives; }
  int collectives = 0;
};

// Mirrored(2) as worker 0 of two, reducing across workers through a CountingCommunicator.
class CountingWorkerStrategy final : public MirroredStrategy {
 public:
  explicit CountingWorkerStrategy(std::shared_ptr<CountingCommunicator> comm)
      : MirroredStrategy(MirroredStrategy::cpu_devices(2)) {
    set_workers(0, 2);
    set_worker_communicator(std::move(comm));
  }
};
}  // namespace

TEST_CASE("a sync-on-read variable's shape, dtype and device run no collective, unlike its value") {
  auto comm = std::make_shared<CountingCommunicator>();
  CountingWorkerStrategy strategy(comm);
  Variable v;
  {
    auto scope = strategy.scope();
    v = Variable(tensor({1, 2, 3}), {.name = "total", .trainable = false,
                                     .synchronization = VariableSynchronization::OnRead,
                                     .aggregation = VariableAggregation::Sum});
  }
  REQUIRE(v.impl().kind() == "SyncOnReadVariable");
  REQUIRE(comm->collectives == 0);
  // In cross-replica context, where value() is the job-wide aggregate: a worker asking
  // alone would wait for the others (and time out) if these read it.
  REQUIRE(v.shape() == Shape{3});
  REQUIRE(v.dtype() == kFloat32);
  REQUIRE(v.device() == cpu(0));
  v.assign(tensor({4, 4, 4}));  // checks the dtype without reading the aggregate
  REQUIRE(comm->collectives == 0);
  // The aggregate itself is one collective. The total was split over the job's 4
  // replicas; the pretend worker's 2 shares are its zeros.
  REQUIRE_ALLCLOSE(v.value(), tensor({2, 2, 2}));
  REQUIRE(comm->collectives == 1);
  // In replica context the device is the replica's own component's.
  auto devices = strategy.run([&] { return v.device(); });
  REQUIRE(devices[1] == cpu(1));
  REQUIRE(comm->collectives == 1);
}

TEST_CASE("assign_add / assign_sub of another dtype are refused by distributed variables, as by local ones") {
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(2));
  CentralStorageStrategy central(MirroredStrategy::cpu_devices(2));
  const Tensor five = full({1}, 5.0, kInt64), fraction = full({1}, 0.7);
  Variable local(five);
  REQUIRE_THROWS_WITH(local.assign_add(fraction), Catch::Contains("does not match the variable's dtype int64"));
  Variable m, r, c;
  {
    auto scope = mirrored.scope();
    m = Variable(five, {.name = "m", .trainable = false});
    r = Variable(five, {.name = "r", .trainable = false, .synchronization = VariableSynchronization::OnRead,
                        .aggregation = VariableAggregation::OnlyFirstReplica});
  }
  {
    auto scope = central.scope();
    c = Variable(five, {.name = "c", .trainable = false, .aggregation = VariableAggregation::Sum});
  }
  REQUIRE(c.impl().kind() == "AggregatingVariable");
  for (const Variable& v : {m, r, c}) {
    INFO(v.impl().kind());
    Strategy& owner = v == c ? static_cast<Strategy&>(central) : mirrored;
    // Before: add promoted to float32 (5.7) and copy_ cast it back into the int64
    // component (5), silently.
    REQUIRE_THROWS_WITH(v.assign_add(fraction),
                        Catch::Contains("'.assign_add: a delta of dtype float32 gives a result of dtype float32, which "
                                        "does not match the variable's dtype int64"));
    REQUIRE_THROWS_WITH(v.assign_sub(fraction), Catch::Contains("does not match the variable's dtype int64"));
    // In replica context too: the replica's own component, or the aggregated update.
    REQUIRE_THROWS_WITH(owner.run([&] { v.assign_add(fraction); }),
                        Catch::Contains("does not match the variable's dtype int64"));
    for (const Tensor& t : owner.experimental_local_results(v))
      REQUIRE(t.to_vector<int64_t>() == std::vector<int64_t>{5});
    // A delta of the variable's dtype still applies.
    v.assign_add(full({1}, 2.0, kInt64));
    for (const Tensor& t : owner.experimental_local_results(v))
      REQUIRE(t.to_vector<int64_t>() == std::vector<int64_t>{7});
  }
}
