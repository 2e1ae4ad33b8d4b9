// The optimizer kernel family compiled by g++ against cuda_emu.h (see emulated_kernels.cc).
#include <strata/kernels/cuda/optimizer.cuh>

namespace strata::cuda_emulation {
void register_emulated_optimizer() { cuda_kernels::register_optimizer_kernels(); }
}  // namespace strata::cuda_emulation
