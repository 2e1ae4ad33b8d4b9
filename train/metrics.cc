#include <strata/train/metrics.h>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/distributed_variable.h>
#include <strata/distribute/strategy.h>

namespace strata::metrics {

using autograd::VariableAggregation;
using autograd::VariableOptions;
using autograd::VariableSynchronization;

MetricImpl& Metric::impl() const {
  STRATA_CHECK(impl_ != nullptr, "metrics: use of an empty metric handle");
  return *impl_;
}

Variable MetricImpl::add_state(const std::string& name) {
  VariableOptions options;
  options.name = name_ + "/" + name;
  options.trainable = false;
  options.synchronization = VariableSynchronization::OnRead;
  options.aggregation = VariableAggregation::Sum;
  Variable v(zeros({}, kFloat64), options);
  variables_.emplace_back(name, v);
  return v;
}

void MetricImpl::add_to(const Variable& var, const Tensor& delta) {
  // A variable shared by the replicas must not be updated in place by several replica
  // threads at once (updates would be lost):
  //  - CentralStorageStrategy's variables: their assign_add sums the replicas' deltas (in
  //    replica order, so deterministically) and applies them once;
  //  - a metric created outside any strategy's scope (plain variables): their assign_add
  //    is atomic per variable (autograd/variable.h), as TensorFlow's resource variables.
  // Sync-on-read variables give each replica its own component: inside their strategy's
  // run, add to it in place. Elsewhere (cross-replica context) value() is a fresh sum
  // over the replicas, so adding to it would be lost: assign_add raises there instead,
  // as TensorFlow's sync-on-read Sum variables do.
  const auto* distributed = dynamic_cast<const distribute::DistributedVariableImpl*>(&var.impl());
  if (!var.impl().is_replicated() || distributed == nullptr ||
      distributed->strategy().current_local_context() == nullptr) {
    var.assign_add(delta);
    return;
  }
  Tensor t = var.value();
  t.copy_(add(t, delta));
}

void MetricImpl::reset_state() {
  autograd::StopRecording no_tape;
  for (auto& [name, v] : variables_) v.assign(zeros({}, kFloat64));
}

namespace {

// values as float64 and the weights broadcast to them (undefined when unweighted).
std::pair<Tensor, Tensor> weighted(const Tensor& values, const Tensor& sample_weight,
                                   const std::string& metric) {
  STRATA_CHECK(values.defined(), "metrics::", metric, ".update_state: values are undefined");
  Tensor v = values.dtype() == kFloat64 ? values : cast(values, kFloat64);
  if (!sample_weight.defined()) return {v, Tensor()};
  Tensor w = sample_weight.dtype() == kFloat64 ? sample_weight : cast(sample_weight, kFloat64);
  // Keras (squeeze_or_expand_dimensions): a trailing unit axis of the weights is
  // squeezed, weights one rank short get a trailing axis (per-example weights), then they
  // broadcast to the values.
  if (w.ndim() == v.ndim() + 1 && w.dim(-1) == 1) w = w.squeeze(-1);
  if (w.ndim() + 1 == v.ndim()) w = w.expand_dims(-1);
  STRATA_CHECK(broadcast_shapes(w.shape(), v.shape(), "metrics") == v.shape(), "metrics::", metric,
               ".update_state: sample_weight ", shape_str(sample_weight.shape()),
               " does not broadcast to the values ", shape_str(values.shape()));
  return {v, broadcast_to(w, v.shape())};
}

Tensor ratio(const Variable& total, const Variable& count) {
  const double c = count.value().item<double>();
  const double t = total.value().item<double>();
  return Tensor::scalar(c == 0.0 ? 0.0 : t / c, kFloat64);
}

// Keras squeezes a trailing unit axis of y_true when y_pred has one fewer.
Tensor squeeze_labels(const Tensor& y_true, int64_t pred_rank) {
  if (y_true.ndim() == pred_rank + 1 && y_true.ndim() > 0 && y_true.dim(-1) == 1)
    return y_true.squeeze(-1);
  return y_true;
}

}  // namespace

MeanImpl::MeanImpl(std::string name) : MetricImpl(std::move(name)) {
  total_ = add_state("total");
  count_ = add_state("count");
}

void MeanImpl::update_values(const Tensor& values, const Tensor& sample_weight) {
  autograd::StopRecording no_tape;
  auto [v, w] = weighted(values, sample_weight, name());
  if (w.defined()) {
    add_to(total_, sum(mul(v, w)));
    add_to(count_, sum(w));
  } else {
    add_to(total_, sum(v));
    add_to(count_, Tensor::scalar(double(v.numel()), kFloat64));
  }
}

Tensor MeanImpl::result() const { return ratio(total_, count_); }

SumImpl::SumImpl(std::string name) : MetricImpl(std::move(name)) { total_ = add_state("total"); }

void SumImpl::update_values(const Tensor& values, const Tensor& sample_weight) {
  autograd::StopRecording no_tape;
  auto [v, w] = weighted(values, sample_weight, name());
  add_to(total_, w.defined() ? sum(mul(v, w)) : sum(v));
}

Tensor SumImpl::result() const { return total_.value().clone(); }

Mean::Mean(std::string name) : Metric(std::make_shared<MeanImpl>(std::move(name))) {}

void Mean::update_state(const Tensor& values, const Tensor& sample_weight) const {
  static_cast<MeanImpl&>(impl()).update_values(values, sample_weight);
}

Sum::Sum(std::string name) : Metric(std::make_shared<SumImpl>(std::move(name))) {}

void Sum::update_state(const Tensor& values, const Tensor& sample_weight) const {
  static_cast<SumImpl&>(impl()).update_values(values, sample_weight);
}

Accuracy::Accuracy(std::string name) : Metric(std::make_shared<MeanImpl>(std::move(name))) {}

void Accuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                            const Tensor& sample_weight) const {
  STRATA_CHECK(y_true.defined() && y_pred.defined(), "metrics::", name(),
               ".update_state: undefined y_true or y_pred");
  autograd::StopRecording no_tape;
  const Tensor labels = squeeze_labels(y_true, y_pred.ndim());
  STRATA_CHECK(labels.shape() == y_pred.shape(), "metrics::", name(), ".update_state: y_true ",
               shape_str(y_true.shape()), " and y_pred ", shape_str(y_pred.shape()),
               " differ in shape");
  // Keras compares in the labels' dtype: float predictions for integer labels are cast
  // (truncated) to integers first.
  const Tensor pred = y_pred.dtype() == labels.dtype() ? y_pred : cast(y_pred, labels.dtype());
  static_cast<MeanImpl&>(impl()).update_values(cast(equal(labels, pred), kFloat64), sample_weight);
}

