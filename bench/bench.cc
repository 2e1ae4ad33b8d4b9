#include "bench/bench.h"

#include <algorithm>

namespace strata::bench {

Timing time_it(const std::function<void()>& fn, int reps, int inner, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> samples;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double>(t1 - t0).count() / inner);
  }
  return summarize(std::move(samples));
}

Timing summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Timing t;
  t.median_s = samples[samples.size() / 2];
  t.min_s = samples.front();
  t.max_s = samples.back();
  return t;
}

const std::vector<SuiteEntry>& suites() {
  static const std::vector<SuiteEntry> all = {
      {"ops", "matmul, elementwise, reductions, softmax, conv2d vs OpenBLAS/Eigen/plain loops", ops_suite},
      {"autograd", "eager overhead per op without/with a tape; backward/forward cost of an MLP", autograd_suite},
      {"data", "input pipeline examples/s vs a plain copy of the same bytes", data_suite},
      {"collectives", "in-process all-reduce algbw/busbw (nccl-tests definitions)", collectives_suite},
      {"train", "training steps/s of the MLP and the MNIST CNN under strategies", train_suite},
      {"gpu", "CUDA device (--device): matmul f32/bf16 vs cuBLAS, add vs device copy, training steps/s vs CPU",
       gpu_suite},
  };
  return all;
}

}  // namespace strata::bench
