// The caching allocator of page-locked host memory (core/pinned_host_allocator.h), as
// PyTorch's CachingHostAllocator: cudaHostAlloc and cudaFreeHost cost milliseconds and
// cudaFreeHost synchronises the device, so freed blocks are kept and handed out again.
//
// - Sizes are rounded up to a power of two from 4 KiB; a request takes a free block of
//   exactly its rounded size, or a new one from the driver.
// - A block used by a GPU stream (record_stream: an asynchronous copy reads or writes it)
//   is reusable only once an event recorded on each such stream when the block was freed
//   has passed; until then the copy may still be running. Blocks no stream used are
//   reusable at once.
// - When the driver has no page-locked memory left, the cached blocks are returned to it
//   and the request is retried once; then a strata::Error gives the sizes.
//
// The bookkeeping is plain C++ over a small PageLockedMemory interface, so that tests run
// it on the CPU with fake memory and events; kernels/cuda/runtime.cc implements it over
// cudaHostAlloc and cudaEvent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <strata/core/pinned_host_allocator.h>
#include <strata/core/stream.h>
#include <strata/kernels/cuda/caching_allocator.h>

namespace strata::cuda_backend {

// What the host caching allocator needs of the driver.
class PageLockedMemory : public StreamEvents {
 public:
  // `bytes` of page-locked host memory, or nullptr when the driver has none left. Other
  // failures (no GPU, no driver) throw strata::Error naming `op`.
  virtual void* allocate(size_t bytes, const char* op) = 0;
  virtual void free(void* ptr) = 0;
};

struct HostCachingAllocatorStats {
  int64_t allocated_bytes = 0;   // in blocks handed out (rounded sizes)
  int64_t peak_allocated_bytes = 0;
  int64_t cached_bytes = 0;      // in free blocks kept for reuse
  int64_t pending_blocks = 0;    // freed, waiting for GPU streams' events
  int64_t allocations = 0;       // allocate() calls
  int64_t host_allocs = 0;       // blocks obtained from the driver
  int64_t host_frees = 0;        // blocks returned to the driver
  int64_t lost_blocks = 0;       // kept out of circulation after a failing event
};

class HostCachingAllocator final : public PinnedHostAllocator {
 public:
  static constexpr size_t kMinBlock = size_t(4) << 10;

  explicit HostCachingAllocator(std::unique_ptr<PageLockedMemory> memory);
  // Returns every cached block to the driver (the registered allocator lives for the whole
  // process and is never destroyed; tests destroy theirs).
  ~HostCachingAllocator() override;
  HostCachingAllocator(const HostCachingAllocator&) = delete;
  HostCachingAllocator& operator=(const HostCachingAllocator&) = delete;

  void* allocate(size_t bytes, const char* op) override;
  // nullptr and pointers this allocator did not hand out are ignored (destructors call it).
  void deallocate(void* ptr) noexcept override;
  // Raises for a pointer that is not a live block of this allocator.
  void record_stream(void* ptr, const Stream& stream) override;
  // Returns every free block to the driver (not those in use or waiting for events).
  void empty_cache();

  HostCachingAllocatorStats stats() const;
  // The size a request of `bytes` is rounded to.
  static size_t block_size(size_t bytes);

 private:
  struct Block {
    size_t size = 0;
    bool in_use = false;
    int pending_events = 0;
    bool lost = false;                // an event failed: never handed out again
    std::vector<Stream> stream_uses;  // GPU streams that used it since it was handed out
  };
  struct PendingEvent {
    void* event;
    void* ptr;
  };
  void process_events();  // blocks whose events have all passed become free
  void release_cached();  // free blocks back to the driver
  void* take_free(size_t size);
  void hand_out(Block& block);

  std::unique_ptr<PageLockedMemory> memory_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;      // every block obtained and not returned
  std::multimap<size_t, void*> free_;            // size -> free block
  std::vector<PendingEvent> pending_;
  HostCachingAllocatorStats stats_;
};

}  // namespace strata::cuda_backend