SparseCategoricalAccuracy::SparseCategoricalAccuracy(std::string name)
    : Metric(std::make_shared<MeanImpl>(std::move(name))) {}

void SparseCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                             const Tensor& sample_weight) const {
  STRATA_CHECK(y_true.defined() && y_pred.defined(), "metrics::", name(),
               ".update_state: undefined y_true or y_pred");
  STRATA_CHECK(y_pred.ndim() >= 1, "metrics::", name(),
               ".update_state: y_pred needs a class axis, got a scalar");
  autograd::StopRecording no_tape;
  const Tensor labels = squeeze_labels(y_true, y_pred.ndim() - 1);
  const Shape batch(y_pred.shape().begin(), y_pred.shape().end() - 1);
  STRATA_CHECK(labels.shape() == batch, "metrics::", name(), ".update_state: labels ",
               shape_str(y_true.shape()), " do not match predictions ", shape_str(y_pred.shape()));
  Tensor predicted = argmax(y_pred, -1);
  // Keras compares in the labels' dtype (float labels are compared as floats).
  if (predicted.dtype() != labels.dtype()) predicted = cast(predicted, labels.dtype());
  static_cast<MeanImpl&>(impl()).update_values(cast(equal(labels, predicted), kFloat64),
                                               sample_weight);
}

}  // namespace strata::metrics
