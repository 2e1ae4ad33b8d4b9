#include "core/dispatch.h"

#include <array>
#include <atomic>
#include <mutex>

#include "core/recorder.h"

namespace strata {

namespace {
using Table = std::array<std::array<std::atomic<KernelFn>, kNumDeviceTypes>, kNumOps>;
Table& table() {
  static Table t{};
  return t;
}
}  // namespace

void register_kernel(OpId op, DeviceType device, KernelFn fn) {
  table()[size_t(op)][size_t(device)].store(fn, std::memory_order_release);
}

KernelFn find_kernel(OpId op, DeviceType device) {
  ensure_cpu_kernels_registered();
  return table()[size_t(op)][size_t(device)].load(std::memory_order_acquire);
}

void ensure_cpu_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_kernels();
#ifdef STRATA_HAS_CUDA
    register_cuda_kernels();
#endif
  });
}

void run_kernel(OpId op, const OpAttrs& attrs, std::span<const Tensor> in,
                std::span<const Tensor> out) {
  Device device = !out.empty() ? out[0].device() : in[0].device();
  KernelFn fn = find_kernel(op, device.type);
  STRATA_CHECK(fn != nullptr, op_name(op), ": no kernel for device ", device,
               device.is_cuda() ? " (strata was built without the CUDA backend)" : "");
  fn(KernelArgs{op, attrs, in, out});
}

namespace {
thread_local Recorder* t_recorder = nullptr;
}
Recorder* thread_recorder() { return t_recorder; }
void set_thread_recorder(Recorder* recorder) { t_recorder = recorder; }

}  // namespace strata
