// The CUDA caching allocator: device memory is requested from the driver in segments and
// cut into blocks that are kept for reuse, as PyTorch's CUDACachingAllocator does, because
// cudaMalloc/cudaFree synchronise the device and cost milliseconds.
//
// - Two pools: requests up to 1 MiB are served from 2 MiB segments (the small pool),
//   larger ones from 20 MiB segments (below 10 MiB) or segments of their own size rounded
//   to 2 MiB (the large pool). Sizes are rounded up to 512 bytes.
// - Best fit: the smallest free block of the pool, on the request's stream, that holds
//   the request. A block much larger than the request is split (small pool: when at least
//   512 bytes remain; large pool: when more than 1 MiB remains); a freed block merges with
//   its free neighbours of the same segment.
// - Blocks are reused per stream: a block freed by work on stream S goes back to S's free
//   list and is handed out again at once to later work on S, which runs after every
//   earlier use in stream order. A block also used on other streams (record_stream) is
//   held until an event recorded on each of those streams at free time has passed.
// - Out of memory: every cached segment that holds no live block is returned to the
//   device (after waiting for pending events) and the request is retried once; then a
//   strata::Error gives the requested size, the device's free memory and the cache state.
//
// The bookkeeping is plain C++ over a small DeviceMemory interface (raw memory and stream
// events), so that tests run it on the CPU with a fake device; kernels/cuda/runtime.cc
// implements that interface over cudaMalloc and cudaEvent.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <strata/core/allocator.h>
#include <strata/core/device.h>
#include <strata/core/stream.h>

namespace strata::cuda_backend {

// `bytes` for messages: "512 bytes", "1.50 MiB".
std::string human_bytes(size_t bytes);

// Events on streams: how the caching allocators (this one and the host one,
// host_caching_allocator.h) learn that the work using a freed block has passed.
class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // An event marking the work enqueued on `stream` so far.
  virtual void* record_event(const Stream& stream) = 0;
  // True once the work before the event has finished.
  virtual bool query_event(void* event) = 0;
  // Blocks until the work before the event has finished.
  virtual void synchronize_event(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
};

// What the caching allocator needs of one device.
class DeviceMemory : public StreamEvents {
 public:
  // `bytes` of device memory, or nullptr when the device has not enough free memory.
  // Other failures throw strata::Error.
  virtual void* malloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  // Free and total memory of the device (for the out-of-memory message).
  virtual size_t free_bytes() = 0;
  virtual size_t total_bytes() = 0;
};

struct CachingAllocatorStats {
  int64_t allocated_bytes = 0;       // in blocks handed out (rounded sizes)
  int64_t peak_allocated_bytes = 0;
  int64_t requested_bytes = 0;       // as asked for by allocate()
  int64_t reserved_bytes = 0;        // in segments obtained from the device
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;           // allocate() calls
  int64_t device_mallocs = 0;        // segments obtained (cudaMalloc calls that succeeded)
  int64_t device_frees = 0;          // segments returned
  int64_t oom_retries = 0;           // cache flushed after a failed device malloc
  int64_t ooms = 0;                  // out-of-memory errors raised
  int64_t active_blocks = 0;
  int64_t cached_blocks = 0;         // free blocks kept for reuse
  int64_t pending_blocks = 0;        // freed, waiting for other streams' events
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;                      // block size granularity
  static constexpr size_t kSmallSize = size_t(1) << 20;      // small-pool requests: <= 1 MiB
  static constexpr size_t kSmallSegment = size_t(2) << 20;   // small-pool segment size
  static constexpr size_t kLargeSegment = size_t(20) << 20;  // shared large segment size
  static constexpr size_t kMinLargeAlloc = size_t(10) << 20; // own segment from this size
  static constexpr size_t kRoundLarge = size_t(2) << 20;     // own segments rounded to 2 MiB

  CachingAllocator(Device device, std::unique_ptr<DeviceMemory> memory);
  // Waits for pending events and returns every segment to the device, live blocks too
  // (the registered allocator lives for the whole process and is never destroyed).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 allowed) for work on `stream`; raises on out of memory.
  void* allocate(size_t bytes, const Stream& stream);
  // Returns a block (nullptr and unknown pointers are ignored: this runs in destructors).
  void deallocate(void* ptr);
  // The block at ptr is also used by work on `stream`: it is not reused before that work,
  // as enqueued when the block is freed, has finished.
  void record_stream(void* ptr, const Stream& stream);
  // Returns every cached segment without live or pending blocks to the device.
  void empty_cache();

  CachingAllocatorStats stats() const;
  void reset_peak();
  Device device() const { return device_; }
  // The size a request of `bytes` is rounded to, and the segment size it would get.
  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    size_t requested = 0;
    Stream stream;
    bool small = false;
    bool allocated = false;
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
    int pending_events = 0;
    std::vector<Stream> stream_uses;
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BlockLess>;

  FreeSet& pool(bool small) { return small ? small_free_ : large_free_; }
  Block* find_free(size_t size, const Stream& stream, bool small);
  Block* split(Block* block, size_t size);
  void free_block(Block* block);
  void process_events();
  void synchronize_events();
  void release_cached(FreeSet& set);
  void release_all_cached();
  void* malloc_segment(size_t size);
  [[noreturn]] void out_of_memory(size_t requested, size_t rounded, size_t segment);
  void update_peaks();

  const Device device_;
  std::unique_ptr<DeviceMemory> memory_;
  mutable std::mutex mutex_;
  FreeSet small_free_, large_free_;
  std::unordered_map<void*, Block*> active_;
  struct PendingEvent {
    void* event;
    Block* block;
  };
  std::vector<PendingEvent> pending_;
  CachingAllocatorStats stats_;
};

// strata::Allocator over one CachingAllocator per device (created on first use by
// `make_device(index)`), registered for DeviceType::CUDA by the backend.
class CudaAllocator final : public Allocator {
 public:
  using DeviceFactory = std::unique_ptr<DeviceMemory> (*)(int index);
  // `check(index, op)` raises when the device does not exist.
  CudaAllocator(DeviceFactory make_device, void (*check)(int index, const char* op));

  void* allocate(size_t bytes, Device device, const Stream& stream) override;
  void deallocate(void* ptr, size_t bytes, Device device) override;
  void record_stream(void* ptr, Device device, const Stream& stream) override;
  AllocatorStats stats() const override;  // summed over devices
  void reset_peak() override;

  CachingAllocator& for_device(int index);
  CachingAllocatorStats device_stats(int index);
  void empty_cache();  // every device

 private:
  static constexpr int kMaxDevices = 64;
  DeviceFactory make_device_;
  void (*check_)(int, const char*);
  std::mutex mutex_;  // guards creation; lookups read the atomics
  std::atomic<CachingAllocator*> devices_[kMaxDevices] = {};
};

}  // namespace strata::cuda_backend
