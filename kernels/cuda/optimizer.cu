// The fused optimizer updates and all_finite on CUDA (bodies and launchers in
// optimizer.cuh, shared with the emulation tests). Compiled with --fmad=false: see optimizer.cuh.
#include <strata/kernels/cuda/optimizer.cuh>
#include <strata/kernels/cuda/runtime.h>

namespace strata::cuda_kernels {
void register_cuda_optimizer() { register_optimizer_kernels(); }
}  // namespace strata::cuda_kernels
