// ClusterSpec and ClusterResolver: who the workers of a multi-worker job are, which one
// this process is, and where they meet (the rendezvous store hosted by the chief).
//
// Sources, in the order ClusterResolver::from_environment() tries them:
//   1. TF_CONFIG, read exactly as TensorFlow's TFConfigClusterResolver reads it:
//        {"cluster": {"chief": ["h0:p"], "worker": ["h1:p", ...], "ps": [...],
//                     "evaluator": [...]},
//         "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"}
//      Collective ranks follow TensorFlow's id_in_cluster: the chief is rank 0 and
//      worker i is rank i + (1 if there is a chief); ps and evaluator take no part.
//      The rendezvous store lives at the chief's address (worker 0's without a chief).
//   2. mpirun: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (Open MPI) or
//      PMI_RANK/PMI_SIZE (MPICH, Intel MPI).
//   3. Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID and the
//      (compressed) node list and tasks-per-node, as TensorFlow's SlurmClusterResolver.
//   4. torchrun-style RANK + WORLD_SIZE (+ LOCAL_RANK, LOCAL_WORLD_SIZE).
//   5. Nothing: one local worker (rank 0 of 1), as TensorFlow runs without TF_CONFIG.
// For 2-4 the rendezvous address is MASTER_ADDR:MASTER_PORT (port default 29500);
// without MASTER_ADDR, Slurm uses the first node of the job and mpirun uses 127.0.0.1
// when every rank runs on this host (else it is an error: the hosts are unknown).
// STRATA_REPLICAS_PER_WORKER (set by strata-launch) is read by every source.
//
// Every malformed input throws strata::Error naming the variable and what was expected.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::distribute {

// Jobs ("chief", "worker", "ps", "evaluator") -> their tasks' "host:port" addresses, in
// task-index order. An address may be empty where the launcher does not publish it
// (mpirun across several hosts): nothing in strata connects to a task by its address
// except to the rendezvous store.
class ClusterSpec {
 public:
  ClusterSpec() = default;
  // Validates job names (chief, worker, ps, evaluator) and non-empty addresses'
  // "host:port" form; throws strata::Error otherwise.
  explicit ClusterSpec(std::map<std::string, std::vector<std::string>> jobs);

  bool empty() const { return jobs_.empty(); }
  bool has_job(const std::string& job) const { return jobs_.count(job) != 0; }
  std::vector<std::string> jobs() const;
  // Number of tasks of `job`; 0 when the job is absent.
  int num_tasks(const std::string& job) const;
  // Throws strata::Error for an unknown job or an index out of range.
  const std::vector<std::string>& job_tasks(const std::string& job) const;
  const std::string& task_address(const std::string& job, int index) const;
  const std::map<std::string, std::vector<std::string>>& as_map() const { return jobs_; }
  // {"chief": [...], "worker": [...]} — the "cluster" object of TF_CONFIG.
  std::string to_json() const;

  friend bool operator==(const ClusterSpec& a, const ClusterSpec& b) = default;

 private:
  std::map<std::string, std::vector<std::string>> jobs_;
};

// Splits "host:port" or "[v6addr]:port"; throws naming `what` when malformed.
std::pair<std::string, int> split_host_port(const std::string& address, const std::string& what);

// Expands a Slurm host list: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5.
std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist);
// Expands Slurm's tasks-per-node: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(const std::string& spec);

enum class ClusterSource { Local, TfConfig, Mpi, Slurm, TorchEnv };
const char* cluster_source_name(ClusterSource source);

class ClusterResolver {
 public:
  // Reads an environment variable; std::nullopt when unset.
  using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
  static std::optional<std::string> process_env(const std::string& name);

  static constexpr int kDefaultRendezvousPort = 29500;

  // Tries the sources listed at the top of this file, in order.
  static ClusterResolver from_environment(const EnvLookup& env = process_env);
  // Parses TF_CONFIG's JSON text (the rest of `env` is read for
  // STRATA_REPLICAS_PER_WORKER only).
  static ClusterResolver from_tf_config(const std::string& json, const EnvLookup& env = process_env);
  static ClusterResolver from_mpi_env(const EnvLookup& env = process_env);
  static ClusterResolver from_slurm_env(const EnvLookup& env = process_env);
  static ClusterResolver from_torch_env(const EnvLookup& env = process_env);
  static ClusterResolver local();

  ClusterSource source() const { return source_; }
  const ClusterSpec& cluster_spec() const { return spec_; }
  // "chief", "worker", "ps" or "evaluator".
  const std::string& task_type() const { return task_type_; }
  int task_id() const { return task_id_; }
  // TF_CONFIG's optional "rpc_layer" and "environment" (empty when absent).
  const std::string& rpc_layer() const { return rpc_layer_; }
  const std::string& environment() const { return environment_; }

  // Workers taking part in collectives: chief + workers (TensorFlow's
  // multi_worker_util.worker_count).
  int num_workers() const;
  // This task's rank among them (TensorFlow's id_in_cluster); throws for ps/evaluator.
  int worker_rank() const;
  // TensorFlow's multi_worker_util.is_chief: the chief task, an evaluator (chief of its
  // own evaluation), or worker 0 when the cluster has no chief. The chief writes
  // checkpoints and summaries.
  bool is_chief() const;
  // Ranks of this process's host (for picking a local GPU): local_rank in [0, local_size).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // This task's "host:port" in the cluster; empty where the launcher does not publish it
  // (mpirun across hosts, an evaluator outside the cluster). Its host is the address to
  // give Gloo (GlooCommunicatorOptions::hostname) so that peers on other machines reach it.
  std::string task_address() const;

  // Where the rendezvous store listens (hosted by worker rank 0).
  const std::string& rendezvous_host() const { return rendezvous_host_; }
  int rendezvous_port() const { return rendezvous_port_; }
  std::string rendezvous_address() const;

  // STRATA_REPLICAS_PER_WORKER when set (a positive integer).
  std::optional<int> replicas_per_worker() const { return replicas_per_worker_; }

  // One line for logs: "tf_config worker 1 (rank 1 of 3, chief: no, store 127.0.0.1:1234)".
  std::string describe() const;

 private:
  ClusterSource source_ = ClusterSource::Local;
  ClusterSpec spec_;
  std::string task_type_ = "worker";
  int task_id_ = 0;
  std::string rpc_layer_;
  std::string environment_;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string rendezvous_host_ = "127.0.0.1";
  int rendezvous_port_ = kDefaultRendezvousPort;
  std::optional<int> replicas_per_worker_;
};

}  // namespace strata::distribute
