// LocalReplicaContext: the ReplicaContext of one replica thread of a single-process
// strategy, reducing through the in-process collective backend (distribute/collective/).
#pragma once

#include <memory>
#include <string>

#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/gradient_reducer.h>
#include <strata/distribute/replica_context.h>

namespace strata::distribute {

class LocalReplicaContext final : public ReplicaContext {
 public:
  // `gradient_group` joins the replicas' gradient reducers: a group of its own, so that
  // buckets reduced on communication threads never interleave with the replicas' other
  // collectives.
  LocalReplicaContext(Strategy& strategy, int replica, Device device, std::shared_ptr<InProcessGroup> group,
                      std::shared_ptr<InProcessGroup> gradient_group);

  Strategy& strategy() const override { return strategy_; }
  // Over every worker: worker_index * local replicas + the local index.
  int replica_id_in_sync_group() const override;
  int num_replicas_in_sync() const override;
  Device device() const override { return device_; }
  using ReplicaContext::all_reduce;
  std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values) override;
  std::vector<Tensor> sum_gradients(const std::vector<Tensor>& grads) override;
  Tensor all_gather(const Tensor& value, int64_t axis) override;
  Tensor merge_call(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const Tensor& value) override;
  void run_once(const std::function<void()>& fn) override;
  void barrier() override;

  // Runs fn once in cross-replica context; every replica receives the same object.
  // `what` describes the call so that replicas creating different things are reported
  // ("create_variable(w, float32[2,3], ...)").
  std::shared_ptr<void> run_once_shared(const std::string& what, const std::function<std::shared_ptr<void>()>& fn);
  // merge_call with a description used in mismatch messages.
  Tensor merge_call(const std::string& what, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                    const Tensor& value);
  // Blocks until every local replica (this process's) has arrived; `what` names the
  // call in mismatch and timeout errors. One rendezvous, where run_once takes two.
  void local_barrier(const std::string& what) { comm_.group().sync(comm_.rank(), what); }
  // The index of this replica among the strategy's local replicas (= its component).
  int local_index() const { return comm_.rank(); }
  InProcessCommunicator& communicator() { return comm_; }

  // The hook Strategy::run installs on this replica's thread: the gradient reducer, or
  // nullptr with one replica in sync, CommunicationOptions::overlap_gradient_reduction
  // off, or ZeRO-1 on (it reduce-scatters instead). Created on first use (the worker count is known only then).
  GradientReducer* gradient_hook();
  // Called by Strategy::run when the replica's step function returned (`failed`: it
  // threw): waits for its gradient buckets still in flight and forgets them.
  void end_step(bool failed);

 private:
  // Sums `buffer` in place over every replica of every worker: through the local group,
  // then (several workers) across workers from the first local replica.
  void reduce_buffer(InProcessCommunicator& comm, const Tensor& buffer, ReduceOp op, const std::string& what);
  // Every replica's value concatenated along axis `a` (normalised), untaped.
  Tensor gather_values(const Tensor& value, int64_t a);
  // The communicator that sums this replica's gradient buckets alone, in its GPU's memory
  // and on its streams (NCCL): this GPU's rank of the local NCCL group (NcclAllReduce over
  // distinct GPUs), or the worker communicator when it is this GPU's and the worker runs
  // one replica (multi_worker over NCCL). nullptr otherwise (CPU replicas, logical GPUs,
  // Gloo, several local replicas per worker): buckets then go through reduce_buffer.
  Communicator* stream_gradient_communicator() const;
  // Before any other collective: the gradient buckets in flight complete first, so the
  // transports see every replica's calls in the same order.
  void drain_gradients() {
    if (reducer_) reducer_->wait_all();
  }

  Strategy& strategy_;
  int replica_;
  Device device_;
  InProcessCommunicator comm_;
  InProcessCommunicator gradient_comm_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace strata::distribute
