#include <strata/core/stream.h>

#include <array>
#include <atomic>

#include <strata/core/dispatch.h>
#include <strata/core/error.h>

namespace strata {

namespace {

std::array<std::atomic<StreamBackend*>, kNumDeviceTypes>& backends() {
  static std::array<std::atomic<StreamBackend*>, kNumDeviceTypes> b{};
  return b;
}

const char* type_name(DeviceType t) { return t == DeviceType::CUDA ? "cuda" : "cpu"; }

StreamBackend& backend_or_throw(Device device, const char* what) {
  StreamBackend* b = stream_backend(device.type);
  STRATA_CHECK(b != nullptr, what, ": no ", type_name(device.type), " backend for device ", device,
               " (strata was built without it, or it is not linked into this program)");
  return *b;
}

// Per-thread stream overrides set by StreamGuard: few (one per device in use at most), so
// a linear scan beats a map; empty on most threads, where every lookup is one comparison.
struct StreamOverrides {
  static constexpr int kMax = 16;
  std::array<Stream, kMax> streams;
  int count = 0;

  int find(Device d) const {
    for (int i = 0; i < count; ++i) {
      if (streams[size_t(i)].device() == d) return i;
    }
    return -1;
  }
};

thread_local Device t_device;
thread_local StreamOverrides t_streams;

}  // namespace

void register_stream_backend(DeviceType type, StreamBackend* backend) {
  backends()[size_t(type)].store(backend, std::memory_order_release);
}

StreamBackend* stream_backend(DeviceType type) {
  StreamBackend* b = backends()[size_t(type)].load(std::memory_order_acquire);
  if (b == nullptr && type != DeviceType::CPU) {
    // Backends register lazily (core/dispatch.h): a program whose first use of a device
    // creates a tensor there has not looked up a kernel yet.
    ensure_backends_registered();
    b = backends()[size_t(type)].load(std::memory_order_acquire);
  }
  return b;
}

Stream Stream::default_for(Device device) {
  if (device.is_cpu()) return Stream(device, 0);
  return backend_or_throw(device, "Stream::default_for").default_stream(device.index);
}

Device current_device() { return t_device; }

Stream current_stream(Device device) {
  if (t_streams.count != 0) {
    const int i = t_streams.find(device);
    if (i >= 0) return t_streams.streams[size_t(i)];
  }
  return Stream::default_for(device);
}

Stream create_stream(Device device) {
  if (device.is_cpu()) {
    static std::atomic<uint64_t> next_id{1};
    return Stream(device, next_id.fetch_add(1, std::memory_order_relaxed));
  }
  return backend_or_throw(device, "create_stream").create_stream(device.index);
}

void synchronize(const Stream& stream) {
  if (stream.device().is_cpu()) return;
  backend_or_throw(stream.device(), "synchronize").synchronize(stream);
}

void stream_wait(const Stream& waiter, const Stream& producer) {
  if (waiter == producer) return;
  if (waiter.device().is_cpu() && producer.device().is_cpu()) return;
  const Device async = waiter.device().is_cpu() ? producer.device() : waiter.device();
  if (waiter.device().is_cpu()) {
    synchronize(producer);  // the host waits for the device
    return;
  }
  backend_or_throw(async, "stream_wait").wait(waiter, producer);
}

DeviceGuard::DeviceGuard(Device device) : saved_(t_device) { t_device = device; }
DeviceGuard::~DeviceGuard() { t_device = saved_; }

StreamGuard::StreamGuard(Stream stream) {
  StreamOverrides& o = t_streams;
  const int i = o.find(stream.device());
  had_override_ = i >= 0;
  if (had_override_) {
    saved_ = o.streams[size_t(i)];
    o.streams[size_t(i)] = stream;
    return;
  }
  STRATA_CHECK(o.count < StreamOverrides::kMax, "StreamGuard: more than ", StreamOverrides::kMax,
               " devices with a current stream on one thread");
  saved_ = stream;
  o.streams[size_t(o.count++)] = stream;
}

StreamGuard::~StreamGuard() {
  StreamOverrides& o = t_streams;
  const int i = o.find(saved_.device());
  if (i < 0) return;
  if (had_override_) {
    o.streams[size_t(i)] = saved_;
  } else {
    o.streams[size_t(i)] = o.streams[size_t(o.count - 1)];
    --o.count;
  }
}

}  // namespace strata
