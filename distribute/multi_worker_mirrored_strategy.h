// MultiWorkerMirroredStrategy: synchronous data-parallel training across worker processes
// (tf.distribute.MultiWorkerMirroredStrategy), each worker running local replicas on
// replica threads as MirroredStrategy does. num_replicas_in_sync = workers x local
// replicas (every worker must run the same number of local replicas: checked at start).
//
//   distribute::MultiWorkerMirroredStrategy strategy;   // cluster from TF_CONFIG / mpirun / Slurm
//   { auto scope = strategy.scope(); model = ...; opt = ...; }
//   auto ds = strategy.experimental_distribute_dataset(data.batch(global_batch));
//
// Rendezvous: worker 0 (the chief) hosts the job's TcpStoreServer on the resolver's
// rendezvous address (the chief's TF_CONFIG address, or MASTER_ADDR:MASTER_PORT); every
// worker connects a TcpStore client and a Gloo communicator to it (one key prefix per
// strategy object, so several strategies of one job do not collide).
//
// Collectives are hierarchical: the local replicas are reduced first (in-process), the
// first local replica all-reduces the result across workers through Gloo (buckets of
// CommunicationOptions::bytes_per_pack, each bounded by timeout_seconds), and every local
// replica copies it back. Variables created in scope() are broadcast from worker 0 when
// created, so every worker starts from the same values. Datasets are auto-sharded across
// workers (InputOptions::auto_shard_policy, see distributed_dataset.h).
//
// Failures: a worker that dies or stalls makes every other worker's collective throw a
// strata::Error within timeout_seconds (naming the rank when its process is gone); the
// local replicas waiting for it are released and run()/reduce() rethrow it. The
// communicator stays broken afterwards: the job ends, and a relaunch resumes from the
// latest checkpoint (TensorFlow's fault-tolerance model).
//
// Workers that share a host split its cores: each worker's intra-op pool is sized
// cores / (workers on this host) unless STRATA_NUM_THREADS is set.
//
// Without a cluster in the environment (one worker) it behaves as MirroredStrategy.
#pragma once

#include <memory>
#include <vector>

#include <strata/distribute/cluster_resolver.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

class TcpStore;
class TcpStoreServer;

class MultiWorkerMirroredStrategy final : public Strategy {
 public:
  // local_devices: this worker's replicas; empty = cpu:0..R-1 with R the resolver's
  // replicas per worker (STRATA_REPLICAS_PER_WORKER, set by strata-launch), else 1.
  // Blocks until every worker has joined (up to options.timeout_seconds).
  explicit MultiWorkerMirroredStrategy(ClusterResolver cluster_resolver = ClusterResolver::from_environment(),
                                       CommunicationOptions options = {}, std::vector<Device> local_devices = {});
  ~MultiWorkerMirroredStrategy() override;

  std::string name() const override { return "multi_worker"; }
  const ClusterResolver& cluster_resolver() const { return resolver_; }
  // TensorFlow's is_chief: the chief task, or worker 0 when the cluster has none. Only
  // the chief writes checkpoints and summaries to the real directories
  // (distribute/distributed_file_utils.h).
  bool is_chief() const { return resolver_.is_chief(); }

 protected:
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;

 private:
  ClusterResolver resolver_;
  std::unique_ptr<TcpStoreServer> server_;  // the chief's
  std::shared_ptr<TcpStore> store_;
};

}  // namespace strata::distribute
