// data suite: the input pipeline (shuffle -> batch -> prefetch over MNIST-shaped records)
// against a plain loop that copies the same bytes.
//
// One epoch takes a few milliseconds, about a scheduler time slice on this loaded shared
// machine, so a repetition times several epochs, and the pipeline and the baseline
// repetitions alternate (which goes first alternates too) so that load drifting during
// the run hits both alike. Figures are medians of the repetitions; "paired_ratio" is the
// median of the per-repetition ratios.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "bench/bench.h"
#include <strata/core/ops.h>
#include <strata/data/mnist.h>
#include <strata/data/synthetic.h>

namespace strata::bench {

namespace {

double data_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double data_seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<Result> data_suite(const Options& o) {
  std::vector<Result> out;
  // The real MNIST test images when STRATA_MNIST_DIR points at them, else zeros of the same shape.
  int64_t n = 10000;
  Tensor images = zeros({n, 28, 28, 1});
  Tensor labels = zeros({n}, kInt64);
  std::string source = "mnist-shaped";
  const char* dir = std::getenv("STRATA_MNIST_DIR");
  if (dir && std::filesystem::exists(dir)) {
    data::LabeledArrays arrays = data::read_mnist(dir, data::Split::Test);
    images = arrays.features.contiguous();
    labels = arrays.labels;
    n = images.dim(0);
    source = "mnist";
  }
  const int64_t batch = 128;
  const int reps = o.quick ? 3 : 15;
  const int epochs = o.quick ? 1 : 4;  // per repetition

  data::Dataset ds = data::Dataset::from_tensor_slices({images, labels});
  const data::Dataset pipeline = ds.shuffle(10000, 1).batch(batch).prefetch(2);
  const data::Dataset unprefetched = ds.shuffle(10000, 1).batch(batch);
  int64_t seen = 0;
  const auto run_epochs = [&](const data::Dataset& d) {
    for (int e = 0; e < epochs; ++e) {
      for (auto& b : d) seen += b[0].dim(0);
    }
  };
  // Baseline: copy every record's bytes once into batch buffers, in shuffled order.
  std::vector<float> buf(size_t(batch) * 784);
  const float* src = images.data<float>();
  const auto copy_epochs = [&] {
    for (int e = 0; e < epochs; ++e) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = (i * 7919) % n;
        std::memcpy(buf.data() + (i % batch) * 784, src + j * 784, 784 * 4);
      }
    }
    volatile float sink = buf[0];  // the copies are used: the loop cannot be dropped
    (void)sink;
  };

  run_epochs(pipeline);  // warm-up: pages touched, allocator caches filled
  run_epochs(unprefetched);
  copy_epochs();
  std::vector<double> t_pipe, t_copy, t_plain, ratios;
  for (int r = 0; r < reps; ++r) {
    double tp = 0, tc = 0;
    if (r % 2 == 0) {
      tp = data_seconds([&] { run_epochs(pipeline); });
      tc = data_seconds(copy_epochs);
    } else {
      tc = data_seconds(copy_epochs);
      tp = data_seconds([&] { run_epochs(pipeline); });
    }
    t_pipe.push_back(tp);
    t_copy.push_back(tc);
    t_plain.push_back(data_seconds([&] { run_epochs(unprefetched); }));
    ratios.push_back(tc / tp);
  }
  STRATA_CHECK(seen == 2 * n * epochs * (reps + 1), "data suite: the pipelines delivered ", seen,
               " examples, expected ", 2 * n * epochs * (reps + 1));
  const double examples = double(n) * epochs;
  const double tp = data_median(t_pipe);
  Result r{"data",
           source + " shuffle(10000)->batch(128)->prefetch(2)",
           examples / tp,
           "examples/s",
           (*std::max_element(t_pipe.begin(), t_pipe.end()) - *std::min_element(t_pipe.begin(), t_pipe.end())) / tp,
           "plain shuffled copy of the same bytes",
           examples / data_median(t_copy)};
  r.extra = {{"paired_ratio", data_median(ratios)}, {"without_prefetch", examples / data_median(t_plain)}};
  r.note = std::to_string(reps) + " interleaved repetitions of " + std::to_string(epochs) + " epochs of " +
           std::to_string(n) + " examples";
  out.push_back(std::move(r));
  return out;
}

}  // namespace strata::bench
