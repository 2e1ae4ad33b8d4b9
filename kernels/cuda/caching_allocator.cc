#include <strata/kernels/cuda/caching_allocator.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>

#include <strata/core/error.h>

namespace strata::cuda_backend {

std::string human_bytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(a->stream.id(), a->size, reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(b->stream.id(), b->size, reinterpret_cast<uintptr_t>(b->ptr));
}

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<DeviceMemory> memory)
    : device_(device), memory_(std::move(memory)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    synchronize_events();
  } catch (...) {  // a failing device: free what we can
  }
  // Every segment starts with a block without a predecessor: walk each segment once.
  std::vector<Block*> heads;
  for (Block* b : small_free_) heads.push_back(b);
  for (Block* b : large_free_) heads.push_back(b);
  for (const auto& [ptr, b] : active_) heads.push_back(b);
  std::set<Block*> firsts;
  for (Block* b : heads) {
    while (b->prev) b = b->prev;
    firsts.insert(b);
  }
  for (Block* first : firsts) {
    try {
      memory_->free(first->ptr);
    } catch (...) {
    }
    for (Block* b = first; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes < kRound) return kRound;
  return (bytes + kRound - 1) / kRound * kRound;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocator::Block* CachingAllocator::find_free(size_t size, const Stream& stream, bool small) {
  FreeSet& set = pool(small);
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = set.lower_bound(&key);
  if (it == set.end() || (*it)->stream.id() != stream.id()) return nullptr;
  Block* b = *it;
  set.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::split(Block* block, size_t size) {
  const size_t remaining = block->size - size;
  const bool worth = block->small ? remaining >= kRound : remaining > kSmallSize;
  if (!worth) return block;
  Block* rest = new Block;
  rest->ptr = static_cast<char*>(block->ptr) + size;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->small = block->small;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  pool(rest->small).insert(rest);
  return block;
}

void* CachingAllocator::malloc_segment(size_t size) {
  void* p = memory_->malloc(size);
  if (p) {
    ++stats_.device_mallocs;
    stats_.reserved_bytes += int64_t(size);
  }
  return p;
}

void* CachingAllocator::allocate(size_t bytes, const Stream& stream) {
  STRATA_CHECK(stream.device() == device_, "cuda allocator: allocating on ", device_,
               " for a stream of ", stream.device());
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  const size_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  Block* block = find_free(size, stream, small);
  if (!block) {
    const size_t seg = segment_size(size);
    void* p = malloc_segment(seg);
    if (!p) {
      // Out of memory: give every unused cached segment back and try once more.
      ++stats_.oom_retries;
      release_all_cached();
      p = malloc_segment(seg);
    }
    if (!p) out_of_memory(bytes, size, seg);
    block = new Block;
    block->ptr = p;
    block->size = seg;
    block->stream = stream;
    block->small = small;
  }
  block = split(block, size);
  block->allocated = true;
  block->requested = bytes;
  block->stream_uses.clear();
  active_.emplace(block->ptr, block);
  ++stats_.allocations;
  stats_.allocated_bytes += int64_t(block->size);
  stats_.requested_bytes += int64_t(bytes);
  update_peaks();
  return block->ptr;
}

void CachingAllocator::out_of_memory(size_t requested, size_t rounded, size_t segment) {
  ++stats_.ooms;
  size_t free_b = 0, total_b = 0;
  try {
    free_b = memory_->free_bytes();
    total_b = memory_->total_bytes();
  } catch (...) {
  }
  fail("cuda allocator: out of memory on ", device_, ": tried to allocate ", human_bytes(requested),
       " (", requested, " bytes requested, a segment of ", human_bytes(segment), "; block ",
       human_bytes(rounded), "); the device has ", human_bytes(free_b), " free of ",
       human_bytes(total_b), "; strata holds ", human_bytes(size_t(stats_.reserved_bytes)),
       " reserved, of which ", human_bytes(size_t(stats_.allocated_bytes)),
       " is allocated to tensors (the cache was emptied and the allocation retried once)");
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  if (it == active_.end()) return;
  Block* block = it->second;
  active_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= int64_t(block->size);
  stats_.requested_bytes -= int64_t(block->requested);
  if (!block->stream_uses.empty()) {
    // Used on other streams: reusable once each of them has passed this point.
    try {
      for (const Stream& s : block->stream_uses) {
        pending_.push_back({memory_->record_event(s), block});
        ++block->pending_events;
      }
    } catch (...) {
      // The device failed (this runs in a destructor, nothing may throw): keep the block
      // out of circulation for good unless some event was recorded.
      if (block->pending_events == 0) return;
    }
    block->stream_uses.clear();
    return;
  }
  free_block(block);
}

void CachingAllocator::free_block(Block* block) {
  FreeSet& set = pool(block->small);
  // Merge with free neighbours of the same segment (same stream by construction: a segment
  // is cut for one stream, and its blocks return there).
  auto mergeable = [&](Block* n) { return n && !n->allocated && n->pending_events == 0 && set.count(n); };
  if (mergeable(block->prev)) {
    Block* p = block->prev;
    set.erase(p);
    p->size += block->size;
    p->next = block->next;
    if (p->next) p->next->prev = p;
    delete block;
    block = p;
  }
  if (mergeable(block->next)) {
    Block* n = block->next;
    set.erase(n);
    block->size += n->size;
    block->next = n->next;
    if (block->next) block->next->prev = block;
    delete n;
  }
  set.insert(block);
}

void CachingAllocator::record_stream(void* ptr, const Stream& stream) {
  STRATA_CHECK(stream.device() == device_, "record_stream: memory on ", device_,
               " cannot be used by a stream of ", stream.device());
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  STRATA_CHECK(it != active_.end(), "record_stream: ", ptr, " is not a live block of ", device_,
               "'s caching allocator");
  Block* block = it->second;
  if (stream == block->stream) return;
  for (const Stream& s : block->stream_uses) {
    if (s == stream) return;
  }
  block->stream_uses.push_back(stream);
}

void CachingAllocator::process_events() {
  if (pending_.empty()) return;
  std::vector<PendingEvent> still;
  for (const PendingEvent& e : pending_) {
    if (memory_->query_event(e.event)) {
      memory_->destroy_event(e.event);
      if (--e.block->pending_events == 0) free_block(e.block);
    } else {
      still.push_back(e);
    }
  }
  pending_.swap(still);
}

void CachingAllocator::synchronize_events() {
  for (const PendingEvent& e : pending_) {
    memory_->synchronize_event(e.event);
    memory_->destroy_event(e.event);
    if (--e.block->pending_events == 0) free_block(e.block);
  }
  pending_.clear();
}

void CachingAllocator::release_cached(FreeSet& set) {
  for (auto it = set.begin(); it != set.end();) {
    Block* b = *it;
    if (b->prev == nullptr && b->next == nullptr) {  // a whole segment, unused
      memory_->free(b->ptr);
      ++stats_.device_frees;
      stats_.reserved_bytes -= int64_t(b->size);
      it = set.erase(it);
      delete b;
    } else {
      ++it;
    }
  }
}

void CachingAllocator::release_all_cached() {
  synchronize_events();
  release_cached(small_free_);
  release_cached(large_free_);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_all_cached();
}

void CachingAllocator::update_peaks() {
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CachingAllocatorStats s = stats_;
  s.active_blocks = int64_t(active_.size());
  s.cached_blocks = int64_t(small_free_.size() + large_free_.size());
  int64_t pending = 0;
  for (const PendingEvent& e : pending_) pending += e.block->pending_events > 0 ? 1 : 0;
  s.pending_blocks = pending;
  s.peak_reserved_bytes = std::max(s.peak_reserved_bytes, s.reserved_bytes);
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

// ---- CudaAllocator ----

CudaAllocator::CudaAllocator(DeviceFactory make_device, void (*check)(int index, const char* op))
    : make_device_(make_device), check_(check) {}

CachingAllocator& CudaAllocator::for_device(int index) {
  STRATA_CHECK(index >= 0 && index < kMaxDevices, "cuda allocator: device index ", index,
               " is out of range");
  CachingAllocator* a = devices_[index].load(std::memory_order_acquire);
  if (a) return *a;
  std::lock_guard<std::mutex> lock(mutex_);
  a = devices_[index].load(std::memory_order_relaxed);
  if (!a) {
    if (check_) check_(index, "cuda allocator");
    a = new CachingAllocator(cuda(index), make_device_(index));  // lives for the process
    devices_[index].store(a, std::memory_order_release);
  }
  return *a;
}

void* CudaAllocator::allocate(size_t bytes, Device device, const Stream& stream) {
  return for_device(device.index).allocate(bytes, stream);
}

void CudaAllocator::deallocate(void* ptr, size_t, Device device) {
  if (device.index < 0 || device.index >= kMaxDevices) return;
  if (CachingAllocator* a = devices_[device.index].load(std::memory_order_acquire)) a->deallocate(ptr);
}

void CudaAllocator::record_stream(void* ptr, Device device, const Stream& stream) {
  for_device(device.index).record_stream(ptr, stream);
}

AllocatorStats CudaAllocator::stats() const {
  AllocatorStats s;
  for (const auto& d : devices_) {
    if (CachingAllocator* a = d.load(std::memory_order_acquire)) {
      const CachingAllocatorStats c = a->stats();
      s.live_bytes += c.allocated_bytes;
      s.peak_bytes += c.peak_allocated_bytes;
      s.allocations += c.allocations;
    }
  }
  return s;
}

void CudaAllocator::reset_peak() {
  for (auto& d : devices_) {
    if (CachingAllocator* a = d.load(std::memory_order_acquire)) a->reset_peak();
  }
}

CachingAllocatorStats CudaAllocator::device_stats(int index) { return for_device(index).stats(); }

void CudaAllocator::empty_cache() {
  for (auto& d : devices_) {
    if (CachingAllocator* a = d.load(std::memory_order_acquire)) a->empty_cache();
  }
}

}  // namespace strata::cuda_backend
