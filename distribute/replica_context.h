// ReplicaContext: what code running inside Strategy::run sees — its replica id, the number
// of replicas in sync, its device, and collectives across the replicas
// (tf.distribute.ReplicaContext).
//
// The three contexts, exactly as in TensorFlow:
//  - no strategy scope active: get_replica_context() is the default replica context (one
//    replica, collectives are identities) and in_cross_replica_context() is false;
//  - inside a non-default strategy's scope, outside run(): cross-replica context —
//    get_replica_context() is nullptr and in_cross_replica_context() is true;
//  - inside Strategy::run: that replica's context; inside a merge_call/run_once function
//    the code is back in cross-replica context.
//
// Collectives must be issued by every replica in the same order. A mismatch, a replica
// that returns without issuing one, a replica that fails, or a replica missing past
// CommunicationOptions::timeout_seconds makes the collective throw strata::Error on every
// replica (naming the replicas and calls involved) — it never hangs.
#pragma once

#include <functional>
#include <vector>

#include <strata/core/device.h>
#include <strata/core/tensor.h>
#include <strata/distribute/collective/communicator.h>

namespace strata::distribute {

class Strategy;

class ReplicaContext {
 public:
  virtual ~ReplicaContext() = default;
  virtual Strategy& strategy() const = 0;
  virtual int replica_id_in_sync_group() const = 0;
  virtual int num_replicas_in_sync() const = 0;
  // This replica's default device (where its batch and its variable components live).
  virtual Device device() const = 0;

  // Reduces each tensor across all replicas in sync; every replica gets the result (on
  // its own device). Undefined tensors stay undefined. Tensors of one dtype are packed
  // into buckets of CommunicationOptions::bytes_per_pack (0 = one bucket per dtype).
  // Sum and Mean are differentiable, as in TensorFlow: under a GradientTape the gradient
  // of a replica's value is the all-reduce (same op) of every replica's gradient of the
  // result, computed in backward — so compute it inside the same Strategy::run.
  virtual std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values) = 0;
  Tensor all_reduce(ReduceOp op, const Tensor& value) { return all_reduce(op, std::vector<Tensor>{value})[0]; }
  // Sums gradients across replicas (Optimizer::apply_gradients' aggregation): the same
  // result as all_reduce(Sum, grads), but gradients already being reduced while backward
  // ran (distribute/gradient_reducer.h) are taken from their buckets. Replicas of one
  // process on logical CPU devices may get views of one shared bucket: read the sums,
  // never write into them (as TensorFlow's tensors, they are values).
  virtual std::vector<Tensor> sum_gradients(const std::vector<Tensor>& grads) { return all_reduce(ReduceOp::Sum, grads); }
  // Concatenates every replica's value along `axis` (extents along axis may differ).
  // Differentiable for floating values, as in TensorFlow: a replica's gradient is its
  // slice of the all-reduced gradient of the result (computed in backward). Replicas on
  // distinct GPUs of one process gather along axis 0 through NCCL when every extent is
  // the same (the extents are exchanged on the host first).
  virtual Tensor all_gather(const Tensor& value, int64_t axis) = 0;
  // tf's merge_call: runs fn once, in cross-replica context, with every replica's value
  // (index = replica id); every replica receives fn's result, in its own device's memory
  // (a host scalar stays on the host). All replicas must call it.
  virtual Tensor merge_call(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                            const Tensor& value) = 0;
  // Runs fn exactly once (on one replica thread, in cross-replica context) while the
  // other replicas wait; used to create or update state that replicas share (a
  // CentralStorageStrategy variable). All replicas must call it.
  virtual void run_once(const std::function<void()>& fn) = 0;
  // Blocks until every replica has arrived.
  virtual void barrier() = 0;
};

// The current replica context; nullptr in cross-replica context.
ReplicaContext* get_replica_context();
// True inside a non-default strategy's scope outside run() (or inside merge_call).
bool in_cross_replica_context();

namespace detail {
// Installed by Strategy::run for the duration of the step function.
void set_replica_context(ReplicaContext* ctx);
ReplicaContext* current_replica_context();

// RAII: the calling thread is in cross-replica context for the guard's lifetime.
class CrossReplicaGuard {
 public:
  CrossReplicaGuard() : saved_(current_replica_context()) { set_replica_context(nullptr); }
  ~CrossReplicaGuard() { set_replica_context(saved_); }
  CrossReplicaGuard(const CrossReplicaGuard&) = delete;
  CrossReplicaGuard& operator=(const CrossReplicaGuard&) = delete;

 private:
  ReplicaContext* saved_;
};
}  // namespace detail

}  // namespace strata::distribute
