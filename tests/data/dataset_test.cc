// Dataset stages: what each yields, in what order, and how they count.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include <strata/core/ops.h>
#include <strata/data/dataset.h>
#include <strata/data/input_context.h>
#include "tests/data/data_test_util.h"

using namespace strata;
using data::Dataset;
using data::Element;
using testing::ints;
using testing::iota;

TEST_CASE("range yields int64 scalars in order", "[data]") {
  CHECK(ints(Dataset::range(5)) == iota(0, 5));
  CHECK(ints(Dataset::range(10, 0, -3)) == std::vector<int64_t>{10, 7, 4, 1});
  CHECK(ints(Dataset::range(3, 3)).empty());
  CHECK(Dataset::range(10, 0, -3).cardinality() == 4);
  CHECK(Dataset::range(0, 10, 3).cardinality() == 4);
  auto it = Dataset::range(2).make_iterator();
  auto e = it.next();
  REQUIRE(e);
  REQUIRE(e->size() == 1);
  CHECK((*e)[0].dtype() == kInt64);
  CHECK((*e)[0].ndim() == 0);
  CHECK_THROWS_WITH(Dataset::range(0, 5, 0), Catch::Contains("step must not be 0"));
}

TEST_CASE("from_tensor_slices slices every component along axis 0 as views", "[data]") {
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor y = Tensor::from_vector(std::vector<int64_t>{10, 11, 12, 13}, {4});
  auto ds = Dataset::from_tensor_slices({x, y});
  CHECK(ds.cardinality() == 4);
  int64_t i = 0;
  for (auto& e : ds) {
    REQUIRE(e.size() == 2);
    CHECK(e[0].shape() == Shape{2});
    CHECK(e[0].to_vector<float>() == std::vector<float>{float(2 * i), float(2 * i + 1)});
    CHECK(e[1].shape() == Shape{});
    CHECK(e[1].item<int64_t>() == 10 + i);
    CHECK(e[0].shares_storage(x));
    ++i;
  }
  CHECK(i == 4);

  // A non-contiguous input (a transpose) slices by its strides.
  Tensor t = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3}).transpose();
  std::vector<std::vector<float>> rows;
  for (auto& e : Dataset::from_tensor_slices(t)) rows.push_back(e[0].to_vector<float>());
  CHECK(rows == std::vector<std::vector<float>>{{0, 3}, {1, 4}, {2, 5}});

  CHECK_THROWS_WITH(Dataset::from_tensor_slices({x, Tensor::from_vector(std::vector<int64_t>{1, 2, 3})}),
                    Catch::Contains("leading extent 3"));
  CHECK_THROWS_WITH(Dataset::from_tensor_slices(Tensor::scalar(1.0)), Catch::Contains("scalar"));
  CHECK_THROWS_WITH(Dataset::from_tensor_slices(std::vector<Tensor>{}), Catch::Contains("no components"));
}

TEST_CASE("batch stacks elements and keeps the short last batch unless dropped", "[data]") {
  auto ds = Dataset::range(10);
  std::vector<std::vector<int64_t>> batches;
  for (auto& b : ds.batch(4)) batches.push_back(b[0].to_vector<int64_t>());
  CHECK(batches == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  CHECK(ds.batch(4).cardinality() == 3);

  batches.clear();
  for (auto& b : ds.batch(4, /*drop_remainder=*/true)) batches.push_back(b[0].to_vector<int64_t>());
  CHECK(batches == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(ds.batch(4, true).cardinality() == 2);
  CHECK(ds.batch(5, true).cardinality() == 2);
  CHECK(ints(ds.batch(5, true)) == iota(0, 10));

  // Multi-component elements stack component-wise with a new leading axis.
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {6, 2});
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, {6});
  int64_t n = 0;
  for (auto& b : Dataset::from_tensor_slices({x, y}).batch(4)) {
    const int64_t rows = n == 0 ? 4 : 2;
    CHECK(b[0].shape() == Shape{rows, 2});
    CHECK(b[1].shape() == Shape{rows});
    CHECK(b[0].dtype() == kFloat32);
    CHECK(b[1].dtype() == kInt64);
    ++n;
  }
  CHECK(n == 2);

  // Elements of different shapes cannot be stacked.
  int calls = 0;
  auto ragged = Dataset::from_generator([&calls] {
    calls = 0;
    return [&calls]() -> std::optional<Element> {
      if (calls >= 3) return std::nullopt;
      ++calls;
      return Element{zeros({calls})};
    };
  });
  auto it = ragged.batch(3).make_iterator();
  CHECK_THROWS_WITH(it.next(), Catch::Contains("batch: component 0 of element 1") &&
                                   Catch::Contains("[2]") && Catch::Contains("[1]"));
  CHECK_THROWS_WITH(ds.batch(0), Catch::Contains("batch_size must be >= 1"));
}

