// The emulated CUDA backend of the emulation tests (see emulated_runtime.cc).
#pragma once

#include <cstdint>
#include <vector>

#include <strata/core/stream.h>

#include <strata/kernels/cuda/caching_allocator.h>
#include <strata/kernels/cuda/host_caching_allocator.h>

namespace strata::cuda_emulation {

// Emulated devices: cuda:0 and cuda:1 (two, so that cross-device copies run too).
inline constexpr int kDevices = 2;

// The caching allocator of the emulated devices, and that of their "page-locked" host memory.
cuda_backend::CudaAllocator& allocator();
cuda_backend::HostCachingAllocator& host_allocator();
// Emulated kernel launches so far (to check that an op ran on the emulated device).
int64_t launches();
// What the emulated streams were asked to do, in order (streams are immediate here, so
// tests check the order of requests, not of execution): host-to-device copies with their
// stream and blocking mode, and cross-stream waits.
struct StreamRequest {
  enum class Kind { Upload, Wait };
  Kind kind;
  Stream stream;          // Upload: the copy's stream; Wait: the waiting stream
  Stream producer;        // Wait: the stream waited for
  bool non_blocking = false;  // Upload
};
std::vector<StreamRequest> stream_requests();
void clear_stream_requests();
// Registers the hand-written kernel families for DeviceType::CUDA (emulated_kernels.cc).
void register_emulated_kernels();

}  // namespace strata::cuda_emulation
