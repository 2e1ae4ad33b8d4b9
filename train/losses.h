// Losses with Keras's semantics (strata::losses).
//
// The functions return one loss per example (the Keras functional losses: reduced over
// the last axis where Keras does so), ready for distribute::compute_average_loss:
//
//   Tensor per_example = losses::sparse_categorical_crossentropy(labels, logits, {.from_logits = true});
//   losses::SparseCategoricalCrossentropy loss({.from_logits = true, .reduction = losses::Reduction::None});
//
// Every loss takes its options either as a struct with designated initializers (as layers,
// strategies and the Controller do) or positionally in Keras's order (from_logits, then
// reduction / axis).
//
// The classes apply a Reduction like Keras's Loss objects: NONE returns the per-example
// losses (times sample_weight), SUM their sum, SUM_OVER_BATCH_SIZE their sum divided by
// their number of elements (not by the sum of the weights, as in Keras). Under a
// distribution strategy a SUM_OVER_BATCH_SIZE loss object refuses to be called, as in
// Keras (see Loss::operator()); train::fit and train::evaluate take it and compute the
// mean over the global batch themselves.
//
// float16/bfloat16 predictions (mixed precision) are cast to float32 first, so every loss
// is computed and returned in float32.
//
// From probabilities, predictions are clipped to [1e-7, 1 - 1e-7] (Keras's epsilon) before
// the log, and categorical predictions are renormalised to sum to one, exactly as Keras's
// backend does.
#pragma once

#include <string>

#include <strata/core/tensor.h>

namespace strata::losses {

enum class Reduction { None, Sum, SumOverBatchSize };
const char* reduction_name(Reduction r);

// Keras's backend epsilon, used to clip probabilities.
inline constexpr double kEpsilon = 1e-7;

// Options of the crossentropy functions (Keras's keyword arguments).
struct CrossentropyOptions {
  bool from_logits = false;
  int64_t axis = -1;  // the class axis (sparse, categorical)
};

// Options of the Loss classes.
struct LossOptions {
  bool from_logits = false;  // crossentropies only
  Reduction reduction = Reduction::SumOverBatchSize;
};
struct HuberOptions {
  double delta = 1.0;
  Reduction reduction = Reduction::SumOverBatchSize;
};

// Integer labels [...] (or [..., 1]) against predictions [..., K] -> [...].
Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                       bool from_logits = false, int64_t axis = -1);
// One-hot (or soft) labels [..., K] against predictions [..., K] -> [...].
Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                bool from_logits = false, int64_t axis = -1);
// Targets in [0, 1] against predictions, elementwise, then the mean over the last axis.
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false);
// The same with options: sparse_categorical_crossentropy(labels, logits, {.from_logits = true}).
inline Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                              const CrossentropyOptions& options) {
  return sparse_categorical_crossentropy(y_true, y_pred, options.from_logits, options.axis);
}
inline Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                       const CrossentropyOptions& options) {
  return categorical_crossentropy(y_true, y_pred, options.from_logits, options.axis);
}
// binary_crossentropy reduces over the last axis: options.axis must be -1.
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, const CrossentropyOptions& options);
// mean(square(y_pred - y_true), last axis).
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);
// Per element 0.5 e^2 when |e| <= delta, else delta (|e| - 0.5 delta); mean over last axis.
Tensor huber(const Tensor& y_true, const Tensor& y_pred, double delta = 1.0);

// losses * sample_weight (broadcast; undefined = 1), then reduced.
Tensor compute_weighted_loss(const Tensor& losses, const Tensor& sample_weight,
                             Reduction reduction);

// A loss function with a reduction (Keras's Loss classes).
class Loss {
 public:
  explicit Loss(Reduction reduction, std::string name)
      : reduction_(reduction), name_(std::move(name)) {}
  virtual ~Loss() = default;

  // Under a distribution strategy (has_strategy()) SumOverBatchSize is refused, as Keras
  // refuses it outside its built-in loops: each replica would divide by its own part of
  // the batch. Use Reduction::None and distribute::compute_average_loss instead.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = Tensor()) const;
  // The unreduced per-example losses.
  virtual Tensor call(const Tensor& y_true, const Tensor& y_pred) const = 0;

  Reduction reduction() const { return reduction_; }
  const std::string& name() const { return name_; }

 private:
  Reduction reduction_;
  std::string name_;
};

class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(const LossOptions& options) : SparseCategoricalCrossentropy(options.from_logits, options.reduction) {}
  explicit SparseCategoricalCrossentropy(bool from_logits = false,
                                         Reduction reduction = Reduction::SumOverBatchSize)
      : Loss(reduction, "sparse_categorical_crossentropy"), from_logits_(from_logits) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override {
    return sparse_categorical_crossentropy(y_true, y_pred, from_logits_);
  }

 private:
  bool from_logits_;
};

class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(const LossOptions& options) : CategoricalCrossentropy(options.from_logits, options.reduction) {}
  explicit CategoricalCrossentropy(bool from_logits = false,
                                   Reduction reduction = Reduction::SumOverBatchSize)
      : Loss(reduction, "categorical_crossentropy"), from_logits_(from_logits) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override {
    return categorical_crossentropy(y_true, y_pred, from_logits_);
  }

 private:
  bool from_logits_;
};

class BinaryCrossentropy : public Loss {
 public:
  explicit BinaryCrossentropy(const LossOptions& options) : BinaryCrossentropy(options.from_logits, options.reduction) {}
  explicit BinaryCrossentropy(bool from_logits = false,
                              Reduction reduction = Reduction::SumOverBatchSize)
      : Loss(reduction, "binary_crossentropy"), from_logits_(from_logits) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override {
    return binary_crossentropy(y_true, y_pred, from_logits_);
  }

 private:
  bool from_logits_;
};

class MeanSquaredError : public Loss {
 public:
  explicit MeanSquaredError(Reduction reduction = Reduction::SumOverBatchSize)
      : Loss(reduction, "mean_squared_error") {}
  // options.from_logits must be false (a regression loss has no logits).
  explicit MeanSquaredError(const LossOptions& options);
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override {
    return mean_squared_error(y_true, y_pred);
  }
};

class Huber : public Loss {
 public:
  explicit Huber(double delta = 1.0, Reduction reduction = Reduction::SumOverBatchSize)
      : Loss(reduction, "huber_loss"), delta_(delta) {}
  explicit Huber(const HuberOptions& options) : Huber(options.delta, options.reduction) {}
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const override {
    return huber(y_true, y_pred, delta_);
  }

 private:
  double delta_;
};

}  // namespace strata::losses
