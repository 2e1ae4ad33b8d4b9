#include <strata/distribute/gradient_accumulator.h>

#include <unordered_map>
#include <unordered_set>

#include <strata/autograd/gradient_hook.h>
#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/distribute/gradient_reducer.h>

namespace strata::distribute {

namespace {

// Stands between the tape and the replica's reducer in the last micro-batch: each
// variable's gradient reaches the reducer as its total.
class TotalsHook final : public autograd::GradientReadyHook {
 public:
  TotalsHook(autograd::GradientReadyHook& reducer, const std::vector<autograd::Variable>& variables,
             const std::vector<Tensor>& earlier)
      : reducer_(reducer),
        variables_(variables),
        earlier_(earlier),
        reported_(variables.size(), false),
        totals_(variables.size()) {
    for (size_t i = 0; i < variables.size(); ++i) index_.emplace(variables[i].value().id(), i);
  }

  void gradient_ready(const autograd::Variable& variable, const Tensor& gradient) override {
    Tensor total = gradient;
    auto it = index_.find(variable.value().id());
    if (it != index_.end()) {
      reported_[it->second] = true;
      if (earlier_[it->second].defined()) {
        autograd::StopRecording no_tape;
        total = strata::add(earlier_[it->second], gradient);
      }
      totals_[it->second] = total;
    }
    reducer_.gradient_ready(variable, total);
  }

  void backward_done() override {
    // Variables this micro-batch did not reach, in the variables' order (the same on every
    // replica): their totals are reduced too.
    for (size_t i = 0; i < variables_.size(); ++i) {
      if (!reported_[i] && earlier_[i].defined()) reducer_.gradient_ready(variables_[i], earlier_[i]);
    }
    reducer_.backward_done();
  }

  // Products need the total, which a factor pair is not: the tape computes them.
  bool accepts_product(DType, const Device&) const override { return false; }

  bool reported(size_t i) const { return reported_[i]; }
  // Whether variable i's total went to the reducer: reported by the tape, or (after
  // backward_done) an earlier total the last micro-batch did not reach.
  bool handed_over(size_t i) const { return reported_[i] || earlier_[i].defined(); }
  // What gradients() holds for such a variable after the last micro-batch: its total,
  // through the reducer (the replicas' sum under aggregate_gradients_in_backward). By
  // index, not through final_gradient(reported): the tape may report one gradient tensor
  // for several variables (`a + b`'s for both a and b), whose totals differ.
  Tensor final(size_t i) { return reducer_.final_gradient(reported_[i] ? totals_[i] : earlier_[i]); }

 private:
  autograd::GradientReadyHook& reducer_;
  const std::vector<autograd::Variable>& variables_;
  const std::vector<Tensor>& earlier_;
  std::vector<bool> reported_;
  std::unordered_map<uint64_t, size_t> index_;
  std::vector<Tensor> totals_;  // per variable, those reported
};

}  // namespace

GradientAccumulator::GradientAccumulator(std::vector<autograd::Variable> variables)
    : variables_(std::move(variables)), totals_(variables_.size()) {
  std::unordered_set<uint64_t> seen;
  for (size_t i = 0; i < variables_.size(); ++i)
    STRATA_CHECK(seen.insert(variables_[i].value().id()).second, "GradientAccumulator: variable ", i, " ('",
                 variables_[i].name(), "') is listed twice; list each variable once");
}

void GradientAccumulator::add(autograd::GradientTape& tape, const Tensor& loss, bool last) {
  STRATA_CHECK(!failed_, "GradientAccumulator::add: the last micro-batch's backward failed, and its totals may be "
               "in the reducer's buckets; make a new accumulator for the next step");
  STRATA_CHECK(!finished_, "GradientAccumulator::add: the last micro-batch was added already; make a new "
               "accumulator for the next step");
  autograd::GradientReadyHook* reducer = autograd::current_gradient_hook();
  if (!last || reducer == nullptr) {
    std::vector<Tensor> grads;
    {
      autograd::GradientHookScope local(nullptr);  // nothing communicated (no_sync)
      grads = tape.gradient(loss, variables_);
    }
    autograd::StopRecording no_tape;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      totals_[i] = totals_[i].defined() ? strata::add(totals_[i], grads[i]) : grads[i];
    }
    // Without a reducer the totals are what apply_gradients reduces, as under no_sync.
    finished_ = last;
    return;
  }
  TotalsHook hook(*reducer, variables_, totals_);
  std::vector<Tensor> grads;
  try {
    {
      autograd::GradientHookScope through(&hook);
      grads = tape.gradient(loss, variables_);
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      // A gradient the tape computed without reporting it (a variable watched as a plain
      // tensor, or a tape that does not watch variables) never reached the reducer.
      STRATA_CHECK(!grads[i].defined() || hook.reported(i), "GradientAccumulator::add: variable ", i, " ('",
                   variables_[i].name(), "') got a gradient the tape did not report to the gradient reducer; "
                   "let the tape watch it as a Variable (watch_accessed_variables, or tape.watch(variable))");
      if (hook.handed_over(i)) grads[i] = hook.final(i);
    }
  } catch (...) {
    failed_ = true;
    throw;
  }
  totals_ = std::move(grads);
  finished_ = true;
}

const std::vector<Tensor>& GradientAccumulator::gradients() const {
  if (!finished_) {
    // Under aggregate_gradients_in_backward apply_gradients takes its gradients as the
    // replicas' sums, which only the last micro-batch's add() makes.
    const auto* reducer = dynamic_cast<const GradientReducer*>(autograd::current_gradient_hook());
    STRATA_CHECK(reducer == nullptr || !reducer->aggregates(),
                 "GradientAccumulator::gradients: under CommunicationOptions::aggregate_gradients_in_backward "
                 "apply_gradients expects the replicas' sums, which the last micro-batch's add(tape, loss, "
                 "/*last=*/true) makes; these are this replica's own totals");
  }
  return totals_;
}

}  // namespace strata::distribute
