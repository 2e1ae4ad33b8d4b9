// Streams and the execution context: where and in what order an op's kernel runs.
//
// A Stream is an ordered queue of work on one device. Kernels are enqueued on a stream and
// run in enqueue order; work on different streams may overlap. On CPU every stream is
// immediate: a kernel has finished when its call returns. On CUDA a stream wraps a
// `cudaStream_t` that the backend creates (`native_handle()`); core never names CUDA types.
//
// The execution context is per thread: a current device (cpu:0 unless set) and, per
// device, a current stream (that device's default stream unless set). Ops run on the
// current stream of their device; creation and random ops allocate on the current device.
// Replica threads make their replica's device current, as TensorFlow does inside
// `strategy.run`, so temporaries land next to the replica's variables.
//
//   DeviceGuard on(cuda(1));          // zeros({3}) now lands on cuda:1
//   StreamGuard side(copy_stream);    // ops on copy_stream's device go to copy_stream
#pragma once

#include <cstdint>

#include <strata/core/device.h>

namespace strata {

class Stream {
 public:
  // The default stream of cpu:0.
  constexpr Stream() = default;
  constexpr Stream(Device device, uint64_t id, void* native_handle = nullptr)
      : device_(device), id_(id), native_(native_handle) {}
  // The default stream of `device` (id 0; its native handle is the backend's).
  static Stream default_for(Device device);

  Device device() const { return device_; }
  // 0 is the device's default stream; other ids are unique per device for the process.
  uint64_t id() const { return id_; }
  // The backend's handle (cudaStream_t on CUDA); null on CPU.
  void* native_handle() const { return native_; }
  bool is_default() const { return id_ == 0; }

  friend bool operator==(const Stream& a, const Stream& b) {
    return a.device_ == b.device_ && a.id_ == b.id_;
  }

 private:
  Device device_;
  uint64_t id_ = 0;
  void* native_ = nullptr;
};

// What an asynchronous backend supplies for its device type, registered when its library
// is loaded (register_stream_backend). The CPU needs none: its streams are immediate.
class StreamBackend {
 public:
  virtual ~StreamBackend() = default;
  // Devices of this type present at run time (0 when the driver or device is missing).
  virtual int device_count() = 0;
  virtual Stream default_stream(int device_index) = 0;
  // A new stream on the device (for copies or communication overlapping compute).
  virtual Stream create_stream(int device_index) = 0;
  // Blocks until the work enqueued on `stream` has finished. Raises the data error a
  // kernel deferred on the device since the last synchronisation (core/data_error.h).
  virtual void synchronize(const Stream& stream) = 0;
  // Makes `waiter` wait (without blocking the host) for the work enqueued on `producer` so
  // far: cross-stream ordering through an event.
  virtual void wait(const Stream& waiter, const Stream& producer) = 0;
};

void register_stream_backend(DeviceType type, StreamBackend* backend);
// The backend of an asynchronous device type, or nullptr (always for CPU).
StreamBackend* stream_backend(DeviceType type);

// ---- the calling thread's execution context ----
Device current_device();
Stream current_stream(Device device);
inline Stream current_stream() { return current_stream(current_device()); }
// A fresh stream on `device` (CPU: a new immediate stream id).
Stream create_stream(Device device);
// Blocks until the stream's work is done (CPU: returns at once); raises deferred errors.
void synchronize(const Stream& stream);
// Synchronises the calling thread's current stream of `device`.
inline void synchronize(Device device) { synchronize(current_stream(device)); }
// Orders `waiter` after the work enqueued on `producer` so far (no-op when both are the
// same stream or both immediate).
void stream_wait(const Stream& waiter, const Stream& producer);

// Makes `device` current for the calling thread until destroyed. Nests.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device saved_;
};

// Makes `stream` the current stream of its device for the calling thread until destroyed
// (the current device is unchanged). Nests.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream saved_;
  bool had_override_;
};

}  // namespace strata
