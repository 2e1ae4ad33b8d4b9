// Strategy::run's constraints (distribute/values.h): an std::optional batch or a function
// that cannot take what each replica receives is rejected at the call, by a named
// constraint, instead of failing deep inside run's body. Checked with requires-expressions
// (false exactly when the call would not compile).
#include <optional>

#include <strata/data/dataset.h>
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"

namespace strata_run_constraints_test {

using namespace strata;
using distribute::PerReplica;
using distribute::Strategy;

template <typename Fn, typename... Args>
concept Runnable = requires(Strategy& s, Fn fn, const Args&... args) { s.run(fn, args...); };

using BatchStep = Tensor (*)(const data::Batch&);
using OptionalBatches = std::optional<PerReplica<data::Batch>>;

// The iterator's next() result must be tested and unwrapped: named by RunArgument.
static_assert(!distribute::RunArgument<OptionalBatches>);
static_assert(!Runnable<BatchStep, OptionalBatches>);
static_assert(Runnable<BatchStep, PerReplica<data::Batch>>);
// Other arguments reach every replica as they are, an optional of a plain value included.
static_assert(distribute::RunArgument<std::optional<int>>);
static_assert(Runnable<int (*)(const std::optional<int>&), std::optional<int>>);
// Each replica receives a component: fn must take that, not the PerReplica.
static_assert(distribute::ReplicaCallable<BatchStep, PerReplica<data::Batch>>);
static_assert(!distribute::ReplicaCallable<Tensor (*)(const Tensor&), PerReplica<data::Batch>>);
static_assert(!Runnable<Tensor (*)(const Tensor&), PerReplica<data::Batch>>);
// The number of arguments must match fn's.
static_assert(!Runnable<BatchStep>);

}  // namespace strata_run_constraints_test

TEST_CASE("Strategy::run still runs a step on each replica's component") {
  using namespace strata;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  distribute::PerReplica<Tensor> values({Tensor::scalar(1.0), Tensor::scalar(2.0)});
  auto out = strategy.run([](const Tensor& t, double k) { return t * k; }, values, 3.0);
  REQUIRE(out.size() == 2);
  REQUIRE(out[0].item<double>() == 3.0);
  REQUIRE(out[1].item<double>() == 6.0);
}
