// Per-call training flag: model(x, {.training = ...}) (Keras's model(x, training=...))
// applies to that call and every layer it reaches, on the calling thread only, so two
// replicas may run one model with different flags at the same time.
#include <strata/core/random.h>
#include <strata/distribute/strategy.h>
#include <strata/train/nn/nn.h>
#include "tests/test_util.h"

namespace strata_call_training_test {

using namespace strata;

// True when dropout left every element unchanged (no zeros, no 1/(1-rate) scaling).
bool untouched(const Tensor& y, const Tensor& x) { return y.to_vector<float>() == x.to_vector<float>(); }
bool dropped_some(const Tensor& y) {
  for (float v : y.to_vector<float>())
    if (v == 0.0f) return true;
  return false;
}

}  // namespace strata_call_training_test

TEST_CASE("call training: the per-call flag wins over set_training, for that call only") {
  using namespace strata;
  using namespace strata_call_training_test;
  nn::Sequential model{nn::Dropout(0.5, /*seed=*/3)};
  const Tensor x = ones({64});
  REQUIRE(model.training());
  REQUIRE(untouched(model(x, {.training = false}), x));
  REQUIRE(model.training());  // the module's own flag is unchanged
  REQUIRE(dropped_some(model(x)));
  model.set_training(false);  // the module-wide flag still works
  REQUIRE(untouched(model(x), x));
  REQUIRE(dropped_some(model(x, {.training = true})));
  REQUIRE(untouched(model(x, {}), x));  // no per-call value: the module's flag
  REQUIRE(!model.training());
}

TEST_CASE("call training: replicas calling one model with different flags do not interfere") {
  using namespace strata;
  using namespace strata_call_training_test;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  nn::Sequential model{nn::Flatten(), nn::Dropout(0.5, /*seed=*/5)};
  const Tensor x = random::uniform({8, 16}, 0.5f, 1.0f, 11);
  for (int i = 0; i < 50; ++i) {
    // Replica 0 trains (drops), replica 1 evaluates (deterministic), concurrently.
    auto out = strategy.run([&] {
      const bool training = distribute::get_replica_context()->replica_id_in_sync_group() == 0;
      return model(x, {.training = training});
    });
    REQUIRE(untouched(out[1], x));
    REQUIRE(dropped_some(out[0]));
  }
}

TEST_CASE("Dropout under Mirrored(2): each replica's masks are the same run to run, and differ between replicas") {
  using namespace strata;
  // Masks of `calls` successive steps, per replica, from a fresh layer with a fixed seed.
  auto masks = [](int calls) {
    distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
    nn::Dropout drop(0.5, /*seed=*/9);
    const Tensor x = ones({256});
    std::vector<std::vector<float>> out(2);
    for (int i = 0; i < calls; ++i) {
      auto y = strategy.run([&] { return drop(x); });
      for (int r = 0; r < 2; ++r) {
        const auto v = y[size_t(r)].to_vector<float>();
        out[size_t(r)].insert(out[size_t(r)].end(), v.begin(), v.end());
      }
    }
    return out;
  };
  const auto first = masks(20);
  for (int run = 0; run < 5; ++run) REQUIRE(masks(20) == first);  // no dependence on thread order
  CHECK(first[0] != first[1]);
  // Replica 0 draws what a single replica draws.
  nn::Dropout single(0.5, /*seed=*/9);
  std::vector<float> alone;
  for (int i = 0; i < 20; ++i) {
    const auto v = single(ones({256})).to_vector<float>();
    alone.insert(alone.end(), v.begin(), v.end());
  }
  CHECK(alone == first[0]);
}