TEST_CASE("huge sizes: batch everything, bounded map parallelism, no cache of an endless input", "[data]") {
  // "Batch everything" with the largest size reserves no memory for it.
  const auto generated = Dataset::from_generator([] {
    return [i = int64_t(0)]() mutable -> std::optional<Element> {
      if (i == 5) return std::nullopt;
      return Element{Tensor::scalar(double(i++))};
    };
  });
  auto all = generated.batch(std::numeric_limits<int64_t>::max()).make_iterator();
  CHECK(all.next()->at(0).shape() == Shape{5});
  CHECK_FALSE(all.next().has_value());
  const auto identity = [](const Element& e) { return e; };
  CHECK_THROWS_WITH(Dataset::range(3).map(identity, int64_t(1) << 40),
                    Catch::Contains("num_parallel_calls must be in [1, 1024]"));
  CHECK_THROWS_WITH(Dataset::range(3).repeat().cache(),
                    Catch::Contains("Dataset::cache: the dataset is infinite") &&
                        Catch::Contains("ds.cache().repeat()"));
  CHECK(ints(Dataset::range(3).cache().repeat(2)) == std::vector<int64_t>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("unbatch inverts batch", "[data]") {
  auto ds = Dataset::range(11).batch(3).unbatch();
  CHECK(ints(ds) == iota(0, 11));
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2});
  std::vector<std::vector<float>> rows;
  for (auto& e : Dataset::from_tensor_slices(x).batch(2).unbatch()) {
    CHECK(e[0].shape() == Shape{2});
    rows.push_back(e[0].to_vector<float>());
  }
  CHECK(rows == std::vector<std::vector<float>>{{0, 1}, {2, 3}, {4, 5}});
  auto it = Dataset::range(3).unbatch().make_iterator();
  CHECK_THROWS_WITH(it.next(), Catch::Contains("unbatch: component 0 is a scalar"));
}

TEST_CASE("repeat, take and skip count as documented", "[data]") {
  auto ds = Dataset::range(5);
  std::vector<int64_t> three;
  for (int r = 0; r < 3; ++r) {
    for (int64_t v : iota(0, 5)) three.push_back(v);
  }
  CHECK(ints(ds.repeat(3)) == three);
  CHECK(ds.repeat(3).cardinality() == 15);
  CHECK(ints(ds.repeat(0)).empty());
  CHECK(ds.repeat().cardinality() == data::kInfiniteCardinality);
  CHECK(ints(ds.repeat().take(12)) == std::vector<int64_t>(three.begin(), three.begin() + 12));
  CHECK(ds.repeat().take(12).cardinality() == 12);

  CHECK(ints(ds.take(3)) == iota(0, 3));
  CHECK(ints(ds.take(9)) == iota(0, 5));
  CHECK(ints(ds.take(-1)) == iota(0, 5));
  CHECK(ints(ds.take(0)).empty());
  CHECK(ds.take(3).cardinality() == 3);
  CHECK(ds.take(9).cardinality() == 5);

  CHECK(ints(ds.skip(2)) == iota(2, 5));
  CHECK(ints(ds.skip(7)).empty());
  CHECK(ints(ds.skip(-1)).empty());
  CHECK(ds.skip(2).cardinality() == 3);
  CHECK(ds.skip(7).cardinality() == 0);

  // The main program's split: the first 8 and the last 2 of 10.
  auto all = Dataset::range(10);
  CHECK(ints(all.take(8)) == iota(0, 8));
  CHECK(ints(all.skip(8)) == iota(8, 10));
  CHECK(ints(ds.repeat(2).skip(3).take(4)) == std::vector<int64_t>{3, 4, 0, 1});
  CHECK(ds.repeat(2).skip(3).take(4).cardinality() == 4);

  // repeat() over an empty input ends instead of spinning.
  CHECK(ints(Dataset::range(0).repeat()).empty());
  CHECK(ints(ds.filter([](const Element&) { return false; }).repeat()).empty());
}

