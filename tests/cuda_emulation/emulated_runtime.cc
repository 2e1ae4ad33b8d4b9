// An emulated CUDA backend for the emulation tests: `cuda:0` and `cuda:1` backed by host
// memory, with the hand-written kernels (kernels/cuda/*.cuh, compiled here by g++ against
// cuda_emu.h) registered for DeviceType::CUDA. Ops, dispatch, host scalars, views, the
// caching allocator's bookkeeping and the deferred data errors then run the same code
// paths as on a GPU, and the parity test compares every kernel with the CPU backend.
//
// What differs from kernels/cuda/runtime.cc: streams are immediate (an emulated launch
// has finished when it returns), device memory is host memory, and copies are memcpy.
// Ops whose CUDA path calls a library (cuBLAS, cuDNN) are not emulated: they have no
// kernel here, and the parity test reports them as "not emulated".
#include "tests/cuda_emulation/emulated_runtime.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <strata/core/contiguous.h>
#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/core/pinned_host_allocator.h>
#include <strata/kernels/cuda/caching_allocator.h>
#include <strata/kernels/cuda/host_caching_allocator.h>
#include <strata/kernels/cuda/launch.h>

namespace strata::cuda_backend {

namespace {
std::array<DataError, cuda_emulation::kDevices>& records() {
  static std::array<DataError, cuda_emulation::kDevices> r{};
  return r;
}
}  // namespace

void set_device(int index) {
  STRATA_CHECK(index >= 0 && index < cuda_emulation::kDevices, "set_device: emulated cuda:", index,
               " does not exist");
}

DataError* device_data_error(int index) {
  set_device(index);
  return &records()[size_t(index)];
}

}  // namespace strata::cuda_backend

