// Page-locked ("pinned") host memory. The host caching allocator's bookkeeping on fake
// memory and events (no GPU): rounding, reuse, blocks held until every GPU stream that used
// them has passed its event, failing events, out-of-memory retry and error, empty_cache,
// statistics, concurrent threads. Then Tensor::pin_memory and the non-blocking copies on
// the emulated devices, which run the same bookkeeping through core's PinnedHostAllocator.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <vector>

#include <strata/autograd/tape.h>
#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/core/pinned_host_allocator.h>
#include <strata/core/random.h>
#include <strata/kernels/cuda/host_caching_allocator.h>
#include "tests/cuda_emulation/fake_memory.h"
#include "tests/cuda_emulation/emulated_runtime.h"

using namespace strata;
using strata::cuda_backend::HostCachingAllocator;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

class FakeHostMemory final : public testing::FakeMemory<cuda_backend::PageLockedMemory> {
 public:
  using FakeMemory::FakeMemory;
  void* allocate(size_t bytes, const char*) override { return s_->take(bytes); }
  void free(void* ptr) override { s_->give_back(ptr); }
};

struct Fixture {
  std::shared_ptr<testing::FakeMemoryState> mem = std::make_shared<testing::FakeMemoryState>();
  std::unique_ptr<HostCachingAllocator> alloc;
  Stream gpu0{cuda(0), 5}, gpu1{cuda(1), 6}, host{Device(), 0};
  explicit Fixture(size_t capacity = 1024 * MiB) {
    mem->capacity = capacity;
    alloc = std::make_unique<HostCachingAllocator>(std::make_unique<FakeHostMemory>(mem));
  }
  void* get(size_t bytes) { return alloc->allocate(bytes, "test"); }
  cuda_backend::HostCachingAllocatorStats stats() const { return alloc->stats(); }
};

}  // namespace

TEST_CASE("host caching allocator: sizes round up to a power of two from 4 KiB", "[pinned]") {
  CHECK(HostCachingAllocator::block_size(0) == 4 * KiB);
  CHECK(HostCachingAllocator::block_size(1) == 4 * KiB);
  CHECK(HostCachingAllocator::block_size(4 * KiB) == 4 * KiB);
  CHECK(HostCachingAllocator::block_size(4 * KiB + 1) == 8 * KiB);
  CHECK(HostCachingAllocator::block_size(3 * MiB) == 4 * MiB);
  CHECK_THROWS_WITH(HostCachingAllocator::block_size(~size_t(0)), Catch::Contains("cannot be allocated"));
}

TEST_CASE("host caching allocator: a block no GPU stream used is reused at once, by its size only", "[pinned]") {
  Fixture f;
  void* a = f.get(5000);
  f.alloc->deallocate(a);
  CHECK(f.stats().cached_bytes == int64_t(8 * KiB));
  void* small = f.get(100);  // another size: a new block
  CHECK(small != a);
  void* b = f.get(8000);  // the same rounded size: the cached block
  CHECK(b == a);
  CHECK(f.mem->mallocs == 2);
  CHECK(f.stats().host_allocs == 2);
  // A CPU stream is immediate: recording it holds nothing back.
  f.alloc->record_stream(b, f.host);
  f.alloc->deallocate(b);
  f.alloc->deallocate(small);
  CHECK(f.get(8000) == a);
  CHECK(f.stats().pending_blocks == 0);
}

TEST_CASE("host caching allocator: a block used by GPU streams waits for every one of them", "[pinned]") {
  Fixture f;
  void* a = f.get(64 * KiB);
  f.alloc->record_stream(a, f.gpu0);
  f.alloc->record_stream(a, f.gpu1);
  f.alloc->record_stream(a, f.gpu0);  // once per stream
  f.alloc->deallocate(a);
  CHECK(f.mem->events.size() == 2);
  CHECK(f.stats().pending_blocks == 1);
  CHECK(f.stats().cached_bytes == 0);
  // The copies may still run: a request of the same size gets another block.
  void* b = f.get(64 * KiB);
  CHECK(b != a);
  f.alloc->deallocate(b);
  f.mem->finish(f.gpu0);
  void* c = f.get(64 * KiB);
  CHECK(c == b);  // a is still waiting for gpu1
  f.mem->finish(f.gpu1);
  void* d = f.get(64 * KiB);
  CHECK(d == a);
  CHECK(f.stats().pending_blocks == 0);
  CHECK(f.mem->events.empty());  // every event destroyed
  // Handed out again, the block starts with no stream uses.
  f.alloc->deallocate(d);
  CHECK(f.stats().pending_blocks == 0);
  f.alloc->deallocate(c);
}

