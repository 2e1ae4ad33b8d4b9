// Storage: a refcounted block of device memory that tensors view.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include <strata/core/device.h>
#include <strata/core/stream.h>

namespace strata {

class Storage {
 public:
  // Allocates `bytes` on `device` through its registered allocator, for work on the
  // calling thread's current stream of that device (or on `stream`).
  Storage(size_t bytes, Device device);
  Storage(size_t bytes, Device device, const Stream& stream);
  // Wraps memory owned elsewhere; `deleter` runs when the storage dies (may be empty).
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter);
  // Page-locked host memory on the CPU device `device`, from the registered
  // PinnedHostAllocator (core/pinned_host_allocator.h); raises naming `op` without one.
  struct PinnedHost {
    const char* op;
  };
  Storage(size_t bytes, Device device, PinnedHost pinned);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // The stream the memory was allocated for (PyTorch's "allocation stream").
  const Stream& stream() const { return stream_; }
  // True when the CPU can read and write the memory directly.
  bool host_addressable() const { return device_.is_cpu(); }
  // True for page-locked host memory (Tensor::pin_memory).
  bool pinned() const { return pinned_; }
  // Marks the memory as used by work on another stream of its device, so that the
  // allocator does not reuse it before that work has finished (PyTorch's recordStream).
  // Pinned host memory may be used by any GPU's streams (asynchronous copies).
  void record_stream(const Stream& stream);

  // Counts the in-place writes made through the tensor API (Tensor::copy_, the fused
  // optimizer updates): the gradient tape records it with each tensor it saves, and
  // refuses to use one that was overwritten since (PyTorch's version counter). Writes
  // through raw pointers (collectives, the input pipeline's own buffers) are not counted.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Stream stream_;
  std::function<void(void*)> deleter_;
  bool owned_ = true;
  bool pinned_ = false;
};

}  // namespace strata
