#include <strata/train/ema.h>

#include <cmath>

#include <strata/core/error.h>
#include <strata/core/ops.h>

namespace strata::optim {

void check_ema_options(const std::string& optimizer, const EmaOptions& options) {
  STRATA_CHECK(std::isfinite(options.momentum) && options.momentum >= 0.0 && options.momentum <= 1.0, "optim::",
               optimizer, ": ema_momentum must be in [0, 1], got ", options.momentum);
  STRATA_CHECK(options.overwrite_frequency >= 0, "optim::", optimizer,
               ": ema_overwrite_frequency must be >= 0 (0: never), got ", options.overwrite_frequency);
  STRATA_CHECK(options.use_ema || options.overwrite_frequency == 0, "optim::", optimizer,
               ": ema_overwrite_frequency (", options.overwrite_frequency, ") needs use_ema");
}

void update_moving_average(const Tensor& param, const Tensor& average, const EmaOptions& options, int64_t step) {
  const double momentum = step == 1 ? 0.0 : options.momentum;
  average.copy_(average * momentum + param * (1.0 - momentum));
  if (options.overwrite_frequency > 0 && step % options.overwrite_frequency == 0) param.copy_(average);
}

}  // namespace strata::optim
