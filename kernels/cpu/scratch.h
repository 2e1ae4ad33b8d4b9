// Uninitialised scratch memory for a CPU kernel (an im2col buffer, partial sums).
//
// Taken from the CPU allocator rather than new[]: its cache (core/allocator.cc) hands back
// the block freed by the previous call of the same size, where a fresh malloc of hundreds
// of KB page-faults on every call (glibc maps it, or trims the heap after the free; the
// MNIST CNN step took ~100 page faults per step that way).
#pragma once

#include <cstddef>
#include <cstdint>

#include <strata/core/device.h>
#include <strata/core/storage.h>

namespace strata::cpu_kernels {

template <typename T>
class ScratchBuffer {
 public:
  explicit ScratchBuffer(int64_t n) : storage_(size_t(n) * sizeof(T), cpu()) {}
  T* get() const { return static_cast<T*>(storage_.data()); }

 private:
  Storage storage_;
};

}  // namespace strata::cpu_kernels
