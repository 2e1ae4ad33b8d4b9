// The NN family on CUDA: softmax, log-softmax, sparse softmax cross-entropy and layer norm
// (bodies and launchers in nn.cuh, shared with the emulation tests).
#include <strata/kernels/cuda/nn.cuh>
#include <strata/kernels/cuda/runtime.h>

namespace strata::cuda_kernels {
void register_cuda_nn() { register_nn_kernels(); }
}  // namespace strata::cuda_kernels
