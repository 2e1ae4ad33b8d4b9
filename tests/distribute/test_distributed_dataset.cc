// Distributed datasets: global batches split across replicas (uneven and empty splits of
// a short last batch, never dropped), distribute_datasets_from_function with its
// InputContext, placement on the replicas' devices, prefetching and save/restore.
#include <atomic>
#include <chrono>
#include <thread>

#include <strata/data/dataset.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/strategy.h>
#include "tests/distribute/strategy_cases.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;

namespace {
std::vector<int64_t> ints(const Tensor& t) { return t.to_vector<int64_t>(); }
std::vector<int64_t> range_of(int64_t a, int64_t b) {
  std::vector<int64_t> v;
  for (int64_t i = a; i < b; ++i) v.push_back(i);
  return v;
}
}  // namespace

TEST_CASE("split sizes follow TensorFlow's rebatching") {
  REQUIRE(split_sizes(8, 8, 3) == std::vector<int64_t>{3, 3, 2});
  REQUIRE(split_sizes(5, 8, 3) == std::vector<int64_t>{3, 2, 0});
  REQUIRE(split_sizes(6, 8, 2) == std::vector<int64_t>{4, 2});
  REQUIRE(split_sizes(2, 8, 4) == std::vector<int64_t>{2, 0, 0, 0});
  REQUIRE(split_sizes(0, 8, 2) == std::vector<int64_t>{0, 0});
  REQUIRE(split_sizes(7, 0, 2) == std::vector<int64_t>{4, 3});  // a batch larger than any seen
  REQUIRE(split_sizes(9, 9, 4) == std::vector<int64_t>{3, 2, 2, 2});
  REQUIRE_THROWS_WITH(split_sizes(4, 4, 0), Catch::Contains("replicas must be >= 1"));
  auto parts = split_batch({arange(0, 10).reshape({5, 2}), arange(0, 5)}, 2, 8);
  REQUIRE(parts[0][0].shape() == Shape{4, 2});
  REQUIRE(parts[1][0].shape() == Shape{1, 2});
  REQUIRE(parts[1][1].to_vector<float>() == std::vector<float>{4});
  REQUIRE_THROWS_WITH(split_batch({ones({4}), ones({3})}, 2), Catch::Contains("component 1 of the batch has 3 rows"));
  REQUIRE_THROWS_WITH(split_batch({Tensor::scalar(1.0)}, 2), Catch::Contains("needs a leading batch axis"));
}

TEST_CASE("experimental_distribute_dataset splits global batches, a short last batch is never dropped") {
  // testSimpleInputFromDatasetLastPartialBatch on one worker: range(14).batch(8).
  for (int n : {1, 2, 3, 4}) {
    INFO("replicas " << n);
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    auto dist = strategy.experimental_distribute_dataset(data::Dataset::range(14).batch(8));
    std::vector<std::vector<int64_t>> seen;
    for (auto& per_replica : dist) {
      REQUIRE(int(per_replica.size()) == n);
      for (int r = 0; r < n; ++r) {
        const Tensor& t = per_replica[size_t(r)][0];
        REQUIRE(t.device() == cpu(r));  // fetched to the replica's device
        REQUIRE(t.ndim() == 1);
        seen.push_back(ints(t));
      }
    }
    REQUIRE(int(seen.size()) == 2 * n);
    std::vector<int64_t> all;
    for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
    REQUIRE(all == range_of(0, 14));  // every example once, in order
    // The sizes: the full batch as evenly as possible, the last one filled in order.
    const auto full = split_sizes(8, 8, n), last = split_sizes(6, 8, n);
    for (int r = 0; r < n; ++r) {
      REQUIRE(int64_t(seen[size_t(r)].size()) == full[size_t(r)]);
      REQUIRE(int64_t(seen[size_t(n + r)].size()) == last[size_t(r)]);
    }
  }
  MirroredStrategy two(MirroredStrategy::cpu_devices(2));
  auto it = two.experimental_distribute_dataset(data::Dataset::range(14).batch(8)).make_iterator();
  it.next();
  auto last = *it.next();
  REQUIRE(ints(last[0][0]) == std::vector<int64_t>{8, 9, 10, 11});  // the [4, 2] split
  REQUIRE(ints(last[1][0]) == std::vector<int64_t>{12, 13});
  REQUIRE(!it.next().has_value());
}

