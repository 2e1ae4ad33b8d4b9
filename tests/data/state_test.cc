// Iterator save/restore: a restored iterator yields exactly the remaining sequence.
#include <functional>

#include <strata/core/ops.h>
#include <strata/data/dataset.h>
#include <strata/data/dataset_node.h>
#include "tests/data/data_test_util.h"

using namespace strata;
using data::Dataset;
using data::Element;
using data::IteratorState;

namespace {

using Builder = std::function<Dataset()>;

// Reads `consumed` elements, saves, reads the rest; then restores the state (through its
// string form) into an iterator of a freshly built pipeline — as a resumed process would
// — and checks it yields the same rest. Returns the size of the rest.
size_t check_resume(const Builder& build, int64_t consumed, uint64_t iteration = 0) {
  INFO("pipeline " << build().describe() << ", saved after " << consumed << " elements");
  auto ds = build();
  auto it = ds.make_iterator(iteration);
  auto head = testing::take_n(it, consumed);
  const IteratorState state = it.save();
  const auto rest = testing::drain(it);

  auto resumed = build().make_iterator(/*iteration=*/12345);  // overwritten by restore
  resumed.restore(IteratorState::from_string(state.to_string()));
  CHECK(testing::drain(resumed) == rest);

  // Restoring into an iterator that already ran rewinds it.
  auto used = build().make_iterator(iteration);
  testing::drain(used);
  used.restore(state);
  CHECK(testing::drain(used) == rest);
  return rest.size();
}

Element square_first(const Element& e) { return Element{e[0] * e[0], e[0]}; }

}  // namespace

TEST_CASE("state round-trips through its string form", "[data][state]") {
  IteratorState s{{1, -2, 9223372036854775807LL, -9223372036854775807LL - 1}};
  CHECK(IteratorState::from_string(s.to_string()) == s);
  CHECK_THROWS_WITH(IteratorState::from_string("hello"), Catch::Contains("not a dataset iterator state"));
  CHECK_THROWS_WITH(IteratorState::from_string("sdata1 3 1 2"), Catch::Contains("ends early"));
  CHECK_THROWS_WITH(IteratorState::from_string("sdata1 1 1 2"), Catch::Contains("trailing"));
  CHECK_THROWS_WITH(IteratorState::from_string("sdata1 1 x"), Catch::Contains("not an int64"));
}

TEST_CASE("restore mid-epoch resumes simple pipelines exactly", "[data][state]") {
  const Builder plain = [] { return Dataset::range(23).batch(4); };
  for (int64_t k = 0; k <= 7; ++k) check_resume(plain, k);

  const Builder counting = [] {
    return Dataset::range(40).skip(3).shard(3, 1).enumerate(5).take(9).filter(
        [](const Element& e) { return e[1].item<int64_t>() % 4 != 0; });
  };
  for (int64_t k = 0; k <= 8; ++k) check_resume(counting, k);

  const Builder zipped = [] {
    return Dataset::zip({Dataset::range(30), Dataset::range(100, 200).shuffle(7, 3)}).batch(4).unbatch();
  };
  for (int64_t k = 0; k <= 31; k += 3) check_resume(zipped, k);
}

TEST_CASE("restore resumes shuffle, repeat and reshuffled epochs", "[data][state]") {
  const Builder epochs = [] { return Dataset::range(37).shuffle(10, 5).repeat(3).batch(4); };
  for (int64_t k = 0; k <= 28; ++k) check_resume(epochs, k);
  // The same at a later iteration of the dataset (another shuffle order).
  for (int64_t k : {0, 5, 13}) check_resume(epochs, k, /*iteration=*/4);

  // Shuffle over an endless input: the replay is bounded by the buffer, not the epoch.
  const Builder endless = [] { return Dataset::range(40).repeat().shuffle(16, 2).take(300); };
  for (int64_t k : {0, 1, 15, 16, 17, 100, 299, 300}) check_resume(endless, k);

  // A buffer larger than the data.
  const Builder big = [] { return Dataset::range(20).shuffle(1000, 2).repeat(2); };
  for (int64_t k : {0, 3, 19, 20, 21, 39, 40}) check_resume(big, k);
}

TEST_CASE("a restored iteration moves the dataset's count on: the next epochs reshuffle as before", "[data][state]") {
  // One make_iterator() per epoch over a reshuffling pipeline, stopped part-way through
  // epoch 1 and resumed in a fresh process (a new Dataset, its count at 0): epoch 2 must
  // be drawn from iteration 2, as the uninterrupted job's was.
  const Builder build = [] { return Dataset::range(30).shuffle(30, 7).batch(5); };
  const Dataset ds = build();
  std::vector<std::vector<std::string>> epochs;  // each epoch's elements, printed
  for (int e = 0; e < 3; ++e) {
    auto it = ds.make_iterator();
    epochs.push_back(testing::drain(it));
  }
  REQUIRE(epochs[1] != epochs[2]);
  const Dataset original = build();
  auto e0 = original.make_iterator();
  testing::drain(e0);
  auto e1 = original.make_iterator();
  testing::take_n(e1, 2);
  const IteratorState state = e1.save();

  const Dataset resumed = build();
  auto it = resumed.make_iterator();  // iteration 0, replaced by the restore
  it.restore(state);
  CHECK(testing::drain(it) == std::vector<std::string>(epochs[1].begin() + 2, epochs[1].end()));
  auto next_epoch = resumed.make_iterator();
  CHECK(testing::drain(next_epoch) == epochs[2]);
}

