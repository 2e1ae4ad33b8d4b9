// Dropout: while training, zeroes each element with probability `rate` and scales the
// rest by 1 / (1 - rate); the identity in inference (Keras's Dropout).
//
// Masks are seeded: call k of a layer on replica r uses a seed derived from (the layer's
// seed, k, r), so a program is reproducible run to run. Each replica of a strategy counts
// its own calls: a count shared by the replica threads would hand out call numbers in
// whatever order the threads arrive, and the masks would change from run to run. The
// layer's seed is explicit or drawn from nn::next_seed() at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

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
  std::mutex mu_;
  std::unordered_map<int, uint64_t> calls_;  // per replica id in sync (0 outside a strategy)
};

class Dropout : public ModuleHolder<DropoutImpl> {
 public:
  explicit Dropout(double rate, std::optional<uint64_t> seed = std::nullopt)
      : ModuleHolder(std::make_shared<DropoutImpl>(rate, seed)) {}
};

}  // namespace strata::nn
