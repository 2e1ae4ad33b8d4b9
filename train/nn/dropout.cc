#include <strata/train/nn/dropout.h>

#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/distribute/replica_context.h>

namespace strata::nn {

DropoutImpl::DropoutImpl(double rate, std::optional<uint64_t> seed)
    : Module("dropout"), rate_(rate), seed_(seed ? *seed : next_seed()) {
  STRATA_CHECK(rate >= 0.0 && rate < 1.0, "nn::Dropout: rate must be in [0, 1), got ", rate);
}

Tensor DropoutImpl::forward(const Tensor& x) {
  if (!training() || rate_ == 0.0) return x;
  STRATA_CHECK(is_floating(x.dtype()), "nn::Dropout: expected a floating input, got ", x.dtype());
  const distribute::ReplicaContext* ctx = distribute::get_replica_context();
  const int replica = ctx ? ctx->replica_id_in_sync_group() : 0;
  uint64_t call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = calls_[replica]++;
  }
  // Replica 0 keeps the single-replica sequence; the others' streams are decorrelated
  // by a second odd constant.
  const uint64_t seed = seed_ ^ (0x9E3779B97F4A7C15ull * (call + 1)) ^ (0xD1B54A32D192ED03ull * uint64_t(replica));
  // keep-mask scaled by 1/(1-rate): a constant for autograd, so the gradient is mask/(1-rate).
  const Tensor mask = random::bernoulli(x.shape(), 1.0 - rate_, seed, x.dtype(), x.device()) *
                      (1.0 / (1.0 - rate_));
  return mul(x, mask);
}

}  // namespace strata::nn
