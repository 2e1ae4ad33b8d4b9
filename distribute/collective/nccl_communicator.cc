#include <strata/distribute/collective/nccl_communicator.h>

#include <algorithm>
#include <atomic>

#include <strata/core/error.h>
#include <strata/core/stream.h>

#ifdef STRATA_HAS_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/collective/tcp_store.h>
#endif

namespace strata::distribute {

namespace {
std::atomic<NcclBackend*> g_installed_nccl{nullptr};
NcclBackend* builtin_nccl_backend();
}  // namespace

void install_nccl_backend(NcclBackend* backend) { g_installed_nccl.store(backend); }

NcclBackend* nccl_backend() {
  if (NcclBackend* b = g_installed_nccl.load()) return b;
  return builtin_nccl_backend();
}

bool nccl_available() {
  NcclBackend* b = nccl_backend();
  return b != nullptr && b->device_count() > 0;
}

bool nccl_can_reduce(const std::vector<Device>& devices) {
  if (devices.empty() || !nccl_available()) return false;
  const int count = nccl_backend()->device_count();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].is_cuda() || devices[i].index < 0 || devices[i].index >= count) return false;
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) return false;  // two ranks on one GPU: NCCL refuses
    }
  }
  return true;
}

#ifndef STRATA_HAS_NCCL

namespace {
NcclBackend* builtin_nccl_backend() { return nullptr; }
}  // namespace

#else

namespace {

using NcclClock = std::chrono::steady_clock;

NcclClock::time_point nccl_deadline_after(double seconds) {
  return NcclClock::now() + std::chrono::duration_cast<NcclClock::duration>(std::chrono::duration<double>(seconds));
}

std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = ncclGetErrorString(r);
  const char* last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  if (last && *last) m += std::string(" (") + last + ")";
  return m;
}

// Restores the calling thread's CUDA device: NCCL and event calls need the rank's device
// current, and replica threads of other GPUs must not see it changed.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (saved_ != device) cudaSetDevice(device);
  }
  ~CudaDeviceScope() {
    int now = -1;
    if (saved_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != saved_) cudaSetDevice(saved_);
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  int saved_ = -1;
};

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::Bool: return ncclUint8;
  }
  fail("nccl: unknown dtype");
}

std::string nccl_describe(const char* op, const Tensor& t, const std::string& extra = "") {
  std::ostringstream os;
  os << op << '(' << extra << (extra.empty() ? "" : ", ") << dtype_name(t.dtype()) << shape_str(t.shape()) << ')';
  return os.str();
}

std::string nccl_rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// Waits with a short spin, then short sleeps: a collective of a few microseconds returns
// at once, a long one costs the host little.
void nccl_backoff(int& iteration) {
  if (++iteration < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(iteration < 1024 ? 20 : 200));
  }
}

// What the ranks of one local group share: who issued how many collectives this round,
// who returned from its step function, and why the group failed (the watchdog of each
// rank reads it to name the missing ranks and to stop waiting for a failed peer).
struct NcclLocalState {
  explicit NcclLocalState(int n) : calls(size_t(n), 0), finished(size_t(n), false) {}
  std::mutex mutex;
  std::vector<uint64_t> calls;
  std::vector<bool> finished;
  std::optional<std::string> aborted;
};

// The communication stream of one GPU, shared by every NCCL communicator of the process on
// it: created once, on first use, through the stream backend (core/stream.h), so that
// collectives launched asynchronously overlap the compute stream's work.
Stream communication_stream(Device device) {
  static std::mutex mutex;
  static std::map<int, Stream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device.index);
  if (it == streams.end()) it = streams.emplace(device.index, create_stream(device)).first;
  return it->second;
}

// A CUDA event recorded after one asynchronous collective on the communication stream,
// shared by its work (which orders consumers after it) and the communicator's in-flight
// list (which polls it). Destroying a pending event is allowed: CUDA releases it later.
struct NcclEvent {
  NcclEvent(int device_index, cudaEvent_t e) : device(device_index), event(e) {}
  ~NcclEvent() {
    CudaDeviceScope on(device);
    cudaEventDestroy(event);
  }
  NcclEvent(const NcclEvent&) = delete;
  NcclEvent& operator=(const NcclEvent&) = delete;
  const int device;
  const cudaEvent_t event;
};

class NcclCommunicator;

