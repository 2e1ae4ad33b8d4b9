// The elementwise kernel family compiled by g++ against cuda_emu.h (see emulated_kernels.cc).
#include <strata/kernels/cuda/elementwise.cuh>

namespace strata::cuda_emulation {
void register_emulated_elementwise() { cuda_kernels::register_elementwise_kernels(); }
}  // namespace strata::cuda_emulation
