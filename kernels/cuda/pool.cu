// The pooling family on CUDA: max/average pooling and their gradients (bodies and
// launchers in pool.cuh, shared with the emulation tests).
#include <strata/kernels/cuda/pool.cuh>
#include <strata/kernels/cuda/runtime.h>

namespace strata::cuda_kernels {
void register_cuda_pool() { register_pool_kernels(); }
}  // namespace strata::cuda_kernels
