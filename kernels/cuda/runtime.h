// The CUDA runtime layer of the backend: devices, streams, events, the deferred data-error
// record, copies, the caching allocator and the page-locked host memory's allocator.
//
// A library built with CUDA runs on machines without a GPU: device_count() is then 0
// (any driver error counts as "no device") and the first use of `cuda:N` raises a
// strata::Error saying why. Core reaches all of this through the interfaces it declares
// (core/stream.h StreamBackend, core/allocator.h Allocator, core/dispatch.h copies); this
// header is for the backend's own files and its tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <strata/core/device.h>
#include <strata/core/stream.h>
#include <strata/kernels/cuda/caching_allocator.h>
#include <strata/kernels/cuda/host_caching_allocator.h>

namespace strata::cuda_backend {

// Number of CUDA devices (0 when the driver or the device is missing); queried once.
int device_count();
// Why device_count() is 0 ("" when devices exist).
std::string no_device_reason();
// Raises a strata::Error naming `op` unless cuda:index exists.
void require_device(int index, const char* op);

struct DeviceProperties {
  std::string name;
  size_t total_memory = 0;
  int multiprocessors = 0;
  int major = 0, minor = 0;  // compute capability
};
DeviceProperties properties(int index);

// The CUDA allocator (registered for DeviceType::CUDA) and its per-device statistics.
CudaAllocator& allocator();
CachingAllocatorStats allocator_stats(int index);
// Returns the cached, unused segments of every device to the driver, and the cached
// page-locked host blocks.
void empty_cache();
// The allocator of page-locked host memory (registered as core's PinnedHostAllocator).
HostCachingAllocator& host_allocator();

// Registers the backend's stream backend, allocator, copies and kernels (run once by the
// backend's BackendRegistration; idempotent).
void register_backend();

}  // namespace strata::cuda_backend

namespace strata::cuda_kernels {
// Defined by the kernel families' .cu files.
void register_cuda_elementwise();
void register_cuda_creation();
void register_cuda_shape();
void register_cuda_optimizer();
void register_cuda_reduce();
void register_cuda_nn();
// Defined by matmul.cc (cuBLASLt), conv.cc (cuDNN) and pool.cu.
void register_cuda_matmul();
void register_cuda_conv();
void register_cuda_pool();
}  // namespace strata::cuda_kernels
