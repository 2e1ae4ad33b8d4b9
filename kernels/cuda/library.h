// What the library-backed kernels (matmul.cc over cuBLASLt, conv.cc over cuDNN) share:
// per-thread library handles, workspace memory from the caching allocator, and strided
// device copies through the backend's own Copy kernel. Host C++ only (no device code).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include <strata/core/device.h>
#include <strata/core/stream.h>
#include <strata/core/tensor.h>

namespace strata::cuda_backend {

// Library handles (cublasLtHandle_t, cudnnHandle_t) per (thread, device), as PyTorch's
// DeviceThreadHandlePool: a handle serves one thread at a time; creating one costs
// milliseconds and device memory, so a thread that exits gives its handles back to a
// process-wide pool for the next thread instead of destroying them. Handles are never
// destroyed (the pool lives for the process: destroying them at exit would race the
// driver's own teardown).
template <typename H>
class HandlePool {
 public:
  using Create = H (*)(int device);
  explicit HandlePool(Create create) : create_(create) {}

  // The calling thread's handle for `device` (created or taken from the pool on first use).
  H get(int device) {
    thread_local Holder holder;
    if (holder.pool == nullptr) holder.pool = this;
    H& h = holder.handles[size_t(device)];
    if (h == H{}) h = acquire(device);
    return h;
  }

 private:
  static constexpr int kMaxDevices = 64;
  struct Holder {
    HandlePool* pool = nullptr;
    std::array<H, kMaxDevices> handles{};
    ~Holder() {
      if (pool == nullptr) return;
      for (size_t d = 0; d < handles.size(); ++d) {
        if (handles[d] != H{}) pool->release(int(d), handles[d]);
      }
    }
  };
  H acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<H>& f = free_[size_t(device)];
      if (!f.empty()) {
        H h = f.back();
        f.pop_back();
        return h;
      }
    }
    return create_(device);
  }
  void release(int device, H h) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size_t(device)].push_back(h);
  }

  Create create_;
  std::mutex mutex_;
  std::array<std::vector<H>, kMaxDevices> free_;
};

// Scratch device memory for one library call, from the caching allocator on `stream`.
// Released when it goes out of scope, right after the call is enqueued: the allocator hands
// a freed block out again only to later work on the same stream, which runs after the call.
class Workspace {
 public:
  Workspace(size_t bytes, Device device, const Stream& stream);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

// A view of base's storage: `shape` and `strides` (elements) starting at base's first
// element. Not taped (no front-end op is involved).
Tensor strided_view(const Tensor& base, const Shape& shape, const Strides& strides);
// dst = src (same shape and dtype, any strides on either side, both on one CUDA device), on
// that device's current stream, through the registered Copy kernel. Not taped.
void copy_into(const Tensor& src, const Tensor& dst);
// t itself when contiguous, else a contiguous copy on its device.
Tensor contiguous_on_device(const Tensor& t);
// Writes zeros into t (any strides) on `stream`.
void fill_zero(const Tensor& t, const Stream& stream);
// The largest power of two (at most 256) dividing both the address and `stride_bytes`
// (0: ignored): the alignment a library may assume for every matrix of a strided batch.
uint32_t alignment_of(const void* ptr, int64_t stride_bytes = 0);

}  // namespace strata::cuda_backend
