#include <strata/core/allocator.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/core/pinned_host_allocator.h>
#include <strata/core/storage.h>

namespace strata {

namespace {

// Small blocks (eager scalars, biases, per-op temporaries, small layers' outputs and
// gradients) are kept on per-thread free lists: aligned_alloc/free of a 64-byte block cost
// ~100 ns in glibc (memalign splits and consolidates chunks), most of an eager op's
// overhead, and more for the few-KiB outputs of a small layer (the MNIST CNN's last dense
// layer: 5 and 32 KiB per product of ~5 us). Classes of 64 bytes up to 4 KiB, then of
// 1 KiB below 64 KiB (where the medium cache takes over). A block freed on another thread
// joins that thread's lists. Sanitizer builds skip the lists so that every use after free
// is still caught.
class SmallBlockCache {
 public:
  static constexpr size_t kFineMax = 4096;         // size classes of 64 bytes up to 4 KiB
  static constexpr size_t kCoarseGranule = 1024;   // then of 1 KiB
  static constexpr size_t kMaxBytes = 63 * 1024;   // below the medium cache's 64 KiB
  static constexpr size_t kClasses = kFineMax / 64 + (kMaxBytes - kFineMax) / kCoarseGranule;
  static constexpr size_t kPerClass = 64;          // blocks kept per class and thread

  // The size class of `bytes` (at most kMaxBytes), as allocations are rounded.
  static size_t round(size_t bytes) {
    return bytes <= kFineMax ? (bytes + 63) / 64 * 64 : (bytes + kCoarseGranule - 1) / kCoarseGranule * kCoarseGranule;
  }

  ~SmallBlockCache() {
    for (auto& list : lists_) {
      for (size_t i = 0; i < list.count; ++i) std::free(list.blocks[i]);
      list.count = 0;
    }
  }
  void* take(size_t rounded) {
    List& l = lists_[index(rounded)];
    if (l.count == 0) return nullptr;
    bytes_ -= rounded;
    return l.blocks[--l.count];
  }
  bool put(size_t rounded, void* p) {
    List& l = lists_[index(rounded)];
    if (l.count == kPerClass || bytes_ + rounded > kMaxHeld) return false;
    bytes_ += rounded;
    l.blocks[l.count++] = p;
    return true;
  }

 private:
  struct List {
    size_t count = 0;
    std::array<void*, kPerClass> blocks;
  };
  static size_t index(size_t rounded) {
    return rounded <= kFineMax ? rounded / 64 - 1 : kFineMax / 64 + (rounded - kFineMax) / kCoarseGranule - 1;
  }
  static constexpr size_t kMaxHeld = size_t(2) << 20;  // bytes kept per thread at most
  std::array<List, kClasses> lists_{};
  size_t bytes_ = 0;
};

#ifdef STRATA_SANITIZER_BUILD
constexpr bool kUseSmallBlockCache = false;
#else
constexpr bool kUseSmallBlockCache = true;
#endif

// The calling thread's cache, or null while the thread is exiting (its cache destroyed).
SmallBlockCache* small_cache() {
  struct Holder {
    SmallBlockCache cache;
    bool alive = true;
    ~Holder() { alive = false; }
  };
  thread_local Holder h;
  return h.alive ? &h.cache : nullptr;
}

// 64-byte-aligned host memory with live/peak counters (relaxed atomics: statistics only).
//
// Large blocks are cached for reuse. glibc serves blocks above its mmap threshold (at most
// 32 MiB) with a fresh mmap and unmaps them on free, so every large op output (an add of 16M
// floats writes 64 MiB) paid a page fault and the kernel's zeroing for each 4 KiB page on
// first touch: that made such an add 4-5x slower than a loop into a reused buffer. Freed
// blocks of at least kCacheMin bytes are kept (up to kCacheMax bytes in all) and handed out
// again for requests of the same size class. live_bytes counts only blocks held by tensors.
//
// Medium blocks (64 KiB to 1 MiB: a training step's activations, gradients and masks, e.g.
// 128x512 floats) are cached too, in 4 KiB classes and at most kMediumMax bytes: below
// glibc's initial mmap threshold (128 KiB) they came from the heap, whose top glibc trims
// back to the kernel once 2x that threshold is free, and above it from a fresh mmap — either
// way a step paid page faults for memory it had held the step before. A step allocates the
// same sizes every time, so exact size classes are reused; the bound keeps a workload of
// ever-changing sizes from hoarding memory.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kCacheMin = size_t(1) << 16;        // 64 KiB
  static constexpr size_t kLargeMin = size_t(1) << 20;        // 1 MiB
  static constexpr size_t kCacheMax = size_t(1) << 30;        // 1 GiB cached at most
  static constexpr size_t kMediumMax = size_t(1) << 26;       // of which medium blocks 64 MiB
  static constexpr size_t kMediumGranule = size_t(1) << 12;   // size classes of 4 KiB
  static constexpr size_t kCacheGranule = size_t(1) << 16;    // size classes of 64 KiB

