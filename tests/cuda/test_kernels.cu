// Test-only kernels of the GPU tests (nvcc).
#include <strata/core/tensor.h>
#include "tests/cuda/test_kernels.cuh"

namespace strata::cuda_testing {
void label_check(const Tensor& labels, int64_t limit, const Stream& stream) {
  launch_label_check(labels, limit, stream);
}
}  // namespace strata::cuda_testing
