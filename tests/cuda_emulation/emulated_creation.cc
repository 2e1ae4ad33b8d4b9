// The creation kernel family compiled by g++ against cuda_emu.h (see emulated_kernels.cc).
#include <strata/kernels/cuda/creation.cuh>

namespace strata::cuda_emulation {
void register_emulated_creation() { cuda_kernels::register_creation_kernels(); }
}  // namespace strata::cuda_emulation
