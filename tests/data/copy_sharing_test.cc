// Copy sharing (Note [copy sharing] in data/copy_sharing.h): a prefetch producer's row
// copies, partly run by its waiting consumer, give the same elements, states and errors as
// the producer alone.
#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include <strata/core/ops.h>
#include <strata/data/copy_sharing.h>
#include <strata/data/dataset.h>
#include "tests/data/data_test_util.h"

using namespace strata;
using data::Dataset;
using data::Element;
using data::IteratorState;
using data::detail::CopySharing;

namespace {

// 320 rows of 32x32 floats (4 KiB each, so a batch of 32 is shared in several chunks) and
// their labels; every value distinct, so a row copied to the wrong place shows.
Dataset big_rows() {
  const int64_t n = 320;
  std::vector<float> pixels(static_cast<size_t>(n * 32 * 32));
  std::iota(pixels.begin(), pixels.end(), 0.0f);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::iota(labels.begin(), labels.end(), int64_t(0));
  return Dataset::from_tensor_slices(
      {Tensor::from_vector(pixels, Shape{n, 32, 32}), Tensor::from_vector(labels, Shape{n})});
}

}  // namespace

TEST_CASE("CopySharing runs every chunk once, some of them on a helping thread", "[data][threads]") {
  CopySharing sharing;
  constexpr size_t kChunks = 64;
  std::vector<std::atomic<int>> runs(kChunks);
  std::atomic<int> helped{0};
  std::atomic<bool> stop{false};
  const auto producer = std::this_thread::get_id();
  std::thread helper([&] {
    while (!stop.load()) {
      if (!sharing.help()) std::this_thread::yield();
    }
  });
  // The producer's first chunk waits (boundedly) until the helper has run one, so a
  // helper that never gets a chunk fails the test instead of passing by luck.
  std::atomic<bool> first{true};
  sharing.run(kChunks, [&](size_t i) {
    runs[i].fetch_add(1);
    if (std::this_thread::get_id() != producer) {
      helped.fetch_add(1);
      return;
    }
    if (first.exchange(false)) {
      const auto t0 = std::chrono::steady_clock::now();
      while (helped.load() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
        std::this_thread::yield();
      }
    }
  });
  // run() returned: every chunk has run, and the helper's counts are visible.
  stop = true;
  helper.join();
  for (size_t i = 0; i < kChunks; ++i) CHECK(runs[i].load() == 1);
  CHECK(helped.load() >= 1);
  CHECK(helped.load() < int(kChunks));  // the producer ran its first chunk itself

  // Without a helper the producer runs everything; help() with nothing on offer does nothing.
  CHECK_FALSE(sharing.help());
  int alone = 0;
  sharing.run(5, [&](size_t) { ++alone; });
  CHECK(alone == 5);
}

TEST_CASE("shared batch copies give the elements of the unprefetched pipeline", "[data][threads]") {
  const auto plain = big_rows().shuffle(100, 7).batch(32);
  const auto prefetched = big_rows().shuffle(100, 7).batch(32).prefetch(2);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    auto expected_it = plain.make_iterator(epoch);
    const auto expected = testing::drain(expected_it);
    REQUIRE(expected.size() == 10);
    // A consumer that asks at once (it waits, so it helps) and one that is slower than the
    // producer (the queue is full, no one waits).
    auto fast = prefetched.make_iterator(epoch);
    CHECK(testing::drain(fast) == expected);
    auto slow = prefetched.make_iterator(epoch);
    std::vector<std::string> got;
    while (auto e = slow.next()) {
      got.push_back(testing::element_str(*e));
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    CHECK(got == expected);
  }
  // Elements that are not rows of one source (after a map) are stacked, also shared.
  const auto mapped_plain = big_rows().shuffle(100, 7).map([](const Element& e) { return e; }).batch(32);
  const auto mapped = big_rows().shuffle(100, 7).map([](const Element& e) { return e; }).batch(32).prefetch(2);
  auto m_plain = mapped_plain.make_iterator(1);
  auto m = mapped.make_iterator(1);
  CHECK(testing::drain(m) == testing::drain(m_plain));
  // drop_remainder and a remainder batch smaller than a chunk take the same path.
  auto odd_plain = big_rows().take(301).batch(40, true);
  auto odd = big_rows().take(301).batch(40, true).prefetch(1);
  auto a = odd_plain.make_iterator();
  auto b = odd.make_iterator();
  CHECK(testing::drain(b) == testing::drain(a));
  auto tail_plain = big_rows().skip(315).batch(32);
  auto tail = big_rows().skip(315).batch(32).prefetch(2);
  auto c = tail_plain.make_iterator();
  auto d = tail.make_iterator();
  CHECK(testing::drain(d) == testing::drain(c));
}

TEST_CASE("a pipeline with shared copies saves and restores mid-epoch", "[data][threads][state]") {
  const auto build = [] { return big_rows().shuffle(50, 3).batch(32).prefetch(2); };
  for (int64_t k : {0, 1, 4, 9, 10}) {
    INFO("saved after " << k << " batches");
    auto it = build().make_iterator(2);
    testing::take_n(it, k);
    const IteratorState state = it.save();
    const auto rest = testing::drain(it);
    CHECK(int64_t(rest.size()) == 10 - k);
    auto resumed = build().make_iterator();
    resumed.restore(IteratorState::from_string(state.to_string()));
    CHECK(testing::drain(resumed) == rest);
    // The same position in the unprefetched pipeline gives the same rest.
    auto plain = big_rows().shuffle(50, 3).batch(32).make_iterator(2);
    testing::take_n(plain, k);
    CHECK(testing::drain(plain) == rest);
  }
}

TEST_CASE("an error after shared copies reaches the consumer in order", "[data][threads]") {
  auto batches = std::make_shared<std::atomic<int>>(0);
  const auto ds = big_rows()
                      .batch(32)
                      .map([batches](const Element& e) {
                        if (batches->fetch_add(1) == 3) throw std::runtime_error("bad batch 3");
                        return e;
                      })
                      .prefetch(2);
  auto it = ds.make_iterator();
  for (int i = 0; i < 3; ++i) REQUIRE(it.next().has_value());
  CHECK_THROWS_WITH(it.next(), Catch::Contains("bad batch 3"));
  // The failure is sticky (data/dataset.h), not an early end.
  CHECK_THROWS_WITH(it.next(), Catch::Contains("bad batch 3"));
}

TEST_CASE("destroying an iterator while its consumer shares copies does not hang", "[data][threads]") {
  // An endless input: the producer always has a batch to build when the iterator goes.
  const auto ds = big_rows().repeat().shuffle(64, 5).batch(32).prefetch(2);
  for (int round = 0; round < 40; ++round) {
    auto it = ds.make_iterator();
    for (int i = 0; i < round % 6; ++i) REQUIRE(it.next().has_value());
    if (round % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Destroyed on another thread than the one that consumed.
  auto moved = std::make_unique<data::Iterator>(ds.make_iterator());
  REQUIRE(moved->next().has_value());
  std::thread([m = std::move(moved)]() mutable { m.reset(); }).join();
}
