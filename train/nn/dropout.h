// Dropout: while training, zeroes each element with probability `rate` and scales the
// rest by 1 / (1 - rate); the identity in inference (Keras's Dropout).
//
// Masks are seeded: call k of a layer uses a seed derived from (the layer's seed, k), so a
// program is reproducible run to run. The layer's seed is explicit or drawn from
// nn::next_seed() at construction.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include <strata/train/nn/module.h>

namespace strata::nn {

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double rate, std::optional<uint64_t> seed = std::nullopt);
  Tensor forward(const Tensor& x) override;
  double rate() const { return rate_; }

 private:
  double rate_;
  uint64_t seed_;
  std::atomic<uint64_t> calls_{0};
};

class Dropout : public ModuleHolder<DropoutImpl> {
 public:
  explicit Dropout(double rate, std::optional<uint64_t> seed = std::nullopt)
      : ModuleHolder(std::make_shared<DropoutImpl>(rate, seed)) {}
};

}  // namespace strata::nn
