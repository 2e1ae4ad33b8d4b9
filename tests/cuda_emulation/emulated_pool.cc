// The pooling kernel family compiled by g++ against cuda_emu.h (see emulated_kernels.cc).
#include <strata/kernels/cuda/pool.cuh>

namespace strata::cuda_emulation {
void register_emulated_pool() { cuda_kernels::register_pool_kernels(); }
}  // namespace strata::cuda_emulation
