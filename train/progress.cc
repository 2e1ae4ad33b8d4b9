#include "train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>

namespace strata::train {

ProgressReporter::ProgressReporter(ProgressOptions options)
    : options_(options), tty_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()),
      last_print_(start_ - std::chrono::hours(1)) {}

void ProgressReporter::update(int64_t step, int64_t target, const std::map<std::string, double>& outputs,
                              double examples_per_second) {
  if (options_.verbosity == Verbosity::Quiet) return;
  const auto now = std::chrono::steady_clock::now();
  if (start_step_ < 0) {
    start_step_ = step;
    start_ = now;
  }
  const double since = std::chrono::duration<double>(now - last_print_).count();
  const bool done = step >= target;
  const double interval = tty_ ? 0.2 : options_.min_interval_seconds;
  if (!done && since < interval && options_.verbosity != Verbosity::Verbose) return;
  last_print_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? double(step - start_step_) / elapsed : 0;
  const double eta = rate > 0 ? double(target - step) / rate : 0;
  std::ostringstream os;
  if (tty_) {
    const int width = 24;
    const int filled = target > 0 ? int(double(width) * double(step) / double(target)) : width;
    os << '[' << std::string(size_t(std::min(filled, width)), '=') << std::string(size_t(std::max(0, width - filled)), ' ') << "] ";
  }
  os << "step " << step << '/' << target;
  for (const auto& [k, v] : outputs) os << "  " << k << ' ' << v;
  if (examples_per_second > 0) os << "  " << int64_t(examples_per_second) << " examples/s";
  if (!done && rate > 0) os << "  ETA " << int64_t(eta) << " s";
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", os.str().c_str());
    bar_open_ = true;
    if (done) finish();
  } else {
    std::fprintf(stderr, "%s\n", os.str().c_str());
  }
  std::fflush(stderr);
}

void ProgressReporter::message(const std::string& text) {
  if (options_.verbosity == Verbosity::Quiet) return;
  finish();
  std::fprintf(stderr, "%s\n", text.c_str());
}

void ProgressReporter::finish() {
  if (bar_open_) {
    std::fprintf(stderr, "\n");
    bar_open_ = false;
  }
}

}  // namespace strata::train
