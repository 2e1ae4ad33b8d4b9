#include <strata/core/dispatch.h>
#include <strata/core/contiguous.h>

#include <array>
#include <atomic>
#include <mutex>

#include <strata/core/op_common.h>
#include <strata/core/recorder.h>

namespace strata {

namespace {
using Table = std::array<std::array<std::atomic<KernelFn>, kNumDeviceTypes>, kNumOps>;
Table& table() {
  static Table t{};
  return t;
}

using CopyTable = std::array<std::array<std::atomic<CopyFn>, kNumDeviceTypes>, kNumDeviceTypes>;
CopyTable& copy_table() {
  static CopyTable t{};
  return t;
}

struct Backend {
  std::string name;
  void (*init)();
};
struct BackendList {
  std::mutex mutex;
  std::vector<Backend> backends;
  bool initialised = false;  // set once the first lookup ran every init
};
BackendList& backend_list() {
  static BackendList* list = new BackendList();  // never destroyed: used from static init
  return *list;
}
}  // namespace

void register_kernel(OpId op, DeviceType device, KernelFn fn) {
  table()[size_t(op)][size_t(device)].store(fn, std::memory_order_release);
}

KernelFn find_kernel(OpId op, DeviceType device) {
  ensure_backends_registered();
  return table()[size_t(op)][size_t(device)].load(std::memory_order_acquire);
}

void register_copy(DeviceType src, DeviceType dst, CopyFn fn) {
  copy_table()[size_t(src)][size_t(dst)].store(fn, std::memory_order_release);
}

CopyFn find_copy(DeviceType src, DeviceType dst) {
  ensure_backends_registered();
  return copy_table()[size_t(src)][size_t(dst)].load(std::memory_order_acquire);
}

BackendRegistration::BackendRegistration(const char* name, void (*init)()) {
  BackendList& list = backend_list();
  bool run_now = false;
  {
    std::lock_guard<std::mutex> lock(list.mutex);
    list.backends.push_back({name, init});
    run_now = list.initialised;
  }
  if (run_now) init();
}

void ensure_backends_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_kernels();
    BackendList& list = backend_list();
    std::vector<Backend> backends;
    {
      std::lock_guard<std::mutex> lock(list.mutex);
      backends = list.backends;
      list.initialised = true;
    }
    for (const Backend& b : backends) b.init();
  });
}

std::vector<std::string> registered_backends() {
  std::vector<std::string> names{"cpu"};
  BackendList& list = backend_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  for (const Backend& b : list.backends) names.push_back(b.name);
  return names;
}

void run_kernel(OpId op, const OpAttrs& attrs, std::span<const Tensor> in,
                std::span<const Tensor> out) {
  // The op's device: its outputs' (checked against every input), else its inputs'.
  Device device;
  if (!out.empty()) {
    device = out[0].device();
    for (const Tensor& t : in) {
      if (t.defined() && !detail::usable_on(t, device)) detail::device_mismatch(op_name(op), device, t.device());
    }
  } else {
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : in) ptrs.push_back(&t);
    device = detail::op_device(op_name(op), ptrs.data(), ptrs.size());
  }
  KernelFn fn = find_kernel(op, device.type);
  STRATA_CHECK(fn != nullptr, op_name(op), ": no kernel for device ", device,
               device.is_cuda() ? " (strata was built without the CUDA backend)" : "");
  fn(KernelArgs{op, attrs, in, out, current_stream(device)});
}

namespace {
thread_local Recorder* t_recorder = nullptr;
}
Recorder* thread_recorder() { return t_recorder; }
void set_thread_recorder(Recorder* recorder) { t_recorder = recorder; }

Tensor contiguous_untaped(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  const Tensor in[1] = {t}, o[1] = {out};
  run_kernel(OpId::Copy, OpAttrs{}, in, o);
  return out;
}

}  // namespace strata