TEST_CASE("shards partition the input: their union covers it exactly once", "[data]") {
  for (int64_t n : {1, 2, 3, 7, 25}) {
    std::multiset<int64_t> seen;
    int64_t total_cardinality = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto shard = Dataset::range(20).shard(n, i);
      auto values = ints(shard);
      CHECK(int64_t(values.size()) == shard.cardinality());
      total_cardinality += shard.cardinality();
      for (size_t k = 0; k < values.size(); ++k) CHECK(values[k] == i + int64_t(k) * n);
      seen.insert(values.begin(), values.end());
    }
    CHECK(std::vector<int64_t>(seen.begin(), seen.end()) == iota(0, 20));
    CHECK(total_cardinality == 20);
  }
  // Shards of a shuffled input still partition it when every shard reads the same
  // iteration of the shuffle.
  auto shuffled = Dataset::range(50).shuffle(16, /*seed=*/9);
  std::multiset<int64_t> seen;
  for (int64_t i = 0; i < 4; ++i) {
    auto it = shuffled.shard(4, i).make_iterator(/*iteration=*/0);
    auto v = ints(it);
    seen.insert(v.begin(), v.end());
  }
  CHECK(std::vector<int64_t>(seen.begin(), seen.end()) == iota(0, 50));
  CHECK_THROWS_WITH(Dataset::range(5).shard(2, 2), Catch::Contains("index 2 outside [0, 2)"));
  CHECK_THROWS_WITH(Dataset::range(5).shard(0, 0), Catch::Contains("num_shards must be >= 1"));
}

TEST_CASE("filter, enumerate and zip", "[data]") {
  auto even = Dataset::range(10).filter([](const Element& e) { return e[0].item<int64_t>() % 2 == 0; });
  CHECK(ints(even) == std::vector<int64_t>{0, 2, 4, 6, 8});
  CHECK(even.cardinality() == data::kUnknownCardinality);

  auto en = Dataset::range(5, 8).enumerate(100);
  CHECK(ints(en, 0) == std::vector<int64_t>{100, 101, 102});
  CHECK(ints(en, 1) == std::vector<int64_t>{5, 6, 7});

  auto z = Dataset::zip({Dataset::range(5), Dataset::range(10, 13), Dataset::range(20, 30)});
  CHECK(z.cardinality() == 3);
  CHECK(ints(z, 0) == std::vector<int64_t>{0, 1, 2});
  CHECK(ints(z, 1) == std::vector<int64_t>{10, 11, 12});
  CHECK(ints(z, 2) == std::vector<int64_t>{20, 21, 22});
  CHECK(Dataset::zip({Dataset::range(5).repeat(), Dataset::range(3)}).cardinality() == 3);
}

