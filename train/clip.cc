#include <strata/train/clip.h>

#include <array>
#include <cmath>
#include <limits>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>

namespace strata::optim {

// Per-tensor sums in float64 added in order on the first tensor's device; no host read.
Tensor sum_of_squares(const std::vector<Tensor>& tensors) {
  Tensor total;
  for (const auto& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    STRATA_CHECK(is_floating(t.dtype()), "optim::global_norm: expected floating tensors, got ",
                 t.dtype(), " with shape ", shape_str(t.shape()));
    Tensor s = sum(square(cast(t, kFloat64)));
    if (!total.defined()) {
      total = s;
      continue;
    }
    if (!same_memory(s.device(), total.device())) s = s.to(total.device());
    total = total + s;
  }
  return total;
}

Tensor global_norm_tensor(const std::vector<Tensor>& tensors) {
  autograd::StopRecording no_tape;
  const Tensor total = sum_of_squares(tensors);
  return total.defined() ? sqrt(total) : Tensor::scalar(0.0, kFloat64);
}

double global_norm(const std::vector<Tensor>& tensors) {
  return global_norm_tensor(tensors).item<double>();
}

std::vector<Tensor> clip_gradients_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm,
                                                  Tensor* global_norm) {
  STRATA_CHECK(clip_norm > 0 && std::isfinite(clip_norm),
               "optim::clip_by_global_norm: clip_norm must be positive and finite, got ", clip_norm);
  Tensor norm;
  {
    autograd::StopRecording no_tape;
    const Tensor total = sum_of_squares(gradients);
    if (!total.defined()) {  // no element to scale
      if (global_norm) *global_norm = Tensor::scalar(0.0, kFloat64);
      return gradients;
    }
    norm = sqrt(total);
  }
  if (global_norm) *global_norm = norm;
  return scale_gradients_to_norm(gradients, norm, clip_norm);
}

std::vector<Tensor> scale_gradients_to_norm(const std::vector<Tensor>& gradients, const Tensor& norm,
                                            double clip_norm) {
  STRATA_CHECK(clip_norm > 0 && std::isfinite(clip_norm),
               "optim::clip_by_global_norm: clip_norm must be positive and finite, got ", clip_norm);
  STRATA_CHECK(norm.defined() && norm.ndim() == 0 && norm.dtype() == kFloat64,
               "optim::scale_gradients_to_norm: the norm must be a 0-d float64 tensor, got ",
               norm.defined() ? dtype_name(norm.dtype()) + shape_str(norm.shape()) : std::string("undefined"));
  Tensor scale;
  {
    autograd::StopRecording no_tape;
    // clip_norm / max(norm, clip_norm), and NaN for a non-finite norm as in TensorFlow.
    scale = where(is_finite(norm), clip_norm / maximum(norm, scalar_like(norm, clip_norm)),
                  scalar_like(norm, std::numeric_limits<double>::quiet_NaN()));
  }
  // The scale rounded to each gradient's dtype (as a host scalar would be), once per dtype.
  std::array<Tensor, 8> scale_as;
  std::vector<Tensor> out;
  out.reserve(gradients.size());
  for (const auto& g : gradients) {
    if (!g.defined()) {
      out.push_back(g);
      continue;
    }
    Tensor& s = scale_as[size_t(g.dtype())];
    if (!s.defined()) {
      autograd::StopRecording no_tape;
      s = cast(scale, g.dtype());
    }
    out.push_back(g * (same_memory(s.device(), g.device()) ? s : s.to(g.device())));
  }
  return out;
}

ClippedGradients clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm) {
  ClippedGradients out;
  Tensor norm;
  out.gradients = clip_gradients_by_global_norm(gradients, clip_norm, &norm);
  out.global_norm = norm.item<double>();
  return out;
}

}  // namespace strata::optim
