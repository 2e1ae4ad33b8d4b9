#include <strata/distribute/device_fetch.h>

#include <mutex>
#include <unordered_map>

#include <strata/core/storage.h>

namespace strata::distribute {

Stream input_stream(const Device& device) {
  static std::mutex mutex;
  static auto* streams = new std::unordered_map<Device, Stream>();  // lives for the process
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams->find(device);
  if (it == streams->end()) it = streams->emplace(device, create_stream(device)).first;
  return it->second;
}

Tensor place_on(const Tensor& t, const Device& device, bool fetch) {
  if (!fetch || t.device() == device) return t;
  // Host to host, and copies between accelerators: the copy as Tensor::to makes it.
  if (!t.device().is_cpu() || stream_backend(device.type) == nullptr) return t.to(device);
  const Stream compute = current_stream(device);
  const Stream upload = input_stream(device);
  Tensor out;
  {
    StreamGuard on_upload(upload);  // the copy, and its output's memory, belong to `upload`
    out = t.to(device, /*non_blocking=*/true);
  }
  stream_wait(compute, upload);
  if (out.storage()) out.storage()->record_stream(compute);
  return out;
}

}  // namespace strata::distribute
