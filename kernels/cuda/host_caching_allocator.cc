#include <strata/kernels/cuda/host_caching_allocator.h>

#include <algorithm>
#include <bit>
#include <limits>

#include <strata/core/error.h>

namespace strata::cuda_backend {

HostCachingAllocator::HostCachingAllocator(std::unique_ptr<PageLockedMemory> memory) : memory_(std::move(memory)) {}

HostCachingAllocator::~HostCachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Blocks waiting for copies are returned once those copies have finished; blocks still
  // in use are left alone (a tensor points into them).
  for (const PendingEvent& pe : pending_) {
    try {
      memory_->synchronize_event(pe.event);
      memory_->destroy_event(pe.event);
      Block& b = blocks_.at(pe.ptr);
      if (--b.pending_events == 0 && !b.lost) free_.emplace(b.size, pe.ptr);
    } catch (...) {  // a failing device: keep what it may still be writing
    }
  }
  pending_.clear();
  try {
    release_cached();
  } catch (...) {
  }
}

size_t HostCachingAllocator::block_size(size_t bytes) {
  STRATA_CHECK(bytes <= (std::numeric_limits<size_t>::max() >> 1) + 1, "pinned host allocator: ", bytes,
               " bytes cannot be allocated");
  return std::max(kMinBlock, std::bit_ceil(bytes));
}

void HostCachingAllocator::hand_out(Block& block) {
  block.in_use = true;
  block.stream_uses.clear();
  stats_.allocated_bytes += int64_t(block.size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
}

void* HostCachingAllocator::take_free(size_t size) {
  auto it = free_.find(size);
  if (it == free_.end()) return nullptr;
  void* p = it->second;
  free_.erase(it);
  stats_.cached_bytes -= int64_t(size);
  hand_out(blocks_.at(p));
  return p;
}

void* HostCachingAllocator::allocate(size_t bytes, const char* op) {
  const size_t size = block_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.allocations;
    process_events();
    if (void* p = take_free(size)) return p;
  }
  // The driver's call runs outside the lock: it takes milliseconds.
  void* p = memory_->allocate(size, op);
  if (p == nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      process_events();
      if (void* q = take_free(size)) return q;
      release_cached();
    }
    p = memory_->allocate(size, op);
    if (p == nullptr) {
      const HostCachingAllocatorStats s = stats();
      fail(op, ": out of page-locked host memory: tried to allocate ", human_bytes(size), " (", bytes,
           " bytes requested); strata holds ", human_bytes(size_t(s.allocated_bytes)), " in pinned tensors and ",
           s.pending_blocks, " block(s) waiting for GPU copies to finish (the cache was emptied and the "
           "allocation retried once)");
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Block& b = blocks_[p];
  b.size = size;
  ++stats_.host_allocs;
  hand_out(b);
  return p;
}

void HostCachingAllocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second.in_use) return;
  Block& b = it->second;
  b.in_use = false;
  stats_.allocated_bytes -= int64_t(b.size);
  if (b.stream_uses.empty()) {
    free_.emplace(b.size, ptr);
    stats_.cached_bytes += int64_t(b.size);
    return;
  }
  // A copy on each of these streams may still read or write the block: reusable once an
  // event recorded behind it has passed on every one of them.
  for (const Stream& s : b.stream_uses) {
    try {
      pending_.push_back({memory_->record_event(s), ptr});
      ++b.pending_events;
    } catch (...) {
      // The device failed (this runs in a destructor, nothing may throw): the block never
      // returns to circulation, since the copy may still be using it.
      b.lost = true;
    }
  }
  b.stream_uses.clear();
  if (b.pending_events > 0) {
    ++stats_.pending_blocks;
  } else {
    ++stats_.lost_blocks;
  }
}

void HostCachingAllocator::record_stream(void* ptr, const Stream& stream) {
  if (stream.device().is_cpu()) return;  // CPU streams are immediate
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  STRATA_CHECK(it != blocks_.end() && it->second.in_use, "pinned host allocator: record_stream(", ptr,
               ") on memory that is not a live page-locked block of this allocator");
  std::vector<Stream>& uses = it->second.stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void HostCachingAllocator::process_events() {
  std::vector<PendingEvent> still;
  for (const PendingEvent& pe : pending_) {
    Block& b = blocks_.at(pe.ptr);
    bool passed = false;
    try {
      passed = memory_->query_event(pe.event);
    } catch (...) {
      passed = true;  // the device failed: stop waiting, but never hand the block out again
      b.lost = true;
    }
    if (!passed) {
      still.push_back(pe);
      continue;
    }
    memory_->destroy_event(pe.event);
    if (--b.pending_events > 0) continue;
    --stats_.pending_blocks;
    if (b.lost) {
      ++stats_.lost_blocks;
    } else {
      free_.emplace(b.size, pe.ptr);
      stats_.cached_bytes += int64_t(b.size);
    }
  }
  pending_.swap(still);
}

void HostCachingAllocator::release_cached() {
  for (auto it = free_.begin(); it != free_.end();) {
    void* p = it->second;
    const size_t size = it->first;
    memory_->free(p);  // may throw: what was freed so far is accounted for
    it = free_.erase(it);
    blocks_.erase(p);
    stats_.cached_bytes -= int64_t(size);
    ++stats_.host_frees;
  }
}

void HostCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  release_cached();
}

HostCachingAllocatorStats HostCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace strata::cuda_backend
