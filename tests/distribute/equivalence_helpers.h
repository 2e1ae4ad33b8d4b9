// Shared pieces of the tests that train one model under several strategies and compare
// the results: a small classification dataset, the MLP they train on it and its training
// loop, the checks that the replicas agree, and exact and relative comparisons of tensors.
// Catch-free: the multi-worker helper program (helpers/mwms_helper.cc) uses it too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <strata/autograd/tape.h>
#include <strata/core/tensor.h>
#include <strata/data/dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include <strata/train/losses.h>
#include <strata/train/nn/activations.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/optimizer.h>

namespace strata::distribute::testing {

// `examples` rows of `features` normal values (from `seed`), labelled 0-3 by the sum of the
// first three features, batched by `batch` (the last batch may be short unless
// `drop_remainder`).
inline data::Dataset classification_dataset(uint32_t seed, int64_t examples, int64_t features, int64_t batch,
                                            bool drop_remainder = false) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(examples * features));
  for (auto& v : x) v = normal(gen);
  std::vector<int64_t> y(static_cast<size_t>(examples));
  for (int64_t i = 0; i < examples; ++i) {
    float s = 0;
    for (int64_t f = 0; f < 3; ++f) s += x[size_t(i * features + f)];
    y[size_t(i)] = s > 1 ? 3 : s > 0 ? 2 : s > -1 ? 1 : 0;
  }
  return data::Dataset::from_tensor_slices(
             std::vector<Tensor>{Tensor::from_vector(x, {examples, features}), Tensor::from_vector(y, {examples})})
      .batch(batch, drop_remainder);
}

// Dense(features, hidden) - ReLU - Dense(hidden, classes), the two kernels glorot-uniform
// from `init_seed` and `init_seed + 1`. Made inside a strategy's scope, its variables are
// the strategy's.
inline nn::Sequential classification_mlp(int64_t features, int64_t hidden, int64_t classes, uint64_t init_seed) {
  return nn::Sequential{nn::Dense(features, hidden, {.kernel_initializer = nn::glorot_uniform(init_seed)}),
                        nn::ReLU(),
                        nn::Dense(hidden, classes, {.kernel_initializer = nn::glorot_uniform(init_seed + 1)})};
}

// Trains `model` with `opt` for `epochs` passes over `dataset` distributed by `strategy`:
// each step applies the gradients of the softmax cross-entropy averaged over the global
// batch (compute_average_loss), as the design's custom loop does. The global batch is
// `global_batch` when positive, else the sum of the step's local parts (the whole batch in
// one process; a multi-worker job must give it). Returns each step's loss summed over the
// replicas; on_step(n), when given, runs after the n-th step (from 1).
inline std::vector<float> train_classifier(Strategy& strategy, nn::Sequential& model, optim::Optimizer& opt,
                                           const data::Dataset& dataset, int epochs, int64_t global_batch = 0,
                                           const std::function<void(int)>& on_step = {}) {
  const auto vars = model.trainable_variables();
  auto step = [&](const data::Batch& b, int64_t global) {
    autograd::GradientTape tape;
    Tensor logits = model(b[0]);
    Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
    Tensor loss = compute_average_loss(per_example, global);
    auto grads = tape.gradient(loss, vars);
    opt.apply_gradients(grads, vars);
    return loss;
  };
  std::vector<float> losses;
  auto dist = strategy.experimental_distribute_dataset(dataset);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : dist) {
      int64_t global = global_batch;
      if (global <= 0) {
        for (const auto& part : batch) global += part[0].dim(0);
      }
      losses.push_back(strategy.reduce(ReduceOp::Sum, strategy.run(step, batch, global)).item<float>());
      if (on_step) on_step(int(losses.size()));
    }
  }
  return losses;
}

// True when every replica's copy of every variable has the first copy's shape and bits.
inline bool replicas_agree(Strategy& strategy, const std::vector<Variable>& vars) {
  for (const Variable& v : vars) {
    const auto comps = strategy.experimental_local_results(v);
    for (const Tensor& c : comps) {
      if (c.shape() != comps[0].shape() ||
          std::memcmp(c.contiguous().raw_data(), comps[0].contiguous().raw_data(), c.nbytes()) != 0)
        return false;
    }
  }
  return true;
}

// Each variable's value (its cross-replica value under a strategy), copied.
inline std::vector<Tensor> values_of(const std::vector<Variable>& vars) {
  std::vector<Tensor> out;
  for (const Variable& v : vars) out.push_back(v.value().clone());
  return out;
}

// Same shapes, dtypes and bits, element for element.
inline bool bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape() || a[i].dtype() != b[i].dtype() ||
        std::memcmp(a[i].contiguous().raw_data(), b[i].contiguous().raw_data(), a[i].nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// The largest max|a - b| / max|b| over the tensors (paired in order).
inline double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    double diff = 0, scale = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      diff = std::max(diff, std::abs(x[k] - y[k]));
      scale = std::max(scale, std::abs(y[k]));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-12));
  }
  return worst;
}

}  // namespace strata::distribute::testing
