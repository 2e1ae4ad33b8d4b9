// BatchNormalization and LayerNormalization (Keras semantics and defaults).
//
// BatchNormalization normalises over every axis but `axis` (the features, last by
// default). While training it uses the batch's mean and (biased) variance and moves
// moving_mean / moving_variance towards them: moving -= (moving - batch) * (1 - momentum).
// In inference, or when frozen (set_trainable(false), Keras 2's rule), it uses the moving
// averages and leaves them alone. The moving statistics are non-trainable,
// sync-on-read variables aggregated by mean, as in Keras, so under a strategy each replica
// keeps its own and reading them in cross-replica context averages the replicas.
//
// synchronized (Keras's BatchNormalization(synchronized=True), PyTorch's SyncBatchNorm):
// in training under a strategy with several replicas in sync, the batch statistics are
// those of the global batch, computed in two passes as the plain layer does — every
// replica's sums per feature and example count all-reduced for the mean, then its sums of
// squared deviations from that mean for the variance (numerically stable, unlike Keras's
// E[x^2] - E[x]^2) — and the gradients flow back through those all-reduces (two more
// collectives in backward). Every replica then normalises with the same mean and variance
// and moves its moving statistics alike. For per-replica batches too small for good
// statistics (detection, segmentation). Elsewhere (one replica, inference) it is the plain
// layer. Under synchronized a replica may get an empty part of the batch (it adds nothing
// to the sums); a global batch with no rows at all normalises nothing and leaves the
// moving statistics as they were.
#pragma once

#include <cstdint>
#include <optional>

#include <strata/train/nn/module.h>

namespace strata::nn {

struct BatchNormalizationOptions {
  int64_t axis = -1;
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;  // learn beta
  bool scale = true;   // learn gamma
  bool synchronized = false;  // the global batch's statistics under a strategy (above)
  // The layer's dtype policy (a mixed_precision::Policy, its name or a DType); by default
  // the global policy when the layer is constructed.
  std::optional<mixed_precision::Policy> dtype{};
  Initializer beta_initializer = zeros_initializer();
  Initializer gamma_initializer = ones_initializer();
  Initializer moving_mean_initializer = zeros_initializer();
  Initializer moving_variance_initializer = ones_initializer();
};

class BatchNormalizationImpl : public Module {
 public:
  BatchNormalizationImpl(int64_t num_features, BatchNormalizationOptions options = {});
  Tensor forward(const Tensor& x) override;

  const Variable& gamma() const { return gamma_; }  // undefined without scale
  const Variable& beta() const { return beta_; }    // undefined without center
  const Variable& moving_mean() const { return moving_mean_; }
  const Variable& moving_variance() const { return moving_variance_; }

 private:
  int64_t num_features_;
  BatchNormalizationOptions options_;
  Variable gamma_, beta_, moving_mean_, moving_variance_;
};

class BatchNormalization : public ModuleHolder<BatchNormalizationImpl> {
 public:
  BatchNormalization() = default;
  explicit BatchNormalization(int64_t num_features, BatchNormalizationOptions options = {})
      : ModuleHolder(std::make_shared<BatchNormalizationImpl>(num_features, std::move(options))) {}
};

// Normalises each example over its last axis, then applies gamma and beta ([dim] each).
struct LayerNormalizationOptions {
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  // The layer's dtype policy (a mixed_precision::Policy, its name or a DType); by default
  // the global policy when the layer is constructed.
  std::optional<mixed_precision::Policy> dtype{};
  Initializer beta_initializer = zeros_initializer();
  Initializer gamma_initializer = ones_initializer();
};

class LayerNormalizationImpl : public Module {
 public:
  LayerNormalizationImpl(int64_t dim, LayerNormalizationOptions options = {});
  Tensor forward(const Tensor& x) override;

  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }

 private:
  int64_t dim_;
  LayerNormalizationOptions options_;
  Variable gamma_, beta_;
};

class LayerNormalization : public ModuleHolder<LayerNormalizationImpl> {
 public:
  LayerNormalization() = default;
  explicit LayerNormalization(int64_t dim, LayerNormalizationOptions options = {})
      : ModuleHolder(std::make_shared<LayerNormalizationImpl>(dim, std::move(options))) {}
};

}  // namespace strata::nn
