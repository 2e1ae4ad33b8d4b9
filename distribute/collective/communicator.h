// Communicator: one participant's handle on a group of peers that run collectives together.
//
// Each replica thread (in-process backend), each worker process (Gloo over TCP) or each
// GPU (NCCL) owns one Communicator with its rank in the group. Collectives work in place
// on contiguous tensors, are called by every rank in the same order, and fail with a
// strata::Error naming the rank that was missing after `timeout_seconds` — they never hang.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <strata/core/tensor.h>
#include <strata/distribute/collective/comm_work.h>

namespace strata::distribute {

enum class ReduceOp { Sum, Mean, Max, Min };
const char* reduce_op_name(ReduceOp op);

enum class CommunicationImplementation { Auto, Ring, Nccl };

struct CommunicationOptions {
  CommunicationImplementation implementation = CommunicationImplementation::Auto;
  // Gradient buckets (distribute/gradient_reducer.h) and the packs of replica-context
  // all_reduce: 0 means DDP's gradient buckets (256 KiB first, then 25 MiB) and one pack
  // per dtype for all_reduce.
  int64_t bytes_per_pack = 0;
  double timeout_seconds = 300.0;  // every collective fails after this long
  // Multi-process backends with heartbeats (Gloo): a peer whose process stops running
  // (no heartbeat; SIGSTOP, a frozen machine) is named and the collective fails after this
  // long; a peer that runs but is slow is waited for up to timeout_seconds
  // (distribute/collective/heartbeat.h). A dead peer is reported at once.
  double stall_timeout_seconds = 60.0;
  // Sum each bucket of gradients across replicas as soon as backward has finished it,
  // on a communication thread, while backward goes on (PyTorch DDP); false: one
  // reduction of every gradient in apply_gradients, after backward.
  bool overlap_gradient_reduction = true;
  // GradientTape::gradient returns the gradients already summed over the replicas, as
  // PyTorch DDP leaves them in param.grad after backward, instead of each replica's own
  // (TensorFlow's); apply_gradients then takes the gradients it is given as sums, so a
  // step may clip or log them, but must not hand it per-replica gradients of its own. In
  // one process on CPU devices the weight gradients of matmuls are then summed straight
  // from their factors (distribute/gradient_reducer.h): no per-replica product, no fold.
  // Needs overlap_gradient_reduction and no optimizer-state sharding.
  bool aggregate_gradients_in_backward = false;
  // Multi-process CPU backends (Gloo): when every rank runs on this machine, all_reduce
  // goes through one shared-memory segment instead of loopback TCP
  // (distribute/collective/shared_memory_group.h); other collectives stay on TCP. Off, or
  // implementation Ring, or ranks on several machines: TCP only.
  bool shared_memory = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A short name for messages: "in-process", "gloo", "nccl".
  virtual std::string backend() const = 0;
  // Where this communicator's buffers must live: cpu:0 for Gloo, the rank's GPU for NCCL.
  // Cross-worker code stages its buffers there (distribute/cross_worker.cc).
  virtual Device buffer_device() const { return Device(); }

  // Reduces `buffer` across ranks in place (Mean divides by size()).
  virtual void all_reduce(const Tensor& buffer, ReduceOp op) = 0;
  // all_reduce started asynchronously: `buffer` must stay untouched until the returned
  // work's wait() returned. Async calls and the synchronous ones are still issued in the
  // same order on every rank. This default runs the collective now, on the caller's
  // thread, and returns a completed work (its failure is rethrown by wait()); a backend
  // with a communication thread or stream overrides it. NCCL's runs on a communication
  // stream: its work completes once enqueued, and a consumer orders its stream after the
  // result with CommWork::order_consumer (comm_work.h, nccl_communicator.h).
  virtual std::shared_ptr<CommWork> all_reduce_async(const Tensor& buffer, ReduceOp op) {
    std::exception_ptr error;
    try {
      all_reduce(buffer, op);
    } catch (...) {
      error = std::current_exception();
    }
    return CommWork::completed(backend() + " all_reduce(" + reduce_op_name(op) + ")", error);
  }
  // Copies root's `buffer` into every other rank's `buffer`.
  virtual void broadcast(const Tensor& buffer, int root) = 0;
  // output = concatenation of every rank's `input` along axis 0 (output has size()x rows).
  virtual void all_gather(const Tensor& input, const Tensor& output) = 0;
  // Reduces `input` across ranks and leaves rank r's 1/size() slice (axis 0) in `output`.
  virtual void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  virtual void barrier() = 0;
};

}  // namespace strata::distribute