TEST_CASE("map transforms elements and is deterministic across num_parallel_calls", "[data]") {
  // Uneven work per element makes parallel workers finish out of order.
  auto fn = [](const Element& e) {
    const int64_t v = e[0].item<int64_t>();
    if (v % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    return Element{e[0] * e[0], Tensor::from_vector(std::vector<float>{float(v) + 0.5f}, Shape{})};
  };
  auto base = Dataset::range(300).shuffle(64, /*seed=*/3);
  std::vector<std::string> reference;
  {
    auto it = base.map(fn).batch(7).make_iterator(0);
    reference = testing::drain(it);
  }
  REQUIRE(reference.size() == 43);
  for (int64_t p : {int64_t(2), int64_t(3), int64_t(8), data::kAutotune}) {
    auto it = base.map(fn, p).batch(7).make_iterator(0);
    CHECK(testing::drain(it) == reference);
    auto it2 = base.map(fn, p).prefetch(3).batch(7).make_iterator(0);
    CHECK(testing::drain(it2) == reference);
  }
  auto squares = ints(Dataset::range(6).map(fn, 4));
  CHECK(squares == std::vector<int64_t>{0, 1, 4, 9, 16, 25});
  CHECK_THROWS_WITH(Dataset::range(3).map(fn, 0), Catch::Contains("num_parallel_calls"));
}

TEST_CASE("shuffle is a seeded permutation, reshuffled on each iteration", "[data]") {
  auto make = [](uint64_t seed, bool reshuffle = true) {
    return Dataset::range(100).shuffle(20, seed, reshuffle);
  };
  auto a = ints(make(1));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota(0, 100));
  CHECK(a != iota(0, 100));
  CHECK(ints(make(1)) == a);      // same seed, fresh dataset: same order
  CHECK(ints(make(2)) != a);      // another seed: another order

  // Each iteration of one dataset reshuffles, reproducibly.
  auto ds = make(1);
  auto first = ints(ds);
  auto second = ints(ds);
  CHECK(first == a);
  CHECK(second != first);
  auto again = ds.make_iterator(1);
  CHECK(ints(again) == second);

  auto fixed = make(1, /*reshuffle=*/false);
  CHECK(ints(fixed) == ints(fixed));

  // Across the epochs of a repeat.
  auto epochs = ints(make(4).repeat(3));
  REQUIRE(epochs.size() == 300);
  std::vector<int64_t> e0(epochs.begin(), epochs.begin() + 100), e1(epochs.begin() + 100, epochs.begin() + 200);
  CHECK(e0 != e1);
  std::sort(e1.begin(), e1.end());
  CHECK(e1 == iota(0, 100));
  auto still = ints(make(4, false).repeat(2));
  CHECK(std::vector<int64_t>(still.begin(), still.begin() + 100) ==
        std::vector<int64_t>(still.begin() + 100, still.end()));

  // A buffer of one keeps the input order; a buffer as large as the data mixes globally.
  CHECK(ints(Dataset::range(30).shuffle(1, 5)) == iota(0, 30));
  auto global = ints(Dataset::range(1000).shuffle(1000, 5));
  const auto high = std::count_if(global.begin(), global.begin() + 100, [](int64_t v) { return v >= 500; });
  CHECK(high >= 30);
  CHECK(high <= 70);
  CHECK_THROWS_WITH(Dataset::range(3).shuffle(0, 1), Catch::Contains("buffer_size must be >= 1"));
}

