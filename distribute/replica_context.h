// ReplicaContext: what code running inside Strategy::run sees — its replica id, the number
// of replicas in sync, and collectives across them (tf.distribute.ReplicaContext).
//
// get_replica_context() returns the calling replica thread's context; outside run() it
// returns the default strategy's context (one replica) unless a non-default strategy's
// scope is active, in which case the code is in cross-replica context and it returns
// nullptr — exactly TensorFlow's rules.
#pragma once

#include <functional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "distribute/collective/communicator.h"

namespace strata::distribute {

class Strategy;

class ReplicaContext {
 public:
  virtual ~ReplicaContext() = default;
  virtual Strategy& strategy() const = 0;
  virtual int replica_id_in_sync_group() const = 0;
  virtual int num_replicas_in_sync() const = 0;
  // This replica's default device.
  virtual Device device() const = 0;

  // Reduces each tensor across all replicas in sync (in every worker); every replica gets
  // the result. Tensors are packed into buckets of bytes_per_pack (0 = one bucket).
  virtual std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values) = 0;
  Tensor all_reduce(ReduceOp op, const Tensor& value) { return all_reduce(op, std::vector<Tensor>{value})[0]; }
  // Concatenates every replica's value along `axis` (values may differ in that extent).
  virtual Tensor all_gather(const Tensor& value, int64_t axis) = 0;
  // Runs fn once, in cross-replica context, with every replica's argument; every replica
  // receives fn's result (tf's merge_call). All replicas must call it.
  virtual Tensor merge_call(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                            const Tensor& value) = 0;
  // Runs fn exactly once (on one replica thread, in cross-replica context) while the
  // other replicas wait; used to create or update state that replicas share.
  virtual void run_once(const std::function<void()>& fn) = 0;
  // Blocks until every replica has arrived.
  virtual void barrier() = 0;
};

// nullptr in cross-replica context.
ReplicaContext* get_replica_context();
bool in_cross_replica_context();

namespace detail {
// Installed by replica threads for the duration of a Strategy::run.
void set_replica_context(ReplicaContext* ctx);
ReplicaContext* current_replica_context();
}  // namespace detail

}  // namespace strata::distribute
