// The shape kernel family compiled by g++ against cuda_emu.h (see emulated_kernels.cc).
#include <strata/kernels/cuda/shape.cuh>

namespace strata::cuda_emulation {
void register_emulated_shape() { cuda_kernels::register_shape_kernels(); }
}  // namespace strata::cuda_emulation
