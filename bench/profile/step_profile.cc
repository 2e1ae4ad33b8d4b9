// strata-step-profile: runs the train suite's MLP or CNN step (bench/suite_train.cc
// make_trainer: SGD under the default strategy, fixed random inputs) in a loop of its own, so that a profiler
// sees one workload only: `perf record -F 2000 build/bin/strata-step-profile cnn`, then
// `bench/profile/classify.py perf.data` groups the samples by op class (bench/README.md
// "Training-step profile"). Prints steps/s (wall clock) and CPU ms per step (process CPU
// time: on a loaded machine the wall clock includes waiting for a core, CPU time does not).
// `--replicas N` (N > 1) runs the same global batch under MirroredStrategy over N logical
// CPU devices, the train suite's mirrored(N) row; `--one-copy` with one copy of the
// variables (Strategy::set_share_cpu_variables); `--aggregate` with the gradients summed
// in backward (CommunicationOptions::aggregate_gradients_in_backward). `--independent`
// with `--replicas N` runs N independent trainings of the global batch / N instead, with no
// communication at all (the train suite's data-parallel bound, independent(N)).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include "bench/bench.h"
#include <strata/core/thread_pool.h>
#include <strata/distribute/strategy.h>

namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

int usage(const char* why) {
  std::fprintf(stderr, "strata-step-profile: %s\nusage: strata-step-profile mlp|cnn [--steps N] [--threads N] [--replicas N] [--one-copy] [--aggregate] [--independent]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  if (argc < 2) return usage("missing the model (mlp or cnn)");
  const std::string which = argv[1];
  if (which != "mlp" && which != "cnn") return usage(("unknown model '" + which + "'").c_str());
  const bool cnn = which == "cnn";
  int steps = cnn ? 20 : 300;
  int replicas = 1;
  bool one_copy = false, aggregate = false, independent = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--one-copy" || flag == "--aggregate" || flag == "--independent") {
      (flag == "--one-copy" ? one_copy : flag == "--aggregate" ? aggregate : independent) = true;
      continue;
    }
    if ((flag != "--steps" && flag != "--threads" && flag != "--replicas") || i + 1 >= argc) {
      return usage(("bad argument '" + flag + "'").c_str());
    }
    const int v = std::atoi(argv[++i]);
    if (v <= 0) return usage((flag + " needs a positive integer").c_str());
    if (flag == "--steps") steps = v;
    else if (flag == "--replicas") replicas = v;
    else set_num_threads(v);
  }
  try {
    const int64_t batch = cnn ? 64 : 128;
    if (independent && (replicas < 2 || one_copy || aggregate))
      return usage("--independent needs --replicas N (N > 1) and neither --one-copy nor --aggregate");
    std::unique_ptr<distribute::Strategy> mirrored;
    if (replicas > 1 && !independent) {
      distribute::CommunicationOptions comm;
      comm.aggregate_gradients_in_backward = aggregate;
      mirrored = std::make_unique<distribute::MirroredStrategy>(distribute::MirroredStrategy::cpu_devices(replicas),
                                                                distribute::CrossDeviceOps::Default, comm);
      if (one_copy) mirrored->set_share_cpu_variables(true);
    }
    distribute::Strategy& strategy = mirrored ? *mirrored : distribute::DefaultStrategy::instance();
    // The train suite's workload, one step per call (bench/suite_train.cc).
    const std::function<void()> step = independent ? bench::make_independent_trainer(cnn, batch, replicas, 1)
                                                   : bench::make_trainer(strategy, cnn, batch, 1);
    for (int i = 0; i < 3; ++i) step();  // warm-up: slots, caches, the allocator's free lists
    const double cpu0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = process_cpu_seconds() - cpu0;
    std::printf("%s %s=%d threads=%d steps=%d: %.1f steps/s (wall), %.2f ms CPU per step\n", which.c_str(), independent ? "independent" : "replicas", replicas, num_threads(),
                steps, double(steps) / wall, cpu / double(steps) * 1e3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-step-profile: %s\n", e.what());
    return 1;
  }
  return 0;
}
