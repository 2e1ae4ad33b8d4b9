// Builds optimizers from a name and JSON hyperparameters — the vocabulary of the golden
// "optimizer" cases (../shared/golden/README.md) and of programs that pick an optimizer
// from a flag or a config file.
//
//   "sgd":   lr, momentum (0), nesterov (false), weight_decay (0), keras_momentum (false)
//   "adam":  lr, beta1 (0.9), beta2 (0.999), eps (1e-8), weight_decay (0, L2)
//   "adamw": lr, beta1, beta2, eps, weight_decay (0.01, decoupled)
//   all:     global_clipnorm (0 = off); use_ema (false), ema_momentum (0.99),
//            ema_overwrite_frequency (0 = never; Keras's None), train/ema.h
// Unknown names, unknown hyperparameters and values of the wrong type throw strata::Error
// naming them, so a case with a new knob fails loudly instead of running without it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/core/tensor.h>
#include <strata/train/optimizer.h>

namespace strata::optim {

Optimizer make_optimizer(const std::string& name, const nlohmann::json& hparams);

// Runs `grads.size()` updates of one fresh variable initialised to `initial` and returns
// its value after each step (what a golden optimizer case compares).
std::vector<Tensor> optimizer_trajectory(const Optimizer& optimizer, const Tensor& initial,
                                         const std::vector<Tensor>& grads);

}  // namespace strata::optim
