#include <strata/train/nn/dropout.h>

#include <strata/core/ops.h>
#include <strata/core/random.h>

namespace strata::nn {

DropoutImpl::DropoutImpl(double rate, std::optional<uint64_t> seed)
    : Module("dropout"), rate_(rate), seed_(seed ? *seed : next_seed()) {
  STRATA_CHECK(rate >= 0.0 && rate < 1.0, "nn::Dropout: rate must be in [0, 1), got ", rate);
}

Tensor DropoutImpl::forward(const Tensor& x) {
  if (!training() || rate_ == 0.0) return x;
  STRATA_CHECK(is_floating(x.dtype()), "nn::Dropout: expected a floating input, got ", x.dtype());
  const uint64_t call = calls_.fetch_add(1);
  const uint64_t seed = seed_ ^ (0x9E3779B97F4A7C15ull * (call + 1));
  // keep-mask scaled by 1/(1-rate): a constant for autograd, so the gradient is mask/(1-rate).
  const Tensor mask = random::bernoulli(x.shape(), 1.0 - rate_, seed, x.dtype(), x.device()) *
                      (1.0 / (1.0 - rate_));
  return mul(x, mask);
}

}  // namespace strata::nn
