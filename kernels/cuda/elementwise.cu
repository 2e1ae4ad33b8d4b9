// The elementwise family on CUDA: unary, binary, where, cast and copy (bodies and
// launchers in elementwise.cuh, shared with the emulation tests).
#include <strata/kernels/cuda/elementwise.cuh>
#include <strata/kernels/cuda/runtime.h>

namespace strata::cuda_kernels {
void register_cuda_elementwise() { register_elementwise_kernels(); }
}  // namespace strata::cuda_kernels
