// The CUDA runtime layer (kernels/cuda/runtime.h) and the backend's registration.
#include <strata/kernels/cuda/runtime.h>

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <strata/core/contiguous.h>
#include <strata/core/data_error.h>
#include <strata/core/dispatch.h>
#include <strata/core/error.h>
#include <strata/core/pinned_host_allocator.h>
#include <strata/core/tensor.h>
#include <strata/kernels/cuda/check.h>
#include <strata/kernels/cuda/launch.h>

namespace strata::cuda_backend {

// ---- errors (check.h) ----

void fail_cuda(const char* op, const char* call, cudaError_t status, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so that later calls start clean
  fail(op, ": CUDA call ", call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
       ") [", file, ":", line, "]");
}

void fail_library(const char* op, const char* library, const char* call, int status, const std::string& text,
                  const char* file, int line) {
  fail(op, ": ", library, " call ", call, " failed with status ", status, " (", text, ") [", file, ":", line,
       "]");
}

namespace {

constexpr int kMaxDevices = 64;
constexpr int kStreamPoolSize = 32;

struct DeviceCount {
  int count = 0;
  std::string reason;
};

const DeviceCount& device_count_once() {
  static const DeviceCount dc = [] {
    DeviceCount d;
    int n = 0;  // cudaGetDeviceCount leaves it untouched on error (PLATFORM.md)
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      d.reason = detail::concat("cudaGetDeviceCount failed: ", cudaGetErrorName(e), " (",
                                cudaGetErrorString(e), ")");
      n = 0;
    } else if (n == 0) {
      d.reason = "the driver reports no CUDA device";
    }
    d.count = n < kMaxDevices ? n : kMaxDevices;
    return d;
  }();
  return dc;
}

// Per-device state, created on first use of the device.
struct DeviceState {
  int index = 0;
  cudaStream_t default_stream = nullptr;
  std::array<cudaStream_t, kStreamPoolSize> pool{};
  std::atomic<uint64_t> next_stream_id{1};
  DataError* error_record = nullptr;  // device memory, zeroed
  std::mutex error_mutex;
};

std::array<std::atomic<DeviceState*>, kMaxDevices>& device_states() {
  static std::array<std::atomic<DeviceState*>, kMaxDevices> s{};
  return s;
}
std::mutex& device_init_mutex() {
  static std::mutex m;
  return m;
}

DeviceState& state(int index, const char* op) {
  require_device(index, op);
  DeviceState* s = device_states()[size_t(index)].load(std::memory_order_acquire);
  if (s) return *s;
  std::lock_guard<std::mutex> lock(device_init_mutex());
  s = device_states()[size_t(index)].load(std::memory_order_relaxed);
  if (s) return *s;
  auto fresh = std::make_unique<DeviceState>();
  fresh->index = index;
  set_device(index);
  // Non-blocking: strata's streams never synchronise implicitly with the legacy stream.
  STRATA_CUDA_CHECK(op, cudaStreamCreateWithFlags(&fresh->default_stream, cudaStreamNonBlocking));
  void* rec = nullptr;
  STRATA_CUDA_CHECK(op, cudaMalloc(&rec, sizeof(DataError)));
  STRATA_CUDA_CHECK(op, cudaMemset(rec, 0, sizeof(DataError)));
  fresh->error_record = static_cast<DataError*>(rec);
  s = fresh.release();  // lives for the process
  device_states()[size_t(index)].store(s, std::memory_order_release);
  return *s;
}

// Raises the data error a kernel recorded on the device since the last check, if any.
void raise_deferred_error(DeviceState& s) {
  DataError e;
  {
    std::lock_guard<std::mutex> lock(s.error_mutex);
    set_device(s.index);
    STRATA_CUDA_CHECK("synchronize", cudaMemcpy(&e, s.error_record, sizeof e, cudaMemcpyDeviceToHost));
    if (int(e.kind) <= 0) return;
    STRATA_CUDA_CHECK("synchronize", cudaMemset(s.error_record, 0, sizeof e));
  }
  raise_data_error(e);
}

cudaEvent_t record_new_event(const Stream& stream, const char* op) {
  set_device(stream.device().index);
  cudaEvent_t ev = nullptr;
  STRATA_CUDA_CHECK(op, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaError_t e = cudaEventRecord(ev, native_stream(stream));
  if (e != cudaSuccess) {
    cudaEventDestroy(ev);
    fail_cuda(op, "cudaEventRecord(ev, stream)", e, __FILE__, __LINE__);
  }
  return ev;
}

class CudaStreams final : public StreamBackend {
 public:
  int device_count() override { return cuda_backend::device_count(); }

  Stream default_stream(int index) override {
    DeviceState& s = state(index, "default_stream");
    return Stream(cuda(index), 0, s.default_stream);
  }

  Stream create_stream(int index) override {
    DeviceState& s = state(index, "create_stream");
    const uint64_t id = s.next_stream_id.fetch_add(1, std::memory_order_relaxed);
    // A pool of streams per device, handed out round-robin (as PyTorch does): ids stay
    // unique, and two ids may share a CUDA stream (which only adds ordering).
    const size_t slot = size_t((id - 1) % kStreamPoolSize);
    std::lock_guard<std::mutex> lock(device_init_mutex());
    if (!s.pool[slot]) {
      set_device(index);
      STRATA_CUDA_CHECK("create_stream", cudaStreamCreateWithFlags(&s.pool[slot], cudaStreamNonBlocking));
    }
    return Stream(cuda(index), id, s.pool[slot]);
  }

  void synchronize(const Stream& stream) override {
    DeviceState& s = state(stream.device().index, "synchronize");
    set_device(s.index);
    STRATA_CUDA_CHECK("synchronize", cudaStreamSynchronize(native_stream(stream)));
    raise_deferred_error(s);
  }

  void wait(const Stream& waiter, const Stream& producer) override {
    if (waiter == producer) return;
    cudaEvent_t ev = record_new_event(producer, "stream_wait");
    set_device(waiter.device().index);
    const cudaError_t e = cudaStreamWaitEvent(native_stream(waiter), ev, 0);
    cudaEventDestroy(ev);  // released once the event has completed
    if (e != cudaSuccess) fail_cuda("stream_wait", "cudaStreamWaitEvent(waiter, ev, 0)", e, __FILE__, __LINE__);
  }
};

CudaStreams& streams() {
  static CudaStreams* s = new CudaStreams();
  return *s;
}

// ---- memory for the caching allocators ----

// The caching allocators' StreamEvents over cudaEvent_t; errors name `op`.
template <class Memory>
class WithCudaEvents : public Memory {
 public:
  explicit WithCudaEvents(const char* op) : op_(op) {}
  void* record_event(const Stream& stream) override { return record_new_event(stream, op_); }
  bool query_event(void* event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    fail_cuda(op_, "cudaEventQuery(event)", e, __FILE__, __LINE__);
    return false;
  }
  void synchronize_event(void* event) override {
    STRATA_CUDA_CHECK(op_, cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  void destroy_event(void* event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

 private:
  const char* op_;
};

class CudaDeviceMemory final : public WithCudaEvents<DeviceMemory> {
 public:
  explicit CudaDeviceMemory(int index) : WithCudaEvents("cuda allocator"), index_(index) {}
  void* malloc(size_t bytes) override {
    set_device(index_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (e != cudaSuccess) fail_cuda("cuda allocator", "cudaMalloc(&p, bytes)", e, __FILE__, __LINE__);
    return p;
  }
  void free(void* ptr) override {
    set_device(index_);
    STRATA_CUDA_CHECK("cuda allocator", cudaFree(ptr));
  }
  size_t free_bytes() override {
    size_t f = 0, t = 0;
    set_device(index_);
    STRATA_CUDA_CHECK("cuda allocator", cudaMemGetInfo(&f, &t));
    return f;
  }
  size_t total_bytes() override {
    size_t f = 0, t = 0;
    set_device(index_);
    STRATA_CUDA_CHECK("cuda allocator", cudaMemGetInfo(&f, &t));
    return t;
  }

 private:
  int index_;
};

std::unique_ptr<DeviceMemory> make_device_memory(int index) {
  return std::make_unique<CudaDeviceMemory>(index);
}

void check_device(int index, const char* op) { require_device(index, op); }

class CudaPageLockedMemory final : public WithCudaEvents<PageLockedMemory> {
 public:
  CudaPageLockedMemory() : WithCudaEvents("pinned host allocator") {}
  void* allocate(size_t bytes, const char* op) override {
    require_device(0, op);  // without a GPU the driver's error would not say so
    void* p = nullptr;
    // Portable: the memory is page-locked for every device's context, not only the current one.
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (e != cudaSuccess) fail_cuda(op, "cudaHostAlloc(&p, bytes, cudaHostAllocPortable)", e, __FILE__, __LINE__);
    return p;
  }
  void free(void* ptr) override { STRATA_CUDA_CHECK("pinned host allocator", cudaFreeHost(ptr)); }
};

HostCachingAllocator& host_allocator_instance() {
  static HostCachingAllocator* a = new HostCachingAllocator(std::make_unique<CudaPageLockedMemory>());
  return *a;
}

// ---- copies (core/dispatch.h CopyFn) ----

void copy_cpu_to_cuda(const Tensor& src, const Tensor& dst, const Stream& stream, bool non_blocking) {
  const Tensor s = src.is_contiguous() ? src : src.contiguous();
  const size_t n = s.nbytes();
  if (n == 0) return;
  set_device(stream.device().index);
  if (non_blocking && s.is_pinned()) {
    // The DMA reads the tensor's own page-locked memory; its block is not reused before
    // the copy has finished (the caller must not write it meanwhile, as in PyTorch).
    STRATA_CUDA_CHECK("copy to cuda",
                      cudaMemcpyAsync(dst.raw_data(), s.raw_data(), n, cudaMemcpyHostToDevice, native_stream(stream)));
    s.storage()->record_stream(stream);
    return;
  }
  if (non_blocking) {
    // Stage through page-locked memory: the caller may reuse its host buffer at once, and
    // the DMA runs asynchronously.
    HostCachingAllocator& host = host_allocator_instance();
    void* staging = host.allocate(n, "copy to cuda");
    std::memcpy(staging, s.raw_data(), n);
    const cudaError_t e = cudaMemcpyAsync(dst.raw_data(), staging, n, cudaMemcpyHostToDevice, native_stream(stream));
    if (e == cudaSuccess) host.record_stream(staging, stream);
    host.deallocate(staging);
    if (e != cudaSuccess) fail_cuda("copy to cuda", "cudaMemcpyAsync(dst, staging, n, H2D, stream)", e, __FILE__, __LINE__);
    return;
  }
  STRATA_CUDA_CHECK("copy to cuda",
                    cudaMemcpyAsync(dst.raw_data(), s.raw_data(), n, cudaMemcpyHostToDevice, native_stream(stream)));
  streams().synchronize(stream);
}

void copy_cuda_to_cpu(const Tensor& src, const Tensor& dst, const Stream& stream, bool non_blocking) {
  const Tensor s = contiguous_untaped(src);
  const size_t n = s.nbytes();
  if (n == 0) return;
  set_device(stream.device().index);
  // Into pageable memory CUDA returns only once the copy is done; into page-locked memory
  // (to(cpu, non_blocking) allocates it) the copy runs behind the host's back, and the
  // block is not reused before it has finished.
  STRATA_CUDA_CHECK("copy to cpu",
                    cudaMemcpyAsync(dst.raw_data(), s.raw_data(), n, cudaMemcpyDeviceToHost, native_stream(stream)));
  if (dst.is_pinned()) dst.storage()->record_stream(stream);
  // A host read synchronises: it is where deferred data errors surface.
  if (!non_blocking) streams().synchronize(stream);
}

void copy_cuda_to_cuda(const Tensor& src, const Tensor& dst, const Stream& stream, bool non_blocking) {
  const int from = src.device().index, to = dst.device().index;
  if (from == to) {
    const Tensor in[1] = {src}, out[1] = {dst};
    StreamGuard guard(stream);
    run_kernel(OpId::Copy, OpAttrs{}, in, out);
  } else {
    const Tensor s = contiguous_untaped(src);
    const Stream src_stream = current_stream(src.device());
    streams().wait(stream, src_stream);  // the source's producers come first
    set_device(to);
    STRATA_CUDA_CHECK("copy to cuda",
                      cudaMemcpyPeerAsync(dst.raw_data(), to, s.raw_data(), from, s.nbytes(), native_stream(stream)));
    // The source's memory returns to its stream's pool when s dies: later work there
    // must not overwrite it before the copy has read it.
    streams().wait(src_stream, stream);
  }
  if (!non_blocking) streams().synchronize(stream);
}

CudaAllocator& allocator_instance() {
  static CudaAllocator* a = new CudaAllocator(make_device_memory, check_device);
  return *a;
}

}  // namespace

void set_device(int index) {
  // Asked every time rather than cached: NCCL or user code may switch the device too.
  // cudaGetDevice is a thread-local read in the runtime (tens of nanoseconds).
  int current = -1;
  STRATA_CUDA_CHECK("set_device", cudaGetDevice(&current));
  if (current != index) STRATA_CUDA_CHECK("set_device", cudaSetDevice(index));
}

DataError* device_data_error(int index) { return state(index, "device_data_error").error_record; }

int device_count() { return device_count_once().count; }

std::string no_device_reason() { return device_count_once().reason; }

void require_device(int index, const char* op) {
  const DeviceCount& dc = device_count_once();
  if (dc.count == 0) {
    fail(op, ": cuda:", index, " is not available: no CUDA device (", dc.reason,
         "); this build of strata has the CUDA backend, but the machine has no usable GPU");
  }
  STRATA_CHECK(index >= 0 && index < dc.count, op, ": cuda:", index, " does not exist (", dc.count,
               " CUDA device", dc.count == 1 ? "" : "s", ": cuda:0", dc.count > 1 ? "..cuda:" : "",
               dc.count > 1 ? std::to_string(dc.count - 1) : std::string(), ")");
}

DeviceProperties properties(int index) {
  require_device(index, "properties");
  cudaDeviceProp p{};
  STRATA_CUDA_CHECK("properties", cudaGetDeviceProperties(&p, index));
  DeviceProperties d;
  d.name = p.name;
  d.total_memory = p.totalGlobalMem;
  d.multiprocessors = p.multiProcessorCount;
  d.major = p.major;
  d.minor = p.minor;
  return d;
}

CudaAllocator& allocator() { return allocator_instance(); }
CachingAllocatorStats allocator_stats(int index) { return allocator_instance().device_stats(index); }
void empty_cache() {
  allocator_instance().empty_cache();
  host_allocator_instance().empty_cache();
}
HostCachingAllocator& host_allocator() { return host_allocator_instance(); }

void register_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_stream_backend(DeviceType::CUDA, &streams());
    register_allocator(DeviceType::CUDA, &allocator_instance());
    register_pinned_host_allocator(&host_allocator_instance());
    register_copy(DeviceType::CPU, DeviceType::CUDA, copy_cpu_to_cuda);
    register_copy(DeviceType::CUDA, DeviceType::CPU, copy_cuda_to_cpu);
    register_copy(DeviceType::CUDA, DeviceType::CUDA, copy_cuda_to_cuda);
    cuda_kernels::register_cuda_elementwise();
    cuda_kernels::register_cuda_creation();
    cuda_kernels::register_cuda_shape();
    cuda_kernels::register_cuda_optimizer();
    cuda_kernels::register_cuda_reduce();
    cuda_kernels::register_cuda_nn();
    cuda_kernels::register_cuda_matmul();
    cuda_kernels::register_cuda_conv();
    cuda_kernels::register_cuda_pool();
  });
}

namespace {
// Linked with WHOLE_ARCHIVE into `strata` so that this object is never dropped.
const BackendRegistration kRegistration("cuda", register_backend);
}  // namespace

}  // namespace strata::cuda_backend