// The work of NcclCommunicator::all_reduce_async: completed (for wait()) once enqueued on
// the communication stream after the caller's stream; order_consumer() and synchronize()
// as comm_work.h says. It refers to its communicator, which must outlive its use (the
// gradient reducer ends every step's works before the strategy rebuilds a group); past
// the communicator's life only the event is left to answer.
class NcclStreamWork final : public CommWork {
 public:
  NcclStreamWork(std::string what, NcclCommunicator* comm, std::weak_ptr<void> alive,
                 std::shared_ptr<NcclEvent> event, uint64_t call)
      : CommWork(std::move(what)), comm_(comm), alive_(std::move(alive)), event_(std::move(event)), call_(call) {
    finish();
  }
  void order_consumer(const Stream& consumer) const override;
  void synchronize(double timeout_seconds) const override;

 private:
  NcclCommunicator* comm_;
  std::weak_ptr<void> alive_;
  std::shared_ptr<NcclEvent> event_;
  uint64_t call_;  // the communicator's in-flight key
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, Device device, double timeout_seconds,
                   std::shared_ptr<NcclLocalState> local, std::shared_ptr<TcpStore> store, std::string prefix)
      : comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        timeout_(timeout_seconds),
        local_(std::move(local)),
        store_(std::move(store)),
        prefix_(std::move(prefix)) {}

  ~NcclCommunicator() override {
    if (watchdog_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_watchdog_ = true;
      }
      watchdog_cv_.notify_all();
      watchdog_.join();
    }
    CudaDeviceScope on(device_.index);
    if (event_) cudaEventDestroy(event_);
    bool pending = false;
    for (const InFlight& f : in_flight_) pending = pending || cudaEventQuery(f.event->event) == cudaErrorNotReady;
    if (comm_) {
      // A healthy communicator is destroyed (flushing nothing: every synchronous call
      // waited for its work, and so did the owners of asynchronous ones); one with an
      // asynchronous collective still running is aborted, as ncclCommDestroy would wait
      // for it unboundedly; a broken one was aborted already.
      if (pending) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  Device buffer_device() const override { return device_; }
  bool broken() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !broken_.empty();
  }

  void all_reduce(const Tensor& buffer, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mutex_);
    check_tensor(buffer, "all_reduce", "buffer");
    check_reducible(buffer, "all_reduce", op);
    const bool mean_of_ints = op == ReduceOp::Mean && !is_floating(buffer.dtype());
    const ncclRedOp_t rop = nccl_op(op, buffer.dtype());
    run(nccl_describe("all_reduce", buffer, reduce_op_name(op)), [&](cudaStream_t s) {
      return ncclAllReduce(buffer.raw_data(), buffer.raw_data(), size_t(buffer.numel()), nccl_dtype(buffer.dtype()),
                           rop, comm_, s);
    });
    if (mean_of_ints) divide_ints(buffer);
  }

  // The all-reduce on this GPU's communication stream (see the header): ordered after the
  // caller's current stream, enqueued, and returned at once.
  std::shared_ptr<CommWork> all_reduce_async(const Tensor& buffer, ReduceOp op) override {
    // The mean of integers divides after the sum: the synchronous path keeps that simple.
    if (op == ReduceOp::Mean && buffer.defined() && !is_floating(buffer.dtype())) {
      return Communicator::all_reduce_async(buffer, op);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    check_tensor(buffer, "all_reduce", "buffer");
    check_reducible(buffer, "all_reduce", op);
    const ncclRedOp_t rop = nccl_op(op, buffer.dtype());
    const std::string what = nccl_describe("all_reduce_async", buffer, reduce_op_name(op));
    // Earlier asynchronous collectives that failed or ran out of time fail this call.
    poll_in_flight();
    const uint64_t my_call = begin_call(what);
    const auto deadline = nccl_deadline_after(timeout_);
    CudaDeviceScope on(device_.index);
    const Stream comm_stream = communication_stream(device_);
    // The buffer was written on the caller's stream: the collective runs after that work,
    // and the allocator keeps the buffer's block until the collective finished with it.
    stream_wait(comm_stream, current_stream(device_));
    if (buffer.storage()) buffer.storage()->record_stream(comm_stream);
    enqueue(what, static_cast<cudaStream_t>(comm_stream.native_handle()), [&](cudaStream_t s) {
      return ncclAllReduce(buffer.raw_data(), buffer.raw_data(), size_t(buffer.numel()), nccl_dtype(buffer.dtype()),
                           rop, comm_, s);
    });
    if (!enqueued_now(what)) {
      ComputeSlot::Yield yield;  // as in run(): the peer it waits for may need the slot
      wait_until_ready(what, deadline, my_call);
    }
    cudaEvent_t raw = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&raw, cudaEventDisableTiming);
    if (e != cudaSuccess) fail(what, std::string("cudaEventCreate failed: ") + cudaGetErrorString(e));
    auto event = std::make_shared<NcclEvent>(device_.index, raw);
    e = cudaEventRecord(raw, static_cast<cudaStream_t>(comm_stream.native_handle()));
    if (e != cudaSuccess) fail(what, std::string("cudaEventRecord failed: ") + cudaGetErrorString(e));
    const uint64_t key = ++async_calls_;
    in_flight_.push_back(InFlight{key, my_call, calls_, deadline, what, event});
    if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watchdog_loop(); });
    return std::make_shared<NcclStreamWork>(what, this, alive_, std::move(event), key);
  }

  // Blocks until the asynchronous collectives up to `key` have finished on the GPU, with
  // the synchronous path's watchdog (NcclStreamWork::synchronize).
  void complete_through(uint64_t key) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!in_flight_.empty() && in_flight_.front().key <= key) {
      check_usable(in_flight_.front().what.c_str());
      const InFlight f = in_flight_.front();
      ComputeSlot::Yield yield;
      CudaDeviceScope on(device_.index);
      await(f.what, f.event->event, f.deadline, f.my_call, f.number);
      in_flight_.pop_front();
    }
  }

  void broadcast(const Tensor& buffer, int root) override {
    std::lock_guard<std::mutex> lock(mutex_);
    check_tensor(buffer, "broadcast", "buffer");
    STRATA_CHECK(root >= 0 && root < size_, "nccl broadcast: root ", root, " is out of range for ", size_, " ranks");
    run(nccl_describe("broadcast", buffer, "root " + std::to_string(root)), [&](cudaStream_t s) {
      return ncclBroadcast(buffer.raw_data(), buffer.raw_data(), size_t(buffer.numel()), nccl_dtype(buffer.dtype()),
                           root, comm_, s);
    });
  }

  void all_gather(const Tensor& input, const Tensor& output) override {
    std::lock_guard<std::mutex> lock(mutex_);
    check_tensor(input, "all_gather", "input");
    check_tensor(output, "all_gather", "output");
    STRATA_CHECK(input.dtype() == output.dtype(), "nccl all_gather: input dtype ", input.dtype(),
                 " differs from output dtype ", output.dtype());
    STRATA_CHECK(input.ndim() >= 1 && output.ndim() == input.ndim() && output.dim(0) == input.dim(0) * size_ &&
                     output.numel() == input.numel() * size_,
                 "nccl all_gather: output shape ", shape_str(output.shape()), " must have ", size_,
                 "x the rows of input ", shape_str(input.shape()));
    run(nccl_describe("all_gather", input), [&](cudaStream_t s) {
      return ncclAllGather(input.raw_data(), output.raw_data(), size_t(input.numel()), nccl_dtype(input.dtype()), comm_,
                           s);
    });
  }

  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mutex_);
    check_tensor(input, "reduce_scatter", "input");
    check_tensor(output, "reduce_scatter", "output");
    check_reducible(input, "reduce_scatter", op);
    STRATA_CHECK(input.dtype() == output.dtype(), "nccl reduce_scatter: input dtype ", input.dtype(),
                 " differs from output dtype ", output.dtype());
    STRATA_CHECK(input.ndim() >= 1 && output.ndim() == input.ndim() && input.dim(0) == output.dim(0) * size_ &&
                     input.numel() == output.numel() * size_,
                 "nccl reduce_scatter: input shape ", shape_str(input.shape()), " must have ", size_,
                 "x the rows of output ", shape_str(output.shape()));
    const bool mean_of_ints = op == ReduceOp::Mean && !is_floating(input.dtype());
    const ncclRedOp_t rop = nccl_op(op, input.dtype());
    run(nccl_describe("reduce_scatter", input, reduce_op_name(op)), [&](cudaStream_t s) {
      return ncclReduceScatter(input.raw_data(), output.raw_data(), size_t(output.numel()), nccl_dtype(input.dtype()),
                               rop, comm_, s);
    });
    if (mean_of_ints) divide_ints(output);
  }

  void barrier() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!barrier_buffer_.defined()) {
      DeviceGuard on(device_);
      barrier_buffer_ = zeros({1}, kFloat32, device_);
    }
    check_usable("barrier");
    run("barrier()", [&](cudaStream_t s) {
      return ncclAllReduce(barrier_buffer_.raw_data(), barrier_buffer_.raw_data(), 1, ncclFloat32, ncclSum, comm_, s);
    });
  }

  // Aborts the NCCL communicator (releasing its kernels) and makes every later call fail
  // with `why`. Idempotent.
  void abort_with(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_locked(why);
  }

 private:
  // Every member below runs with mutex_ held: the calling thread's collectives and the
  // watchdog thread's checks of asynchronous ones never overlap.
  void abort_locked(const std::string& why) {
    if (broken_.empty()) broken_ = why;
    if (comm_) {
      CudaDeviceScope on(device_.index);
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  // The watchdog of asynchronous collectives (started by the first all_reduce_async), as
  // PyTorch's ProcessGroupNCCL has: while one is in flight it checks, every few
  // milliseconds, what a synchronous call checks while it waits. On a failure it aborts
  // the communicator, which ends the GPU kernels waiting for a lost peer, so that a host
  // read of a result ordered after the collective (a loss scale's finite check) returns
  // instead of hanging; the failure, naming the rank, is raised by the next call on the
  // communicator or the work's synchronize(). It sleeps while the calling thread is
  // inside a call (which watches by itself).
  void watchdog_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_watchdog_) {
      // Every 5 ms while a collective is in flight on a healthy communicator; a broken
      // one has nothing left to watch.
      watchdog_cv_.wait_for(lock, std::chrono::milliseconds(in_flight_.empty() || !broken_.empty() ? 50 : 5));
      if (stop_watchdog_ || in_flight_.empty() || !broken_.empty()) continue;
      CudaDeviceScope on(device_.index);
      cudaError_t e = cudaSuccess;
      while (!in_flight_.empty() && (e = cudaEventQuery(in_flight_.front().event->event)) == cudaSuccess) {
        in_flight_.pop_front();
      }
      if (in_flight_.empty()) continue;
      const InFlight& f = in_flight_.front();
      std::string cause;
      if (e != cudaErrorNotReady) {
        cause = std::string("the GPU reported an error: ") + cudaGetErrorString(e);
      } else {
        cause = watch_cause(f.deadline, f.my_call);
      }
      if (!cause.empty()) record_failure(f.what, cause + " (found by the watchdog)", f.number);
    }
  }

  void check_usable(const char* op) const {
    STRATA_CHECK(broken_.empty(), "nccl ", op, ": rank ", rank_, " of ", size_, " (", device_,
                 "): the communicator is unusable after an earlier failure: ", broken_);
  }

  void check_tensor(const Tensor& t, const char* op, const char* name) const {
    check_usable(op);
    STRATA_CHECK(t.defined(), "nccl ", op, ": ", name, " is an undefined tensor");
    STRATA_CHECK(t.device() == device_, "nccl ", op, ": ", name, " is on ", t.device(), " but rank ", rank_,
                 "'s communicator is on ", device_, " (NCCL reduces tensors on the communicator's GPU)");
    STRATA_CHECK(t.is_contiguous(), "nccl ", op, ": ", name, " of shape ", shape_str(t.shape()),
                 " is not contiguous (collectives work in place on contiguous tensors)");
  }

  static void check_reducible(const Tensor& t, const char* op, ReduceOp rop) {
    STRATA_CHECK(t.dtype() != kBool || rop == ReduceOp::Max || rop == ReduceOp::Min, "nccl ", op, "(",
                 reduce_op_name(rop), "): bool tensors can only be reduced with max or min");
  }

  static ncclRedOp_t nccl_op(ReduceOp op, DType dtype) {
    switch (op) {
      case ReduceOp::Sum: return ncclSum;
      case ReduceOp::Mean: return is_floating(dtype) ? ncclAvg : ncclSum;
      case ReduceOp::Max: return ncclMax;
      case ReduceOp::Min: return ncclMin;
    }
    return ncclSum;
  }

  // Integer mean: the sum divided with truncation, as fold_reduce and Gloo do.
  void divide_ints(const Tensor& t) const {
    autograd::StopRecording no_tape;
    DeviceGuard on(device_);
    t.copy_(cast(cast(t, kFloat64) / double(size_), t.dtype()));
  }

  // Enqueues `enqueue` as one NCCL group on the current stream of this rank's GPU, then
  // waits (bounded) until the GPU finished it. See the header for the failure rules.
  template <typename Enqueue>
  void run(const std::string& what, Enqueue&& enqueue_call) {
    // Collectives on the calling stream may need an asynchronous one's result: an earlier
    // failure is reported first, and the calling stream waits for the asynchronous
    // collectives still in flight, so this one runs after them (one communicator's
    // collectives never run concurrently on two streams).
    poll_in_flight();
    const uint64_t my_call = begin_call(what);
    const auto deadline = nccl_deadline_after(timeout_);
    CudaDeviceScope on(device_.index);
    const Stream stream = current_stream(device_);
    cudaStream_t s = static_cast<cudaStream_t>(stream.native_handle());
    if (!in_flight_.empty()) {
      const cudaError_t w = cudaStreamWaitEvent(s, in_flight_.back().event->event, 0);
      if (w != cudaSuccess) fail(what, std::string("cudaStreamWaitEvent failed: ") + cudaGetErrorString(w));
    }
    enqueue(what, s, enqueue_call);
    // While it waits for its peers the replica gives its compute slot up (in_process.h):
    // with fewer cores than GPUs, the peer it waits for may need the slot to get here.
    ComputeSlot::Yield yield;
    // A non-blocking communicator may still be enqueueing: wait for it, bounded.
    wait_until_ready(what, deadline, my_call);
    if (!event_) {
      const cudaError_t e = cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
      if (e != cudaSuccess) fail(what, std::string("cudaEventCreate failed: ") + cudaGetErrorString(e));
    }
    const cudaError_t e = cudaEventRecord(event_, s);
    if (e != cudaSuccess) fail(what, std::string("cudaEventRecord failed: ") + cudaGetErrorString(e));
    await(what, event_, deadline, my_call, calls_);
  }

  // Counts a new collective (in the local group's tally too) and returns its number there.
  uint64_t begin_call(const std::string& what) {
    check_usable(what.c_str());
    ++calls_;
    uint64_t my_call = calls_;
    if (local_) {
      std::optional<std::string> aborted;
      {
        std::lock_guard<std::mutex> lock(local_->mutex);
        aborted = local_->aborted;
        if (!aborted) my_call = ++local_->calls[size_t(rank_)];
      }
      if (aborted) fail(what, "aborted: " + *aborted);  // fail() takes the lock itself
    }
    return my_call;
  }

  // Enqueues one collective on `s` as one NCCL group.
  template <typename Enqueue>
  void enqueue(const std::string& what, cudaStream_t s, Enqueue&& enqueue_call) {
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) {
      r = enqueue_call(s);
      const ncclResult_t end = ncclGroupEnd();
      if (r == ncclSuccess || r == ncclInProgress) r = end;
    }
    if (r != ncclSuccess && r != ncclInProgress) fail(what, "NCCL refused the call: " + nccl_message(r, comm_));
  }

  // True when the non-blocking communicator finished enqueueing (one check, no wait).
  bool enqueued_now(const std::string& what) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail(what, "ncclCommGetAsyncError failed: " + nccl_message(r, comm_));
    if (state != ncclSuccess && state != ncclInProgress) fail(what, "NCCL reported an error: " + nccl_message(state, comm_));
    return state == ncclSuccess;
  }

  // Polls `event` (recorded after collective #number) until it completed, under the
  // watchdog: NCCL's asynchronous error, the local peers, the deadline.
  void await(const std::string& what, cudaEvent_t event, NcclClock::time_point deadline, uint64_t my_call,
             uint64_t number) {
    int spins = 0;
    for (;;) {
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        fail(what, std::string("the GPU reported an error: ") + cudaGetErrorString(e), number);
      }
      watch(what, deadline, my_call, number);
      nccl_backoff(spins);
    }
  }

  // Forgets the asynchronous collectives that finished; one that failed or ran past its
  // deadline fails now (no waiting).
  void poll_in_flight() {
    if (in_flight_.empty() || !broken_.empty()) return;  // a broken one fails in begin_call
    CudaDeviceScope on(device_.index);
    while (!in_flight_.empty()) {
      const InFlight& f = in_flight_.front();
      const cudaError_t e = cudaEventQuery(f.event->event);
      if (e == cudaErrorNotReady) break;
      if (e != cudaSuccess) fail(f.what, std::string("the GPU reported an error: ") + cudaGetErrorString(e), f.number);
      in_flight_.pop_front();
    }
    for (const InFlight& f : in_flight_) watch(f.what, f.deadline, f.my_call, f.number);
  }

  void wait_until_ready(const std::string& what, NcclClock::time_point deadline, uint64_t my_call) {
    int spins = 0;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) fail(what, "ncclCommGetAsyncError failed: " + nccl_message(r, comm_));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, "NCCL reported an error: " + nccl_message(state, comm_));
      watch(what, deadline, my_call);
      nccl_backoff(spins);
    }
  }

  // One watchdog check while a call is in flight: NCCL's asynchronous error (a peer
  // process died, a network failure), a failed or finished local peer, the deadline.
  void watch(const std::string& what, NcclClock::time_point deadline, uint64_t my_call, uint64_t number = 0) {
    const std::string cause = watch_cause(deadline, my_call);
    if (!cause.empty()) fail(what, cause, number);
  }

  // What watch() would fail with ("" while all is well).
  std::string watch_cause(NcclClock::time_point deadline, uint64_t my_call) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
      return "NCCL reported an error: " + nccl_message(state, comm_) + peers_status(my_call);
    }
    if (local_) {
      std::string cause;
      {
        std::lock_guard<std::mutex> lock(local_->mutex);
        if (local_->aborted) cause = "aborted: " + *local_->aborted;
        for (int p = 0; p < size_ && cause.empty(); ++p) {
          if (p != rank_ && local_->finished[size_t(p)] && local_->calls[size_t(p)] < my_call) {
            cause = "it can never complete: rank " + std::to_string(p) +
                    " returned from its step function without issuing it (every replica must issue the same "
                    "collectives in the same order)";
          }
        }
      }
      if (!cause.empty()) return cause;
    }
    if (NcclClock::now() >= deadline) {
      std::ostringstream os;
      os << "timed out after " << timeout_ << " s" << peers_status(my_call);
      return os.str();
    }
    return "";
  }

  // Which peers are missing, for messages: in a local group the ranks that have not
  // issued this call yet; across processes the ranks whose store liveness key is gone.
  std::string peers_status(uint64_t my_call) {
    if (local_) {
      std::vector<int> missing;
      {
        std::lock_guard<std::mutex> lock(local_->mutex);
        for (int p = 0; p < size_; ++p)
          if (local_->calls[size_t(p)] < my_call) missing.push_back(p);
      }
      if (missing.empty()) return ": every rank issued it, but the GPUs did not finish it";
      return ": rank(s) " + nccl_rank_list(missing) + " did not issue it";
    }
    if (!store_) return "";
    try {
      std::vector<int> gone;
      for (int p = 0; p < size_; ++p)
        if (p != rank_ && !store_->check({prefix_ + "/live/" + std::to_string(p)})) gone.push_back(p);
      if (gone.empty()) return ": every other rank is still connected to the store, so a peer is slow or stuck";
      return ": rank(s) " + nccl_rank_list(gone) + " gone (their processes left the rendezvous store)";
    } catch (const Error& e) {
      return std::string(": the rendezvous store is unreachable, so its host (rank 0) is probably gone: ") + e.what();
    }
  }

  // `number`: the collective's number on this communicator (0: the latest issued).
  [[noreturn]] void fail(const std::string& what, const std::string& cause, uint64_t number = 0) {
    throw Error(record_failure(what, cause, number));
  }

  // Aborts with the message fail() raises, which it returns.
  std::string record_failure(const std::string& what, const std::string& cause, uint64_t number) {
    std::ostringstream os;
    os << "nccl " << what << " failed on rank " << rank_ << " of " << size_ << " (" << device_ << ", collective #"
       << (number ? number : calls_) << "): " << cause;
    const std::string message = os.str();
    abort_locked(message);
    if (local_) {
      // The other ranks of the group stop waiting for this one.
      std::lock_guard<std::mutex> lock(local_->mutex);
      if (!local_->aborted) local_->aborted = message;
    }
    return message;
  }

  ncclComm_t comm_;
  const int rank_, size_;
  const Device device_;
  const double timeout_;
  std::shared_ptr<NcclLocalState> local_;
  std::shared_ptr<TcpStore> store_;
  std::string prefix_;
  uint64_t calls_ = 0;
  cudaEvent_t event_ = nullptr;
  Tensor barrier_buffer_;
  std::string broken_;
  // Asynchronous collectives not yet seen finished, in issue order.
  struct InFlight {
    uint64_t key;      // NcclStreamWork's handle on it
    uint64_t my_call;  // its number in the local group's tally (watch())
    uint64_t number;   // its number on this communicator (messages)
    NcclClock::time_point deadline;
    std::string what;
    std::shared_ptr<NcclEvent> event;
  };
  std::deque<InFlight> in_flight_;
  uint64_t async_calls_ = 0;
  mutable std::mutex mutex_;  // see abort_locked()
  std::thread watchdog_;
  std::condition_variable watchdog_cv_;
  bool stop_watchdog_ = false;
  // Expires with the communicator: its works then stop calling it.
  std::shared_ptr<void> alive_ = std::make_shared<int>(0);
};

