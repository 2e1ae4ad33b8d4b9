// ZeRO-1 (sharded optimizer state, train/sharded_optimizer_state.h) in one process:
//  - every synchronous strategy trains bitwise as without it (weights, whole slots and
//    losses), for SGD with momentum, Adam and AdamW, over 2, 3 and 4 replicas (chunks of
//    uneven and empty sizes), and within rounding with global-norm clipping;
//  - each replica holds its 1/N chunk of the optimizer state;
//  - checkpoints move between sharded and plain strategies and replica counts both ways
//    (and replicas sharing one copy of the variables: Strategy::set_share_cpu_variables);
//  - what cannot be sharded is refused by name.
// The 2-process case (multi_worker over Gloo) is in test_zero_multi_worker.cc.
#include <catch2/catch.hpp>
#include <filesystem>

#include <strata/core/ops.h>
#include <strata/distribute/make_strategy.h>
#include <strata/distribute/strategy.h>
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>
#include <strata/train/sharded_optimizer_state.h>
#include "tests/distribute/equivalence_helpers.h"
#include "tests/distribute/strategy_cases.h"
#include "tests/train/checkpoint_compare.h"
#include "tests/temp_dir.h"

using namespace strata;
using namespace strata::distribute;
namespace fs = std::filesystem;

namespace {
// The strategy-equivalence helpers (equivalence_helpers.h).
namespace eq = strata::distribute::testing;
using strata::testing::checkpoint_tensors;
using strata::testing::same_tensors;

// Kernel 12x16 (192: 3 chunks of 64, 4 of 48), bias 16, kernel 16x4 (64), bias 4 (over 3
// replicas: chunks of 2, 2 and 0).
constexpr int64_t kFeatures = 12, kHidden = 16, kClasses = 4, kGlobalBatch = 10, kExamples = 56;

// 5 batches of 10 and a last one of 6.
data::Dataset make_dataset() { return eq::classification_dataset(7, kExamples, kFeatures, kGlobalBatch); }

enum class Opt { SGD, Adam, AdamW, SGDClipped, SGDUnclipped };
const char* opt_name(Opt o) {
  switch (o) {
    case Opt::SGD: return "SGD(momentum 0.9, nesterov, weight decay)";
    case Opt::Adam: return "Adam";
    case Opt::AdamW: return "AdamW";
    case Opt::SGDClipped: return "SGD(momentum 0.9, global_clipnorm 0.05)";
    case Opt::SGDUnclipped: return "SGD(momentum 0.9)";
  }
  return "?";
}

optim::Optimizer make_optimizer(Opt o) {
  switch (o) {
    case Opt::SGD: return optim::SGD(0.1, {.momentum = 0.9, .nesterov = true, .weight_decay = 1e-3});
    case Opt::Adam: return optim::Adam(0.01);
    case Opt::AdamW: return optim::AdamW(0.01, {.weight_decay = 0.05});
    case Opt::SGDClipped: return optim::SGD(0.1, {.momentum = 0.9, .global_clipnorm = 0.05});
    case Opt::SGDUnclipped: return optim::SGD(0.1, {.momentum = 0.9});
  }
  return {};
}

struct Result {
  std::vector<Tensor> weights;  // cross-replica values
  std::vector<Tensor> slots;    // every whole slot, variable by variable in slot order
  std::vector<float> losses;
  optim::OptimizerStateBytes bytes;
};

// Trains `epochs` epochs under `strategy` (after restoring `restore` when given; saving to
// `save` at the end when given), checking that every replica's copy of every variable
// is the same.
Result fit(Strategy& strategy, Opt which, int epochs, const std::string& restore = "", const std::string& save = "") {
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = eq::classification_mlp(kFeatures, kHidden, kClasses, /*init_seed=*/1);
    opt = make_optimizer(which);
  }
  train::Checkpoint checkpoint{{"model", model}, {"optimizer", opt}};
  if (!restore.empty()) {
    auto scope = strategy.scope();
    checkpoint.restore(restore);
  }
  Result out;
  out.losses = eq::train_classifier(strategy, model, opt, make_dataset(), epochs);
  if (!save.empty()) {
    auto scope = strategy.scope();
    checkpoint.save(save);
  }
  const auto vars = model.trainable_variables();
  REQUIRE(eq::replicas_agree(strategy, vars));
  out.weights = eq::values_of(vars);
  for (const Variable& v : vars) {
    for (const auto& name : opt.slot_names()) {
      auto slot = opt.find_slot(v, name);
      REQUIRE(slot.has_value());
      out.slots.push_back(slot->impl().checkpoint_value().clone());
    }
  }
  out.bytes = optim::optimizer_state_bytes(opt);
  return out;
}

