// Page-locked ("pinned") host memory: CPU memory that a GPU's copy engines read and write
// directly, so that a copy between it and a GPU runs asynchronously with the host, as
// PyTorch's pin_memory and CUDA's cudaHostAlloc. Tensors get it from Tensor::pin_memory()
// and from Tensor::to(cpu, /*non_blocking=*/true) of a GPU tensor; it is CPU memory in
// every other respect (CPU kernels read and write it). The CUDA backend registers a caching
// allocator for it (kernels/cuda/host_caching_allocator.h); a build without the backend
// has none, and asking for pinned memory there raises a strata::Error.
#pragma once

#include <cstddef>

#include <strata/core/stream.h>

namespace strata {

class PinnedHostAllocator {
 public:
  virtual ~PinnedHostAllocator() = default;
  // A page-locked block of at least `bytes`; raises strata::Error naming `op` and why
  // (no GPU, the driver refusing, out of memory).
  virtual void* allocate(size_t bytes, const char* op) = 0;
  // Returns a block. It is handed out again only once the work of every GPU stream
  // recorded on it (record_stream) has passed the point where it was freed.
  virtual void deallocate(void* ptr) noexcept = 0;
  // Marks the block at `ptr` as used by work enqueued on `stream` (a GPU's stream): an
  // asynchronous copy reading or writing it. CPU streams are immediate and ignored.
  virtual void record_stream(void* ptr, const Stream& stream) = 0;
};

// The registered allocator of page-locked memory, or nullptr when no backend provides one.
PinnedHostAllocator* pinned_host_allocator();
void register_pinned_host_allocator(PinnedHostAllocator* allocator);

}  // namespace strata