TEST_CASE("restore resumes threaded stages, counting only consumed elements", "[data][state]") {
  const Builder pipeline = [] {
    return Dataset::range(50).shuffle(10, 1).repeat(3).map(square_first, 4).batch(5).prefetch(3);
  };
  for (int64_t k : {0, 1, 2, 7, 14, 15, 29, 30}) check_resume(pipeline, k);

  const Builder prefetch_elements = [] {
    return Dataset::range(64).map(square_first, 3).prefetch(8).shuffle(9, 4).prefetch(2);
  };
  for (int64_t k : {0, 1, 5, 31, 63, 64}) check_resume(prefetch_elements, k);

  // Saving a large shuffle buffer costs more than producing an element, so prefetch
  // snapshots its input only every so often and restore replays from the last snapshot.
  const Builder sparse_anchors = [] { return Dataset::range(3000).shuffle(1000, 1).prefetch(4); };
  for (int64_t k : {0, 1, 500, 1701, 2999, 3000}) check_resume(sparse_anchors, k);

  // A state saved with parallel map restores into the sequential form and back.
  auto parallel = Dataset::range(30).map(square_first, 4).prefetch(4);
  auto sequential = Dataset::range(30).map(square_first).prefetch(1);
  auto it = parallel.make_iterator(0);
  testing::take_n(it, 11);
  const auto state = it.save();
  const auto rest = testing::drain(it);
  auto seq_it = sequential.make_iterator();
  seq_it.restore(state);
  CHECK(testing::drain(seq_it) == rest);

  // A restored iterator is itself a range over what remains.
  auto ranged = parallel.make_iterator();
  ranged.restore(state);
  std::vector<std::string> via_range;
  for (auto& e : ranged) via_range.push_back(testing::element_str(e));
  CHECK(via_range == rest);
}

TEST_CASE("restore resumes generators, unbatch and cache", "[data][state]") {
  const Builder gen = [] {
    return Dataset::from_generator([] {
             auto i = std::make_shared<int64_t>(0);
             return [i]() -> std::optional<Element> {
               if (*i >= 10) return std::nullopt;
               const int64_t v = (*i)++;
               return Element{Tensor::from_vector(std::vector<int64_t>{v, v + 100, v + 200}, {3})};
             };
           })
        .unbatch()
        .shuffle(5, 7)
        .batch(4)
        .prefetch(2);
  };
  for (int64_t k = 0; k <= 8; ++k) check_resume(gen, k);

  // Cached epochs: a fresh pipeline (new, empty cache) must rebuild what was cached.
  const Builder cached = [] {
    return Dataset::range(20).shuffle(8, 3).cache().repeat(3).map(square_first, 2);
  };
  for (int64_t k : {0, 5, 20, 27, 45, 60}) check_resume(cached, k);
}

TEST_CASE("restore rejects states of other pipelines and leaves the iterator usable", "[data][state]") {
  auto ds = Dataset::range(10).batch(2);
  auto it = ds.make_iterator();
  testing::take_n(it, 2);

  auto other = Dataset::range(10).batch(3).make_iterator();
  other.next();
  CHECK_THROWS_WITH(it.restore(other.save()), Catch::Contains("does not match this pipeline"));
  auto shape = Dataset::range(10).shuffle(3, 1).make_iterator();
  CHECK_THROWS_WITH(it.restore(shape.save()), Catch::Contains("does not match this pipeline"));
  CHECK_THROWS_WITH(it.restore(IteratorState{{1, 2, 3}}), Catch::Contains("not a dataset iterator state"));
  auto truncated = it.save();
  truncated.words.pop_back();
  CHECK_THROWS_WITH(it.restore(truncated), Catch::Contains("ends early"));

  // Still where it was.
  CHECK(testing::ints(it) == testing::iota(4, 10));

  // A state saved at the end restores to the end.
  auto end_state = it.save();
  auto again = ds.make_iterator();
  again.restore(end_state);
  CHECK_FALSE(again.next().has_value());
}

TEST_CASE("restore refuses a read-ahead stage's replay count beyond its snapshot interval", "[data][state]") {
  // Over an endless input a corrupt count would replay without end; the producer
  // snapshots at least every AnchorClock::kMaxInterval elements, so more is corrupt.
  auto ds = Dataset::range(10).repeat().prefetch(2);
  auto it = ds.make_iterator();
  testing::take_n(it, 3);
  IteratorState state = it.save();
  auto resumed = ds.make_iterator();
  resumed.restore(state);  // the genuine state restores
  CHECK(resumed.next()->at(0).item<int64_t>() == 3);
  // The prefetch record is the first after the header (magic, version, fingerprint,
  // iteration): its marker, then the elements since its anchor.
  const int64_t since = state.words[5];
  CHECK(since >= 0);
  CHECK(since <= data::detail::AnchorClock::kMaxInterval);
  state.words[5] = int64_t(1) << 40;
  CHECK_THROWS_WITH(ds.make_iterator().restore(state), Catch::Contains("prefetch elements since anchor") &&
                                                           Catch::Contains("outside [0, 1024]"));
}
