// The creation and random family on CUDA (bodies and launchers in creation.cuh, shared
// with the emulation tests). Compiled with --fmad=false: see creation.cuh.
#include <strata/kernels/cuda/creation.cuh>
#include <strata/kernels/cuda/runtime.h>

namespace strata::cuda_kernels {
void register_cuda_creation() { register_creation_kernels(); }
}  // namespace strata::cuda_kernels