struct Case {
  std::string label;
  std::string name;
  StrategyOptions options;
};

// Every synchronous strategy make_strategy builds in one process (multi_worker without a
// cluster is one worker of local replicas, as Mirrored).
std::vector<Case> cases() {
  std::vector<Case> out{{"default", "default", {}},
                        {"one_device(cpu:1)", "one_device", {.devices = {cpu(1)}}},
                        {"mirrored(2)", "mirrored", {.replicas = 2}},
                        {"mirrored(3)", "mirrored", {.replicas = 3}},
                        {"mirrored(4, hierarchical)",
                         "mirrored",
                         {.replicas = 4, .cross_device_ops = CrossDeviceOps::HierarchicalCopyAllReduce}},
                        {"multi_worker(1 worker x 2)", "multi_worker", {.replicas = 2}},
                        {"mirrored(3), one copy of the variables",
                         "mirrored",
                         {.replicas = 3, .share_cpu_variables = true}}};
  return out;
}

std::unique_ptr<Strategy> make(const Case& c, bool shard) {
  StrategyOptions o = c.options;
  o.shard_optimizer_state = shard;
  return make_strategy(c.name, o);
}

using strata::testing::TempDir;

// An optimizer whose update is not elementwise: scales each step by the gradient's norm.
class NormalizedSGDImpl final : public optim::OptimizerImpl {
 public:
  NormalizedSGDImpl() : OptimizerImpl("NormalizedSGD", 0.1, 0.0) {}
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }
  void update(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots,
              const optim::UpdateContext& ctx) const override {
    slots[0].copy_(slots[0] + grad);
    param.copy_(param - grad * (ctx.learning_rate / (global_norm_of(grad) + 1e-12)));
  }

 private:
  static double global_norm_of(const Tensor& t) { return std::sqrt(sum(square(cast(t, kFloat64))).item<double>()); }
};
}  // namespace

TEST_CASE("ZeRO-1: every synchronous strategy trains bitwise as without it", "[zero]") {
  for (Opt which : {Opt::SGD, Opt::Adam, Opt::AdamW}) {
    INFO(opt_name(which));
    for (const Case& c : cases()) {
      INFO(c.label);
      auto plain = make(c, false);
      auto sharded = make(c, true);
      REQUIRE(sharded->shard_optimizer_state());
      const Result a = fit(*plain, which, 2);
      const Result b = fit(*sharded, which, 2);
      REQUIRE(a.losses.size() == 12);
      CHECK(a.losses == b.losses);
      CHECK(eq::bitwise_equal(a.weights, b.weights));
      CHECK(eq::bitwise_equal(a.slots, b.slots));
      // The weights moved (the test compares trained models, not initial values).
      CHECK(a.losses.back() < a.losses.front());
      // One whole copy of the state either way; each replica holds 1/N of it sharded.
      CHECK(a.bytes.total == b.bytes.total);
      CHECK(a.bytes.per_replica == a.bytes.total);
      const int n = sharded->num_replicas_in_sync();
      if (n == 1) {
        CHECK(b.bytes.per_replica == b.bytes.total);
      } else {
        // At most one chunk's rounding per slot of each of the 4 variables above 1/N.
        const int64_t slots = int64_t(optim::Optimizer(make_optimizer(which)).slot_names().size());
        CHECK(b.bytes.per_replica < a.bytes.total);
        CHECK(b.bytes.per_replica >= a.bytes.total / n);
        CHECK(b.bytes.per_replica <= a.bytes.total / n + 4 * slots * int64_t(sizeof(float)));
      }
    }
  }
}

TEST_CASE("ZeRO-1: global-norm clipping over the shards matches the unsharded clip", "[zero]") {
  for (const Case& c : cases()) {
    INFO(c.label);
    const Result a = fit(*make(c, false), Opt::SGDClipped, 2);
    const Result b = fit(*make(c, true), Opt::SGDClipped, 2);
    // The norm's partial sums are added in another order: equal up to rounding.
    const double rel = eq::max_relative_difference(b.weights, a.weights);
    INFO("max relative difference " << rel);
    CHECK(rel <= 1e-5);
    CHECK(eq::max_relative_difference(b.slots, a.slots) <= 1e-4);
    // Clipping was active: an unclipped run ends elsewhere.
    const Result unclipped = fit(*make(c, false), Opt::SGDUnclipped, 2);
    CHECK(eq::max_relative_difference(unclipped.weights, a.weights) > 1e-3);
  }
}

