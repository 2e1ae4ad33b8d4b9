// Streaming metrics (strata::metrics): Mean, Sum, Accuracy, SparseCategoricalAccuracy with
// Keras's update_state / result / reset_state.
//
// A metric's state lives in float64 scalar Variables created with trainable = false,
// synchronization ON_READ and aggregation SUM. Under a strategy's scope those become
// sync-on-read variables: update_state inside Strategy::run adds to the calling replica's
// own component (in place, no communication), and result() in cross-replica context reads
// each variable's aggregate (var.value()), i.e. the sum over replicas. reset_state()
// assigns zero to every variable (all components).
//
// Metrics are cheap copyable handles on shared state, like layers and optimizers.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/variable.h>
#include <strata/core/tensor.h>

namespace strata::metrics {

class MetricImpl {
 public:
  explicit MetricImpl(std::string name) : name_(std::move(name)) {}
  virtual ~MetricImpl() = default;
  MetricImpl(const MetricImpl&) = delete;
  MetricImpl& operator=(const MetricImpl&) = delete;

  // The metric's value from its current state (float64 scalar).
  virtual Tensor result() const = 0;
  void reset_state();

  const std::string& name() const { return name_; }
  // The state variables by name ("total", "count").
  const std::vector<std::pair<std::string, Variable>>& variables() const { return variables_; }

 protected:
  // A float64 scalar state variable, zero-initialised.
  Variable add_state(const std::string& name);
  // var += delta on the current component, with tapes paused.
  static void add_to(const Variable& var, const Tensor& delta);

 private:
  std::string name_;
  std::vector<std::pair<std::string, Variable>> variables_;
};

// total / count of weighted values (Keras's Mean; 0 while count is 0). Also the state of
// the accuracy metrics, which average per-example matches.
class MeanImpl : public MetricImpl {
 public:
  explicit MeanImpl(std::string name);
  // total += sum(values * w), count += sum(w), w = sample_weight broadcast to values
  // (1 when undefined).
  void update_values(const Tensor& values, const Tensor& sample_weight);
  Tensor result() const override;

 private:
  Variable total_, count_;
};

class SumImpl : public MetricImpl {
 public:
  explicit SumImpl(std::string name);
  void update_values(const Tensor& values, const Tensor& sample_weight);
  Tensor result() const override;

 private:
  Variable total_;
};

// The handle every metric shares.
class Metric {
 public:
  Metric() = default;
  explicit Metric(std::shared_ptr<MetricImpl> impl) : impl_(std::move(impl)) {}

  Tensor result() const { return impl().result(); }
  void reset_state() const { impl().reset_state(); }
  const std::string& name() const { return impl().name(); }
  const std::vector<std::pair<std::string, Variable>>& variables() const {
    return impl().variables();
  }

  bool defined() const { return impl_ != nullptr; }
  MetricImpl& impl() const;
  const std::shared_ptr<MetricImpl>& ptr() const { return impl_; }

 private:
  std::shared_ptr<MetricImpl> impl_;
};

class Mean : public Metric {
 public:
  explicit Mean(std::string name = "mean");
  void update_state(const Tensor& values, const Tensor& sample_weight = Tensor()) const;
};

class Sum : public Metric {
 public:
  explicit Sum(std::string name = "sum");
  void update_state(const Tensor& values, const Tensor& sample_weight = Tensor()) const;
};

// How often y_pred equals y_true exactly, elementwise (Keras's Accuracy).
class Accuracy : public Metric {
 public:
  explicit Accuracy(std::string name = "accuracy");
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) const;
};

// How often argmax(y_pred, -1) equals the integer label y_true ([...] or [..., 1]).
class SparseCategoricalAccuracy : public Metric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy");
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) const;
};

}  // namespace strata::metrics
