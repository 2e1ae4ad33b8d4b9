// strata-bench: op, autograd, training-step, collective and data-pipeline benchmarks, each
// figure next to a baseline measured in the same run (these machines are shared and noisy,
// so ratios are what count).
//
//   strata-bench [SUITE...] [--quick] [--json FILE] [--threads N] [--device cuda:N] [--filter TEXT]
//
// The gpu suite runs on --device (default cuda:0); without a CUDA device it is skipped
// when no suite is named, and fails when it is named.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/collectives_worker.h"
#include <strata/core/stream.h>
#include <strata/core/thread_pool.h>

using namespace strata;

int main(int argc, char** argv) {
  CLI::App app{"strata-bench: benchmarks with same-run baselines"};
  std::vector<std::string> names;
  std::string json_path;
  bench::Options options;
  std::vector<std::string> known;
  for (const auto& s : bench::suites()) known.push_back(s.name);
  app.add_option("suites", names, "suites to run (default: all)")->check(CLI::IsMember(known));
  app.add_flag("--quick", options.quick, "run every suite briefly (smoke test)");
  app.add_option("--json", json_path, "also write the results as JSON");
  app.add_option("--threads", options.threads, "intra-op threads (default: STRATA_NUM_THREADS or all cores)");
  app.add_option("--device", options.device, "the gpu suite's device (default cuda:0)");
  app.add_option("--filter", options.filter,
                 "only the benchmarks whose name contains TEXT (the ops suite skips measuring the others)");
  // Hidden: the collectives suite re-executes this program as its cross-process workers.
  std::string worker_spec;
  app.add_option("--collectives-worker", worker_spec)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!worker_spec.empty()) return bench::collectives_worker_main(worker_spec);
  if (options.threads > 0) set_num_threads(options.threads);
  options.threads = num_threads();
  nlohmann::json report = {{"threads", options.threads}, {"quick", options.quick}, {"results", nlohmann::json::array()}};
  std::printf("strata-bench: %d intra-op thread(s)%s\n", options.threads, options.quick ? ", quick" : "");
  std::printf("%-12s %-52s %12s %-9s %7s  %-40s %12s %7s\n", "suite", "benchmark", "strata", "unit", "spread",
              "baseline", "baseline", "ratio");
  int failures = 0;
  for (const auto& suite : bench::suites()) {
    if (!names.empty() && std::find(names.begin(), names.end(), suite.name) == names.end()) continue;
    if (suite.name == "gpu" && names.empty()) {
      StreamBackend* cuda = stream_backend(DeviceType::CUDA);
      if (!cuda || cuda->device_count() == 0) {
        std::printf("%-12s (skipped: no CUDA device; name the suite to make that an error)\n", "gpu");
        continue;
      }
    }
    std::vector<bench::Result> results;
    try {
      results = suite.run(options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-bench: suite %s failed: %s\n", suite.name.c_str(), e.what());
      ++failures;
      continue;
    }
    for (const auto& r : results) {
      if (!options.selects(r.name)) continue;
      std::printf("%-12s %-52s %12.4g %-9s %6.1f%%  %-40s %12.4g %6.2fx", r.suite.c_str(), r.name.c_str(), r.value,
                  r.unit.c_str(), 100 * r.spread, r.baseline.c_str(), r.baseline_value, r.ratio());
      for (const auto& [key, v] : r.extra) std::printf("  %s %.4g", key.c_str(), v);
      if (!r.note.empty()) std::printf("  (%s)", r.note.c_str());
      if (!r.error.empty()) {
        std::printf("  FAILED: %s", r.error.c_str());
        ++failures;
      }
      std::printf("\n");
      report["results"].push_back({{"suite", r.suite}, {"name", r.name}, {"value", r.value}, {"unit", r.unit},
                                   {"spread", r.spread}, {"baseline", r.baseline},
                                   {"baseline_value", r.baseline_value}, {"ratio", r.ratio()},
                                   {"lower_is_better", r.lower_is_better}});
      if (!r.extra.empty()) {
        auto& extra = report["results"].back()["extra"];
        for (const auto& [key, v] : r.extra) extra[key] = v;
      }
      if (!r.note.empty()) report["results"].back()["note"] = r.note;
      if (!r.error.empty()) report["results"].back()["error"] = r.error;
    }
    std::fflush(stdout);
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << report.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "strata-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return failures == 0 ? 0 : 1;
}
