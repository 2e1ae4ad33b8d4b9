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
// Collectives are hierarchical: the local replicas are reduced first (in-process, in device
// memory on GPUs), the first local replica all-reduces the result across workers (buckets
// of CommunicationOptions::bytes_per_pack, each bounded by timeout_seconds), and every
// local replica copies it back. Between workers CommunicationOptions::implementation
// chooses, as TensorFlow's CommunicationImplementation: Nccl runs NCCL (one rank per
// worker, on its first GPU; the unique id goes through the store); Ring runs Gloo; Auto
// runs NCCL when this worker's replicas are GPUs and NCCL is available, else Gloo (which
// stages GPU values through host memory). Local devices may be GPUs (cuda:N). Variables created in scope() are broadcast from worker 0 when
// created, so every worker starts from the same values. Datasets are auto-sharded across
// workers (InputOptions::auto_shard_policy, see distributed_dataset.h).
//
// Failures: a worker that dies makes every other worker's collective throw at once; a
// worker whose process stops running (SIGSTOP, a frozen machine: its heartbeat stops)
// within options.stall_timeout_seconds; a worker that runs but does not arrive within
// options.timeout_seconds. The error is a PeerFailure naming the worker ("worker 1 made
// no progress for 60 s: ..."; distribute/collective/heartbeat.h defines a stall); the
// local replicas waiting for it are released and run()/reduce() rethrow it. The
// communicator stays broken afterwards: the job ends, and a relaunch resumes from the
// latest checkpoint (TensorFlow's fault-tolerance model; strata-launch --max-restarts).
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
