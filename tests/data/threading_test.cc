// Background threads: prompt shutdown, parked threads serving many iterators, and
// exceptions surfacing at the consumer.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <strata/core/ops.h>
#include <strata/data/dataset.h>
#include <strata/data/parked_threads.h>
#include "tests/data/data_test_util.h"

using namespace strata;
using data::Dataset;
using data::Element;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Element slow_identity(const Element& e) {
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  return e;
}

}  // namespace

TEST_CASE("destroying a prefetching iterator mid-epoch stops its threads promptly", "[data][threads]") {
  // An endless input: the threads never run out of work by themselves.
  auto ds = Dataset::range(1000).repeat().map(slow_identity, 3).prefetch(4).map(slow_identity).prefetch(2);
  const auto t0 = Clock::now();
  for (int round = 0; round < 30; ++round) {
    auto it = ds.make_iterator();
    for (int i = 0; i < round % 5; ++i) REQUIRE(it.next().has_value());
    if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // queues fill
  }
  // 30 teardowns, each waiting at most for the element in flight (~0.2 ms per stage).
  CHECK(seconds_since(t0) < 10.0);

  // Destroyed without ever being started, and destroyed on another thread.
  { auto unused = ds.make_iterator(); }
  auto moved = std::make_unique<data::Iterator>(ds.make_iterator());
  REQUIRE(moved->next().has_value());
  std::thread([m = std::move(moved)]() mutable { m.reset(); }).join();
}

TEST_CASE("prefetch bounds how far it reads ahead", "[data][threads]") {
  auto produced = std::make_shared<std::atomic<int64_t>>(0);
  auto ds = Dataset::from_generator([produced] {
              return [produced]() -> std::optional<Element> {
                const int64_t v = produced->fetch_add(1);
                return Element{Tensor::from_vector(std::vector<int64_t>{v}, Shape{})};
              };
            }).prefetch(3);
  auto it = ds.make_iterator();
  REQUIRE(it.next().has_value());
  // The producer runs ahead until the queue holds 3 (one delivered + three queued)...
  const auto t0 = Clock::now();
  while (produced->load() < 4 && seconds_since(t0) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(produced->load() == 4);
  // ...and then waits instead of reading further.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(produced->load() == 4);
  REQUIRE(it.next().has_value());
  while (produced->load() < 5 && seconds_since(t0) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(produced->load() == 5);
}

TEST_CASE("an exception in map surfaces at next() with its message, in order", "[data][threads]") {
  auto fn = [](const Element& e) {
    if (e[0].item<int64_t>() == 7) throw std::runtime_error("bad element 7");
    return e;
  };
  for (int64_t p : {1, 2, 4}) {
    INFO("num_parallel_calls " << p);
    for (bool prefetch : {false, true}) {
      auto ds = Dataset::range(20).map(fn, p);
      if (prefetch) ds = ds.prefetch(3);
      auto it = ds.make_iterator();
      for (int64_t i = 0; i < 7; ++i) {
        auto e = it.next();
        REQUIRE(e.has_value());
        CHECK((*e)[0].item<int64_t>() == i);
      }
      try {
        it.next();
        FAIL("expected the map function's exception");
      } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()) == "bad element 7");
      }
      // The iterator stays failed: the same error again, and no position to save.
      CHECK_THROWS_WITH(it.next(), "bad element 7");
      CHECK_THROWS_WITH(it.save(), Catch::Contains("failed earlier"));
    }
  }
}

TEST_CASE("an exception in a generator surfaces through prefetch and map", "[data][threads]") {
  auto ds = Dataset::from_generator([] {
              auto i = std::make_shared<int64_t>(0);
              return [i]() -> std::optional<Element> {
                if (*i == 3) strata::fail("generator: sensor offline at ", *i);
                return Element{Tensor::from_vector(std::vector<int64_t>{(*i)++}, Shape{})};
              };
            })
                .map([](const Element& e) { return e; }, 2)
                .prefetch(2);
  auto it = ds.make_iterator();
  CHECK(testing::take_n(it, 3).size() == 3);
  CHECK_THROWS_AS(it.next(), strata::Error);
  CHECK_THROWS_WITH(it.next(), "generator: sensor offline at 3");

  // A failing factory, too.
  auto bad = Dataset::from_generator([]() -> data::Generator { throw std::runtime_error("no source"); }).prefetch(1);
  auto it2 = bad.make_iterator();
  CHECK_THROWS_WITH(it2.next(), "no source");

  // restore() clears the failure.
  auto flaky = std::make_shared<std::atomic<bool>>(true);
  auto ds3 = Dataset::range(5).map([flaky](const Element& e) {
               if (flaky->exchange(false)) throw std::runtime_error("transient");
               return e;
             }).prefetch(2);
  auto it4 = ds3.make_iterator();
  CHECK_THROWS_WITH(it4.next(), "transient");
  it4.restore(ds3.make_iterator().save());
  CHECK(testing::ints(it4) == testing::iota(0, 5));
}