  void* allocate(size_t bytes, Device, const Stream&) override {
    const size_t rounded = size_class((bytes == 0 ? 1 : bytes));
    void* p = nullptr;
    if (rounded >= kCacheMin) {
      p = take_cached(rounded);
    } else if (kUseSmallBlockCache && rounded <= SmallBlockCache::kMaxBytes) {
      if (SmallBlockCache* c = small_cache()) p = c->take(rounded);
    }
    if (!p) p = std::aligned_alloc(64, rounded);
    if (!p) {
      release_cached();  // memory held for reuse is better given back than failing
      p = std::aligned_alloc(64, rounded);
    }
    if (!p) fail("cpu allocator: out of memory allocating ", bytes, " bytes");
    int64_t live = live_.fetch_add(int64_t(bytes), std::memory_order_relaxed) + int64_t(bytes);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
    count_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  void deallocate(void* ptr, size_t bytes, Device) override {
    live_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
    const size_t rounded = size_class(bytes == 0 ? 1 : bytes);
    if (kUseSmallBlockCache && rounded <= SmallBlockCache::kMaxBytes) {
      SmallBlockCache* c = small_cache();
      if (c && c->put(rounded, ptr)) return;
    }
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      const bool medium = rounded < kLargeMin;
      if (cached_bytes_ + rounded <= kCacheMax && (!medium || medium_bytes_ + rounded <= kMediumMax)) {
        cache_.emplace(rounded, ptr);
        cached_bytes_ += rounded;
        if (medium) medium_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }
  AllocatorStats stats() const override {
    AllocatorStats s{live_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed),
                     count_.load(std::memory_order_relaxed)};
    std::lock_guard<std::mutex> lock(cache_mutex_);
    s.cached_bytes = int64_t(cached_bytes_);  // the per-thread small-block lists are not counted
    return s;
  }
  void reset_peak() override { peak_.store(live_.load()); }

  void release_cached() {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (const auto& [size, p] : cache_) std::free(p);
    cache_.clear();
    cached_bytes_ = 0;
    medium_bytes_ = 0;
  }

 private:
  static size_t round_up(size_t bytes, size_t granule) { return (bytes + granule - 1) / granule * granule; }
  static size_t size_class(size_t bytes) {
    if (bytes >= kLargeMin) return round_up(bytes, kCacheGranule);
    if (bytes <= SmallBlockCache::kMaxBytes) return SmallBlockCache::round(bytes);
    const size_t r = round_up(bytes, 64);
    return r >= kCacheMin ? round_up(r, kMediumGranule) : r;
  }

  void* take_cached(size_t rounded) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto [lo, hi] = cache_.equal_range(rounded);
    if (lo == hi) return nullptr;
    const auto it = std::prev(hi);  // the block freed last: likeliest still in cache
    void* p = it->second;
    cache_.erase(it);
    cached_bytes_ -= rounded;
    if (rounded < kLargeMin) medium_bytes_ -= rounded;
    return p;
  }

