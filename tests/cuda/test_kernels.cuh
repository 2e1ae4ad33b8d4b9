// A kernel that finds an out-of-range label and defers the error (core/data_error.h), for
// the deferred-error tests of both the emulated and the real device until the sparse
// cross-entropy kernel exists.
#pragma once

#include <strata/kernels/cuda/launch.h>

namespace strata::cuda_testing {

__global__ inline void label_check_kernel(DataError* rec, const int64_t* labels, int64_t n, int64_t limit) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (labels[i] < 0 || labels[i] >= limit) {
      cuda_backend::record_data_error(rec, DataErrorKind::LabelOutOfRange, OpId::SparseSoftmaxCrossEntropy, labels[i], i,
                              limit, 0);
    }
  }
}

// Checks int64 `labels` (on a CUDA device) against [0, limit) on `stream`.
inline void launch_label_check(const Tensor& labels, int64_t limit, const Stream& stream) {
  cuda_backend::launch("label_check", label_check_kernel, cuda_backend::elementwise_shape(labels.numel()).grid,
               cuda_backend::elementwise_shape(labels.numel()).block,
               0, stream, cuda_backend::device_data_error(labels.device().index),
               static_cast<const int64_t*>(labels.raw_data()), labels.numel(), limit);
}

}  // namespace strata::cuda_testing
