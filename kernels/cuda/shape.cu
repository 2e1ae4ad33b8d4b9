// The copying shape ops on CUDA: concat, pad, gather, scatter_add, one_hot (bodies and
// launchers in shape.cuh, shared with the emulation tests).
#include <strata/kernels/cuda/shape.cuh>
#include <strata/kernels/cuda/runtime.h>

namespace strata::cuda_kernels {
void register_cuda_shape() { register_shape_kernels(); }
}  // namespace strata::cuda_kernels
