#include "train/nn/normalization.h"

#include <vector>

#include "autograd/tape.h"
#include "core/ops.h"

namespace strata::nn {

using autograd::VariableAggregation;
using autograd::VariableOptions;
using autograd::VariableSynchronization;

BatchNormalizationImpl::BatchNormalizationImpl(int64_t num_features,
                                               BatchNormalizationOptions options)
    : Module("batch_normalization"), num_features_(num_features), options_(std::move(options)) {
  STRATA_CHECK(num_features > 0, "nn::BatchNormalization: num_features must be positive, got ",
               num_features);
  STRATA_CHECK(options_.momentum >= 0.0 && options_.momentum <= 1.0,
               "nn::BatchNormalization: momentum must be in [0, 1], got ", options_.momentum);
  STRATA_CHECK(options_.epsilon > 0.0, "nn::BatchNormalization: epsilon must be positive, got ",
               options_.epsilon);
  const Shape shape{num_features};
  if (options_.scale) gamma_ = add_weight("gamma", shape, options_.dtype, options_.gamma_initializer);
  if (options_.center) beta_ = add_weight("beta", shape, options_.dtype, options_.beta_initializer);
  auto moving = [] {
    VariableOptions o;
    o.trainable = false;
    o.synchronization = VariableSynchronization::OnRead;
    o.aggregation = VariableAggregation::Mean;
    return o;
  };
  moving_mean_ = add_weight("moving_mean", shape, options_.dtype,
                            options_.moving_mean_initializer, moving());
  moving_variance_ = add_weight("moving_variance", shape, options_.dtype,
                                options_.moving_variance_initializer, moving());
}

Tensor BatchNormalizationImpl::forward(const Tensor& x) {
  STRATA_CHECK(x.ndim() >= 1, "nn::BatchNormalization: expected an input with a feature axis");
  const int64_t axis = normalize_axis(options_.axis, x.ndim(), "nn::BatchNormalization");
  STRATA_CHECK(x.dim(axis) == num_features_, "nn::BatchNormalization: expected ", num_features_,
               " features on axis ", axis, ", got input ", shape_str(x.shape()));
  STRATA_CHECK(x.dtype() == options_.dtype, "nn::BatchNormalization: input dtype ", x.dtype(),
               " differs from the layer's ", options_.dtype);
  // Statistics are shaped to broadcast against x: extent 1 everywhere but `axis`.
  Shape stat_shape(size_t(x.ndim()), 1);
  stat_shape[size_t(axis)] = num_features_;
  std::vector<int64_t> reduce_axes;
  for (int64_t a = 0; a < x.ndim(); ++a)
    if (a != axis) reduce_axes.push_back(a);

  Tensor mean_b, var_b;
  if (training()) {
    STRATA_CHECK(x.numel() > 0, "nn::BatchNormalization: empty batch in training mode");
    mean_b = mean(x, reduce_axes, /*keepdims=*/true);
    var_b = mean(square(sub(x, mean_b)), reduce_axes, /*keepdims=*/true);  // biased, as Keras
    autograd::StopRecording no_tape;
    const double decay = 1.0 - options_.momentum;
    for (auto [var, batch] : {std::pair{moving_mean_, mean_b}, std::pair{moving_variance_, var_b}}) {
      // In place on this replica's component (sync-on-read: each replica keeps its own).
      Tensor moving = var.value();
      moving.copy_(sub(moving, sub(moving, batch.reshape({num_features_})) * decay));
    }
  } else {
    mean_b = moving_mean_.value().reshape(stat_shape);
    var_b = moving_variance_.value().reshape(stat_shape);
  }
  Tensor y = mul(sub(x, mean_b), rsqrt(var_b + options_.epsilon));
  if (gamma_.defined()) y = mul(y, gamma_.read().reshape(stat_shape));
  if (beta_.defined()) y = add(y, beta_.read().reshape(stat_shape));
  return y;
}

LayerNormalizationImpl::LayerNormalizationImpl(int64_t dim, LayerNormalizationOptions options)
    : Module("layer_normalization"), dim_(dim), options_(std::move(options)) {
  STRATA_CHECK(dim > 0, "nn::LayerNormalization: dim must be positive, got ", dim);
  STRATA_CHECK(options_.epsilon > 0.0, "nn::LayerNormalization: epsilon must be positive, got ",
               options_.epsilon);
  if (options_.scale) gamma_ = add_weight("gamma", {dim}, options_.dtype, options_.gamma_initializer);
  if (options_.center) beta_ = add_weight("beta", {dim}, options_.dtype, options_.beta_initializer);
}

Tensor LayerNormalizationImpl::forward(const Tensor& x) {
  STRATA_CHECK(x.ndim() >= 1 && x.dim(-1) == dim_, "nn::LayerNormalization: expected input [..., ",
               dim_, "], got ", shape_str(x.shape()));
  const Tensor gamma = gamma_.defined() ? gamma_.read() : ones({dim_}, x.dtype(), x.device());
  const Tensor beta = beta_.defined() ? beta_.read() : zeros({dim_}, x.dtype(), x.device());
  return layer_norm(x, gamma, beta, options_.epsilon);
}

}  // namespace strata::nn