void NcclStreamWork::order_consumer(const Stream& consumer) const {
  STRATA_CHECK(consumer.device() == Device(DeviceType::CUDA, event_->device), "nccl ", what(),
               ": order_consumer needs a stream of cuda:", event_->device, ", got one of ", consumer.device());
  CudaDeviceScope on(event_->device);
  const cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer.native_handle()), event_->event, 0);
  STRATA_CHECK(e == cudaSuccess, "nccl ", what(), ": cudaStreamWaitEvent failed: ", cudaGetErrorString(e));
}

void NcclStreamWork::synchronize(double timeout_seconds) const {
  // Bounded by the communicator's deadline for the collective, set at launch (at most
  // CommunicationOptions::timeout_seconds); wait() returns at once (it is enqueued).
  wait(timeout_seconds);
  if (alive_.expired()) {
    CudaDeviceScope on(event_->device);
    const cudaError_t e = cudaEventQuery(event_->event);
    STRATA_CHECK(e == cudaSuccess, "nccl ", what(), ": its communicator was destroyed before it finished (",
                 cudaGetErrorString(e), ")");
    return;
  }
  comm_->complete_through(call_);
}

ncclConfig_t nccl_nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and enqueue return at once; we poll, bounded
  return config;
}

// Polls a non-blocking communicator until its initialisation finished; false on timeout.
bool nccl_wait_initialised(ncclComm_t comm, NcclClock::time_point deadline, std::string& error) {
  int spins = 0;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) {
      error = nccl_message(r, comm);
      return false;
    }
    if (state == ncclSuccess) return true;
    if (state != ncclInProgress) {
      error = nccl_message(state, comm);
      return false;
    }
    if (NcclClock::now() >= deadline) {
      error = "timed out";
      return false;
    }
    nccl_backoff(spins);
  }
}

