#include <strata/distribute/gradient_accumulator.h>

#include <unordered_map>

#include <strata/autograd/gradient_hook.h>
#include <strata/core/error.h>
#include <strata/core/ops.h>

namespace strata::distribute {

namespace {

// Stands between the tape and the replica's reducer in the last micro-batch: each
// variable's gradient reaches the reducer as its total.
class TotalsHook final : public autograd::GradientReadyHook {
 public:
  TotalsHook(autograd::GradientReadyHook& reducer, const std::vector<autograd::Variable>& variables,
             const std::vector<Tensor>& earlier)
      : reducer_(reducer), variables_(variables), earlier_(earlier), reported_(variables.size(), false) {
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
    }
    totals_.emplace(gradient.id(), total);
    reducer_.gradient_ready(variable, total);
  }

  void backward_done() override {
    // Variables this micro-batch did not reach, in the variables' order (the same on every
    // replica): their totals are reduced too.
    for (size_t i = 0; i < variables_.size(); ++i) {
      if (!reported_[i] && earlier_[i].defined()) {
        reducer_.gradient_ready(variables_[i], earlier_[i]);
        late_.push_back(i);
      }
    }
    reducer_.backward_done();
  }

  // Products need the total, which a factor pair is not: the tape computes them.
  bool accepts_product(DType, const Device&) const override { return false; }

  Tensor final_gradient(const Tensor& reported) override {
    auto it = totals_.find(reported.id());
    STRATA_CHECK(it != totals_.end(), "GradientAccumulator: a gradient the tape reported was not seen (internal error)");
    return reducer_.final_gradient(it->second);
  }

  // What gradient() returns for the variables the last micro-batch did not reach.
  const std::vector<size_t>& late() const { return late_; }
  Tensor late_final(size_t i) { return reducer_.final_gradient(earlier_[i]); }

 private:
  autograd::GradientReadyHook& reducer_;
  const std::vector<autograd::Variable>& variables_;
  const std::vector<Tensor>& earlier_;
  std::vector<bool> reported_;
  std::unordered_map<uint64_t, size_t> index_;
  std::unordered_map<uint64_t, Tensor> totals_;  // reported gradient id -> its total
  std::vector<size_t> late_;
};

}  // namespace

GradientAccumulator::GradientAccumulator(std::vector<autograd::Variable> variables)
    : variables_(std::move(variables)), totals_(variables_.size()) {}

void GradientAccumulator::add(autograd::GradientTape& tape, const Tensor& loss, bool last) {
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
  {
    autograd::GradientHookScope through(&hook);
    grads = tape.gradient(loss, variables_);
  }
  for (size_t i : hook.late()) grads[i] = hook.late_final(i);
  totals_ = std::move(grads);
  finished_ = true;
}

}  // namespace strata::distribute