TEST_CASE("host caching allocator: pointers it did not hand out", "[pinned]") {
  Fixture f;
  f.alloc->deallocate(nullptr);
  f.alloc->deallocate(reinterpret_cast<void*>(0x1234));
  CHECK_THROWS_WITH(f.alloc->record_stream(reinterpret_cast<void*>(0x1234), f.gpu0),
                    Catch::Contains("not a live page-locked block"));
  void* a = f.get(10);
  f.alloc->deallocate(a);
  f.alloc->deallocate(a);  // twice: the second is ignored
  CHECK(f.stats().cached_bytes == int64_t(4 * KiB));
  CHECK_THROWS_WITH(f.alloc->record_stream(a, f.gpu0), Catch::Contains("not a live page-locked block"));
}

TEST_CASE("host caching allocator: a failing event keeps the block out of circulation", "[pinned]") {
  Fixture f;
  void* a = f.get(16 * KiB);
  f.alloc->record_stream(a, f.gpu0);
  f.mem->fail_record = true;
  f.alloc->deallocate(a);  // runs in destructors: must not throw
  f.mem->fail_record = false;
  CHECK(f.stats().lost_blocks == 1);
  CHECK(f.stats().pending_blocks == 0);
  CHECK(f.get(16 * KiB) != a);

  void* b = f.get(32 * KiB);
  f.alloc->record_stream(b, f.gpu1);
  f.alloc->deallocate(b);
  f.mem->fail_query = true;
  void* c = f.get(32 * KiB);  // the query fails: b is given up, not handed out
  f.mem->fail_query = false;
  CHECK(c != b);
  CHECK(f.stats().lost_blocks == 2);
  CHECK(f.stats().pending_blocks == 0);
  f.alloc->deallocate(c);
  CHECK(f.get(32 * KiB) == c);
}

TEST_CASE("host caching allocator: empty_cache returns free blocks only", "[pinned]") {
  Fixture f;
  void* used = f.get(4 * KiB);
  void* waiting = f.get(8 * KiB);
  void* cached = f.get(16 * KiB);
  f.alloc->record_stream(waiting, f.gpu0);
  f.alloc->deallocate(waiting);
  f.alloc->deallocate(cached);
  f.alloc->empty_cache();
  CHECK(f.mem->frees == 1);
  CHECK(f.mem->live.size() == 2);
  CHECK(f.stats().cached_bytes == 0);
  CHECK(f.stats().host_frees == 1);
  f.mem->finish(f.gpu0);
  f.alloc->empty_cache();  // the copy has passed: now it goes too
  CHECK(f.mem->frees == 2);
  f.alloc->deallocate(used);
  f.alloc.reset();  // the destructor returns what is cached
  CHECK(f.mem->live.empty());
}

TEST_CASE("host caching allocator: statistics", "[pinned]") {
  Fixture f;
  void* a = f.get(5 * KiB);
  void* b = f.get(100 * KiB);
  auto s = f.stats();
  CHECK(s.allocated_bytes == int64_t(8 * KiB + 128 * KiB));
  CHECK(s.peak_allocated_bytes == s.allocated_bytes);
  CHECK(s.allocations == 2);
  f.alloc->deallocate(b);
  s = f.stats();
  CHECK(s.allocated_bytes == int64_t(8 * KiB));
  CHECK(s.peak_allocated_bytes == int64_t(136 * KiB));
  CHECK(s.cached_bytes == int64_t(128 * KiB));
  f.alloc->deallocate(a);
}

