// NCCL collectives: the Communicator of one GPU, for MirroredStrategy over local GPUs
// (NcclAllReduce) and MultiWorkerMirroredStrategy between processes whose replicas are GPUs
// (CommunicationImplementation::Nccl).
//
// Two ways to build communicators:
//  - local_group(devices): one communicator per local GPU, all in this process (what
//    ncclCommInitAll does, written as a grouped ncclCommInitRankConfig per device so that
//    initialisation is non-blocking and bounded too). The replica threads each drive their
//    own rank. The devices must be distinct GPUs: NCCL refuses two ranks on one GPU, so
//    logical replicas sharing a GPU (a device listed twice, docs/GPU.md) reduce in device
//    memory through the in-process backend instead.
//  - process_group(rank, size, device, store): rank `rank` of `size` processes; rank 0
//    creates the NCCL unique id and publishes it on the job's TcpStore, the others read it.
//
// Every collective is enqueued on the calling thread's current stream of the tensor's
// device (core/stream.h; the stream's native handle is the cudaStream_t), as one NCCL group
// (ncclGroupStart/End), and the call then waits, polling, until the work has finished:
// the communicator's watchdog checks ncclCommGetAsyncError, a completion event, whether a
// peer already failed or returned without issuing the call, and the deadline
// (CommunicationOptions::timeout_seconds). On a timeout or a failure it aborts the NCCL
// communicator (ncclCommAbort, which also releases the GPU kernels waiting for a peer) and
// raises a strata::Error naming this rank and the ranks that are missing or gone. After
// that the communicator is unusable (every call throws); a local group is rebuilt by
// begin_round() (the next Strategy::run), a process group is not (the job ends and a
// relaunch resumes from the latest checkpoint, as with Gloo).
//
// all_reduce_async (floats; the mean of integers takes the synchronous path) runs on the
// GPU's communication stream instead, as PyTorch DDP's buckets do: one stream per GPU and
// process, created on first use through the stream backend. The stream first waits (an
// event, no host blocking) for the work enqueued so far on the caller's current stream,
// which produced the buffer; the all-reduce is enqueued there, the buffer's block is kept
// from reuse until it finished (Storage::record_stream), and the call returns a CommWork
// that is already complete in wait()'s sense ("enqueued and ordered"). Its
// order_consumer(stream) makes a consumer stream wait for the result (an event recorded
// after the collective); its synchronize() blocks the host until the GPU finished it,
// under the same watchdog and deadline as a synchronous call. While one is in flight a
// watchdog thread of the communicator (PyTorch's ProcessGroupNCCL has one) makes the same
// checks every few milliseconds and on a failure aborts the communicator, which ends the
// GPU kernels waiting for a lost peer: a host read of a result ordered after the
// collective returns instead of hanging, and the failure, naming the rank, is raised by
// the next call on the communicator or by the work's synchronize(). A synchronous call
// made while asynchronous ones are in flight is ordered after them (its stream waits for
// the last one's event). The owner of the works must
// synchronize them before the communicator is destroyed or its group rebuilt (the
// gradient reducer does at the end of each step); one left running makes the destructor
// abort the NCCL communicator rather than wait for it.
//
// dtypes: float32, float64, float16, bfloat16, int32, int64 (all ops), bool (broadcast,
// all_gather, and max/min). Mean is ncclAvg for floats and sum then truncating division for
// integers. Tensors must be contiguous and on the communicator's GPU.
//
// The real backend exists in builds with the CUDA backend and NCCL (STRATA_HAS_NCCL). Tests
// may install another backend (install_nccl_backend): the CUDA emulation tests install one
// that runs the in-process CPU communicator on the emulated GPUs, so that the strategies'
// GPU logic runs in CI without a GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <strata/core/device.h>
#include <strata/distribute/collective/communicator.h>

namespace strata::distribute {

class TcpStore;

// One communicator per local replica of a single-process strategy, with the group-wide
// controls Strategy::run needs so that a failing replica never leaves the others hanging.
class LocalCollectiveGroup {
 public:
  virtual ~LocalCollectiveGroup() = default;
  virtual int size() const = 0;
  virtual Communicator& communicator(int rank) = 0;
  // Starts a round (one Strategy::run): rebuilds communicators aborted in an earlier one
  // and clears the finished marks. Called while no rank is inside a collective.
  virtual void begin_round() = 0;
  // A replica failed: every collective waiting now or later in this round fails with
  // `reason` (and the NCCL communicators are aborted).
  virtual void abort(const std::string& reason) = 0;
  // `rank` returned from its step function: a collective it never issued fails at once.
  virtual void finish(int rank) = 0;
};

struct NcclProcessGroupOptions {
  int rank = 0;
  int size = 1;
  Device device = Device(DeviceType::CUDA, 0);  // this process's GPU
  std::shared_ptr<TcpStore> store;              // the job's rendezvous store
  std::string prefix = "nccl";                  // unique per group on the store
  CommunicationOptions comm;                    // timeout_seconds bounds init and every call
};

class NcclBackend {
 public:
  virtual ~NcclBackend() = default;
  // "nccl 2.28.9", "nccl (emulated: in-process)".
  virtual std::string name() const = 0;
  // GPUs this backend can put ranks on (0: none, NCCL is then not used).
  virtual int device_count() = 0;
  // devices: distinct GPUs, rank r on devices[r].
  virtual std::unique_ptr<LocalCollectiveGroup> local_group(const std::vector<Device>& devices,
                                                            const CommunicationOptions& options) = 0;
  // Blocks until every rank joined (up to options.comm.timeout_seconds).
  virtual std::shared_ptr<Communicator> process_group(const NcclProcessGroupOptions& options) = 0;
};

// The installed backend, else the built-in NCCL one (builds with NCCL), else nullptr.
NcclBackend* nccl_backend();
// True when a backend exists and sees at least one GPU.
bool nccl_available();
// Installs `backend` (not owned; nullptr restores the built-in one). For tests.
void install_nccl_backend(NcclBackend* backend);

// True when NCCL can reduce these replicas' devices: every one a GPU, no GPU twice, and a
// backend that sees them all.
bool nccl_can_reduce(const std::vector<Device>& devices);

}  // namespace strata::distribute
