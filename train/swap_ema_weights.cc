#include <strata/train/swap_ema_weights.h>

#include <strata/core/error.h>
#include <strata/train/nn/module.h>
#include <strata/train/optimizer.h>

namespace strata::train {

void SwapEMAWeights::hold_averages(bool averages_in_model) {
  STRATA_CHECK(model() != nullptr && optimizer() != nullptr,
               "SwapEMAWeights: used outside fit (it swaps the weights of the model fit trains)");
  STRATA_CHECK(optimizer()->use_ema(), "SwapEMAWeights: the optimizer '", optimizer()->name(),
               "' keeps no moving average of the weights; create it with use_ema (EmaOptions)");
  // The optimizer knows whether the averages are in the model: another SwapEMAWeights, or
  // the user, may have swapped them already.
  if (optimizer()->ema_weights_swapped() != averages_in_model)
    optimizer()->swap_ema_weights(model()->trainable_variables());
}

void SwapEMAWeights::on_train_begin() {
  // Checks the optimizer before the first epoch rather than after it.
  hold_averages(false);
}

void SwapEMAWeights::on_epoch_begin(int64_t) {
  if (swap_on_epoch_) hold_averages(false);
}

void SwapEMAWeights::on_epoch_end(int64_t, const Outputs&) {
  if (swap_on_epoch_) hold_averages(true);
}

void SwapEMAWeights::on_test_begin() { hold_averages(true); }

void SwapEMAWeights::on_test_end(const Outputs&) {
  // With swap_on_epoch the averages stay for the epoch's end.
  if (!swap_on_epoch_) hold_averages(false);
}

}  // namespace strata::train