// The communicators of one process's GPUs.
class NcclLocalGroup final : public LocalCollectiveGroup {
 public:
  NcclLocalGroup(std::vector<Device> devices, CommunicationOptions options)
      : devices_(std::move(devices)), options_(options) {
    build();
  }

  int size() const override { return int(devices_.size()); }
  Communicator& communicator(int rank) override {
    STRATA_CHECK(rank >= 0 && rank < size(), "nccl local group: rank ", rank, " out of range for ", size(), " ranks");
    return *comms_[size_t(rank)];
  }

  void begin_round() override {
    bool rebuild = false;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      rebuild = state_->aborted.has_value();
    }
    for (auto& c : comms_) rebuild = rebuild || c->broken();
    if (rebuild) {
      // A failed round leaves peers' kernels possibly waiting for the failed rank: abort
      // every communicator of the group and start afresh.
      for (auto& c : comms_) c->abort_with("the group was rebuilt after a failure");
      comms_.clear();
      build();
      return;
    }
    std::lock_guard<std::mutex> lock(state_->mutex);
    std::fill(state_->calls.begin(), state_->calls.end(), 0);
    std::fill(state_->finished.begin(), state_->finished.end(), false);
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->aborted) state_->aborted = reason;
  }

  void finish(int rank) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->finished[size_t(rank)] = true;
  }

 private:
  // What ncclCommInitAll does (one unique id, one rank per device, in one group), with
  // non-blocking communicators so that initialisation is bounded by the timeout too.
  void build() {
    const int n = size();
    state_ = std::make_shared<NcclLocalState>(n);
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    STRATA_CHECK(r == ncclSuccess, "nccl: ncclGetUniqueId failed: ", nccl_message(r, nullptr));
    std::vector<ncclComm_t> raw(size_t(n), nullptr);
    ncclConfig_t config = nccl_nonblocking_config();
    r = ncclGroupStart();
    for (int i = 0; i < n && (r == ncclSuccess || r == ncclInProgress); ++i) {
      CudaDeviceScope on(devices_[size_t(i)].index);
      r = ncclCommInitRankConfig(&raw[size_t(i)], n, id, i, &config);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
    const auto deadline = nccl_deadline_after(options_.timeout_seconds);
    std::string error = r == ncclSuccess || r == ncclInProgress ? "" : nccl_message(r, nullptr);
    int failed_rank = error.empty() ? -1 : 0;
    for (int i = 0; i < n && error.empty(); ++i) {
      if (!raw[size_t(i)] || !nccl_wait_initialised(raw[size_t(i)], deadline, error)) failed_rank = i;
    }
    if (!error.empty()) {
      for (int i = 0; i < n; ++i) {
        if (raw[size_t(i)]) {
          CudaDeviceScope on(devices_[size_t(i)].index);
          ncclCommAbort(raw[size_t(i)]);
        }
      }
      std::string devices;
      for (const Device& d : devices_) devices += (devices.empty() ? "" : ", ") + d.str();
      fail("nccl: could not create the communicators of ", n, " local GPUs (", devices, "): rank ", failed_rank, " on ",
           devices_[size_t(std::max(failed_rank, 0))], ": ", error, " (timeout ", options_.timeout_seconds, " s)");
    }
    for (int i = 0; i < n; ++i) {
      comms_.push_back(std::make_unique<NcclCommunicator>(raw[size_t(i)], i, n, devices_[size_t(i)],
                                                          options_.timeout_seconds, state_, nullptr, ""));
    }
  }

  std::vector<Device> devices_;
  CommunicationOptions options_;
  std::shared_ptr<NcclLocalState> state_;
  std::vector<std::unique_ptr<NcclCommunicator>> comms_;
};