TEST_CASE("every component of an element is split the same way, placement can be turned off") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  Tensor images = arange(0, 7 * 4).reshape({7, 2, 2});
  Tensor labels = arange(0, 7, 1, kInt64);
  auto ds = data::Dataset::from_tensor_slices(std::vector<Tensor>{images, labels}).batch(7);
  auto batch = *strategy.experimental_distribute_dataset(ds).make_iterator().next();
  const std::vector<int64_t> sizes = {3, 2, 2};
  int64_t start = 0;
  for (int r = 0; r < 3; ++r) {
    REQUIRE(batch[size_t(r)].size() == 2);
    REQUIRE(batch[size_t(r)][0].shape() == Shape{sizes[size_t(r)], 2, 2});
    REQUIRE_ALLCLOSE(batch[size_t(r)][0], images.slice(0, start, start + sizes[size_t(r)]));
    REQUIRE(ints(batch[size_t(r)][1]) == range_of(start, start + sizes[size_t(r)]));
    start += sizes[size_t(r)];
  }
  auto unplaced = *strategy.experimental_distribute_dataset(ds, {.experimental_fetch_to_device = false,
                                                                 .experimental_per_replica_buffer_size = 0})
                       .make_iterator()
                       .next();
  for (int r = 0; r < 3; ++r) REQUIRE(unplaced[size_t(r)][0].device() == cpu(0));
  // A single replica gets the global batch unchanged.
  OneDeviceStrategy one(cpu(0));
  auto whole = *one.experimental_distribute_dataset(ds).make_iterator().next();
  REQUIRE(whole.size() == 1);
  REQUIRE(whole[0][0].shape() == Shape{7, 2, 2});
}

TEST_CASE("distribute_datasets_from_function: InputContext, per-replica elements in turn, empty tail batches") {
  for (int n : {1, 2, 3}) {
    INFO("replicas " << n);
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    int calls = 0;
    auto dist = strategy.distribute_datasets_from_function([&](const data::InputContext& ctx) {
      ++calls;
      REQUIRE(ctx.num_input_pipelines() == 1);
      REQUIRE(ctx.input_pipeline_id() == 0);
      REQUIRE(ctx.num_replicas_in_sync() == n);
      REQUIRE(ctx.get_per_replica_batch_size(6 * n) == 6);
      return data::Dataset::range(14).batch(4);  // per-replica batches
    });
    REQUIRE(calls == 1);
    std::vector<int64_t> all;
    int steps = 0;
    for (auto& per_replica : dist) {
      ++steps;
      REQUIRE(int(per_replica.size()) == n);
      for (int r = 0; r < n; ++r) {
        const Tensor& t = per_replica[size_t(r)][0];
        REQUIRE(t.device() == cpu(r));
        REQUIRE(t.dtype() == kInt64);
        auto v = ints(t);
        all.insert(all.end(), v.begin(), v.end());
      }
    }
    REQUIRE(all == range_of(0, 14));
    REQUIRE(steps == (4 + n - 1) / n);  // 4 per-replica batches handed out n at a time
  }
  // testSimpleInputFromFnLastPartialBatch on one worker, and a tail shorter than the replicas.
  MirroredStrategy three(MirroredStrategy::cpu_devices(3));
  auto it = three.distribute_datasets_from_function([](const data::InputContext& ctx) {
                   return data::Dataset::range(10).batch(ctx.get_per_replica_batch_size(9));
                 }).make_iterator();
  auto first = *it.next();
  REQUIRE(ints(first[2][0]) == std::vector<int64_t>{6, 7, 8});
  auto tail = *it.next();
  REQUIRE(ints(tail[0][0]) == std::vector<int64_t>{9});
  REQUIRE(tail[1][0].shape() == Shape{0});  // empty, shaped like replica 0's, on its device
  REQUIRE(tail[2][0].device() == cpu(2));
  REQUIRE(tail[2][0].dtype() == kInt64);
  REQUIRE(!it.next().has_value());
}

namespace {
InputOptions per_replica_pipelines() { return {.experimental_replication_mode = InputReplicationMode::PerReplica}; }
}  // namespace

TEST_CASE("distribute_datasets_from_function per replica: one pipeline and InputContext per replica") {
  for (int n : {1, 2, 3}) {
    INFO("replicas " << n);
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    std::vector<int64_t> ids;
    // Replica r reads the examples i with i % n == r, in per-replica batches of 2.
    auto dist = strategy.distribute_datasets_from_function(
        [&](const data::InputContext& ctx) {
          ids.push_back(ctx.input_pipeline_id());
          REQUIRE(ctx.num_input_pipelines() == n);
          REQUIRE(ctx.num_replicas_in_sync() == n);
          return data::Dataset::range(6 * n)
              .shard(ctx.num_input_pipelines(), ctx.input_pipeline_id())
              .batch(ctx.get_per_replica_batch_size(2 * n));
        },
        per_replica_pipelines());
    REQUIRE(ids == range_of(0, n));
    int steps = 0;
    for (auto& per_replica : dist) {
      REQUIRE(int(per_replica.size()) == n);
      for (int r = 0; r < n; ++r) {
        const Tensor& t = per_replica[size_t(r)][0];
        REQUIRE(t.device() == cpu(r));
        REQUIRE(ints(t) == std::vector<int64_t>{(2 * steps) * n + r, (2 * steps + 1) * n + r});
      }
      ++steps;
    }
    REQUIRE(steps == 3);
  }
}

