#include <strata/train/nn/normalization.h>

#include <vector>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/replica_context.h>

namespace strata::nn {

using autograd::VariableAggregation;
using autograd::VariableOptions;
using autograd::VariableSynchronization;

namespace {
// Where normalisation statistics are computed: float32 for a half compute dtype.
DType statistics_dtype(DType compute) { return is_half(compute) ? kFloat32 : compute; }
}  // namespace

BatchNormalizationImpl::BatchNormalizationImpl(int64_t num_features,
                                               BatchNormalizationOptions options)
    : Module("batch_normalization"), num_features_(num_features), options_(std::move(options)) {
  STRATA_CHECK(num_features > 0, "nn::BatchNormalization: num_features must be positive, got ",
               num_features);
  STRATA_CHECK(options_.momentum >= 0.0 && options_.momentum <= 1.0,
               "nn::BatchNormalization: momentum must be in [0, 1], got ", options_.momentum);
  STRATA_CHECK(options_.epsilon > 0.0, "nn::BatchNormalization: epsilon must be positive, got ",
               options_.epsilon);
  if (options_.dtype) set_dtype_policy(*options_.dtype);
  const Shape shape{num_features};
  if (options_.scale) gamma_ = add_weight("gamma", shape, variable_dtype(), options_.gamma_initializer);
  if (options_.center) beta_ = add_weight("beta", shape, variable_dtype(), options_.beta_initializer);
  auto moving = [] {
    VariableOptions o;
    o.trainable = false;
    o.synchronization = VariableSynchronization::OnRead;
    o.aggregation = VariableAggregation::Mean;
    return o;
  };
  moving_mean_ = add_weight("moving_mean", shape, variable_dtype(),
                            options_.moving_mean_initializer, moving());
  moving_variance_ = add_weight("moving_variance", shape, variable_dtype(),
                                options_.moving_variance_initializer, moving());
}

Tensor BatchNormalizationImpl::forward(const Tensor& input) {
  STRATA_CHECK(input.ndim() >= 1, "nn::BatchNormalization: expected an input with a feature axis");
  STRATA_CHECK(is_floating(input.dtype()), "nn::BatchNormalization: expected a floating input, got ",
               input.dtype());
  const int64_t axis = normalize_axis(options_.axis, input.ndim(), "nn::BatchNormalization");
  STRATA_CHECK(input.dim(axis) == num_features_, "nn::BatchNormalization: expected ", num_features_,
               " features on axis ", axis, ", got input ", shape_str(input.shape()));
  // Statistics and normalisation run in float32 under a half compute dtype (mixed
  // precision); the result is cast back to the compute dtype.
  const Tensor x = mixed_precision::autocast(input, statistics_dtype(compute_dtype()));
  // Statistics are shaped to broadcast against x: extent 1 everywhere but `axis`.
  Shape stat_shape(size_t(x.ndim()), 1);
  stat_shape[size_t(axis)] = num_features_;
  std::vector<int64_t> reduce_axes;
  for (int64_t a = 0; a < x.ndim(); ++a)
    if (a != axis) reduce_axes.push_back(a);

  // Variables in the statistics' dtype (a no-op unless a policy stores them in another).
  auto as_x = [&](const Tensor& t) { return mixed_precision::autocast(t, x.dtype()); };
  Tensor mean_b, var_b;
  // A frozen layer normalises with its moving statistics (Keras 2: trainable = false
  // makes BatchNormalization run in inference mode, for fine-tuning).
  if (training() && trainable()) {
    distribute::ReplicaContext* replica = options_.synchronized ? distribute::get_replica_context() : nullptr;
    // Synchronized: whether the global batch had rows (1) or not (0), as a device tensor
    // (reading the count on the host would stop a GPU every step).
    Tensor has_rows;
    if (replica != nullptr && replica->num_replicas_in_sync() > 1) {
      // The global batch's statistics in two passes, as the plain layer computes them:
      // the sums and the example count all-reduced give the global mean, then the sums
      // of squared deviations from it all-reduced give the variance (both differentiable).
      // Keras's one pass, E[x^2] - E[x]^2 from summed squares, needs one collective less
      // but loses the variance to cancellation when a feature's mean is large against its
      // spread (float32: a mean of 1e4 leaves no digit of a unit variance). All-reduces,
      // not an all-gather of each replica's statistics (PyTorch's way): they stay on the
      // GPUs' streams through NCCL, across workers too, with no host round trip.
      const Tensor zero = zeros({}, x.dtype(), x.device());
      const Tensor count = full({1}, double(x.numel() / num_features_), x.dtype(), x.device());
      const Tensor sums = replica->all_reduce(distribute::ReduceOp::Sum,
                                              concat({sum(x, reduce_axes).reshape({num_features_}), count}, 0));
      const Tensor examples = sums.slice(0, num_features_, num_features_ + 1);
      has_rows = greater(examples, zero);
      // An empty global batch normalises nothing; its statistics are 0 instead of 0 / 0,
      // and the moving statistics stay (below). An empty replica adds nothing.
      const Tensor n = maximum(examples, ones({}, x.dtype(), x.device()));
      mean_b = div(sums.slice(0, 0, num_features_), n).reshape(stat_shape);
      const Tensor squares =
          replica->all_reduce(distribute::ReduceOp::Sum, sum(square(sub(x, mean_b)), reduce_axes).reshape({num_features_}));
      var_b = div(squares, n).reshape(stat_shape);
    } else {
      STRATA_CHECK(x.numel() > 0, "nn::BatchNormalization: empty batch in training mode");
      mean_b = mean(x, reduce_axes, /*keepdims=*/true);
      var_b = mean(square(sub(x, mean_b)), reduce_axes, /*keepdims=*/true);  // biased, as Keras
    }
    autograd::StopRecording no_tape;
    const double decay = 1.0 - options_.momentum;
    for (auto [var, batch] : {std::pair{moving_mean_, mean_b}, std::pair{moving_variance_, var_b}}) {
      // Keras's assign_sub((moving - batch) * decay), through the variable so that its kind
      // decides: a sync-on-read replica updates its own component, CentralStorage's shared
      // copy takes the replicas' mean delta once, a cross-replica call updates every copy,
      // a parameter server's variable changes on the server. (Writing value() in place
      // would race on a shared copy and be lost on an aggregated read.)
      const Tensor moving = var.value();
      Tensor batch_stat = batch.reshape({num_features_});
      if (batch_stat.dtype() != moving.dtype()) batch_stat = cast(batch_stat, moving.dtype());
      Tensor delta = sub(moving, batch_stat) * decay;
      if (has_rows.defined()) delta = where(has_rows, delta, zeros_like(delta));
      var.assign_sub(delta);
    }
  } else {
    mean_b = as_x(moving_mean_.value()).reshape(stat_shape);
    var_b = as_x(moving_variance_.value()).reshape(stat_shape);
  }
  Tensor y = mul(sub(x, mean_b), rsqrt(var_b + options_.epsilon));
  if (gamma_.defined()) y = mul(y, as_x(gamma_.read()).reshape(stat_shape));
  if (beta_.defined()) y = add(y, as_x(beta_.read()).reshape(stat_shape));
  return autocast(y);
}

LayerNormalizationImpl::LayerNormalizationImpl(int64_t dim, LayerNormalizationOptions options)
    : Module("layer_normalization"), dim_(dim), options_(std::move(options)) {
  STRATA_CHECK(dim > 0, "nn::LayerNormalization: dim must be positive, got ", dim);
  STRATA_CHECK(options_.epsilon > 0.0, "nn::LayerNormalization: epsilon must be positive, got ",
               options_.epsilon);
  if (options_.dtype) set_dtype_policy(*options_.dtype);
  if (options_.scale) gamma_ = add_weight("gamma", {dim}, variable_dtype(), options_.gamma_initializer);
  if (options_.center) beta_ = add_weight("beta", {dim}, variable_dtype(), options_.beta_initializer);
}

Tensor LayerNormalizationImpl::forward(const Tensor& input) {
  STRATA_CHECK(input.ndim() >= 1 && input.dim(-1) == dim_, "nn::LayerNormalization: expected input [..., ",
               dim_, "], got ", shape_str(input.shape()));
  STRATA_CHECK(is_floating(input.dtype()), "nn::LayerNormalization: expected a floating input, got ",
               input.dtype());
  // Normalised in float32 under a half compute dtype, then cast back (mixed precision).
  const Tensor x = mixed_precision::autocast(input, statistics_dtype(compute_dtype()));
  auto as_x = [&](const Tensor& t) { return mixed_precision::autocast(t, x.dtype()); };
  const Tensor gamma = gamma_.defined() ? as_x(gamma_.read()) : ones({dim_}, x.dtype(), x.device());
  const Tensor beta = beta_.defined() ? as_x(beta_.read()) : zeros({dim_}, x.dtype(), x.device());
  return autocast(layer_norm(x, gamma, beta, options_.epsilon));
}

}  // namespace strata::nn
