// Keras's SwapEMAWeights: a fit callback (train/fit.h) that evaluates with the moving
// average of the weights that an optimizer with use_ema keeps (train/ema.h).
//
// fit's validation after each epoch runs with the averages in the model (swapped in before
// it, swapped back after). With swap_on_epoch the averages also stay in the model from the
// end of each epoch to the start of the next, so that callbacks placed after this one
// (EarlyStopping's restore_best_weights, a user's) see them. fit ends with the averages in
// the model either way (Optimizer::finalize_variable_values).
//
// The swaps exchange values in place, on every replica's copy, between variables and
// their "average" slots; the optimizer refuses to train while they are swapped.
#pragma once

#include <strata/train/fit.h>

namespace strata::train {

class SwapEMAWeights : public Callback {
 public:
  explicit SwapEMAWeights(bool swap_on_epoch = false) : swap_on_epoch_(swap_on_epoch) {}

  void on_train_begin() override;
  void on_epoch_begin(int64_t epoch) override;
  void on_epoch_end(int64_t epoch, const Outputs& logs) override;
  void on_test_begin() override;
  void on_test_end(const Outputs& logs) override;

 private:
  // Swaps the model's trainable variables with their averages when the model does not
  // hold the state `averages_in_model` asks for.
  void hold_averages(bool averages_in_model);

  bool swap_on_epoch_;
};

}  // namespace strata::train
