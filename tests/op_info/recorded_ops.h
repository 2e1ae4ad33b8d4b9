// RecordedOps: the ids of the ops run on the calling thread while it is alive, seen through
// core's recording hook (core/recorder.h) — how a test learns which ops a piece of code
// really ran (a golden program's "mean" runs sum and div; cast to the same dtype runs none).
//
// It installs itself as the thread's recorder and forwards every call to the recorder it
// replaced, so an active tape still records. A GradientTape created or destroyed, or a
// StopRecording scope (custom_gradient's forward) entered, while it is alive replaces the
// thread's recorder: use it around plain forward code.
#pragma once

#include <set>
#include <span>

#include <strata/core/recorder.h>

namespace strata::testing {

class RecordedOps final : public Recorder {
 public:
  RecordedOps() : previous_(thread_recorder()) { set_thread_recorder(this); }
  ~RecordedOps() override { set_thread_recorder(previous_); }
  RecordedOps(const RecordedOps&) = delete;
  RecordedOps& operator=(const RecordedOps&) = delete;

  void record(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
              std::span<const Tensor> outputs) override {
    ops_.insert(op);
    if (previous_ != nullptr) previous_->record(op, attrs, inputs, outputs);
  }

  const std::set<OpId>& ops() const { return ops_; }
  bool contains(OpId op) const { return ops_.count(op) != 0; }
  void clear() { ops_.clear(); }

 private:
  Recorder* previous_;
  std::set<OpId> ops_;
};

}  // namespace strata::testing
