// strata-bench's measurement kit: timing with warm-up and repetitions (median and spread),
// results that carry a same-run baseline, and the registry of suites.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace strata::bench {

struct Options {
  bool quick = false;  // brief runs: checks that suites work, numbers are rough
  int threads = 0;     // intra-op threads used (0: strata's default)
  std::string device = "cuda:0";  // the gpu suite's device
  // --filter: only the rows whose name contains this text (empty: every row). The ops suite
  // skips measuring the others; strata-bench drops the other suites' non-matching rows.
  std::string filter;
  bool selects(const std::string& name) const { return filter.empty() || name.find(filter) != std::string::npos; }
};

// One figure and the baseline it is compared with, measured in the same run.
struct Result {
  std::string suite, name;
  double value = 0;        // higher is better unless lower_is_better
  std::string unit;        // "GFLOP/s", "GB/s", "us", "steps/s", ...
  double spread = 0;       // (max - min) / median of the repetitions, as a fraction
  std::string baseline;    // what the baseline is ("OpenBLAS sgemm", "memcpy", ...)
  double baseline_value = 0;
  bool lower_is_better = false;
  // Further figures of the same measurement (e.g. algbw next to busbw), printed at the end
  // of the row and written to JSON under "extra".
  std::vector<std::pair<std::string, double>> extra = {};
  std::string note = {};  // a word on how it was measured (e.g. the algorithm strata chose)
  // Set when the measurement could not be made (e.g. an op without a kernel on the device):
  // the row is printed and written with this message, and strata-bench exits 1.
  std::string error = {};
  // strata relative to the baseline: > 1 means strata is better.
  double ratio() const {
    if (baseline_value <= 0 || value <= 0) return 0;
    return lower_is_better ? baseline_value / value : value / baseline_value;
  }
};

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;
  double spread() const { return median_s > 0 ? (max_s - min_s) / median_s : 0; }
};

// The median, minimum and maximum of samples (not empty).
Timing summarize(std::vector<double> samples);

// Runs fn `warmup` times, then `reps` timed repetitions of `inner` calls each; returns the
// per-call time statistics.
Timing time_it(const std::function<void()>& fn, int reps, int inner = 1, int warmup = 2);

using Suite = std::function<std::vector<Result>(const Options&)>;
struct SuiteEntry {
  std::string name, description;
  Suite run;
};
const std::vector<SuiteEntry>& suites();

std::vector<Result> ops_suite(const Options& options);
std::vector<Result> autograd_suite(const Options& options);
std::vector<Result> data_suite(const Options& options);
std::vector<Result> collectives_suite(const Options& options);
std::vector<Result> train_suite(const Options& options);
std::vector<Result> gpu_suite(const Options& options);

}  // namespace strata::bench

namespace strata::nn {
class Sequential;
}
namespace strata::distribute {
class Strategy;
}

namespace strata::bench {

// The training workloads shared by the train and gpu suites: the MLP 784-512-512-10 or
// the MNIST CNN (conv3x3-32, conv3x3-64, maxpool, dense 128, dense 10), and the median
// steps/s of `steps` SGD steps under `strategy` on fixed random data (the strategy's
// devices synchronised before each repetition's clock is read).
nn::Sequential make_model(bool cnn);
// The training loop of that workload under `strategy`, built once: each call runs `steps`
// SGD steps on one fixed batch and synchronises the strategy's devices.
std::function<void()> make_trainer(distribute::Strategy& strategy, bool cnn, int64_t batch, int steps);
// `replicas` independent trainings of batch / replicas each on threads of their own, no
// communication: the bound of data-parallel training at this global batch
// (bench/suite_train.cc).
std::function<void()> make_independent_trainer(bool cnn, int64_t batch, int replicas, int steps);
double steps_per_second(distribute::Strategy& strategy, bool cnn, int64_t batch, int steps, int reps);

}  // namespace strata::bench