TEST_CASE("many short-lived threaded iterators (run under ThreadSanitizer in CI)", "[data][threads]") {
  auto ds = Dataset::range(64).shuffle(16, 1).map([](const Element& e) { return Element{e[0] + e[0]}; }, 3)
                .batch(4)
                .prefetch(2)
                .unbatch()
                .prefetch(1);
  auto reference = ds.make_iterator(0);
  const auto full = testing::ints(reference);
  REQUIRE(full.size() == 64);
  for (int round = 0; round < 40; ++round) {
    auto it = ds.make_iterator(0);
    auto part = testing::take_n(it, round % 17);
    if (round % 4 == 0) {
      auto state = it.save();
      auto it2 = ds.make_iterator();
      it2.restore(state);
      auto rest = testing::ints(it2);
      CHECK(std::vector<int64_t>(full.begin() + int64_t(part.size()), full.end()) == rest);
    }
  }
}

TEST_CASE("parked threads run every task at once, whether they start or reuse a thread", "[data][threads]") {
  // Each wave's tasks wait for one another: were two tasks ever given to one thread (an
  // idle thread claimed twice), the wave could not complete.
  for (int wave = 0; wave < 3; ++wave) {
    INFO("wave " << wave);
    const int n = 6 + 2 * wave;  // more than the threads parked by the previous wave
    struct Meeting {             // shared: outlives this scope if a task is late
      std::mutex mu;
      std::condition_variable cv;
      int started = 0, finished = 0;
      bool all_met = true;
    };
    auto m = std::make_shared<Meeting>();
    for (int i = 0; i < n; ++i) {
      data::detail::run_on_parked_thread([m, n] {
        std::unique_lock lk(m->mu);
        ++m->started;
        m->cv.notify_all();
        if (!m->cv.wait_for(lk, std::chrono::seconds(20), [&] { return m->started == n; })) m->all_met = false;
        ++m->finished;
        m->cv.notify_all();
      });
    }
    std::unique_lock lk(m->mu);
    REQUIRE(m->cv.wait_for(lk, std::chrono::seconds(30), [&] { return m->finished == n; }));
    CHECK(m->all_met);
  }
}

TEST_CASE("prefetching iterators back to back and side by side deliver every element", "[data][threads]") {
  auto ds = Dataset::range(200).shuffle(50, 3).batch(7).prefetch(2);
  auto first = ds.make_iterator(0);
  const auto expected = testing::drain(first);
  // Back to back: each epoch's producer is a parked thread the previous epoch left.
  for (int epoch = 0; epoch < 20; ++epoch) {
    auto it = ds.make_iterator(0);
    CHECK(testing::drain(it) == expected);
  }
  // Side by side, consumed in turns: each iterator has its own producer.
  std::vector<data::Iterator> its;
  for (int i = 0; i < 5; ++i) its.push_back(ds.make_iterator(0));
  std::vector<std::vector<std::string>> got(its.size());
  for (bool any = true; any;) {
    any = false;
    for (size_t i = 0; i < its.size(); ++i) {
      if (auto e = its[i].next()) {
        got[i].push_back(testing::element_str(*e));
        any = true;
      }
    }
  }
  for (const auto& g : got) CHECK(g == expected);
}

// ThreadSanitizer does not support a child that starts threads after a multi-threaded
// fork (it ends such a child), so this test is left out of that build.
#if !defined(__SANITIZE_THREAD__)
TEST_CASE("a child forked after prefetching starts producers of its own", "[data][threads]") {
  auto ds = Dataset::range(50).batch(5).prefetch(2);
  auto it = ds.make_iterator(0);
  const auto expected = testing::drain(it);  // leaves a parked thread in this process
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      auto again = ds.make_iterator(0);
      ::_exit(testing::drain(again) == expected ? 0 : 1);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  pid_t done = 0;
  while ((done = ::waitpid(child, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (done == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL("the child's prefetching iterator did not finish (its tasks went to its parent's threads)");
  }
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif
