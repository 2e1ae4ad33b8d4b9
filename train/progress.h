// Progress reporting for long runs on stderr: a redrawn bar on a terminal, plain periodic
// lines otherwise (logs, CI), with step, loss, examples/s and ETA.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace strata::train {

enum class Verbosity { Quiet, Normal, Verbose };

struct ProgressOptions {
  Verbosity verbosity = Verbosity::Normal;
  double min_interval_seconds = 2.0;  // between plain lines (terminals redraw more often)
};

class ProgressReporter {
 public:
  explicit ProgressReporter(ProgressOptions options);
  // Reports reaching `step` of `target` with the latest scalar outputs.
  void update(int64_t step, int64_t target, const std::map<std::string, double>& outputs,
              double examples_per_second);
  // Ends a bar line (before other output) and prints a message line.
  void message(const std::string& text);
  void finish();

 private:
  ProgressOptions options_;
  bool tty_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point start_, last_print_;
  int64_t start_step_ = -1;
};

}  // namespace strata::train
