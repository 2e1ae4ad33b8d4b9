// LocalReplicaContext: the ReplicaContext of one replica thread of a single-process
// strategy, reducing through the in-process collective backend (distribute/collective/).
#pragma once

#include <memory>
#include <string>

#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/replica_context.h>

namespace strata::distribute {

class LocalReplicaContext final : public ReplicaContext {
 public:
  LocalReplicaContext(Strategy& strategy, int replica, Device device, std::shared_ptr<InProcessGroup> group);

  Strategy& strategy() const override { return strategy_; }
  // Over every worker: worker_index * local replicas + the local index.
  int replica_id_in_sync_group() const override;
  int num_replicas_in_sync() const override;
  Device device() const override { return device_; }
  using ReplicaContext::all_reduce;
  std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values) override;
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
  // The index of this replica among the strategy's local replicas (= its component).
  int local_index() const { return comm_.rank(); }
  InProcessCommunicator& communicator() { return comm_; }

 private:
  Strategy& strategy_;
  int replica_;
  Device device_;
  InProcessCommunicator comm_;
};

}  // namespace strata::distribute
