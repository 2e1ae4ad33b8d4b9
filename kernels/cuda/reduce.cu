// The reduction family on CUDA: sum, max, min, prod, logsumexp, argmax, argmin and cumsum
// (bodies and launchers in reduce.cuh, shared with the emulation tests).
#include <strata/kernels/cuda/reduce.cuh>
#include <strata/kernels/cuda/runtime.h>

namespace strata::cuda_kernels {
void register_cuda_reduce() { register_reduce_kernels(); }
}  // namespace strata::cuda_kernels
