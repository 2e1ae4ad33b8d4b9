// The emulated NCCL backend of the emulation tests (see emulated_nccl.cc).
#pragma once

#include <cstdint>

namespace strata::cuda_emulation {

// Collectives the emulated NCCL communicators ran so far (to check that a strategy took
// the NCCL path rather than the in-process one).
int64_t nccl_collectives();
// Of those, the ones started through all_reduce_async (the gradient reducer's buckets).
int64_t nccl_async_collectives();

}  // namespace strata::cuda_emulation
