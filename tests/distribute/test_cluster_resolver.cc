#include <catch2/catch.hpp>
#include <map>
#include <string>

#include <strata/core/error.h>
#include <strata/distribute/cluster_resolver.h>

using namespace strata;
using namespace strata::distribute;

namespace {

using Env = std::map<std::string, std::string>;
using Jobs = std::map<std::string, std::vector<std::string>>;

ClusterResolver::EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// A copy of `env` with `key` set (built by emplace: assigning short literals into map
// values trips a GCC 12 -Wrestrict false positive).
Env with(Env env, const std::string& key, const std::string& value) {
  env.erase(key);
  env.emplace(key, value);
  return env;
}

ClusterResolver tf(const std::string& json, const Env& env = {}) {
  return ClusterResolver::from_tf_config(json, lookup(env));
}

#define REQUIRE_ERROR_WITH(expr, text) REQUIRE_THROWS_WITH((expr), Catch::Contains(text))

}  // namespace

TEST_CASE("TF_CONFIG with chief and workers: TensorFlow's ranks and chief rule", "[cluster]") {
  const std::string cluster =
      R"("cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222"]})";
  auto chief = tf("{" + cluster + R"(, "task": {"type": "chief", "index": 0}})");
  CHECK(chief.source() == ClusterSource::TfConfig);
  CHECK(chief.num_workers() == 3);
  CHECK(chief.worker_rank() == 0);
  CHECK(chief.is_chief());
  CHECK(chief.rendezvous_host() == "host0");
  CHECK(chief.rendezvous_port() == 2222);
  CHECK(chief.cluster_spec().num_tasks("worker") == 2);
  CHECK(chief.cluster_spec().task_address("ps", 0) == "host3:2222");

  auto w1 = tf("{" + cluster + R"(, "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})");
  CHECK(w1.task_type() == "worker");
  CHECK(w1.task_id() == 1);
  CHECK(w1.worker_rank() == 2);  // the chief is rank 0
  CHECK_FALSE(w1.is_chief());
  CHECK(w1.rpc_layer() == "grpc");
  CHECK(w1.rendezvous_address() == "host0:2222");
  CHECK(w1.local_rank() == 0);
  CHECK(w1.local_size() == 1);
  CHECK(w1.task_address() == "host2:2222");

  auto w0 = tf("{" + cluster + R"(, "task": {"type": "worker", "index": 0}})");
  CHECK_FALSE(w0.is_chief());  // a chief exists, so worker 0 is not it

  auto ps = tf("{" + cluster + R"(, "task": {"type": "ps", "index": 0}})");
  CHECK_FALSE(ps.is_chief());
  REQUIRE_ERROR_WITH(ps.worker_rank(), "takes no part in collectives");

  // The evaluator may sit outside the cluster, and is the chief of its own evaluation.
  auto ev = tf("{" + cluster + R"(, "task": {"type": "evaluator", "index": 0}})");
  CHECK(ev.is_chief());
  CHECK(ev.task_address().empty());
  REQUIRE_ERROR_WITH(ev.worker_rank(), "evaluator");
}

TEST_CASE("TF_CONFIG without a chief: worker 0 is chief and hosts the store", "[cluster]") {
  const std::string json =
      R"({"cluster": {"worker": ["127.0.0.1:5000", "127.0.0.1:5001", "10.0.0.2:5000"]},
          "task": {"type": "worker", "index": "1"}, "environment": "cloud"})";  // TensorFlow int()s the index
  auto r = tf(json, {{"STRATA_REPLICAS_PER_WORKER", "2"}});
  CHECK(r.num_workers() == 3);
  CHECK(r.worker_rank() == 1);
  CHECK_FALSE(r.is_chief());
  CHECK(r.environment() == "cloud");
  CHECK(r.rendezvous_address() == "127.0.0.1:5000");
  CHECK(r.local_rank() == 1);  // second of the two tasks on 127.0.0.1
  CHECK(r.local_size() == 2);
  REQUIRE(r.replicas_per_worker().has_value());
  CHECK(*r.replicas_per_worker() == 2);
  CHECK(tf(R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}})").is_chief());
  CHECK(r.describe().find("rank 1 of 3") != std::string::npos);

  auto v6 = tf(R"({"cluster": {"worker": ["[::1]:7000"]}, "task": {"type": "worker", "index": 0}})");
  CHECK(v6.rendezvous_host() == "::1");
  CHECK(v6.rendezvous_port() == 7000);
  CHECK(v6.rendezvous_address() == "[::1]:7000");
}