TEST_CASE("distribute_datasets_from_function per replica: pipelines that end at different steps") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  // Replica r has r + 1 batches of two components (ids and their doubles).
  auto it = strategy
                .distribute_datasets_from_function(
                    [](const data::InputContext& ctx) {
                      const int64_t r = ctx.input_pipeline_id();
                      const data::Dataset ids = data::Dataset::range(100 * r, 100 * r + 2 * (r + 1));
                      return data::Dataset::zip({ids, ids.map([](const data::Element& e) {
                                                   return data::Element{add(e[0], e[0])};
                                                 })})
                          .batch(2);
                    },
                    per_replica_pipelines())
                .make_iterator();
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    auto batch = it.next();
    REQUIRE(batch.has_value());
    for (int r = 0; r < 3; ++r) {
      const data::Batch& part = (*batch)[size_t(r)];
      REQUIRE(part.size() == 2);
      REQUIRE(part[1].device() == cpu(r));
      if (step <= r) {
        REQUIRE(ints(part[0]) == std::vector<int64_t>{100 * r + 2 * step, 100 * r + 2 * step + 1});
        REQUIRE(ints(part[1]) == std::vector<int64_t>{2 * (100 * r + 2 * step), 2 * (100 * r + 2 * step + 1)});
      } else {
        // Ended: empty batches shaped like a running replica's, so the replica still steps.
        REQUIRE(part[0].shape() == Shape{0});
        REQUIRE(part[1].dtype() == kInt64);
      }
    }
  }
  REQUIRE(!it.next().has_value());
  REQUIRE(!it.next().has_value());
}

TEST_CASE("distribute_datasets_from_function per replica: positions save and restore, per replica count") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  // Shuffled and repeated: each replica's order depends on its own pipeline's position.
  const auto fn = [](const data::InputContext& ctx) {
    return data::Dataset::range(10 * ctx.input_pipeline_id(), 10 * ctx.input_pipeline_id() + 9)
        .shuffle(5, 11)
        .repeat(2)
        .batch(ctx.input_pipeline_id() + 2);  // the replicas end at different steps
  };
  auto dist = strategy.distribute_datasets_from_function(fn, per_replica_pipelines());
  const auto ids = [](const PerReplica<data::Batch>& batch) {  // replica after replica
    return concat({batch[0][0], batch[1][0]}, 0).to_vector<int64_t>();
  };
  for (size_t stop : {size_t(2), size_t(7)}) {
    INFO("stopped after " << stop << " steps");
    auto first = dist.make_iterator();
    for (size_t k = 0; k < stop; ++k) first.next();
    const data::IteratorState state = first.save();
    std::vector<std::vector<int64_t>> rest;
    while (auto batch = first.next()) rest.push_back(ids(*batch));
    REQUIRE(stop + rest.size() == 9);  // replica 0: 9 batches of 2, replica 1: 6 of 3
    auto resumed = dist.make_iterator();
    resumed.restore(state);
    for (const auto& want : rest) {
      auto batch = resumed.next();
      REQUIRE(batch.has_value());
      REQUIRE(ids(*batch) == want);
    }
    REQUIRE(!resumed.next().has_value());
  }
  // Each replica's position is its own: three replicas cannot take two replicas' positions.
  auto two = dist.make_iterator();
  two.next();
  MirroredStrategy three(MirroredStrategy::cpu_devices(3));
  auto other = three.distribute_datasets_from_function(fn, per_replica_pipelines()).make_iterator();
  REQUIRE_THROWS_WITH(other.restore(two.save()),
                      Catch::Contains("(InputReplicationMode::PerReplica, 3 local replicas): the saved position does "
                                      "not restore") &&
                          Catch::Contains("resume with the number of replicas and the dataset function it was saved "
                                          "with") &&
                          Catch::Contains("replica_pipelines(replicas=3"));
}

