// Storage: a refcounted block of device memory that tensors view.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"

namespace strata {

class Storage {
 public:
  // Allocates `bytes` on `device` through its registered allocator.
  Storage(size_t bytes, Device device);
  // Wraps memory owned elsewhere; `deleter` runs when the storage dies (may be empty).
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;
  bool owned_ = true;
};

}  // namespace strata
