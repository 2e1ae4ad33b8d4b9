// The nn kernel family compiled by g++ against cuda_emu.h (see emulated_kernels.cc).
#include <strata/kernels/cuda/nn.cuh>

namespace strata::cuda_emulation {
void register_emulated_nn() { cuda_kernels::register_nn_kernels(); }
}  // namespace strata::cuda_emulation