namespace strata::cuda_emulation {

namespace {

void require_device(int index, const char* op) {
  STRATA_CHECK(index >= 0 && index < kDevices, op, ": cuda:", index, " does not exist (", kDevices,
               " emulated CUDA devices)");
}

class HostMemory final : public cuda_backend::DeviceMemory {
 public:
  void* malloc(size_t bytes) override { return std::aligned_alloc(256, (bytes + 255) / 256 * 256); }
  void free(void* ptr) override { std::free(ptr); }
  size_t free_bytes() override { return size_t(1) << 32; }
  size_t total_bytes() override { return size_t(1) << 32; }
  // Streams are immediate: every event has passed when it is recorded.
  void* record_event(const Stream&) override { return this; }
  bool query_event(void*) override { return true; }
  void synchronize_event(void*) override {}
  void destroy_event(void*) override {}
};

std::unique_ptr<cuda_backend::DeviceMemory> make_memory(int) { return std::make_unique<HostMemory>(); }

// "Page-locked" memory of the emulated devices: plain host memory, with immediate events.
class EmulatedPageLockedMemory final : public cuda_backend::PageLockedMemory {
 public:
  void* allocate(size_t bytes, const char*) override { return std::aligned_alloc(4096, bytes); }
  void free(void* ptr) override { std::free(ptr); }
  void* record_event(const Stream&) override { return this; }
  bool query_event(void*) override { return true; }
  void synchronize_event(void*) override {}
  void destroy_event(void*) override {}
};

cuda_backend::HostCachingAllocator& host_allocator_instance() {
  static cuda_backend::HostCachingAllocator* a =
      new cuda_backend::HostCachingAllocator(std::make_unique<EmulatedPageLockedMemory>());
  return *a;
}

void raise_deferred_error(int index) {
  DataError e;
  {
    // Kernels write the record while holding the launch mutex (another replica thread's
    // launch may be running): read and reset it under the same mutex.
    std::lock_guard<std::mutex> lock(emu::launch_mutex());
    DataError* rec = cuda_backend::device_data_error(index);
    if (int(rec->kind) <= 0) return;
    e = *rec;
    *rec = DataError{};
  }
  raise_data_error(e);
}

std::mutex& requests_mutex() {
  static std::mutex m;
  return m;
}
std::vector<StreamRequest>& requests() {
  static std::vector<StreamRequest> r;
  return r;
}
void log_request(StreamRequest request) {
  std::lock_guard<std::mutex> lock(requests_mutex());
  requests().push_back(request);
}

class EmulatedStreams final : public StreamBackend {
 public:
  int device_count() override { return kDevices; }
  Stream default_stream(int index) override {
    require_device(index, "default_stream");
    return Stream(cuda(index), 0, nullptr);
  }
  Stream create_stream(int index) override {
    require_device(index, "create_stream");
    static std::atomic<uint64_t> next{1};
    return Stream(cuda(index), next.fetch_add(1), nullptr);
  }
  void synchronize(const Stream& stream) override { raise_deferred_error(stream.device().index); }
  void wait(const Stream& waiter, const Stream& producer) override {
    log_request({StreamRequest::Kind::Wait, waiter, producer});
  }
};

EmulatedStreams& streams() {
  static EmulatedStreams* s = new EmulatedStreams();
  return *s;
}

cuda_backend::CudaAllocator& allocator_instance() {
  static cuda_backend::CudaAllocator* a = new cuda_backend::CudaAllocator(make_memory, require_device);
  return *a;
}

// Page-locked memory is recorded as used by the copy's stream, as runtime.cc does.
void copy_cpu_to_cuda(const Tensor& src, const Tensor& dst, const Stream& stream, bool non_blocking) {
  const Tensor s = src.is_contiguous() ? src : src.contiguous();
  if (s.nbytes()) std::memcpy(dst.raw_data(), s.raw_data(), s.nbytes());
  if (s.is_pinned()) s.storage()->record_stream(stream);
  log_request({StreamRequest::Kind::Upload, stream, Stream(), non_blocking});
  if (!non_blocking) streams().synchronize(stream);
}

void copy_cuda_to_cpu(const Tensor& src, const Tensor& dst, const Stream& stream, bool non_blocking) {
  const Tensor s = contiguous_untaped(src);
  if (s.nbytes()) std::memcpy(dst.raw_data(), s.raw_data(), s.nbytes());
  if (dst.is_pinned()) dst.storage()->record_stream(stream);
  if (!non_blocking) streams().synchronize(stream);
}

void copy_cuda_to_cuda(const Tensor& src, const Tensor& dst, const Stream& stream, bool non_blocking) {
  if (src.device() == dst.device()) {
    const Tensor in[1] = {src}, out[1] = {dst};
    StreamGuard guard(stream);
    run_kernel(OpId::Copy, OpAttrs{}, in, out);
  } else {
    const Tensor s = contiguous_untaped(src);
    if (s.nbytes()) std::memcpy(dst.raw_data(), s.raw_data(), s.nbytes());
  }
  if (!non_blocking) streams().synchronize(stream);
}

void init() {
  register_stream_backend(DeviceType::CUDA, &streams());
  register_allocator(DeviceType::CUDA, &allocator_instance());
  register_pinned_host_allocator(&host_allocator_instance());
  register_copy(DeviceType::CPU, DeviceType::CUDA, copy_cpu_to_cuda);
  register_copy(DeviceType::CUDA, DeviceType::CPU, copy_cuda_to_cpu);
  register_copy(DeviceType::CUDA, DeviceType::CUDA, copy_cuda_to_cuda);
  register_emulated_kernels();
}

const BackendRegistration kRegistration("cuda-emulated", init);

}  // namespace

cuda_backend::CudaAllocator& allocator() { return allocator_instance(); }

cuda_backend::HostCachingAllocator& host_allocator() { return host_allocator_instance(); }

int64_t launches() { return emu::launch_count().load(); }

std::vector<StreamRequest> stream_requests() {
  std::lock_guard<std::mutex> lock(requests_mutex());
  return requests();
}

void clear_stream_requests() {
  std::lock_guard<std::mutex> lock(requests_mutex());
  requests().clear();
}

}  // namespace strata::cuda_emulation
