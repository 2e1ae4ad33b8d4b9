// Weight regularizers, as tf.keras.regularizers: a Regularizer maps a weight to a scalar
// penalty added to the loss. Give one to a layer (DenseOptions::kernel_regularizer,
// Conv2DOptions::bias_regularizer, ...); the model's losses() then lists one penalty per
// regularized weight, recomputed from the weights' current values on every call (and
// watched by an active GradientTape), as Keras's `model.losses` is:
//
//   nn::Dense(784, 10, {.kernel_regularizer = regularizers::L2(1e-4)})
//   ...
//   Tensor loss = distribute::compute_average_loss(per_example, global_batch) +
//                 distribute::scale_regularization_loss(add_n(model.losses()));
//
// Any callable Tensor(const Tensor&) returning a scalar is a regularizer too.
// Penalties are computed in float32 for floating weights of narrower dtypes (mixed
// precision keeps float32 variables anyway), in the weight's dtype otherwise.
#pragma once

#include <functional>

#include <strata/core/tensor.h>

namespace strata::regularizers {

// Empty (false) means "no regularization".
using Regularizer = std::function<Tensor(const Tensor& weight)>;

// l1 * sum(|w|).
struct L1 {
  explicit L1(double l1 = 0.01);
  Tensor operator()(const Tensor& weight) const;
  double l1;
};

// l2 * sum(w^2).
struct L2 {
  explicit L2(double l2 = 0.01);
  Tensor operator()(const Tensor& weight) const;
  double l2;
};

// l1 * sum(|w|) + l2 * sum(w^2); both default to 0, as in Keras's L1L2.
struct L1L2 {
  explicit L1L2(double l1 = 0.0, double l2 = 0.0);
  Tensor operator()(const Tensor& weight) const;
  double l1, l2;
};

// Keras's functional aliases (tf.keras.regularizers.l1 / l2 / l1_l2 with their defaults).
inline Regularizer l1(double l1 = 0.01) { return L1(l1); }
inline Regularizer l2(double l2 = 0.01) { return L2(l2); }
inline Regularizer l1_l2(double l1 = 0.01, double l2 = 0.01) { return L1L2(l1, l2); }

}  // namespace strata::regularizers
