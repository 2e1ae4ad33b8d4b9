#include "train/clip.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/tape.h"
#include "core/ops.h"

namespace strata::optim {

double global_norm(const std::vector<Tensor>& tensors) {
  autograd::StopRecording no_tape;
  double total = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    STRATA_CHECK(is_floating(t.dtype()), "optim::global_norm: expected floating tensors, got ",
                 t.dtype());
    total += sum(square(cast(t, kFloat64))).item<double>();
  }
  return std::sqrt(total);
}

ClippedGradients clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm) {
  STRATA_CHECK(clip_norm > 0 && std::isfinite(clip_norm),
               "optim::clip_by_global_norm: clip_norm must be positive and finite, got ", clip_norm);
  ClippedGradients out;
  out.global_norm = global_norm(gradients);
  const double scale = std::isfinite(out.global_norm)
                           ? clip_norm / std::max(out.global_norm, clip_norm)
                           : std::numeric_limits<double>::quiet_NaN();
  out.gradients.reserve(gradients.size());
  for (const auto& g : gradients)
    out.gradients.push_back(!g.defined() || scale == 1.0 ? g : g * scale);
  return out;
}

}  // namespace strata::optim
