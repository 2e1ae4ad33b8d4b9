#include "core/allocator.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/storage.h"

namespace strata {

namespace {

// 64-byte-aligned host memory with live/peak counters (relaxed atomics: statistics only).
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device) override {
    const size_t rounded = ((bytes == 0 ? 1 : bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail("cpu allocator: out of memory allocating ", bytes, " bytes");
    int64_t live = live_.fetch_add(int64_t(bytes), std::memory_order_relaxed) + int64_t(bytes);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
    count_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  void deallocate(void* ptr, size_t bytes, Device) override {
    std::free(ptr);
    live_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
  }
  AllocatorStats stats() const override {
    return {live_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed),
            count_.load(std::memory_order_relaxed)};
  }
  void reset_peak() override { peak_.store(live_.load()); }

 private:
  std::atomic<int64_t> live_{0}, peak_{0}, count_{0};
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
  STRATA_CHECK(a != nullptr, "allocator: no allocator for device type ",
               type == DeviceType::CUDA ? "cuda" : "?",
               " (strata was built without the CUDA backend, or no GPU is present)");
  return *a;
}

AllocatorStats cpu_allocator_stats() { return cpu_allocator().stats(); }

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = allocator_for(device.type).allocate(bytes, device);
}

Storage::Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter)
    : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)), owned_(false) {}

Storage::~Storage() {
  if (owned_) {
    allocator_for(device_.type).deallocate(data_, bytes_, device_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace strata