TEST_CASE("host caching allocator: out of memory empties the cache, retries once, then says why", "[pinned]") {
  Fixture f(1 * MiB);
  void* a = f.get(512 * KiB);
  f.alloc->deallocate(a);  // cached: 512 KiB of the 1 MiB
  void* b = f.get(1 * MiB);  // refused, the cache released, granted
  CHECK(f.mem->failed_mallocs == 1);
  CHECK(f.stats().host_frees == 1);
  CHECK_THROWS_WITH(f.get(1), Catch::Contains("test: out of page-locked host memory") &&
                                  Catch::Contains("4.00 KiB") && Catch::Contains("1 bytes requested") &&
                                  Catch::Contains("1.00 MiB in pinned tensors"));
  CHECK(f.mem->failed_mallocs == 3);
  f.alloc->deallocate(b);
  CHECK(f.get(1) != nullptr);  // usable again
}

TEST_CASE("host caching allocator: concurrent threads", "[pinned]") {
  Fixture f;
  auto work = [&](Stream s) {
    std::vector<void*> held;
    for (int i = 0; i < 300; ++i) {
      held.push_back(f.get(size_t(1000 * (1 + i % 5))));
      if (held.size() > 4) {
        if (i % 3 == 0) f.alloc->record_stream(held.front(), s);
        f.alloc->deallocate(held.front());
        held.erase(held.begin());
      }
    }
    for (void* p : held) f.alloc->deallocate(p);
  };
  {
    std::thread t1(work, f.gpu0), t2(work, f.gpu1);
    t1.join();
    t2.join();
  }
  CHECK(f.stats().allocated_bytes == 0);
  CHECK(f.stats().allocations == 600);
  f.alloc.reset();  // pending blocks are synchronised and returned
  CHECK(f.mem->live.empty());
}

// ---- tensors on the emulated devices ----

TEST_CASE("emulated CUDA: pin_memory copies a CPU tensor into page-locked memory", "[pinned]") {
  REQUIRE(pinned_host_allocator() == &cuda_emulation::host_allocator());
  const Tensor x = arange(0, 24, 1, kFloat32).reshape({4, 6});
  CHECK_FALSE(x.is_pinned());
  const Tensor p = x.transpose(0, 1).pin_memory();
  CHECK(p.is_pinned());
  CHECK(p.is_contiguous());
  CHECK(p.device() == Device());
  CHECK(p.to_vector<float>() == x.transpose(0, 1).contiguous().to_vector<float>());
  CHECK(p.pin_memory().storage() == p.storage());  // already pinned: itself
  CHECK(p.slice(0, 1, 3).is_pinned());             // views of it too
  CHECK_FALSE(p.clone().is_pinned());
  // Only CPU tensors.
  CHECK_THROWS_WITH(x.to(cuda(0)).pin_memory(),
                    Catch::Contains("Tensor::pin_memory: only CPU tensors can be pinned") && Catch::Contains("cuda:0"));
  // A copy on the tape: gradients flow through it.
  const Tensor w = random::uniform({3}, 4);
  autograd::GradientTape tape;
  tape.watch(w);
  const Tensor loss = sum(mul(w.pin_memory(), full({3}, 2.0, kFloat32)));
  CHECK(tape.gradient(loss, w).to_vector<float>() == std::vector<float>(3, 2.0f));
}

TEST_CASE("emulated CUDA: non-blocking copies read and write page-locked memory, held until they pass",
          "[pinned]") {
  cuda_backend::HostCachingAllocator& host = cuda_emulation::host_allocator();
  const Tensor x = random::uniform({1000}, 7);
  const auto before = host.stats();
  Tensor on_gpu;
  {
    const Tensor p = x.pin_memory();
    on_gpu = p.to(cuda(0), /*non_blocking=*/true);  // straight from p's block
    CHECK(host.stats().allocated_bytes == before.allocated_bytes + 4096);
  }
  // p's block was used by cuda:0's stream: returned through an event (immediate here).
  CHECK(host.stats().allocated_bytes == before.allocated_bytes);
  CHECK(host.stats().pending_blocks == 1);
  const Tensor back = on_gpu.to(Device(), /*non_blocking=*/true);
  CHECK(back.is_pinned());  // a non-blocking download lands in page-locked memory
  CHECK(host.stats().pending_blocks == 0);  // allocating processed the passed event
  synchronize(cuda(0));
  CHECK(back.to_vector<float>() == x.to_vector<float>());
  // A blocking download, and any copy between CPU devices, stay in pageable memory.
  CHECK_FALSE(on_gpu.to(Device()).is_pinned());
  CHECK_FALSE(x.to(Device(DeviceType::CPU, 1), /*non_blocking=*/true).is_pinned());
}