TEST_CASE("distribute_datasets_from_function per replica: errors name the replica") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto mismatched = strategy
                        .distribute_datasets_from_function(
                            [](const data::InputContext& ctx) {
                              const data::Dataset ids = data::Dataset::range(4);
                              return ctx.input_pipeline_id() == 0 ? ids.batch(2)
                                                                  : data::Dataset::zip({ids, ids}).batch(2);
                            },
                            per_replica_pipelines())
                        .make_iterator();
  REQUIRE_THROWS_WITH(mismatched.next(),
                      Catch::Contains("replica 1's pipeline yielded an element of 2 components but replica 0's has 1"));
  auto scalars = strategy
                     .distribute_datasets_from_function(
                         [](const data::InputContext& ctx) {
                           return data::Dataset::range(ctx.input_pipeline_id() == 0 ? 1 : 3);
                         },
                         per_replica_pipelines())
                     .make_iterator();
  scalars.next();
  REQUIRE_THROWS_WITH(scalars.next(), Catch::Contains("replica 0's pipeline has ended and replica 1's component 0 "
                                                      "has shape [], no batch axis"));
  REQUIRE_THROWS_WITH(strategy.experimental_distribute_dataset(data::Dataset::range(4).batch(2),
                                                               per_replica_pipelines()),
                      Catch::Contains("PerReplica is only supported by distribute_datasets_from_function"));
}

TEST_CASE("a distributed step over every batch: reduce with an axis counts every example once") {
  for (const auto& c : strata::distribute::testing::all_strategy_cases()) {
    INFO(c.label);
    auto strategy = c.make();
    auto dist = strategy->experimental_distribute_dataset(data::Dataset::range(1, 12).batch(5));
    double total = 0, count = 0;
    for (auto& batch : dist) {
      auto values = strategy->run([](const data::Batch& b) { return cast(b[0], kFloat64); }, batch);
      total += strategy->reduce(ReduceOp::Sum, values, 0).item<double>();
      const double mean = strategy->reduce(ReduceOp::Mean, values, 0).item<double>();
      count += strategy->gather(values, 0).dim(0);
      REQUIRE(mean == Approx(strategy->gather(values, 0).to_vector<double>()[0] +
                             (strategy->gather(values, 0).dim(0) - 1) / 2.0));  // consecutive integers
    }
    REQUIRE(total == 66.0);  // 1 + ... + 11
    REQUIRE(count == 11.0);
  }
}

TEST_CASE("distributed iterators save and restore their position") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto dist = strategy.experimental_distribute_dataset(data::Dataset::range(40).shuffle(40, 7).batch(6));
  auto it = dist.make_iterator();
  it.next();
  it.next();
  const data::IteratorState state = it.save();
  auto third = *it.next();
  auto fourth = *it.next();
  auto resumed = dist.make_iterator();
  resumed.restore(state);
  auto again = *resumed.next();
  REQUIRE(ints(again[0][0]) == ints(third[0][0]));
  REQUIRE(ints(again[1][0]) == ints(third[1][0]));
  REQUIRE(ints((*resumed.next())[1][0]) == ints(fourth[1][0]));
}

TEST_CASE("distributed datasets prepare one batch per replica ahead, on a background thread") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  for (int64_t buffer : {int64_t(0), int64_t(1)}) {
    INFO("buffer " << buffer);
    auto produced = std::make_shared<std::atomic<int>>(0);
    auto ds = data::Dataset::from_generator([produced] {
      return [produced, i = 0]() mutable -> std::optional<data::Element> {
        if (i == 10) return std::nullopt;
        ++*produced;
        return data::Element{full({4}, double(i++))};
      };
    });
    auto it = strategy.experimental_distribute_dataset(ds, {.experimental_per_replica_buffer_size = buffer})
                  .make_iterator();
    auto first = *it.next();
    REQUIRE(first[1][0].to_vector<float>() == std::vector<float>{0, 0});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    const int want = buffer == 0 ? 1 : 2;
    while (produced->load() < want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // With a buffer the next batch is ready before it is asked for; never more than that.
    REQUIRE(produced->load() == want);
  }
}

TEST_CASE("errors from splitting are reported from next()") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto scalars = strategy.experimental_distribute_dataset(data::Dataset::range(5));
  auto it = scalars.make_iterator();
  REQUIRE_THROWS_WITH(it.next(), Catch::Contains("needs a leading batch axis"));
  REQUIRE_THROWS_WITH(strategy.run([&] { strategy.experimental_distribute_dataset(data::Dataset::range(5)); }),
                      Catch::Contains("replica context"));
  REQUIRE_THROWS_WITH(strategy.experimental_distribute_dataset(data::Dataset::range(5).batch(2),
                                                               {.experimental_per_replica_buffer_size = -1}),
                      Catch::Contains("experimental_per_replica_buffer_size must be >= 0"));
}