TEST_CASE("cache remembers the first complete pass", "[data]") {
  auto starts = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::from_generator([starts] {
              starts->fetch_add(1);
              auto i = std::make_shared<int64_t>(0);
              return [i]() -> std::optional<Element> {
                if (*i >= 6) return std::nullopt;
                return Element{Tensor::from_vector(std::vector<int64_t>{(*i)++}, Shape{})};
              };
            }).cache();
  CHECK(ints(ds) == iota(0, 6));
  CHECK(ints(ds) == iota(0, 6));
  CHECK(ints(ds.repeat(3)).size() == 18);
  CHECK(starts->load() == 1);

  // An interrupted pass does not fill the cache.
  auto ds2 = Dataset::from_generator([starts] {
               starts->fetch_add(1);
               auto i = std::make_shared<int64_t>(0);
               return [i]() -> std::optional<Element> {
                 if (*i >= 4) return std::nullopt;
                 return Element{Tensor::from_vector(std::vector<int64_t>{(*i)++}, Shape{})};
               };
             }).cache();
  starts->store(0);
  {
    auto it = ds2.make_iterator();
    it.next();
  }
  CHECK(ints(ds2) == iota(0, 4));
  CHECK(ints(ds2) == iota(0, 4));
  CHECK(starts->load() == 2);
}

TEST_CASE("a dataset is iterated independently from several threads", "[data]") {
  auto ds = Dataset::range(200).shuffle(50, 8, /*reshuffle_each_iteration=*/false).map(
      [](const Element& e) { return Element{e[0] + e[0]}; }, 2).batch(16).prefetch(2);
  const auto expected = ints(ds);
  std::vector<std::vector<int64_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = ints(ds); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == expected);
}

TEST_CASE("auto_shard follows its policy", "[data]") {
  auto ds = Dataset::range(12).batch(2).prefetch(1);
  CHECK(ints(ds.auto_shard(2, 0, data::AutoShardPolicy::Off)) == iota(0, 12));
  auto sharded = ds.auto_shard(3, 1, data::AutoShardPolicy::Data);
  CHECK(ints(sharded) == std::vector<int64_t>{2, 3, 8, 9});
  // The shard goes below the trailing prefetch (each worker prefetches its own batches).
  CHECK(sharded.describe().rfind("prefetch(1) <- shard(3, 1) <- batch(2)", 0) == 0);
  CHECK(ints(ds.auto_shard(3, 1, data::AutoShardPolicy::Auto)) == std::vector<int64_t>{2, 3, 8, 9});
  CHECK_THROWS_WITH(ds.auto_shard(2, 0, data::AutoShardPolicy::File),
                    Catch::Contains("reads no files"));
  CHECK_THROWS_WITH(ds.auto_shard(2, 2, data::AutoShardPolicy::Data), Catch::Contains("outside [0, 2)"));
}

TEST_CASE("InputContext splits the global batch across replicas", "[data]") {
  data::InputContext ctx(2, 1, 4);
  CHECK(ctx.num_input_pipelines() == 2);
  CHECK(ctx.input_pipeline_id() == 1);
  CHECK(ctx.num_replicas_in_sync() == 4);
  CHECK(ctx.get_per_replica_batch_size(64) == 16);
  CHECK_THROWS_WITH(ctx.get_per_replica_batch_size(66),
                    Catch::Contains("66") && Catch::Contains("not divisible") && Catch::Contains("4"));
  CHECK(data::InputContext().get_per_replica_batch_size(7) == 7);
  CHECK_THROWS_WITH(data::InputContext(2, 2, 1), Catch::Contains("input_pipeline_id 2"));
  CHECK_THROWS_WITH(data::InputContext(1, 0, 0), Catch::Contains("num_replicas_in_sync"));
  CHECK(data::auto_shard_policy_from_name("DATA") == data::AutoShardPolicy::Data);
  CHECK(std::string(data::auto_shard_policy_name(data::AutoShardPolicy::File)) == "file");
  CHECK_THROWS_WITH(data::auto_shard_policy_from_name("rows"), Catch::Contains("unknown policy 'rows'"));
}

TEST_CASE("describe lists the stages", "[data]") {
  auto ds = Dataset::range(10).shuffle(5, 1).map([](const Element& e) { return e; }, 2).batch(3).prefetch(2);
  CHECK(ds.describe() ==
        "prefetch(2) <- batch(3) <- map(num_parallel_calls=2) <- shuffle(5, seed=1) <- range(0, 10, 1)");
}
