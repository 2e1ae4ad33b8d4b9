// Input pipeline throughput, next to a plain loop moving the same bytes. Hidden: run with
//   build/bin/strata_data_tests "[.bench]"
#include <chrono>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>

#include <strata/data/mnist.h>
#include <strata/data/synthetic.h>
#include "tests/data/data_test_util.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Examples per second of the fastest of `epochs` passes over `ds` (after an untimed
// warm-up pass): the machine is shared and noisy, the best pass is the stable figure.
double pipeline_rate(const data::Dataset& ds, int epochs, int64_t expected_per_epoch) {
  volatile float sink = 0;
  for (auto& b : ds) sink = sink + b[0].data<float>()[0];
  double best = 0;
  for (int e = 0; e < epochs; ++e) {
    int64_t seen = 0;
    const auto t0 = Clock::now();
    for (auto& b : ds) {
      sink = sink + b[0].data<float>()[0];
      seen += b[0].dim(0);
    }
    best = std::max(best, double(seen) / since(t0));
    REQUIRE(seen == expected_per_epoch);
  }
  return best;
}

}  // namespace

TEST_CASE("pipeline throughput: mnist -> shuffle(10000) -> batch(128) -> prefetch(2)", "[.bench]") {
  data::LabeledArrays arrays;
  std::string source;
  const auto dir = testing::shared_dir() / "data" / "mnist";
  if (!testing::shared_dir().empty() && std::filesystem::exists(dir / "t10k-images-idx3-ubyte.gz")) {
    const auto t0 = Clock::now();
    arrays = data::read_mnist(dir.string(), data::Split::Test);
    source = "MNIST t10k (loaded and decoded in " + std::to_string(since(t0) * 1e3) + " ms)";
  } else {
    arrays = data::make_synthetic_classification({.num_examples = 10000, .feature_shape = data::kSyntheticImageShape});
    source = "synthetic 10000 x [28,28,1] (no MNIST files found)";
  }
  const int64_t n = arrays.size();
  const int64_t row = 28 * 28;
  const int64_t batch = 128;
  const int epochs = 10;

  // Baseline: a plain loop that gathers the same rows in a shuffled order into a fresh
  // batch buffer (what any input pipeline must at least do).
  const float* images = arrays.features.data<float>();
  const int64_t* labels = arrays.labels.data<int64_t>();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(1);
  volatile float sink = 0;
  double baseline = 0;
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = Clock::now();
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t start = 0; start < n; start += batch) {
      const int64_t rows = std::min(batch, n - start);
      std::vector<float> x(static_cast<size_t>(rows * row));
      std::vector<int64_t> y(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t src = order[size_t(start + r)];
        std::memcpy(x.data() + r * row, images + src * row, size_t(row) * sizeof(float));
        y[size_t(r)] = labels[src];
      }
      sink = sink + x[0] + float(y[0]);
    }
    baseline = std::max(baseline, double(n) / since(t0));
  }

  auto ds = arrays.dataset();
  const double full = pipeline_rate(ds.shuffle(10000, 1).batch(batch).prefetch(2), epochs, n);
  const double no_prefetch = pipeline_rate(ds.shuffle(10000, 1).batch(batch), epochs, n);
  const double no_shuffle = pipeline_rate(ds.batch(batch).prefetch(2), epochs, n);

  // With a consumer that computes for a while per batch (a training step stand-in),
  // prefetch overlaps producing the next batch with that work.
  const auto consume_rate = [&](const data::Dataset& d, double work_us) {
    int64_t seen = 0;
    volatile double acc = 0;
    const auto t = Clock::now();
    for (auto& b : d) {
      seen += b[0].dim(0);
      const auto w0 = Clock::now();
      while (since(w0) * 1e6 < work_us) acc = acc + 1.0;
    }
    REQUIRE(seen == n);
    return double(seen) / since(t);
  };
  const double work_us = 150;
  const double step_only = double(n) / (double((n + batch - 1) / batch) * work_us * 1e-6);
  double overlap = 0, serial = 0;
  for (int e = 0; e < epochs; ++e) {
    overlap = std::max(overlap, consume_rate(ds.shuffle(10000, 1).batch(batch).prefetch(2), work_us));
    serial = std::max(serial, consume_rate(ds.shuffle(10000, 1).batch(batch), work_us));
  }

  // Checkpointing the canonical pipeline mid-epoch: state size and restore time.
  auto canonical = ds.shuffle(10000, 1).batch(batch).prefetch(2);
  auto it = canonical.make_iterator();
  for (int i = 0; i < 40; ++i) REQUIRE(it.next().has_value());
  const auto t_save = Clock::now();
  const auto state = it.save();
  const double save_ms = since(t_save) * 1e3;
  const size_t state_chars = state.to_string().size();
  auto resumed = canonical.make_iterator();
  const auto t_restore = Clock::now();
  resumed.restore(state);
  const double restore_ms = since(t_restore) * 1e3;
  CHECK(testing::element_str(*resumed.next()) == testing::element_str(*it.next()));

  std::cout << "data pipeline over " << source << ", best of " << epochs << " epochs, batch "
            << batch << ":\n"
            << "  plain gather loop (baseline)               " << baseline << " examples/s\n"
            << "  shuffle(10000).batch(128).prefetch(2)      " << full << " examples/s ("
            << full / baseline << "x baseline)\n"
            << "  shuffle(10000).batch(128)                  " << no_prefetch << " examples/s\n"
            << "  batch(128).prefetch(2)                     " << no_shuffle << " examples/s\n"
            << "with a consumer computing " << work_us << " us per batch (bound: " << step_only
            << " examples/s):\n"
            << "  shuffle(10000).batch(128).prefetch(2)      " << overlap << " examples/s\n"
            << "  shuffle(10000).batch(128)                  " << serial << " examples/s\n"
            << "checkpoint after 40 batches: state " << state.words.size() << " words ("
            << state_chars << " chars as text), save " << save_ms << " ms, restore " << restore_ms
            << " ms\n";
  CHECK(full > 0);
}
