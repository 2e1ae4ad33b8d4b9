// Runs a golden "optimizer" case through strata's optimizers (train/optimizer_factory.h).
#pragma once

#include <string>

#include "tools/golden/golden_program.h"
#include <strata/train/optimizer_factory.h>

namespace strata::golden {

// "" when every step's parameter matches the reference, else what differed.
inline std::string run_optimizer_case(const Case& c, Device device) {
  optim::Optimizer opt = optim::make_optimizer(c.optimizer, c.hparams);
  std::vector<Tensor> grads;
  for (const Tensor& g : c.grads) grads.push_back(g.to(device));
  std::vector<Tensor> got = optim::optimizer_trajectory(opt, c.param.to(device), grads);
  if (got.size() != c.expect_params_after_step.size()) {
    return "\n  produced " + std::to_string(got.size()) + " steps, expected " +
           std::to_string(c.expect_params_after_step.size());
  }
  std::string failures;
  for (size_t k = 0; k < got.size(); ++k) {
    const std::string diff = compare(got[k], c.expect_params_after_step[k], c.tol);
    if (!diff.empty()) failures += "\n  after step " + std::to_string(k + 1) + ": " + diff;
  }
  return failures;
}

}  // namespace strata::golden
