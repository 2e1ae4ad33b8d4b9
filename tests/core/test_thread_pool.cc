// The intra-op pool: every index covered exactly once, exceptions from any chunk reach
// the caller, nested and concurrent callers never deadlock, and the per-thread limit.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;

TEST_CASE("thread pool: parallel_for covers 0..n exactly once", "[threads]") {
  testing::ThreadCountGuard g(2);
  CHECK(num_threads() == 2);
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(100000)}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::mutex m;
    std::set<std::thread::id> threads;
    // 1 us per item: large n is split across both threads. Each chunk really takes a
    // while, so the woken worker gets its chunk before the caller can run both.
    parallel_for(n, 1000.0, [&](int64_t b, int64_t e) {
      if (e - b > 1000) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      {
        std::lock_guard<std::mutex> lock(m);
        threads.insert(std::this_thread::get_id());
      }
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) REQUIRE(hits[size_t(i)] == 1);
    if (n == 100000) CHECK(threads.size() == 2);
    if (n <= 1) CHECK(threads.size() <= 1);
  }
}

TEST_CASE("thread pool: small work runs inline on the caller", "[threads]") {
  testing::ThreadCountGuard g(2);
  std::set<std::thread::id> threads;
  parallel_for(1000, 1.0, [&](int64_t, int64_t) { threads.insert(std::this_thread::get_id()); });
  CHECK(threads == std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_CASE("thread pool: an exception in any chunk reaches the caller", "[threads][errors]") {
  testing::ThreadCountGuard g(2);
  for (int64_t bad : {int64_t(0), int64_t(99999)}) {
    REQUIRE_THROWS_WITH(parallel_for(100000, 1000.0,
                                     [&](int64_t b, int64_t e) {
                                       if (b <= bad && bad < e) fail("chunk: failed at ", bad);
                                     }),
                        Contains("chunk: failed at " + std::to_string(bad)));
  }
  // The pool still works afterwards.
  std::atomic<int64_t> total{0};
  parallel_for(100000, 1000.0, [&](int64_t b, int64_t e) { total += e - b; });
  CHECK(total == 100000);
}

TEST_CASE("thread pool: nested and concurrent callers neither deadlock nor lose work", "[threads]") {
  testing::ThreadCountGuard g(2);
  std::atomic<int64_t> total{0};
  parallel_for(64, 1e6, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      parallel_for(1000, 1e3, [&](int64_t bb, int64_t ee) { total += ee - bb; });
    }
  });
  CHECK(total == 64 * 1000);
  // Replica-style threads calling ops at once.
  std::vector<std::thread> ts;
  std::vector<Tensor> results(4);
  for (int r = 0; r < 4; ++r) {
    ts.emplace_back([&, r] {
      Tensor x = full({512, 512}, double(r));
      results[size_t(r)] = sum(matmul(x, ones({512, 64})) + exp(zeros({512, 64})));
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 4; ++r) CHECK(results[size_t(r)].item<float>() == float(512.0 * 64 * (512.0 * r + 1)));
}

TEST_CASE("thread pool: the thread-local parallelism limit", "[threads]") {
  testing::ThreadCountGuard g(2);
  CHECK(thread_parallelism_limit() == 0);
  set_thread_parallelism_limit(1);
  std::set<std::thread::id> threads;
  std::mutex m;
  parallel_for(100000, 1000.0, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // time for a worker to join in
    std::lock_guard<std::mutex> lock(m);
    threads.insert(std::this_thread::get_id());
  });
  CHECK(threads.size() == 1);
  set_thread_parallelism_limit(0);
  // Other threads are unaffected by this thread's limit.
  std::thread([] { CHECK(thread_parallelism_limit() == 0); }).join();
}

TEST_CASE("thread pool: resizing", "[threads]") {
  const int previous = num_threads();
  {
    testing::ThreadCountGuard g(3);
    CHECK(num_threads() == 3);
    std::atomic<int64_t> total{0};
    parallel_for(300000, 1000.0, [&](int64_t b, int64_t e) { total += e - b; });
    CHECK(total == 300000);
  }
  set_num_threads(0);  // clamped to one: the caller alone
  CHECK(num_threads() == 1);
  set_num_threads(previous);
}

TEST_CASE("thread pool: parallel_for_parts runs the requested parts, capped by the threads", "[threads]") {
  testing::ThreadCountGuard g(2);
  CHECK(available_threads() == 2);
  for (int parts : {0, 1, 2, 3, 8}) {
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<int> inner;
    parallel_for_parts(10, parts, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(m);
      ranges.emplace_back(b, e);
      inner.push_back(available_threads());  // nested work inside a chunk runs inline
    });
    std::sort(ranges.begin(), ranges.end());
    const size_t expected = size_t(std::clamp(parts, 1, 2));
    REQUIRE(ranges.size() == expected);
    CHECK(ranges.front().first == 0);
    CHECK(ranges.back().second == 10);
    for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i].first == ranges[i - 1].second);
    if (expected > 1) {
      for (int t : inner) CHECK(t == 1);
    }
  }
  CHECK(available_threads() == 2);  // restored after the chunks
  set_thread_parallelism_limit(1);
  CHECK(available_threads() == 1);
  int calls = 0;
  parallel_for_parts(10, 2, [&](int64_t b, int64_t e) {
    ++calls;
    CHECK(b == 0);
    CHECK(e == 10);
  });
  CHECK(calls == 1);
  set_thread_parallelism_limit(0);
}

TEST_CASE("thread pool: back-to-back small jobs and jobs after the workers slept", "[threads]") {
  testing::ThreadCountGuard g(2);
  // Many short jobs in a row (the workers are polling) and jobs after a pause longer than
  // the workers' poll (they sleep): every index is covered once each time.
  for (int round = 0; round < 2000; ++round) {
    if (round % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::atomic<int64_t> total{0};
    parallel_for_parts(64, 2, [&](int64_t b, int64_t e) { total += e - b; });
    REQUIRE(total == 64);
  }
}
