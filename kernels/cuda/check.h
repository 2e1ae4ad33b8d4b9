// One checking macro per NVIDIA library: every status a CUDA runtime, cuBLAS/cuBLASLt,
// cuDNN or NCCL call returns goes through it, and a failure becomes a strata::Error that
// names the op, the call, the library's own error name and text, and the source line.
// Nothing here exits or aborts.
//
//   STRATA_CUDA_CHECK("matmul", cudaMemsetAsync(p, 0, n, stream));
//   STRATA_CUBLASLT_CHECK("matmul", cublasLtMatmul(...));
//
// The cuDNN and NCCL macros exist only in translation units that include cudnn.h or
// nccl.h before this header, so that no other file depends on those libraries.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace strata::cuda_backend {

// Throws strata::Error: "<op>: CUDA call <call> failed: <name> (<text>) [file:line]".
[[noreturn]] void fail_cuda(const char* op, const char* call, cudaError_t status, const char* file,
                            int line);
[[noreturn]] void fail_library(const char* op, const char* library, const char* call, int status,
                               const std::string& text, const char* file, int line);

}  // namespace strata::cuda_backend

#define STRATA_CUDA_CHECK(op, call)                                              \
  do {                                                                           \
    const cudaError_t strata_status_ = (call);                                   \
    if (strata_status_ != cudaSuccess)                                           \
      ::strata::cuda_backend::fail_cuda((op), #call, strata_status_, __FILE__, __LINE__); \
  } while (0)

#if defined(CUBLAS_VER_MAJOR) || defined(CUBLAS_API_H_) || defined(CUBLASLT_H_)
#define STRATA_CUBLAS_CHECK(op, call)                                                        \
  do {                                                                                       \
    const cublasStatus_t strata_status_ = (call);                                            \
    if (strata_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::strata::cuda_backend::fail_library((op), "cuBLAS", #call, int(strata_status_),               \
                                   cublasGetStatusString(strata_status_), __FILE__, __LINE__); \
  } while (0)
#endif

// cuBLASLt alone (libcublasLt: its own status strings, so that a file calling only
// cuBLASLt does not need libcublas). Defined where cublasLt.h was included first.
#if defined(CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA)
#define STRATA_CUBLASLT_CHECK(op, call)                                                      \
  do {                                                                                       \
    const cublasStatus_t strata_status_ = (call);                                            \
    if (strata_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::strata::cuda_backend::fail_library((op), "cuBLASLt", #call, int(strata_status_),     \
                                   cublasLtGetStatusString(strata_status_), __FILE__, __LINE__); \
  } while (0)
#endif

#if defined(CUDNN_MAJOR)
#define STRATA_CUDNN_CHECK(op, call)                                                       \
  do {                                                                                     \
    const cudnnStatus_t strata_status_ = (call);                                           \
    if (strata_status_ != CUDNN_STATUS_SUCCESS)                                            \
      ::strata::cuda_backend::fail_library((op), "cuDNN", #call, int(strata_status_),              \
                                   cudnnGetErrorString(strata_status_), __FILE__, __LINE__); \
  } while (0)
#endif

#if defined(NCCL_MAJOR)
#define STRATA_NCCL_CHECK(op, call)                                                          \
  do {                                                                                       \
    const ncclResult_t strata_status_ = (call);                                              \
    if (strata_status_ != ncclSuccess && strata_status_ != ncclInProgress)                   \
      ::strata::cuda_backend::fail_library((op), "NCCL", #call, int(strata_status_),                 \
                                   ncclGetErrorString(strata_status_), __FILE__, __LINE__);  \
  } while (0)
#endif
