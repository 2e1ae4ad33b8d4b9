// Allocators hand out raw device memory for Storage and keep live/peak statistics.
//
// Allocation is stream-aware, as PyTorch's caching allocator is: a block is allocated for
// use on one stream and, once freed, may be handed out again at once to work on that same
// stream (which runs in order after every earlier use). A tensor used on another stream
// is marked with record_stream(); its block is then reused only after that stream's work
// has passed (an event). The CPU allocator ignores streams (CPU streams are immediate).
// It returns 64-byte-aligned blocks (one cache line, a full AVX-512 vector). The CUDA
// backend registers its caching allocator for DeviceType::CUDA.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <strata/core/device.h>
#include <strata/core/stream.h>

namespace strata {

struct AllocatorStats {
  int64_t live_bytes = 0;   // currently allocated
  int64_t peak_bytes = 0;   // high-water mark since start (or last reset)
  int64_t allocations = 0;  // number of allocate() calls
  int64_t cached_bytes = 0; // freed blocks the CPU allocator holds for reuse (not live); 0 elsewhere
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // A block of `bytes` on `device` for work on `stream` (a stream of that device).
  virtual void* allocate(size_t bytes, Device device, const Stream& stream) = 0;
  // Returns a block; it was allocated for the stream given to allocate().
  virtual void deallocate(void* ptr, size_t bytes, Device device) = 0;
  // Marks the block at `ptr` as used by work on `stream` too, so that it is not reused
  // before that work has finished. Immediate (CPU) allocators ignore it.
  virtual void record_stream(void* ptr, Device device, const Stream& stream) {}
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// The allocator for a device type (CPU always exists; CUDA when the backend is built and
// registered). Throws strata::Error when none is registered.
Allocator& allocator_for(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);
bool has_allocator(DeviceType type);

// Statistics of the CPU allocator, used by leak tests. Blocks kept for reuse (see
// core/allocator.cc) are not live.
AllocatorStats cpu_allocator_stats();
// Frees the blocks of 64 KiB and more that the CPU allocator keeps for reuse (at most 1 GiB,
// 64 MiB of it in blocks below 1 MiB).
void cpu_allocator_release_cached();

}  // namespace strata
