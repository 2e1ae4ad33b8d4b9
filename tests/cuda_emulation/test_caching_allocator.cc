// The CUDA caching allocator's bookkeeping on a fake device (no GPU, no memory touched):
// reuse, rounding and pools, best fit, splitting and merging, per-stream reuse,
// record_stream with event deferral, statistics, empty_cache, and out-of-memory retry
// and error.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <strata/core/error.h>
#include <strata/kernels/cuda/caching_allocator.h>
#include "tests/cuda_emulation/fake_memory.h"

using namespace strata;
using strata::cuda_backend::CachingAllocator;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

using FakeDeviceState = testing::FakeMemoryState;

class FakeDevice final : public testing::FakeMemory<cuda_backend::DeviceMemory> {
 public:
  using FakeMemory::FakeMemory;
  void* malloc(size_t bytes) override { return s_->take(bytes); }
  void free(void* ptr) override { s_->give_back(ptr); }
  size_t free_bytes() override { return s_->capacity - s_->used; }
  size_t total_bytes() override { return s_->capacity; }
};

struct Fixture {
  std::shared_ptr<FakeDeviceState> dev = std::make_shared<FakeDeviceState>();
  std::unique_ptr<CachingAllocator> alloc;
  Stream s0{cuda(0), 0}, s1{cuda(0), 1}, s2{cuda(0), 2};
  explicit Fixture(size_t capacity = 1024 * MiB) {
    dev->capacity = capacity;
    alloc = std::make_unique<CachingAllocator>(cuda(0), std::make_unique<FakeDevice>(dev));
  }
  char* get(size_t bytes, const Stream& s) { return static_cast<char*>(alloc->allocate(bytes, s)); }
  cuda_backend::CachingAllocatorStats stats() const { return alloc->stats(); }
};

}  // namespace

TEST_CASE("caching allocator: sizes round to 512 bytes and pick a pool and segment size", "[cuda-allocator]") {
  CHECK(CachingAllocator::round_size(0) == 512);
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::segment_size(512) == 2 * MiB);            // small pool
  CHECK(CachingAllocator::segment_size(1 * MiB) == 2 * MiB);
  CHECK(CachingAllocator::segment_size(1 * MiB + 512) == 20 * MiB);  // large, shared
  CHECK(CachingAllocator::segment_size(10 * MiB) == 10 * MiB);       // own segment
  CHECK(CachingAllocator::segment_size(11 * MiB + 1) == 12 * MiB);   // rounded to 2 MiB
}

TEST_CASE("caching allocator: a freed block is reused without a device malloc", "[cuda-allocator]") {
  Fixture f;
  char* a = f.get(1000, f.s0);
  f.alloc->deallocate(a);
  char* b = f.get(1000, f.s0);
  CHECK(b == a);
  CHECK(f.dev->mallocs == 1);
  CHECK(f.stats().device_mallocs == 1);
  f.alloc->deallocate(b);
  // Zero-byte requests get a block too (distinct pointers, freed like any other).
  char* z1 = f.get(0, f.s0);
  char* z2 = f.get(0, f.s0);
  CHECK(z1 != z2);
  f.alloc->deallocate(z1);
  f.alloc->deallocate(z2);
}

TEST_CASE("caching allocator: small and large pools use their own segments", "[cuda-allocator]") {
  Fixture f;
  char* small = f.get(100, f.s0);
  CHECK(f.stats().reserved_bytes == int64_t(2 * MiB));
  char* large = f.get(3 * MiB, f.s0);
  CHECK(f.stats().reserved_bytes == int64_t(22 * MiB));
  char* huge = f.get(30 * MiB, f.s0);
  CHECK(f.stats().reserved_bytes == int64_t(52 * MiB));
  // A second small request is cut from the first small segment, a second mid-size one
  // from the shared 20 MiB segment.
  char* small2 = f.get(100, f.s0);
  CHECK(small2 == small + 512);
  char* large2 = f.get(2 * MiB, f.s0);
  CHECK(large2 == large + 3 * MiB);
  CHECK(f.dev->mallocs == 3);
  for (char* p : {small, large, huge, small2, large2}) f.alloc->deallocate(p);
}

