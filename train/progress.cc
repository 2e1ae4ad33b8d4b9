#include <strata/train/progress.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace strata::train {

namespace {

std::string format_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  }
  return buf;
}

ProgressReporter::ProgressReporter(ProgressOptions options)
    : options_(options), stream_(options.stream ? options.stream : stderr) {
  terminal_ = options_.terminal ? *options_.terminal : ::isatty(::fileno(stream_)) == 1;
  start_ = last_print_ = std::chrono::steady_clock::now();
}

ProgressReporter::~ProgressReporter() { finish(); }

void ProgressReporter::begin(int64_t start_step, int64_t target_step) {
  start_step_ = start_step;
  target_step_ = target_step;
  start_ = std::chrono::steady_clock::now();
  printed_since_begin_ = false;
}

void ProgressReporter::update(int64_t step, const std::map<std::string, double>& outputs,
                              double examples_per_second) {
  if (options_.verbosity == Verbosity::Quiet) return;
  const auto now = std::chrono::steady_clock::now();
  const bool done = step >= target_step_;
  const double since_print = std::chrono::duration<double>(now - last_print_).count();
  const bool verbose = options_.verbosity == Verbosity::Verbose;
  const bool bar = terminal_ && !verbose;
  if (!verbose && !done && printed_since_begin_) {
    // Throttle: a bar redraws at most 5 times a second, plain lines every interval.
    if (since_print < (bar ? 0.2 : options_.min_interval_seconds)) return;
  }
  last_print_ = now;
  printed_since_begin_ = true;

  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? double(step - start_step_) / elapsed : 0.0;
  std::ostringstream os;
  if (bar) {
    constexpr int kWidth = 24;
    const double fraction =
        target_step_ > 0 ? std::clamp(double(step) / double(target_step_), 0.0, 1.0) : 1.0;
    const int filled = int(fraction * kWidth);
    os << '[' << std::string(size_t(filled), '=') << (filled < kWidth ? ">" : "")
       << std::string(size_t(std::max(0, kWidth - filled - 1)), ' ') << "] " << step << '/' << target_step_;
  } else {
    os << "train | step " << step << '/' << target_step_;
  }
  for (const auto& [name, value] : outputs) {
    if (name == "steps_per_second") continue;
    os << " | " << name << ' ' << format_value(value);
  }
  if (examples_per_second > 0) os << " | " << int64_t(std::llround(examples_per_second)) << " examples/s";
  const auto sps = outputs.find("steps_per_second");
  if (!bar && sps != outputs.end()) os << " | " << format_value(sps->second) << " steps/s";
  if (!done && rate > 0) os << " | ETA " << format_duration(double(target_step_ - step) / rate);

  if (bar) {
    std::fprintf(stream_, "\r%s\033[K", os.str().c_str());
    bar_open_ = true;
    if (done) finish();
  } else {
    write_line(os.str());
  }
  std::fflush(stream_);
}

void ProgressReporter::message(const std::string& text) {
  if (options_.verbosity == Verbosity::Quiet) return;
  write_line(text);
}

void ProgressReporter::detail(const std::string& text) {
  if (options_.verbosity != Verbosity::Verbose) return;
  write_line(text);
}

void ProgressReporter::write_line(const std::string& text) {
  finish();
  std::fprintf(stream_, "%s\n", text.c_str());
  std::fflush(stream_);
}

void ProgressReporter::finish() {
  if (!bar_open_) return;
  std::fputc('\n', stream_);
  std::fflush(stream_);
  bar_open_ = false;
}

}  // namespace strata::train
