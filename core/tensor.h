// Tensor: a cheap shared handle to a strided view of refcounted Storage.
//
// Copying a Tensor aliases (like a shared_ptr). Views — reshape of contiguous data,
// transpose/permute, slice, broadcast_to, expand_dims, squeeze — share storage; ops are
// functional and return new tensors. Every tensor has a process-unique id, which the
// autograd tape uses to recognise it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <strata/core/checked_math.h>
#include <strata/core/device.h>
#include <strata/core/dtype.h>
#include <strata/core/error.h>
#include <strata/core/shape.h>
#include <strata/core/storage.h>
#include <strata/core/stream.h>

namespace strata {

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Strides strides;  // in elements
  DType dtype = DType::Float32;
  Device device;
  uint64_t id = 0;
};

uint64_t next_tensor_id();

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous tensor, on the calling thread's current device by default
  // (core/stream.h), as every creation function.
  static Tensor empty(const Shape& shape, DType dtype = kFloat32, Device device = current_device());
  // A view onto existing storage.
  static Tensor view_of(std::shared_ptr<Storage> storage, int64_t offset, Shape shape,
                        Strides strides, DType dtype);
  // Copies host values into a new tensor of the given shape (and casts to dtype).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            DType dtype = dtype_of_v<T>, Device device = current_device());
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{int64_t(values.size())});
  }
  // A rank-0 tensor.
  static Tensor scalar(double value, DType dtype = kFloat32, Device device = current_device());

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t ndim() const { return int64_t(impl().shape.size()); }
  int64_t dim(int64_t axis) const;  // negative axes count from the end
  int64_t numel() const { return numel_of(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  size_t itemsize() const { return dtype_size(impl().dtype); }
  size_t nbytes() const { return size_t(numel()) * itemsize(); }
  uint64_t id() const { return impl().id; }
  bool is_contiguous() const;
  // True when both share the same storage.
  bool shares_storage(const Tensor& other) const;

  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Pointer to the first element (offset applied) in the tensor's device memory: for
  // kernels, which run on that device. Not dereferenceable on the host for a GPU tensor.
  void* raw_data() const;
  // Host pointer to the first element; raises unless the memory is host-addressable and
  // the dtype is T. Host I/O (readers, checkpoint and event writers) uses it.
  template <typename T>
  T* data() const {
    STRATA_CHECK(dtype() == dtype_of_v<T>, "Tensor::data: tensor has dtype ", dtype(),
                 ", requested ", dtype_of_v<T>);
    require_host_addressable("Tensor::data");
    return static_cast<T*>(raw_data());
  }
  // Raises a strata::Error naming `what` unless the CPU can address this tensor's memory.
  void require_host_addressable(const char* what) const;

  // Host access (copies from the device when needed).
  template <typename T>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;  // row-major, cast to T

  // Views and conversions (thin wrappers over the ops in core/ops.h).
  Tensor reshape(const Shape& shape) const;
  Tensor transpose() const;  // reverses all axes
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor permute(const std::vector<int64_t>& perm) const;
  Tensor slice(int64_t axis, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor broadcast_to(const Shape& shape) const;
  Tensor expand_dims(int64_t axis) const;
  Tensor squeeze(int64_t axis) const;
  Tensor squeeze() const;
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor cast(DType dtype) const;
  // This tensor on `device`: itself when already there, else a copy through the copy
  // registered for (source, destination) device types, recorded on the tape. A
  // non_blocking copy may still be running when to() returns (it is ordered before later
  // work on the destination's current stream; synchronize before reading it on the host).
  Tensor to(Device device, bool non_blocking = false) const;
  // This CPU tensor's values in page-locked host memory (itself when it is already there),
  // as PyTorch's pin_memory(): copies between it and a GPU then run asynchronously
  // (to(cuda, /*non_blocking=*/true) reads it without a staging copy), and to(cpu,
  // /*non_blocking=*/true) of a GPU tensor returns such memory. The host must not write it
  // while a copy from it may still run, nor read a copy into it before synchronising.
  // Recorded on the tape as a copy. Needs the CUDA backend (core/pinned_host_allocator.h).
  Tensor pin_memory() const;
  bool is_pinned() const;

  // Writes `src` (broadcast and cast to this tensor's shape/dtype) into this tensor's
  // memory in place. Used by variables and optimizers; not recorded by autograd.
  void copy_(const Tensor& src) const;

  std::string str() const;

  TensorImpl& impl() const {
    STRATA_CHECK(impl_ != nullptr, "Tensor: use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// NumPy-like printing, summarised beyond ~1000 elements.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- template definitions ----

namespace detail {
// Copies n contiguous host values of type `from` into n values of type `to`.
void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n);
// Copies a tensor into a contiguous host buffer of its own dtype (any device).
void copy_to_host(const Tensor& t, void* dst);
}  // namespace detail

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, DType dtype,
                           Device device) {
  STRATA_CHECK(int64_t(values.size()) == numel_of(shape), "from_vector: ", values.size(),
               " values do not fill shape ", shape_str(shape), " (", numel_of(shape),
               " elements)");
  Tensor host = empty(shape, dtype, Device());
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> tmp(values.begin(), values.end());
    detail::convert_elements(tmp.data(), kBool, host.raw_data(), dtype, int64_t(values.size()));
  } else {
    detail::convert_elements(values.data(), dtype_of_v<T>, host.raw_data(), dtype,
                             int64_t(values.size()));
  }
  return device == Device() ? host : host.to(device);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const int64_t n = numel();
  // Both host buffers' byte counts are checked first: an impossible one (a broadcast view
  // of 2^61 elements) is a strata::Error rather than std::length_error from std::vector.
  checked_nbytes(shape(), itemsize(), "Tensor::to_vector");
  checked_nbytes(shape(), sizeof(T), "Tensor::to_vector");
  std::vector<uint8_t> raw(size_t(n) * itemsize());
  detail::copy_to_host(*this, raw.data());
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> tmp(static_cast<size_t>(n));
    detail::convert_elements(raw.data(), dtype(), tmp.data(), kBool, n);
    return std::vector<bool>(tmp.begin(), tmp.end());
  } else {
    std::vector<T> out(static_cast<size_t>(n));
    detail::convert_elements(raw.data(), dtype(), out.data(), dtype_of_v<T>, n);
    return out;
  }
}

template <typename T>
T Tensor::item() const {
  STRATA_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ",
               shape_str(shape()));
  return to_vector<T>()[0];
}

}  // namespace strata