TEST_CASE("TF_CONFIG errors name what is wrong", "[cluster]") {
  const std::string workers = R"("cluster": {"worker": ["h:1", "h:2"]})";
  REQUIRE_ERROR_WITH(tf("{not json"), "TF_CONFIG: invalid JSON");
  REQUIRE_ERROR_WITH(tf("[1, 2]"), "expected a JSON object");
  REQUIRE_ERROR_WITH(tf(R"({"task": {"type": "worker", "index": 0}})"), "missing \"cluster\"");
  REQUIRE_ERROR_WITH(tf("{" + workers + "}"), "missing \"task\"");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"index": 0}})"), "task.type");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "worker"}})"), "missing task.index");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "worker", "index": -1}})"), "non-negative integer");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "worker", "index": "x"}})"), "non-negative integer");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "worker", "index": 2}})"),
                     "task index 2 is out of range for job 'worker' with 2 task(s)");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "master", "index": 0}})"),
                     "unknown task type 'master'");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "ps", "index": 0}})"),
                     "task type 'ps' is not a job of the cluster");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"master": ["h:1"]}, "task": {"type": "worker", "index": 0}})"),
                     "unknown job 'master'");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"worker": "h:1"}, "task": {"type": "worker", "index": 0}})"),
                     "cluster.worker must be a list");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"worker": [5]}, "task": {"type": "worker", "index": 0}})"),
                     "cluster.worker[0] must be a \"host:port\" string");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"worker": ["nohost"]}, "task": {"type": "worker", "index": 0}})"),
                     "expected \"host:port\"");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"worker": ["h:99999"]}, "task": {"type": "worker", "index": 0}})"),
                     "port must be in [1, 65535]");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}})"),
                     "\"chief\" job can only have one task");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}})"),
                     "no \"chief\" or \"worker\" task");
  REQUIRE_ERROR_WITH(tf(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 1}})"),
                     "evaluator index 1 is out of range");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "worker", "index": 0}, "rpc_layer": 3})"),
                     "\"rpc_layer\" must be a string");
  REQUIRE_ERROR_WITH(tf("{" + workers + R"(, "task": {"type": "worker", "index": 0}})",
                        {{"STRATA_REPLICAS_PER_WORKER", "0"}}),
                     "STRATA_REPLICAS_PER_WORKER must be >= 1");
}