class BuiltinNcclBackend final : public NcclBackend {
 public:
  std::string name() const override {
    int version = 0;
    ncclGetVersion(&version);
    std::ostringstream os;
    os << "nccl " << version / 10000 << '.' << (version % 10000) / 100 << '.' << version % 100;
    return os.str();
  }

  int device_count() override {
    StreamBackend* b = stream_backend(DeviceType::CUDA);
    return b ? b->device_count() : 0;
  }

  std::unique_ptr<LocalCollectiveGroup> local_group(const std::vector<Device>& devices,
                                                    const CommunicationOptions& options) override {
    STRATA_CHECK(nccl_can_reduce(devices), "nccl: a local group needs distinct, visible GPUs (", device_count(),
                 " visible); NCCL refuses two ranks on one GPU");
    return std::make_unique<NcclLocalGroup>(devices, options);
  }

  std::shared_ptr<Communicator> process_group(const NcclProcessGroupOptions& o) override {
    STRATA_CHECK(o.size >= 1 && o.rank >= 0 && o.rank < o.size, "nccl: rank ", o.rank, " is out of range for ", o.size,
                 " ranks");
    STRATA_CHECK(o.store != nullptr, "nccl: rank ", o.rank, ": no rendezvous store given");
    STRATA_CHECK(o.device.is_cuda() && o.device.index >= 0 && o.device.index < device_count(), "nccl: rank ", o.rank,
                 ": device ", o.device, " is not a visible GPU (", device_count(), " visible)");
    STRATA_CHECK(o.comm.timeout_seconds > 0, "nccl: timeout_seconds must be positive, got ", o.comm.timeout_seconds);
    TcpStore& store = *o.store;
    const std::string id_key = o.prefix + "/unique_id";
    ncclUniqueId id;
    if (o.rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      STRATA_CHECK(r == ncclSuccess, "nccl: rank 0: ncclGetUniqueId failed: ", nccl_message(r, nullptr));
      store.set(id_key, std::string(id.internal, sizeof id.internal));
    } else {
      std::string value;
      try {
        value = store.get(id_key, o.comm.timeout_seconds);
      } catch (const Error& e) {
        fail("nccl: rank ", o.rank, " of ", o.size, " waited ", o.comm.timeout_seconds,
             " s for rank 0's NCCL unique id (store key '", id_key, "'): rank 0 never published it: ", e.what());
      }
      STRATA_CHECK(value.size() == sizeof id.internal, "nccl: rank ", o.rank, ": the NCCL unique id on the store has ",
                   value.size(), " bytes, expected ", sizeof id.internal, " (ranks built against different NCCLs?)");
      std::memcpy(id.internal, value.data(), sizeof id.internal);
    }
    store.set_ephemeral(o.prefix + "/live/" + std::to_string(o.rank), "1");
    store.set(o.prefix + "/joined/" + std::to_string(o.rank), "1");
    ncclComm_t comm = nullptr;
    ncclConfig_t config = nccl_nonblocking_config();
    ncclResult_t r;
    {
      CudaDeviceScope on(o.device.index);
      r = ncclCommInitRankConfig(&comm, o.size, id, o.rank, &config);
    }
    std::string error = r == ncclSuccess || r == ncclInProgress ? "" : nccl_message(r, nullptr);
    if (error.empty()) (void)nccl_wait_initialised(comm, nccl_deadline_after(o.comm.timeout_seconds), error);
    if (!error.empty()) {
      if (comm) {
        CudaDeviceScope on(o.device.index);
        ncclCommAbort(comm);
      }
      std::vector<int> missing;
      try {
        for (int p = 0; p < o.size; ++p)
          if (!store.check({o.prefix + "/joined/" + std::to_string(p)})) missing.push_back(p);
      } catch (const Error&) {
      }
      fail("nccl: rank ", o.rank, " of ", o.size, " (", o.device, ") could not join group '", o.prefix, "': ", error,
           missing.empty() ? std::string() : " (rank(s) " + nccl_rank_list(missing) + " never joined)", " (timeout ",
           o.comm.timeout_seconds, " s)");
    }
    return std::make_shared<NcclCommunicator>(comm, o.rank, o.size, o.device, o.comm.timeout_seconds, nullptr, o.store,
                                              o.prefix);
  }
};

NcclBackend* builtin_nccl_backend() {
  static BuiltinNcclBackend* backend = new BuiltinNcclBackend();  // lives for the process
  return backend;
}

}  // namespace

#endif  // STRATA_HAS_NCCL

}  // namespace strata::distribute