TEST_CASE("caching allocator: blocks split, and freed neighbours merge back", "[cuda-allocator]") {
  Fixture f;
  char* a = f.get(512 * KiB, f.s0);
  char* b = f.get(512 * KiB, f.s0);
  char* c = f.get(512 * KiB, f.s0);
  CHECK(b == a + 512 * KiB);
  CHECK(c == b + 512 * KiB);
  CHECK(f.stats().cached_blocks == 1);  // the last 512 KiB of the 2 MiB segment
  f.alloc->deallocate(b);
  CHECK(f.stats().cached_blocks == 2);  // b and the tail: not adjacent
  f.alloc->deallocate(a);
  CHECK(f.stats().cached_blocks == 2);  // a merged with b
  // The merged 1 MiB block at a is the best fit for 1 MiB.
  char* d = f.get(1 * MiB, f.s0);
  CHECK(d == a);
  f.alloc->deallocate(d);
  f.alloc->deallocate(c);
  CHECK(f.stats().cached_blocks == 1);  // the whole segment again
  CHECK(f.stats().active_blocks == 0);
  // Two 1 MiB requests (the largest the small pool serves) fill the merged segment.
  char* e1 = f.get(1 * MiB, f.s0);
  char* e2 = f.get(1 * MiB, f.s0);
  CHECK(e1 == a);
  CHECK(e2 == a + 1 * MiB);
  CHECK(f.dev->mallocs == 1);
  f.alloc->deallocate(e1);
  f.alloc->deallocate(e2);
}

TEST_CASE("caching allocator: best fit picks the smallest free block that holds the request",
          "[cuda-allocator]") {
  Fixture f;
  // One small segment cut into 256K | 64K(kept) | 128K | 64K(kept) | rest.
  char* big = f.get(256 * KiB, f.s0);
  char* k1 = f.get(64 * KiB, f.s0);
  char* mid = f.get(128 * KiB, f.s0);
  char* k2 = f.get(64 * KiB, f.s0);
  f.alloc->deallocate(big);
  f.alloc->deallocate(mid);
  CHECK(f.get(100 * KiB, f.s0) == mid);  // 128K fits better than 256K or the tail
  CHECK(f.get(200 * KiB, f.s0) == big);
  (void)k1;
  (void)k2;
}

TEST_CASE("caching allocator: blocks are reused per stream", "[cuda-allocator]") {
  Fixture f;
  char* a = f.get(4096, f.s1);
  f.alloc->deallocate(a);
  char* b = f.get(4096, f.s2);  // another stream: not a's block (its own segment)
  CHECK(b != a);
  CHECK(f.dev->mallocs == 2);
  char* c = f.get(4096, f.s1);  // a's stream gets it back
  CHECK(c == a);
  f.alloc->deallocate(b);
  f.alloc->deallocate(c);
  CHECK_THROWS_AS(f.alloc->allocate(16, Stream(cuda(1), 0)), Error);
}

TEST_CASE("caching allocator: a block used on another stream waits for that stream's event",
          "[cuda-allocator]") {
  Fixture f;
  char* a = f.get(4096, f.s1);
  f.alloc->record_stream(a, f.s2);
  f.alloc->record_stream(a, f.s1);  // its own stream: nothing to wait for
  f.alloc->deallocate(a);
  CHECK(f.stats().pending_blocks == 1);
  CHECK(f.dev->live_events() == 1);
  char* b = f.get(4096, f.s1);  // s2 may still be using a
  CHECK(b != a);
  f.dev->finish(f.s2);
  char* c = f.get(4096, f.s1);  // now a is back in s1's pool
  CHECK(c == a);
  CHECK(f.stats().pending_blocks == 0);
  CHECK(f.dev->live_events() == 0);
  f.alloc->deallocate(b);
  f.alloc->deallocate(c);
  CHECK_THROWS_AS(f.alloc->record_stream(reinterpret_cast<void*>(0x42), f.s2), Error);
  CHECK_THROWS_AS(f.alloc->record_stream(c, Stream(cuda(1), 3)), Error);
}

TEST_CASE("caching allocator: statistics", "[cuda-allocator]") {
  Fixture f;
  char* a = f.get(1000, f.s0);   // 1024 bytes
  char* b = f.get(3 * MiB, f.s0);
  auto s = f.stats();
  CHECK(s.allocated_bytes == int64_t(1024 + 3 * MiB));
  CHECK(s.requested_bytes == int64_t(1000 + 3 * MiB));
  CHECK(s.reserved_bytes == int64_t(22 * MiB));
  CHECK(s.allocations == 2);
  CHECK(s.device_mallocs == 2);
  CHECK(s.active_blocks == 2);
  f.alloc->deallocate(b);
  s = f.stats();
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.peak_allocated_bytes == int64_t(1024 + 3 * MiB));
  CHECK(s.reserved_bytes == int64_t(22 * MiB));  // cached, not returned
  f.alloc->reset_peak();
  CHECK(f.stats().peak_allocated_bytes == 1024);
  f.alloc->deallocate(a);
  CHECK(f.stats().allocated_bytes == 0);
  CHECK(f.stats().requested_bytes == 0);
}

TEST_CASE("caching allocator: empty_cache returns unused segments only", "[cuda-allocator]") {
  Fixture f;
  char* a = f.get(1000, f.s0);     // keeps the small segment in use
  char* b = f.get(3 * MiB, f.s0);  // its 20 MiB segment becomes unused
  char* c = f.get(40 * MiB, f.s0);
  f.alloc->deallocate(b);
  f.alloc->deallocate(c);
  f.alloc->empty_cache();
  auto s = f.stats();
  CHECK(s.reserved_bytes == int64_t(2 * MiB));
  CHECK(s.device_frees == 2);
  CHECK(f.dev->used == 2 * MiB);
  f.alloc->deallocate(a);
  f.alloc->empty_cache();
  CHECK(f.dev->used == 0);
  CHECK(f.stats().reserved_bytes == 0);
}