TEST_CASE("from_environment picks TF_CONFIG first, then mpirun, Slurm, torchrun, then local", "[cluster]") {
  const Env tf_env = {{"TF_CONFIG", R"({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}})"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_RANK", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  CHECK(ClusterResolver::from_environment(lookup(tf_env)).source() == ClusterSource::TfConfig);
  const Env mpi = with(tf_env, "TF_CONFIG", "  ");  // blank counts as unset
  CHECK(ClusterResolver::from_environment(lookup(mpi)).source() == ClusterSource::Mpi);
  CHECK(ClusterResolver::from_environment(lookup({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
                                                  {"SLURM_JOB_NODELIST", "n1"}}))
            .source() == ClusterSource::Slurm);
  CHECK(ClusterResolver::from_environment(lookup({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}}))
            .source() == ClusterSource::TorchEnv);
  auto local = ClusterResolver::from_environment(lookup({}));
  CHECK(local.source() == ClusterSource::Local);
  CHECK(local.num_workers() == 1);
  CHECK(local.worker_rank() == 0);
  CHECK(local.is_chief());
  CHECK(local.task_address().empty());
}

TEST_CASE("mpirun environment (Open MPI and PMI)", "[cluster]") {
  auto r = ClusterResolver::from_mpi_env(lookup({{"OMPI_COMM_WORLD_RANK", "2"},
                                                 {"OMPI_COMM_WORLD_SIZE", "4"},
                                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                                 {"MASTER_PORT", "6000"}}));
  CHECK(r.source() == ClusterSource::Mpi);
  CHECK(r.num_workers() == 4);
  CHECK(r.worker_rank() == 2);
  CHECK_FALSE(r.is_chief());
  CHECK(r.local_rank() == 2);
  CHECK(r.local_size() == 4);
  CHECK(r.rendezvous_address() == "127.0.0.1:6000");  // every rank on this host
  CHECK(r.cluster_spec().task_address("worker", 3) == "127.0.0.1:6003");

  auto multi = ClusterResolver::from_mpi_env(lookup({{"OMPI_COMM_WORLD_RANK", "0"},
                                                     {"OMPI_COMM_WORLD_SIZE", "4"},
                                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                     {"MASTER_ADDR", "node1"}}));
  CHECK(multi.is_chief());
  CHECK(multi.rendezvous_address() == "node1:29500");
  CHECK(multi.cluster_spec().task_address("worker", 0) == "node1:29500");
  CHECK(multi.cluster_spec().task_address("worker", 1).empty());  // mpirun does not say

  auto pmi = ClusterResolver::from_mpi_env(lookup({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALNRANKS", "2"},
                                                   {"MPI_LOCALRANKID", "1"}}));
  CHECK(pmi.worker_rank() == 1);
  CHECK(pmi.local_rank() == 1);

  REQUIRE_ERROR_WITH(ClusterResolver::from_mpi_env(lookup({{"OMPI_COMM_WORLD_RANK", "0"},
                                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})),
                     "set MASTER_ADDR");
  REQUIRE_ERROR_WITH(ClusterResolver::from_mpi_env(lookup({{"OMPI_COMM_WORLD_RANK", "4"},
                                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}})),
                     "OMPI_COMM_WORLD_RANK=4 is out of range for OMPI_COMM_WORLD_SIZE=4");
  REQUIRE_ERROR_WITH(ClusterResolver::from_mpi_env(lookup({{"OMPI_COMM_WORLD_SIZE", "4"}})),
                     "OMPI_COMM_WORLD_RANK is not set");
  REQUIRE_ERROR_WITH(ClusterResolver::from_mpi_env(lookup({{"OMPI_COMM_WORLD_RANK", "x"},
                                                           {"OMPI_COMM_WORLD_SIZE", "4"}})),
                     "OMPI_COMM_WORLD_RANK must be a non-negative integer, got 'x'");
  REQUIRE_ERROR_WITH(ClusterResolver::from_mpi_env(lookup({{"OMPI_COMM_WORLD_RANK", "0"},
                                                           {"OMPI_COMM_WORLD_SIZE", "1"},
                                                           {"MASTER_PORT", "70000"}})),
                     "MASTER_PORT must be a port");
}