TEST_CASE("ZeRO-1: each replica keeps its chunk of every slot", "[zero]") {
  auto strategy = make_strategy("mirrored", {.replicas = 3, .shard_optimizer_state = true});
  nn::Dense layer;
  optim::Optimizer opt;
  {
    auto scope = strategy->scope();
    layer = nn::Dense(kFeatures, kHidden);
    opt = optim::Adam(0.01);
    opt.build(layer->trainable_variables());  // in cross-replica context
  }
  const Variable kernel = layer->kernel();
  auto m = opt.find_slot(kernel, "m");
  REQUIRE(m.has_value());
  auto* sharded = dynamic_cast<const optim::ShardedSlotImpl*>(&m->impl());
  REQUIRE(sharded != nullptr);
  CHECK(m->impl().kind() == "ShardedSlot");
  CHECK(m->name() == kernel.name() + "/m");
  CHECK(sharded->whole_shape() == kernel.shape());
  for (int l = 0; l < 3; ++l) CHECK(sharded->chunk(l).numel() == kFeatures * kHidden / 3);
  // Whole assignment in cross-replica context lands in the chunks; a read gives it back.
  Tensor values = reshape(arange(0, double(kFeatures * kHidden)), kernel.shape());
  m->assign(values);
  CHECK(eq::bitwise_equal({m->value()}, {values}));
  CHECK(sharded->chunk(1).to_vector<double>()[0] == double(kFeatures * kHidden / 3));
  // In replica context a replica sees its own chunk and cannot assign the slot.
  auto seen = strategy->run([&] {
    ReplicaContext* ctx = get_replica_context();
    REPLICA_REQUIRE(m->value().numel() == kFeatures * kHidden / 3);
    return m->value().to_vector<double>()[0] == double(ctx->replica_id_in_sync_group() * kFeatures * kHidden / 3)
               ? 1.0
               : 0.0;
  });
  for (double ok : seen.values()) CHECK(ok == 1.0);
  CHECK_THROWS_WITH(strategy->run([&] { m->assign(values); }),
                    Catch::Contains("ShardedSlot") && Catch::Contains("cross-replica context"));
}

TEST_CASE("ZeRO-1: checkpoints move between sharded and plain strategies and replica counts", "[zero]") {
  TempDir dir;
  for (Opt which : {Opt::SGD, Opt::Adam}) {
    INFO(opt_name(which));
    const std::string tag = which == Opt::SGD ? "sgd" : "adam";
    const std::string sharded2 = (dir.path / (tag + "-sharded2")).string();
    const std::string plain2 = (dir.path / (tag + "-plain2")).string();
    const Case m2{"mirrored(2)", "mirrored", {.replicas = 2}};
    // The same training, sharded or not, writes the same tensors under the same names.
    const Result s1 = fit(*make(m2, true), which, 1, "", sharded2);
    const Result p1 = fit(*make(m2, false), which, 1, "", plain2);
    REQUIRE(eq::bitwise_equal(s1.weights, p1.weights));
    const auto sharded_tensors = checkpoint_tensors(sharded2), plain_tensors = checkpoint_tensors(plain2);
    CHECK(same_tensors(sharded_tensors, plain_tensors));
    // Resuming across the two gives the uninterrupted run, bitwise, both ways.
    const Result whole = fit(*make(m2, false), which, 2);
    const Result sharded_to_plain = fit(*make(m2, false), which, 1, sharded2);
    const Result plain_to_sharded = fit(*make(m2, true), which, 1, plain2);
    CHECK(eq::bitwise_equal(sharded_to_plain.weights, whole.weights));
    CHECK(eq::bitwise_equal(sharded_to_plain.slots, whole.slots));
    CHECK(eq::bitwise_equal(plain_to_sharded.weights, whole.weights));
    CHECK(eq::bitwise_equal(plain_to_sharded.slots, whole.slots));
    // Other replica counts, sharded or not (and the default strategy): restoring then
    // saving again gives back exactly the tensors restored.
    for (const Case& c : cases()) {
      for (bool shard : {false, true}) {
        INFO(c.label << (shard ? " sharded" : " plain"));
        const std::string again = (dir.path / (tag + "-" + std::to_string(shard) + "-again")).string();
        fit(*make(c, shard), which, 0, sharded2, again);
        CHECK(same_tensors(checkpoint_tensors(again), sharded_tensors));
      }
    }
    // Sharded over 3 replicas from a 2-replica checkpoint, trained on: as plain over 3.
    const Case m3{"mirrored(3)", "mirrored", {.replicas = 3}};
    const Result s3 = fit(*make(m3, true), which, 1, plain2);
    const Result p3 = fit(*make(m3, false), which, 1, sharded2);
    CHECK(eq::bitwise_equal(s3.weights, p3.weights));
    CHECK(eq::bitwise_equal(s3.slots, p3.slots));
  }
}