TEST_CASE("caching allocator: out of memory frees the cache and retries once", "[cuda-allocator]") {
  Fixture f(30 * MiB);
  char* a = f.get(12 * MiB, f.s0);
  f.alloc->deallocate(a);  // 12 MiB cached for s0
  // A record_stream'd block pending on s2's event is flushed too (after waiting for it).
  char* p = f.get(512 * KiB, f.s0);  // a 2 MiB small segment
  f.alloc->record_stream(p, f.s2);
  f.alloc->deallocate(p);
  CHECK(f.stats().pending_blocks == 1);
  // s1 cannot reuse s0's blocks; 18 MiB does not fit next to the 14 MiB cached.
  char* b = f.get(18 * MiB, f.s1);
  auto s = f.stats();
  CHECK(s.oom_retries == 1);
  CHECK(s.ooms == 0);
  CHECK(s.device_frees == 2);
  CHECK(s.pending_blocks == 0);
  CHECK(s.reserved_bytes == int64_t(18 * MiB));
  CHECK(f.dev->failed_mallocs == 1);
  f.alloc->deallocate(b);
}

TEST_CASE("caching allocator: out of memory raises with the requested and free sizes", "[cuda-allocator]") {
  Fixture f(30 * MiB);
  char* a = f.get(20 * MiB, f.s0);
  try {
    f.alloc->allocate(size_t(20) * MiB + 5, f.s0);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("out of memory on cuda:0") != std::string::npos);
    CHECK(m.find(std::to_string(20 * MiB + 5) + " bytes requested") != std::string::npos);
    CHECK(m.find("10.00 MiB free of 30.00 MiB") != std::string::npos);
    CHECK(m.find("20.00 MiB reserved") != std::string::npos);
  }
  auto s = f.stats();
  CHECK(s.ooms == 1);
  CHECK(s.oom_retries == 1);
  CHECK(f.dev->failed_mallocs == 2);
  // The allocator is still usable.
  f.alloc->deallocate(a);
  char* b = f.get(25 * MiB, f.s0);
  CHECK(b != nullptr);
  f.alloc->deallocate(b);
}

TEST_CASE("caching allocator: unknown pointers are ignored on free", "[cuda-allocator]") {
  Fixture f;
  f.alloc->deallocate(nullptr);
  f.alloc->deallocate(reinterpret_cast<void*>(0x1234));
  CHECK(f.stats().active_blocks == 0);
}

TEST_CASE("caching allocator: concurrent threads on their own streams", "[cuda-allocator]") {
  Fixture f;
  auto work = [&](Stream s) {
    std::vector<void*> held;
    for (int i = 0; i < 300; ++i) {
      held.push_back(f.alloc->allocate(size_t(512 * (1 + i % 7)), s));
      if (held.size() > 5) {
        f.alloc->deallocate(held.front());
        held.erase(held.begin());
      }
    }
    for (void* p : held) f.alloc->deallocate(p);
  };
  std::thread t1(work, f.s1), t2(work, f.s2);
  t1.join();
  t2.join();
  CHECK(f.stats().active_blocks == 0);
  CHECK(f.stats().allocated_bytes == 0);
  CHECK(f.stats().allocations == 600);
}

TEST_CASE("CudaAllocator creates one caching allocator per device", "[cuda-allocator]") {
  auto states = std::make_shared<std::vector<std::shared_ptr<FakeDeviceState>>>();
  static std::vector<std::shared_ptr<FakeDeviceState>>* g_states = nullptr;
  g_states = states.get();
  cuda_backend::CudaAllocator a(
      [](int) -> std::unique_ptr<cuda_backend::DeviceMemory> {
        g_states->push_back(std::make_shared<FakeDeviceState>());
        return std::make_unique<FakeDevice>(g_states->back());
      },
      [](int index, const char* op) { STRATA_CHECK(index < 2, op, ": no cuda:", index); });
  void* p0 = a.allocate(100, cuda(0), Stream(cuda(0), 0));
  void* p1 = a.allocate(200, cuda(1), Stream(cuda(1), 0));
  CHECK(states->size() == 2);
  CHECK(a.stats().live_bytes == 512 + 512);
  CHECK(a.stats().allocations == 2);
  CHECK_THROWS_WITH(a.allocate(1, cuda(2), Stream(cuda(2), 0)), Catch::Contains("no cuda:2"));
  a.deallocate(p0, 100, cuda(0));
  a.deallocate(p1, 200, cuda(1));
  CHECK(a.stats().live_bytes == 0);
}