TEST_CASE("Slurm environment: host list, tasks per node, block placement", "[cluster]") {
  CHECK(expand_slurm_hostlist("node[01-03,07],gpu5") ==
        std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu5"});
  CHECK(expand_slurm_hostlist("r[1-2]-n[8-9]") == std::vector<std::string>{"r1-n8", "r1-n9", "r2-n8", "r2-n9"});
  CHECK(expand_slurm_hostlist("single") == std::vector<std::string>{"single"});
  CHECK(expand_slurm_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  REQUIRE_ERROR_WITH(expand_slurm_hostlist("node[1-3"), "unmatched '['");
  REQUIRE_ERROR_WITH(expand_slurm_hostlist("node[3-1]"), "bad range");
  REQUIRE_ERROR_WITH(expand_slurm_hostlist("a,,b"), "empty entry");
  REQUIRE_ERROR_WITH(expand_slurm_tasks_per_node("2(3)"), "expected \"N\" or \"N(xM)\"");

  const Env base = {{"SLURM_PROCID", "3"},        {"SLURM_NTASKS", "4"},
                    {"SLURM_LOCALID", "1"},       {"SLURM_NODEID", "1"},
                    {"SLURM_JOB_NODELIST", "gpu[1-2]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  auto r = ClusterResolver::from_slurm_env(lookup(base));
  CHECK(r.source() == ClusterSource::Slurm);
  CHECK(r.num_workers() == 4);
  CHECK(r.worker_rank() == 3);
  CHECK(r.local_rank() == 1);
  CHECK(r.local_size() == 2);
  CHECK(r.rendezvous_address() == "gpu1:29500");  // the first node hosts the store
  CHECK(r.cluster_spec().task_address("worker", 2) == "gpu2:29500");
  CHECK(r.cluster_spec().task_address("worker", 3) == "gpu2:29501");

  const Env with_master = with(with(base, "MASTER_ADDR", "login"), "MASTER_PORT", "7777");
  CHECK(ClusterResolver::from_slurm_env(lookup(with_master)).rendezvous_address() == "login:7777");

  const Env bad_sum = with(base, "SLURM_TASKS_PER_NODE", "3,2");
  REQUIRE_ERROR_WITH(ClusterResolver::from_slurm_env(lookup(bad_sum)), "adds up to 5 tasks but SLURM_NTASKS=4");
  const Env bad_nodes = with(base, "SLURM_TASKS_PER_NODE", "4");
  REQUIRE_ERROR_WITH(ClusterResolver::from_slurm_env(lookup(bad_nodes)), "lists 1 node(s)");
  Env no_host = base;
  no_host.erase("SLURM_JOB_NODELIST");
  REQUIRE_ERROR_WITH(ClusterResolver::from_slurm_env(lookup(no_host)), "set MASTER_ADDR or SLURM_JOB_NODELIST");
  const Env out_of_range = with(base, "SLURM_PROCID", "9");
  REQUIRE_ERROR_WITH(ClusterResolver::from_slurm_env(lookup(out_of_range)), "SLURM_PROCID=9 is out of range");

  // Inside an srun step the step's task count wins over the allocation's.
  const Env step = with(with(base, "SLURM_NTASKS", "8"), "SLURM_STEP_NUM_TASKS", "4");
  CHECK(ClusterResolver::from_slurm_env(lookup(step)).num_workers() == 4);
}

TEST_CASE("torchrun-style environment", "[cluster]") {
  auto r = ClusterResolver::from_torch_env(lookup({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                                   {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.1.1"},
                                                   {"MASTER_PORT", "1234"}}));
  CHECK(r.worker_rank() == 1);
  CHECK(r.num_workers() == 2);
  CHECK(r.rendezvous_address() == "10.1.1.1:1234");
  REQUIRE_ERROR_WITH(ClusterResolver::from_torch_env(lookup({{"RANK", "0"}, {"WORLD_SIZE", "2"}})),
                     "MASTER_ADDR is not");
}

TEST_CASE("hostile launcher environments are refused before they allocate (fuzz findings)", "[cluster]") {
  // Found by fuzz/cluster_env_fuzz.cc: empty brackets expanded to no host, then divided by 0.
  REQUIRE_ERROR_WITH(expand_slurm_hostlist("r[1-2]-n[]"), "empty brackets");
  REQUIRE_ERROR_WITH(ClusterResolver::from_slurm_env(lookup({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                                             {"SLURM_JOB_NODELIST", "n[]"}})),
                     "empty brackets");
  // A short list naming 10^10 hosts, and one nested past any real cluster.
  REQUIRE_ERROR_WITH(expand_slurm_hostlist("a[0-99999]b[0-99999]"), "expands to more than");
  REQUIRE_ERROR_WITH(expand_slurm_hostlist("a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]i[1]j[1]k[1]l[1]m[1]n[1]o[1]p[1]q[1]"),
                     "bracket groups");
  REQUIRE_ERROR_WITH(expand_slurm_tasks_per_node("1(x100000),1(x100000),1(x100000),1(x100000),1(x100000),"
                                                 "1(x100000),1(x100000),1(x100000),1(x100000),1(x100000),1(x100000)"),
                     "lists more than");
  // A world size that would make the resolver build a billion addresses.
  REQUIRE_ERROR_WITH(ClusterResolver::from_torch_env(lookup({{"RANK", "0"}, {"WORLD_SIZE", "1000000000"},
                                                             {"MASTER_ADDR", "h"}})),
                     "WORLD_SIZE must be in [1, 1048576]");
}

TEST_CASE("ClusterSpec validates jobs and addresses", "[cluster]") {
  ClusterSpec spec({{"worker", {"a:1", "b:2"}}, {"chief", {"c:3"}}});
  CHECK(spec.num_tasks("worker") == 2);
  CHECK(spec.num_tasks("ps") == 0);
  CHECK(spec.jobs() == std::vector<std::string>{"chief", "worker"});
  CHECK(spec.to_json() == R"({"chief":["c:3"],"worker":["a:1","b:2"]})");
  REQUIRE_ERROR_WITH(spec.task_address("worker", 2), "task index 2 is out of range");
  REQUIRE_ERROR_WITH(spec.job_tasks("ps"), "no job 'ps'");
  REQUIRE_ERROR_WITH(ClusterSpec(Jobs{{"trainer", {"a:1"}}}), "unknown job 'trainer'");
  REQUIRE_ERROR_WITH(ClusterSpec(Jobs{{"worker", {"a:b"}}}), "port must be in");
  REQUIRE_ERROR_WITH(split_host_port("::1:80", "x"), "expected \"host:port\"");
  CHECK(split_host_port("[fe80::1]:80", "x") == std::pair<std::string, int>{"fe80::1", 80});
}
