// One copy of each mirrored variable for replicas on logical CPU devices
// (Strategy::set_share_cpu_variables):
//  - training is bitwise the same as with a private copy per replica (weights, slots and
//    losses), for SGD with momentum and Adam over 2 and 3 replicas, with and without the
//    gradient reduction overlapping backward, and for a multi_worker strategy's local
//    replicas;
//  - the components are views of one memory, and the optimizer's slots are one copy too;
//  - every update is applied once: replica context with Sum, Mean and OnlyFirstReplica,
//    cross-replica assign, StrategyExtended::update; replica context with aggregation None
//    raises, naming the variable.
// ZeRO-1 with one copy and checkpoints across both layouts: test_zero_redundancy.cc (its
// cases include one copy); across 2 worker processes: test_zero_multi_worker.cc.
#include <array>
#include <catch2/catch.hpp>

#include <strata/core/ops.h>
#include <strata/distribute/make_strategy.h>
#include <strata/distribute/strategy.h>
#include <strata/train/adam.h>
#include <strata/train/sgd.h>
#include "tests/distribute/equivalence_helpers.h"

using namespace strata;
using namespace strata::distribute;

namespace {
namespace eq = strata::distribute::testing;

struct Trained {
  std::vector<Tensor> weights, slots;
  std::vector<float> losses;
};

// 40 examples of 12 features in batches of 10 (3 replicas: parts of 4, 3 and 3), 2 epochs.
Trained train(Strategy& strategy, bool adam) {
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = eq::classification_mlp(12, 16, 4, /*init_seed=*/3);
    opt = adam ? optim::Optimizer(optim::Adam(0.01))
               : optim::Optimizer(optim::SGD(0.1, {.momentum = 0.9, .nesterov = true, .weight_decay = 1e-3}));
  }
  Trained out;
  out.losses = eq::train_classifier(strategy, model, opt, eq::classification_dataset(5, 40, 12, 10), 2);
  const auto vars = model.trainable_variables();
  REQUIRE(eq::replicas_agree(strategy, vars));
  out.weights = eq::values_of(vars);
  for (const Variable& v : vars) {
    for (const auto& name : opt.slot_names()) out.slots.push_back(opt.find_slot(v, name)->value().clone());
    // One copy: every component, and every slot's, views the same memory.
    const bool one_copy = strategy.share_cpu_variables() && strategy.num_local_replicas() > 1;
    CHECK(v.impl().is_replicated() == !one_copy);
    const auto comps = strategy.experimental_local_results(v);
    for (const Tensor& c : comps) CHECK(c.shares_storage(comps[0]) == (one_copy || &c == &comps[0]));
    for (const auto& name : opt.slot_names()) {
      const auto slot = strategy.experimental_local_results(*opt.find_slot(v, name));
      CHECK(slot.back().shares_storage(slot.front()) == (one_copy || slot.size() == 1));
    }
    // Each replica's component is on its own device.
    for (size_t i = 0; i < comps.size(); ++i) CHECK(comps[i].device() == strategy.parameter_devices()[i]);
  }
  return out;
}
}  // namespace

TEST_CASE("One copy of mirrored variables trains bitwise as a copy per replica", "[distribute][one_copy]") {
  CommunicationOptions after_backward;
  after_backward.overlap_gradient_reduction = false;
  struct Case {
    const char* label;
    std::string name;
    StrategyOptions options;
  };
  const std::vector<Case> cases{{"mirrored(2)", "mirrored", {.replicas = 2}},
                                {"mirrored(3)", "mirrored", {.replicas = 3}},
                                {"mirrored(2), reduction after backward", "mirrored",
                                 {.replicas = 2, .communication = after_backward}},
                                {"multi_worker(1 worker x 2)", "multi_worker", {.replicas = 2}}};
  for (bool adam : {false, true}) {
    INFO((adam ? "Adam" : "SGD(momentum, nesterov, weight decay)"));
    for (const Case& c : cases) {
      INFO(c.label);
      StrategyOptions one = c.options;
      one.share_cpu_variables = true;
      auto separate = make_strategy(c.name, c.options);
      auto shared = make_strategy(c.name, one);
      REQUIRE_FALSE(separate->share_cpu_variables());
      REQUIRE(shared->share_cpu_variables());
      const Trained a = train(*separate, adam);
      const Trained b = train(*shared, adam);
      REQUIRE(a.losses.size() == 8);
      // It learned: the second epoch's losses on the same batches are below the first's.
      CHECK(a.losses[4] + a.losses[5] + a.losses[6] + a.losses[7] < a.losses[0] + a.losses[1] + a.losses[2] + a.losses[3]);
      CHECK(a.losses == b.losses);
      CHECK(eq::bitwise_equal(a.weights, b.weights));
      CHECK(eq::bitwise_equal(a.slots, b.slots));
    }
  }
}

TEST_CASE("One copy of mirrored variables: every update is applied once", "[distribute][one_copy]") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  strategy.set_share_cpu_variables(true);
  auto make = [&](autograd::VariableAggregation aggregation, const char* name) {
    auto scope = strategy.scope();
    return Variable(Tensor::scalar(0.0), {.name = name, .trainable = false, .aggregation = aggregation});
  };
  Variable sum = make(autograd::VariableAggregation::Sum, "sum");
  Variable mean = make(autograd::VariableAggregation::Mean, "mean");
  Variable first = make(autograd::VariableAggregation::OnlyFirstReplica, "first");
  Variable none = make(autograd::VariableAggregation::None, "none");
  for (const Variable* v : {&sum, &mean, &first, &none}) REQUIRE_FALSE(v->impl().is_replicated());

  // Replica context: the replicas' values aggregated, then applied once.
  std::array<float, 2> seen{};
  strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    sum.assign_add(Tensor::scalar(r + 1.0));    // 1 + 2, once
    mean.assign_add(Tensor::scalar(r + 1.0));   // (1 + 2) / 2, once
    first.assign(Tensor::scalar(r + 10.0));     // replica 0's
    seen[size_t(r)] = sum.value().item<float>();  // (Catch2's CHECK is not for replica threads)
  });
  // Every replica read the update when its call returned.
  CHECK(seen == std::array<float, 2>{3.0f, 3.0f});
  for (const Tensor& c : strategy.experimental_local_results(sum)) CHECK(c.item<float>() == 3.0f);
  CHECK(mean.value().item<float>() == 1.5f);
  CHECK(first.value().item<float>() == 10.0f);

  // Cross-replica context and StrategyExtended::update: once.
  {
    auto scope = strategy.scope();
    sum.assign_add(Tensor::scalar(1.0));
    CHECK(sum.value().item<float>() == 4.0f);
    int calls = 0;
    strategy.extended().update(sum, [&](const Tensor& c, int) {
      ++calls;
      c.copy_(c + Tensor::scalar(1.0));
    });
    CHECK(calls == 1);
    for (const Tensor& c : strategy.experimental_local_results(sum)) CHECK(c.item<float>() == 5.0f);
  }

  // Aggregation None in replica context would make the replicas' copies differ.
  CHECK_THROWS_WITH(strategy.run([&] { none.assign(Tensor::scalar(1.0)); }),
                    Catch::Contains("MirroredVariable 'none'.assign in replica context with aggregation None") &&
                        Catch::Contains("share one copy") && Catch::Contains("set_share_cpu_variables(false)"));
  CHECK(none.value().item<float>() == 0.0f);

  // The option is set in cross-replica context, before variables are made.
  CHECK_THROWS_WITH(strategy.run([&] { strategy.set_share_cpu_variables(false); }),
                    Catch::Contains("Strategy::set_share_cpu_variables"));
}
