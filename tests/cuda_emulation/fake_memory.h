// Fake memory for the caching allocators' tests (test_caching_allocator.cc for device
// memory, test_host_caching_allocator.cc for page-locked host memory): `capacity` bytes of
// address space that is never dereferenced, and stream events that pass when the test says
// their stream has finished; recording or querying an event can be made to fail.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <strata/core/stream.h>

namespace strata::testing {

struct FakeMemoryState {
  std::mutex mu;  // the host allocator calls allocate outside its own lock
  size_t capacity = size_t(1) << 30;
  size_t used = 0;
  uintptr_t next = 0x100000000ull;
  std::map<uintptr_t, size_t> live;
  int mallocs = 0, frees = 0, failed_mallocs = 0;
  struct Event {
    uint64_t stream_id;
    bool done;
  };
  std::map<int, Event> events;
  int next_event = 1;
  bool fail_record = false, fail_query = false;

  int live_events() const { return int(events.size()); }
  // Every event recorded on the stream so far has passed.
  void finish(const Stream& s) {
    for (auto& [id, e] : events) {
      if (e.stream_id == s.id()) e.done = true;
    }
  }
  // `bytes` of address space, or nullptr beyond the capacity.
  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    if (used + bytes > capacity) {
      ++failed_mallocs;
      return nullptr;
    }
    const uintptr_t p = next;
    next += (bytes + 4095) / 4096 * 4096 + 4096;  // a gap: blocks never touch
    used += bytes;
    live[p] = bytes;
    ++mallocs;
    return reinterpret_cast<void*>(p);
  }
  void give_back(void* ptr) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(reinterpret_cast<uintptr_t>(ptr));
    REQUIRE(it != live.end());
    used -= it->second;
    live.erase(it);
    ++frees;
  }
};

// The StreamEvents half of an allocator's memory interface, over a FakeMemoryState.
template <class Memory>
class FakeMemory : public Memory {
 public:
  explicit FakeMemory(std::shared_ptr<FakeMemoryState> s) : s_(std::move(s)) {}
  void* record_event(const Stream& stream) override {
    if (s_->fail_record) throw std::runtime_error("event record failed");
    const int id = s_->next_event++;
    s_->events[id] = {stream.id(), false};
    return reinterpret_cast<void*>(uintptr_t(id));
  }
  bool query_event(void* e) override {
    if (s_->fail_query) throw std::runtime_error("event query failed");
    return s_->events.at(id(e)).done;
  }
  void synchronize_event(void* e) override { s_->events.at(id(e)).done = true; }
  void destroy_event(void* e) override { s_->events.erase(id(e)); }

 protected:
  static int id(void* e) { return int(reinterpret_cast<uintptr_t>(e)); }
  std::shared_ptr<FakeMemoryState> s_;
};

}  // namespace strata::testing
