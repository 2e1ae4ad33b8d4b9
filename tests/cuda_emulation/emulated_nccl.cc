// The NCCL backend of the emulation build: NCCL's local groups run the in-process CPU
// communicator on the emulated GPUs (whose memory is host memory), so that the strategies'
// GPU logic — NcclAllReduce chosen by default for distinct GPUs, each replica reducing its
// own GPU's buffer through its rank, failures releasing the other ranks — runs in CI
// without a GPU. It keeps NCCL's contract where a mistake would show: a buffer must be
// contiguous and on the rank's GPU, and two ranks may not share a GPU. Installed when the
// emulated CUDA backend registers (before main), replacing the real NCCL backend that a
// CUDA build links in. Across processes it is not emulated (the emulated GPUs exist in one
// process only): process_group raises.
#include "tests/cuda_emulation/emulated_nccl.h"

#include <atomic>
#include <memory>

#include <strata/core/error.h>
#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/collective/nccl_communicator.h>
#include "tests/cuda_emulation/emulated_runtime.h"

namespace strata::cuda_emulation {

namespace {

std::atomic<int64_t> g_nccl_collectives{0};
std::atomic<int64_t> g_nccl_async_collectives{0};

class EmulatedNcclCommunicator final : public distribute::Communicator {
 public:
  EmulatedNcclCommunicator(std::shared_ptr<distribute::InProcessGroup> group, int rank, Device device)
      : comm_(std::move(group), rank), device_(device) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::string backend() const override { return "nccl"; }
  Device buffer_device() const override { return device_; }

  void all_reduce(const Tensor& buffer, distribute::ReduceOp op) override {
    check(buffer, "all_reduce");
    ++g_nccl_collectives;
    comm_.all_reduce(buffer, op);
  }
  // The gradient reducer's path for NCCL (a stream transport): counted, then run as the
  // default does (the emulated GPUs' streams are immediate, so "enqueued" is "done").
  std::shared_ptr<distribute::CommWork> all_reduce_async(const Tensor& buffer, distribute::ReduceOp op) override {
    ++g_nccl_async_collectives;
    return Communicator::all_reduce_async(buffer, op);
  }
  void broadcast(const Tensor& buffer, int root) override {
    check(buffer, "broadcast");
    ++g_nccl_collectives;
    comm_.broadcast(buffer, root);
  }
  void all_gather(const Tensor& input, const Tensor& output) override {
    check(input, "all_gather");
    check(output, "all_gather");
    ++g_nccl_collectives;
    comm_.all_gather(input, output);
  }
  void reduce_scatter(const Tensor& input, const Tensor& output, distribute::ReduceOp op) override {
    check(input, "reduce_scatter");
    check(output, "reduce_scatter");
    ++g_nccl_collectives;
    comm_.reduce_scatter(input, output, op);
  }
  void barrier() override {
    ++g_nccl_collectives;
    comm_.barrier();
  }

 private:
  void check(const Tensor& t, const char* op) const {
    STRATA_CHECK(t.defined() && t.device() == device_ && t.is_contiguous(), "nccl (emulated) ", op, ": rank ",
                 comm_.rank(), " on ", device_, " got ", t.defined() ? t.device().str() : std::string("an undefined"),
                 " tensor", t.defined() && !t.is_contiguous() ? " (not contiguous)" : "",
                 "; NCCL reduces contiguous tensors on the rank's GPU");
  }

  distribute::InProcessCommunicator comm_;
  Device device_;
};

class EmulatedLocalGroup final : public distribute::LocalCollectiveGroup {
 public:
  EmulatedLocalGroup(const std::vector<Device>& devices, const distribute::CommunicationOptions& options)
      : group_(std::make_shared<distribute::InProcessGroup>(int(devices.size()), options.timeout_seconds)) {
    for (size_t r = 0; r < devices.size(); ++r) {
      comms_.push_back(std::make_unique<EmulatedNcclCommunicator>(group_, int(r), devices[r]));
    }
  }
  int size() const override { return group_->size(); }
  distribute::Communicator& communicator(int rank) override { return *comms_.at(size_t(rank)); }
  void begin_round() override { group_->begin_round(); }
  void abort(const std::string& reason) override { group_->abort(reason); }
  void finish(int rank) override { group_->finish(rank); }

 private:
  std::shared_ptr<distribute::InProcessGroup> group_;
  std::vector<std::unique_ptr<EmulatedNcclCommunicator>> comms_;
};

class EmulatedNcclBackend final : public distribute::NcclBackend {
 public:
  std::string name() const override { return "nccl (emulated: in-process)"; }
  int device_count() override { return kDevices; }
  std::unique_ptr<distribute::LocalCollectiveGroup> local_group(
      const std::vector<Device>& devices, const distribute::CommunicationOptions& options) override {
    STRATA_CHECK(distribute::nccl_can_reduce(devices), "nccl (emulated): a local group needs distinct GPUs (",
                 kDevices, " emulated); NCCL refuses two ranks on one GPU");
    return std::make_unique<EmulatedLocalGroup>(devices, options);
  }
  std::shared_ptr<distribute::Communicator> process_group(const distribute::NcclProcessGroupOptions& o) override {
    fail("nccl (emulated): rank ", o.rank, " of ", o.size,
         ": NCCL across processes is not emulated (the emulated GPUs exist in one process only)");
  }
};

struct InstallEmulatedNccl {
  InstallEmulatedNccl() {
    static EmulatedNcclBackend backend;
    distribute::install_nccl_backend(&backend);
  }
} const kInstallEmulatedNccl;

}  // namespace

int64_t nccl_collectives() { return g_nccl_collectives.load(); }
int64_t nccl_async_collectives() { return g_nccl_async_collectives.load(); }

}  // namespace strata::cuda_emulation
