// ProgressReporter: progress of a long run on stderr — a bar redrawn in place on a
// terminal, plain periodic lines otherwise (logs, CI) — with the step, the loss (and the
// other loop outputs), examples/s and the ETA. The Controller and fit() own one.
//
//   Normal:   a terminal gets a bar redrawn at most 5 times a second; anything else gets
//             one line every `min_interval_seconds` (and at the target), so that a log
//             stays short.
//   Verbose:  one line after every loop, plus the Controller's messages (checkpoints
//             written, ...).
//   Quiet:    nothing at all.
//
// Lines look like
//   train | step 200/300 | loss 0.0111 | 4047 examples/s | 31.6 steps/s | ETA 3s
// and the bar like
//   [================>       ] 200/300 | loss 0.0111 | 4047 examples/s | ETA 3s
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

namespace strata::train {

enum class Verbosity { Quiet, Normal, Verbose };

struct ProgressOptions {
  Verbosity verbosity = Verbosity::Normal;
  // Between two plain lines in Normal mode (a terminal's bar is redrawn more often).
  double min_interval_seconds = 10.0;
  // Where to write (nullptr: stderr).
  std::FILE* stream = nullptr;
  // Draw a bar (true) or plain lines (false); unset: a bar exactly when `stream` is a
  // terminal.
  std::optional<bool> terminal;
};

class ProgressReporter {
 public:
  explicit ProgressReporter(ProgressOptions options = {});
  ~ProgressReporter();  // ends an open bar line
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Starts a phase that runs from `start_step` to `target_step` (rates and the ETA are
  // measured from here).
  void begin(int64_t start_step, int64_t target_step);
  // Reports reaching `step` with the latest outputs ("loss", ... — "steps_per_second" is
  // shown as steps/s) and the measured examples per second (0: unknown, not shown).
  void update(int64_t step, const std::map<std::string, double>& outputs, double examples_per_second);
  // Ends an open bar line and prints `text` on its own line (Normal and Verbose).
  void message(const std::string& text);
  // Like message(), only in Verbose mode.
  void detail(const std::string& text);
  // Ends an open bar line.
  void finish();

  Verbosity verbosity() const { return options_.verbosity; }
  bool terminal() const { return terminal_; }

 private:
  void write_line(const std::string& text);

  ProgressOptions options_;
  std::FILE* stream_;
  bool terminal_;
  bool bar_open_ = false;
  int64_t start_step_ = 0, target_step_ = 0;
  std::chrono::steady_clock::time_point start_, last_print_;
  bool printed_since_begin_ = false;
};

// "1h02m", "3m05s", "12s": a compact duration for ETAs.
std::string format_duration(double seconds);

}  // namespace strata::train
