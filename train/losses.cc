#include <strata/train/losses.h>

#include <vector>

#include <strata/core/ops.h>
#include <strata/distribute/strategy.h>

namespace strata::losses {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Sum: return "sum";
    case Reduction::SumOverBatchSize: return "sum_over_batch_size";
  }
  return "?";
}

namespace {

// Every loss promotes float16/bfloat16 predictions to float32 first (mixed precision:
// losses and their reductions run in float32; the cast's gradient returns to the half dtype).
void check_float_pred(const Tensor& y_pred, const char* op) {
  STRATA_CHECK(y_pred.defined(), op, ": y_pred is undefined");
  STRATA_CHECK(is_floating(y_pred.dtype()), op, ": y_pred must be floating, got ", y_pred.dtype());
}

// y_true as y_pred's dtype, with the same shape.
Tensor matching_targets(const Tensor& y_true, const Tensor& y_pred, const char* op) {
  STRATA_CHECK(y_true.defined(), op, ": y_true is undefined");
  STRATA_CHECK(y_true.shape() == y_pred.shape(), op, ": y_true ", shape_str(y_true.shape()),
               " and y_pred ", shape_str(y_pred.shape()), " must have the same shape");
  return y_true.dtype() == y_pred.dtype() ? y_true : cast(y_true, y_pred.dtype());
}

// Moves `axis` of x to the end (a no-op when it is already last).
Tensor axis_last(const Tensor& x, int64_t axis, const char* op) {
  const int64_t a = normalize_axis(axis, x.ndim(), op);
  if (a == x.ndim() - 1) return x;
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.ndim(); ++i)
    if (i != a) perm.push_back(i);
  perm.push_back(a);
  return permute(x, perm);
}

}  // namespace

Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                       bool from_logits, int64_t axis) {
  constexpr const char* op = "losses::sparse_categorical_crossentropy";
  check_float_pred(y_pred, op);
  if (is_half(y_pred.dtype()))  // computed in float32
    return sparse_categorical_crossentropy(y_true, cast(y_pred, kFloat32), from_logits, axis);
  STRATA_CHECK(y_pred.ndim() >= 1, op, ": y_pred must have a class axis, got a scalar");
  STRATA_CHECK(y_true.defined(), op, ": y_true is undefined");
  const Tensor pred = axis_last(y_pred, axis, op);
  Tensor labels = y_true;
  // Keras accepts labels [..., 1] as well as [...].
  if (labels.ndim() == pred.ndim() && labels.ndim() > 0 && labels.dim(-1) == 1)
    labels = labels.squeeze(-1);
  const Shape batch_shape(pred.shape().begin(), pred.shape().end() - 1);
  STRATA_CHECK(labels.shape() == batch_shape, op, ": labels ", shape_str(y_true.shape()),
               " do not match predictions ", shape_str(y_pred.shape()), " (expected labels ",
               shape_str(batch_shape), ")");
  if (!is_integral(labels.dtype())) labels = cast(labels, kInt64);
  const int64_t k = pred.dim(-1);
  Tensor logits = reshape(pred, {numel_of(batch_shape), k});
  if (!from_logits) {
    // Keras: log of the clipped probabilities, then softmax cross-entropy (which renormalises).
    logits = log(clip(logits, kEpsilon, 1.0 - kEpsilon));
  }
  return sparse_softmax_cross_entropy(logits, reshape(labels, {numel_of(batch_shape)}))
      .reshape(batch_shape);
}

Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits,
                                int64_t axis) {
  constexpr const char* op = "losses::categorical_crossentropy";
  check_float_pred(y_pred, op);
  if (is_half(y_pred.dtype()))  // computed in float32
    return categorical_crossentropy(y_true, cast(y_pred, kFloat32), from_logits, axis);
  STRATA_CHECK(y_pred.ndim() >= 1, op, ": y_pred must have a class axis, got a scalar");
  const Tensor target = matching_targets(y_true, y_pred, op);
  const int64_t a = normalize_axis(axis, y_pred.ndim(), op);
  if (from_logits) return neg(sum(mul(target, log_softmax(y_pred, a)), std::vector<int64_t>{a}));
  Tensor p = div(y_pred, sum(y_pred, std::vector<int64_t>{a}, /*keepdims=*/true));
  p = clip(p, kEpsilon, 1.0 - kEpsilon);
  return neg(sum(mul(target, log(p)), std::vector<int64_t>{a}));
}

Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits) {
  constexpr const char* op = "losses::binary_crossentropy";
  check_float_pred(y_pred, op);
  if (is_half(y_pred.dtype()))  // computed in float32
    return binary_crossentropy(y_true, cast(y_pred, kFloat32), from_logits);
  STRATA_CHECK(y_pred.ndim() >= 1, op, ": y_pred must have at least one axis, got a scalar");
  const Tensor z = matching_targets(y_true, y_pred, op);
  Tensor bce;
  if (from_logits) {
    // TensorFlow's sigmoid_cross_entropy_with_logits: max(x, 0) - x z + log(1 + exp(-|x|)).
    bce = add(sub(relu(y_pred), mul(y_pred, z)), softplus(neg(abs(y_pred))));
  } else {
    const Tensor p = clip(y_pred, kEpsilon, 1.0 - kEpsilon);
    bce = neg(add(mul(z, log(p + kEpsilon)), mul(1.0 - z, log((1.0 - p) + kEpsilon))));
  }
  return mean(bce, std::vector<int64_t>{-1});
}

Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred) {
  constexpr const char* op = "losses::mean_squared_error";
  check_float_pred(y_pred, op);
  if (is_half(y_pred.dtype()))  // computed in float32
    return mean_squared_error(y_true, cast(y_pred, kFloat32));
  STRATA_CHECK(y_pred.ndim() >= 1, op, ": y_pred must have at least one axis, got a scalar");
  return mean(square(sub(y_pred, matching_targets(y_true, y_pred, op))), std::vector<int64_t>{-1});
}