  std::atomic<int64_t> live_{0}, peak_{0}, count_{0};
  mutable std::mutex cache_mutex_;
  std::multimap<size_t, void*> cache_;  // size class -> free block
  size_t cached_bytes_ = 0;   // all cached blocks
  size_t medium_bytes_ = 0;   // cached blocks below kLargeMin
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: storages may outlive main
  return *a;
}

std::array<std::atomic<Allocator*>, kNumDeviceTypes>& registry() {
  static std::array<std::atomic<Allocator*>, kNumDeviceTypes> r{};
  return r;
}

}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  registry()[size_t(type)].store(allocator);
}

bool has_allocator(DeviceType type) {
  return type == DeviceType::CPU || registry()[size_t(type)].load() != nullptr;
}

Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::CPU) return cpu_allocator();
  Allocator* a = registry()[size_t(type)].load();
  if (a == nullptr) {
    ensure_backends_registered();  // backends register lazily (core/dispatch.h)
    a = registry()[size_t(type)].load();
  }
  STRATA_CHECK(a != nullptr, "allocator: no allocator for device type ",
               type == DeviceType::CUDA ? "cuda" : "?",
               " (strata was built without the CUDA backend, or no GPU is present)");
  return *a;
}

namespace {
std::atomic<PinnedHostAllocator*>& pinned_registry() {
  static std::atomic<PinnedHostAllocator*> r{nullptr};
  return r;
}
}  // namespace

void register_pinned_host_allocator(PinnedHostAllocator* allocator) { pinned_registry().store(allocator); }

PinnedHostAllocator* pinned_host_allocator() {
  ensure_backends_registered();  // backends register lazily (core/dispatch.h)
  return pinned_registry().load();
}

AllocatorStats cpu_allocator_stats() { return cpu_allocator().stats(); }

void cpu_allocator_release_cached() { cpu_allocator().release_cached(); }

namespace {
// The calling thread's current stream of `device`, once its allocator is known to exist
// (so that a missing backend is reported by the allocator, naming the device type).
Stream allocation_stream(Device device) {
  if (!device.is_cpu()) allocator_for(device.type);
  return current_stream(device);
}
}  // namespace

Storage::Storage(size_t bytes, Device device) : Storage(bytes, device, allocation_stream(device)) {}

Storage::Storage(size_t bytes, Device device, const Stream& stream)
    : bytes_(bytes), device_(device), stream_(stream) {
  STRATA_CHECK(stream.device() == device, "Storage: allocating on ", device, " for a stream of ",
               stream.device());
  data_ = allocator_for(device.type).allocate(bytes, device, stream);
}

Storage::Storage(size_t bytes, Device device, PinnedHost pinned)
    : bytes_(bytes), device_(device), stream_(current_stream(device)), pinned_(true) {
  STRATA_CHECK(device.is_cpu(), pinned.op, ": page-locked memory is host memory, not memory on ", device);
  PinnedHostAllocator* a = pinned_host_allocator();
  STRATA_CHECK(a != nullptr, pinned.op, ": page-locked (pinned) host memory needs the CUDA backend, and ",
               "strata was built without it (or it is not linked into this program)");
  data_ = a->allocate(bytes, pinned.op);
}

void Storage::record_stream(const Stream& stream) {
  if (pinned_) {
    // Host memory read or written by a GPU's copy engine: held until that work has passed.
    if (!stream.device().is_cpu()) pinned_host_allocator()->record_stream(data_, stream);
    return;
  }
  STRATA_CHECK(stream.device() == device_, "Storage::record_stream: memory on ", device_,
               " cannot be used by a stream of ", stream.device());
  if (owned_ && !(stream == stream_)) allocator_for(device_.type).record_stream(data_, device_, stream);
}

Storage::Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter)
    : data_(data), bytes_(bytes), device_(device), stream_(device, 0), deleter_(std::move(deleter)),
      owned_(false) {}

Storage::~Storage() {
  if (pinned_) {
    pinned_host_allocator()->deallocate(data_);
  } else if (owned_) {
    allocator_for(device_.type).deallocate(data_, bytes_, device_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace strata
