// The reduce kernel family compiled by g++ against cuda_emu.h (see emulated_kernels.cc).
#include <strata/kernels/cuda/reduce.cuh>

namespace strata::cuda_emulation {
void register_emulated_reduce() { cuda_kernels::register_reduce_kernels(); }
}  // namespace strata::cuda_emulation