Tensor huber(const Tensor& y_true, const Tensor& y_pred, double delta) {
  constexpr const char* op = "losses::huber";
  check_float_pred(y_pred, op);
  if (is_half(y_pred.dtype()))  // computed in float32
    return huber(y_true, cast(y_pred, kFloat32), delta);
  STRATA_CHECK(delta > 0, op, ": delta must be positive, got ", delta);
  STRATA_CHECK(y_pred.ndim() >= 1, op, ": y_pred must have at least one axis, got a scalar");
  const Tensor error = sub(y_pred, matching_targets(y_true, y_pred, op));
  const Tensor abs_error = abs(error);
  const Tensor loss = where(less_equal(abs_error, scalar_like(abs_error, delta)),
                            square(error) * 0.5, abs_error * delta - 0.5 * delta * delta);
  return mean(loss, std::vector<int64_t>{-1});
}

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const {
  STRATA_CHECK(reduction_ != Reduction::SumOverBatchSize || !distribute::has_strategy(), "losses::", name_,
               ": the reduction SumOverBatchSize would divide by each replica's part of the batch under the "
               "distribution strategy '", distribute::get_strategy().name(),
               "'; create the loss with Reduction::None (or Sum) and divide by the global batch size: "
               "distribute::compute_average_loss(loss(y_true, y_pred), global_batch_size)");
  return compute_weighted_loss(call(y_true, y_pred), sample_weight, reduction_);
}

Tensor compute_weighted_loss(const Tensor& losses, const Tensor& sample_weight,
                             Reduction reduction) {
  constexpr const char* op = "losses::compute_weighted_loss";
  STRATA_CHECK(losses.defined(), op, ": losses are undefined");
  Tensor weighted = losses;
  if (sample_weight.defined()) {
    Tensor w = sample_weight.dtype() == losses.dtype() ? sample_weight
                                                       : cast(sample_weight, losses.dtype());
    // Keras (squeeze_or_expand_dimensions): a trailing unit axis of the weights is
    // squeezed ([N, 1] against [N]); weights one rank short get a trailing axis.
    if (w.ndim() == losses.ndim() + 1 && w.dim(-1) == 1) w = w.squeeze(-1);
    if (w.ndim() + 1 == losses.ndim()) w = w.expand_dims(-1);
    STRATA_CHECK(broadcast_shapes(w.shape(), losses.shape(), op) == losses.shape(), op,
                 ": sample_weight ", shape_str(sample_weight.shape()),
                 " does not broadcast to the losses ", shape_str(losses.shape()));
    weighted = mul(losses, w);
  }
  switch (reduction) {
    case Reduction::None: return weighted;
    case Reduction::Sum: return sum(weighted);
    case Reduction::SumOverBatchSize: {
      const int64_t n = weighted.numel();
      // Keras divides with divide_no_nan: an empty batch gives 0.
      return n == 0 ? sum(weighted) : sum(weighted) / double(n);
    }
  }
  fail(op, ": unknown reduction");
}

Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, const CrossentropyOptions& options) {
  STRATA_CHECK(options.axis == -1, "losses::binary_crossentropy: axis must be -1 (the mean is over the last axis), got ",
               options.axis);
  return binary_crossentropy(y_true, y_pred, options.from_logits);
}

MeanSquaredError::MeanSquaredError(const LossOptions& options) : MeanSquaredError(options.reduction) {
  STRATA_CHECK(!options.from_logits, "losses::MeanSquaredError: from_logits does not apply to a regression loss");
}

}  // namespace strata::losses
