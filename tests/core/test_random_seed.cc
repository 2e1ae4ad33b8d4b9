// random::Seed: tf.random's argument order (shape, minval, maxval, seed) and the seed-first
// order give the same draws, and a call mixing them up does not compile (checked here with
// requires-expressions, which are false exactly when the call would not compile).
#include <algorithm>
#include <functional>
#include <type_traits>

#include <strata/core/random.h>
#include "tests/test_util.h"

namespace strata_random_seed_test {

using strata::Shape;

template <typename... Args>
concept UniformCallable = requires(Args... args) { strata::random::uniform(args...); };
template <typename... Args>
concept NormalCallable = requires(Args... args) { strata::random::normal(args...); };
template <typename... Args>
concept BernoulliCallable = requires(Args... args) { strata::random::bernoulli(args...); };

// Integers are seeds; floating-point numbers and bools are not, and a Seed is not a number.
static_assert(std::is_convertible_v<int, strata::random::Seed>);
static_assert(std::is_convertible_v<uint64_t, strata::random::Seed>);
static_assert(!std::is_convertible_v<float, strata::random::Seed>);
static_assert(!std::is_convertible_v<double, strata::random::Seed>);
static_assert(!std::is_convertible_v<bool, strata::random::Seed>);
static_assert(!std::is_convertible_v<strata::random::Seed, double>);

// Both orders compile...
static_assert(UniformCallable<Shape, int>);                     // (shape, seed)
static_assert(UniformCallable<Shape, int, double, double>);     // (shape, seed, low, high)
static_assert(UniformCallable<Shape, float, float, int>);       // tf.random.uniform(shape, 0., 1., seed)
static_assert(NormalCallable<Shape, double, double, uint64_t>);  // tf.random.normal(shape, mean, stddev, seed)
// ...and the mix-ups that used to compile silently do not.
static_assert(!UniformCallable<Shape, float, float>);           // bounds, no seed: 0.0f is not a seed
static_assert(!UniformCallable<Shape, double, int, double>);    // the seed between the bounds
static_assert(!BernoulliCallable<Shape, int, double>);          // bernoulli(shape, seed, p)
static_assert(BernoulliCallable<Shape, double, int>);           // bernoulli(shape, p, seed)

}  // namespace strata_random_seed_test

TEST_CASE("random: tf.random's argument order draws what the seed-first order draws") {
  using namespace strata;
  const Tensor tf_order = random::uniform({64}, -2.0f, 3.0f, 42);
  const Tensor seed_first = random::uniform({64}, 42, -2.0, 3.0);
  REQUIRE(tf_order.to_vector<float>() == seed_first.to_vector<float>());
  for (float v : tf_order.to_vector<float>()) {
    REQUIRE(v >= -2.0f);
    REQUIRE(v < 3.0f);
  }
  // Not constant (the bug a misordered call produced): the draws differ from each other.
  const auto v = tf_order.to_vector<float>();
  REQUIRE(std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) != v.end());

  REQUIRE(random::normal({32}, 1.5, 0.5, 7, kFloat64).to_vector<double>() ==
          random::normal({32}, 7, 1.5, 0.5, kFloat64).to_vector<double>());
  REQUIRE(random::truncated_normal({32}, 0.0, 2.0, 9).to_vector<float>() ==
          random::truncated_normal({32}, 9, 0.0, 2.0).to_vector<float>());
  // A different seed is a different draw.
  REQUIRE(random::uniform({16}, 0.0, 1.0, 1).to_vector<float>() != random::uniform({16}, 0.0, 1.0, 2).to_vector<float>());
  // The argument checks still name the op.
  REQUIRE_THROWS_WITH(random::uniform({4}, 1.0, 0.0, 3), Catch::Contains("random::uniform"));
}
