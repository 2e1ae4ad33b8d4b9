// The exponential moving average of a model's weights that an optimizer can keep beside
// its own state (Keras's optimizer `use_ema`, `ema_momentum`, `ema_overwrite_frequency`;
// "Polyak averaging"), and its update.
//
// With use_ema, every variable the optimizer updates gets one more slot, "average", made
// as a copy of the variable and placed, synchronised, sharded (ZeRO-1) and checkpointed
// like the optimizer's own slots. Right after each update of the variable:
//   average = momentum * average + (1 - momentum) * variable
// with momentum 0 on the optimizer's first step (the average starts at the updated
// weights, as Keras 3 does). With overwrite_frequency N > 0, every N-th step also copies
// the average into the variable (Keras's ema_overwrite_frequency; 0 is Keras's None).
// Optimizer::finalize_variable_values puts the averages into the model at the end of
// training (train::fit does it, as Keras's fit), Optimizer::swap_ema_weights exchanges
// weights and averages (train::SwapEMAWeights evaluates with the averages).
//
// A variable's average moves at the steps the variable is updated (those where it has a
// gradient); Keras averages every variable it built at every step, which differs only for
// a variable that skips steps.
#pragma once

#include <cstdint>
#include <string>

#include <strata/core/tensor.h>

namespace strata::optim {

struct EmaOptions {
  bool use_ema = false;
  double momentum = 0.99;           // in [0, 1]
  int64_t overwrite_frequency = 0;  // 0: never copy the average into the variable
};

// The slot name of the average.
inline constexpr const char* kAverageSlot = "average";

// Throws strata::Error naming `optimizer` when the options are out of range.
void check_ema_options(const std::string& optimizer, const EmaOptions& options);

// One averaging step after the variable's update number `step` (1-based): `average` and
// `param` are the same shape and dtype (a whole variable, or the same flat range of both),
// `average` updated in place, and `param` overwritten with it on overwrite steps.
void update_moving_average(const Tensor& param, const Tensor& average, const EmaOptions& options, int64_t step);

}  // namespace strata::optim