TEST_CASE("ZeRO-1: what cannot be sharded is refused by name", "[zero]") {
  SECTION("central_storage keeps one copy already") {
    CHECK_THROWS_WITH(make_strategy("central_storage", {.replicas = 2, .shard_optimizer_state = true}),
                      Catch::Contains("central_storage") && Catch::Contains("shard_optimizer_state"));
    CentralStorageStrategy central(MirroredStrategy::cpu_devices(2));
    CHECK_THROWS_WITH(central.set_shard_optimizer_state(true), Catch::Contains("single copy"));
  }
  SECTION("not in replica context") {
    MirroredStrategy s(MirroredStrategy::cpu_devices(2));
    CHECK_THROWS_WITH(s.run([&] { s.set_shard_optimizer_state(true); }),
                      Catch::Contains("set_shard_optimizer_state") && Catch::Contains("replica context"));
  }
  SECTION("an optimizer whose update is not elementwise") {
    MirroredStrategy s(MirroredStrategy::cpu_devices(2));
    s.set_shard_optimizer_state(true);
    Variable w;
    optim::Optimizer opt;
    {
      auto scope = s.scope();
      w = Variable(ones({4}));
      opt = optim::Optimizer(std::make_shared<NormalizedSGDImpl>());
    }
    CHECK_THROWS_WITH(s.run([&] { opt.apply_gradients({ones({4})}, {w}); }),
                      Catch::Contains("NormalizedSGD") && Catch::Contains("not elementwise"));
  }
  // A variable of 4 ones and an Adam optimizer, both made in the strategy's scope.
  const auto adam_in_scope = [](MirroredStrategy& s, Variable& w, optim::Optimizer& opt) {
    auto scope = s.scope();
    w = Variable(ones({4}));
    opt = optim::Adam(0.1);
  };
  SECTION("slots created before sharding was turned on") {
    MirroredStrategy s(MirroredStrategy::cpu_devices(2));
    Variable w;
    optim::Optimizer opt;
    adam_in_scope(s, w, opt);
    {
      auto scope = s.scope();
      opt.build({w});
    }
    s.set_shard_optimizer_state(true);
    CHECK_THROWS_WITH(s.run([&] { opt.apply_gradients({ones({4})}, {w}); }),
                      Catch::Contains("created before shard_optimizer_state was turned on"));
  }
  SECTION("sharding turned off after sharded slots were made") {
    MirroredStrategy s(MirroredStrategy::cpu_devices(2));
    s.set_shard_optimizer_state(true);
    Variable w;
    optim::Optimizer opt;
    adam_in_scope(s, w, opt);
    s.run([&] { opt.apply_gradients({ones({4})}, {w}); });
    s.set_shard_optimizer_state(false);
    CHECK_THROWS_WITH(s.run([&] { opt.apply_gradients({ones({4})}, {w}); }),
                      Catch::Contains("is sharded") && Catch::Contains("sharding is now off"));
  }
  SECTION("a variable created outside the strategy's scope") {
    MirroredStrategy s(MirroredStrategy::cpu_devices(2));
    s.set_shard_optimizer_state(true);
    Variable outside(ones({4}));
    optim::Optimizer opt;
    {
      auto scope = s.scope();
      opt = optim::SGD(0.1);
    }
    CHECK_THROWS_WITH(s.run([&] { opt.apply_gradients({ones({4})}, {outside}); }),
                      Catch::Contains("'" + outside.name() + "'") && Catch::Contains("not a mirrored variable"));
  }
}
