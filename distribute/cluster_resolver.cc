#include <strata/distribute/cluster_resolver.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include <strata/core/error.h>

namespace strata::distribute {

namespace {

constexpr const char* kJobs[] = {"chief", "worker", "ps", "evaluator"};

bool known_job(const std::string& job) {
  for (const char* j : kJobs)
    if (job == j) return true;
  return false;
}

std::string quote_str(const std::string& s) { return "'" + s + "'"; }

// Parses a whole string as a non-negative integer; nullopt on anything else.
std::optional<int64_t> parse_nonneg(const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}

int env_int(const ClusterResolver::EnvLookup& env, const std::string& name) {
  auto value = env(name);
  STRATA_CHECK(value.has_value(), "cluster resolver: environment variable ", name, " is not set");
  auto parsed = parse_nonneg(*value);
  STRATA_CHECK(parsed && *parsed <= 1 << 30, "cluster resolver: ", name,
               " must be a non-negative integer, got ", quote_str(*value));
  return int(*parsed);
}

std::optional<int> env_int_opt(const ClusterResolver::EnvLookup& env, const std::string& name) {
  if (!env(name)) return std::nullopt;
  return env_int(env, name);
}

std::optional<std::string> first_set(const ClusterResolver::EnvLookup& env,
                                     std::initializer_list<const char*> names,
                                     std::string* which = nullptr) {
  for (const char* n : names) {
    if (auto v = env(n); v && !v->empty()) {
      if (which) *which = n;
      return v;
    }
  }
  return std::nullopt;
}

std::optional<int> replicas_from_env(const ClusterResolver::EnvLookup& env) {
  auto r = env_int_opt(env, "STRATA_REPLICAS_PER_WORKER");
  STRATA_CHECK(!r || *r >= 1, "cluster resolver: STRATA_REPLICAS_PER_WORKER must be >= 1, got ", *r);
  return r;
}

// The most processes a job may have: the sources below build one address per rank, and a
// bad WORLD_SIZE must not make them allocate gigabytes first.
constexpr int kMaxWorldSize = 1 << 20;

void check_rank(int rank, int size, const std::string& rank_var, const std::string& size_var) {
  STRATA_CHECK(size >= 1 && size <= kMaxWorldSize, "cluster resolver: ", size_var, " must be in [1, ",
               kMaxWorldSize, "], got ", size);
  STRATA_CHECK(rank < size, "cluster resolver: ", rank_var, "=", rank, " is out of range for ",
               size_var, "=", size);
}

// MASTER_PORT, or the default; validated like a task address's port.
int master_port(const ClusterResolver::EnvLookup& env) {
  auto value = env("MASTER_PORT");
  if (!value || value->empty()) return ClusterResolver::kDefaultRendezvousPort;
  auto parsed = parse_nonneg(*value);
  STRATA_CHECK(parsed && *parsed >= 1 && *parsed <= 65535,
               "cluster resolver: MASTER_PORT must be a port in [1, 65535], got ", quote_str(*value));
  return int(*parsed);
}

std::string join_address(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

// ---- ClusterSpec ----

ClusterSpec::ClusterSpec(std::map<std::string, std::vector<std::string>> jobs) : jobs_(std::move(jobs)) {
  for (const auto& [job, tasks] : jobs_) {
    STRATA_CHECK(known_job(job), "ClusterSpec: unknown job ", quote_str(job),
                 " (expected chief, worker, ps or evaluator)");
    for (size_t i = 0; i < tasks.size(); ++i)
      if (!tasks[i].empty()) split_host_port(tasks[i], "ClusterSpec: " + job + "[" + std::to_string(i) + "]");
  }
}

std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> out;
  for (const auto& [job, tasks] : jobs_) out.push_back(job);
  return out;
}

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : int(it->second.size());
}

const std::vector<std::string>& ClusterSpec::job_tasks(const std::string& job) const {
  auto it = jobs_.find(job);
  STRATA_CHECK(it != jobs_.end(), "ClusterSpec: no job ", quote_str(job), " in the cluster (jobs: ",
               to_json(), ")");
  return it->second;
}

const std::string& ClusterSpec::task_address(const std::string& job, int index) const {
  const auto& tasks = job_tasks(job);
  STRATA_CHECK(index >= 0 && index < int(tasks.size()), "ClusterSpec: task index ", index,
               " is out of range for job ", quote_str(job), " with ", tasks.size(), " task(s)");
  return tasks[size_t(index)];
}

std::string ClusterSpec::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [job, tasks] : jobs_) j[job] = tasks;
  return j.dump();
}

std::pair<std::string, int> split_host_port(const std::string& address, const std::string& what) {
  std::string host, port_text;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    STRATA_CHECK(close != std::string::npos && close + 1 < address.size() && address[close + 1] == ':',
                 what, ": expected \"[ipv6]:port\", got ", quote_str(address));
    host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    STRATA_CHECK(colon != std::string::npos && address.find(':') == colon, what,
                 ": expected \"host:port\", got ", quote_str(address));
    host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  auto port = parse_nonneg(port_text);
  STRATA_CHECK(!host.empty(), what, ": empty host in ", quote_str(address));
  STRATA_CHECK(port && *port >= 1 && *port <= 65535, what, ": port must be in [1, 65535] in ",
               quote_str(address));
  return {host, int(*port)};
}

// ---- Slurm lists ----

namespace {

// Bounds on what a host list may expand to. Slurm's largest clusters have ~10^5 nodes;
// the bounds keep a short list ("a[0-99999]b[0-99999]", "n[]") from expanding to 10^10 names
// or recursing without end (found by fuzz/cluster_env_fuzz.cc).
constexpr size_t kMaxSlurmHosts = size_t(1) << 20;
constexpr size_t kMaxSlurmHostBytes = size_t(1) << 26;
constexpr size_t kMaxSlurmBracketGroups = 16;

// Appends one expanded name; `bytes` counts the names' bytes in `out`.
void push_host(std::vector<std::string>& out, size_t& bytes, std::string host, const std::string& whole) {
  bytes += host.size();
  STRATA_CHECK(out.size() < kMaxSlurmHosts && bytes <= kMaxSlurmHostBytes, "Slurm host list: ",
               quote_str(whole.substr(0, 200)), " expands to more than ", kMaxSlurmHosts, " names or ",
               kMaxSlurmHostBytes, " bytes");
  out.push_back(std::move(host));
}

// Expands one host-list item that may hold several bracket groups: "r[1-2]-n[01-02]".
void expand_item(const std::string& item, std::vector<std::string>& out, size_t& bytes, const std::string& whole) {
  const auto open = item.find('[');
  if (open == std::string::npos) {
    STRATA_CHECK(item.find(']') == std::string::npos, "Slurm host list: unmatched ']' in ",
                 quote_str(whole));
    push_host(out, bytes, item, whole);
    return;
  }
  const auto close = item.find(']', open);
  STRATA_CHECK(close != std::string::npos, "Slurm host list: unmatched '[' in ", quote_str(whole));
  const std::string prefix = item.substr(0, open);
  const std::string ranges = item.substr(open + 1, close - open - 1);
  STRATA_CHECK(!ranges.empty(), "Slurm host list: empty brackets in ", quote_str(whole));
  std::vector<std::string> rest;
  size_t rest_bytes = 0;
  expand_item(item.substr(close + 1), rest, rest_bytes, whole);
  std::stringstream ss(ranges);
  std::string range;
  while (std::getline(ss, range, ',')) {
    const auto dash = range.find('-');
    const std::string lo_text = range.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    auto lo = parse_nonneg(lo_text);
    auto hi = parse_nonneg(hi_text);
    STRATA_CHECK(lo && hi && *lo <= *hi && *hi - *lo < 100000, "Slurm host list: bad range ",
                 quote_str(range), " in ", quote_str(whole));
    for (int64_t v = *lo; v <= *hi; ++v) {
      std::string num = std::to_string(v);
      if (num.size() < lo_text.size()) num.insert(0, lo_text.size() - num.size(), '0');
      for (const auto& r : rest) push_host(out, bytes, prefix + num + r, whole);
    }
  }
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist) {
  std::vector<std::string> hosts;
  size_t bytes = 0;
  std::string item;
  int depth = 0;
  auto flush = [&] {
    STRATA_CHECK(!item.empty(), "Slurm host list: empty entry in ", quote_str(hostlist));
    STRATA_CHECK(size_t(std::count(item.begin(), item.end(), '[')) <= kMaxSlurmBracketGroups,
                 "Slurm host list: more than ", kMaxSlurmBracketGroups, " bracket groups in one entry of ",
                 quote_str(hostlist));
    expand_item(item, hosts, bytes, hostlist);
    item.clear();
  };
  for (char c : hostlist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    STRATA_CHECK(depth >= 0 && depth <= 1, "Slurm host list: unbalanced brackets in ", quote_str(hostlist));
    if (c == ',' && depth == 0) {
      flush();
    } else {
      item += c;
    }
  }
  STRATA_CHECK(depth == 0, "Slurm host list: unmatched '[' in ", quote_str(hostlist));
  flush();
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& spec) {
  std::vector<int> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto paren = item.find('(');
    std::string count_text = item.substr(0, paren);
    int64_t repeat = 1;
    if (paren != std::string::npos) {
      STRATA_CHECK(item.size() > paren + 3 && item[paren + 1] == 'x' && item.back() == ')',
                   "Slurm tasks per node: expected \"N\" or \"N(xM)\", got ", quote_str(item), " in ",
                   quote_str(spec));
      auto r = parse_nonneg(item.substr(paren + 2, item.size() - paren - 3));
      STRATA_CHECK(r && *r >= 1 && *r <= 100000, "Slurm tasks per node: bad repeat in ", quote_str(item));
      repeat = *r;
    }
    auto count = parse_nonneg(count_text);
    STRATA_CHECK(count && *count >= 1 && *count <= 100000, "Slurm tasks per node: bad count in ",
                 quote_str(item), " of ", quote_str(spec));
    STRATA_CHECK(out.size() + size_t(repeat) <= kMaxSlurmHosts, "Slurm tasks per node: ",
                 quote_str(spec.substr(0, 200)), " lists more than ", kMaxSlurmHosts, " nodes");
    for (int64_t i = 0; i < repeat; ++i) out.push_back(int(*count));
  }
  STRATA_CHECK(!out.empty(), "Slurm tasks per node: empty list");
  return out;
}

// ---- ClusterResolver ----

const char* cluster_source_name(ClusterSource source) {
  switch (source) {
    case ClusterSource::Local: return "local";
    case ClusterSource::TfConfig: return "tf_config";
    case ClusterSource::Mpi: return "mpi";
    case ClusterSource::Slurm: return "slurm";
    case ClusterSource::TorchEnv: return "torch_env";
  }
  return "?";
}

std::optional<std::string> ClusterResolver::process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

ClusterResolver ClusterResolver::local() { return ClusterResolver(); }

ClusterResolver ClusterResolver::from_environment(const EnvLookup& env) {
  if (auto tf = env("TF_CONFIG"); tf && tf->find_first_not_of(" \t\r\n") != std::string::npos)
    return from_tf_config(*tf, env);
  if (env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE")) return from_mpi_env(env);
  if (env("SLURM_PROCID") && (env("SLURM_STEP_NUM_TASKS") || env("SLURM_NTASKS")))
    return from_slurm_env(env);
  if (env("RANK") && env("WORLD_SIZE")) return from_torch_env(env);
  ClusterResolver r = local();
  r.replicas_per_worker_ = replicas_from_env(env);
  return r;
}

ClusterResolver ClusterResolver::from_tf_config(const std::string& text, const EnvLookup& env) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("TF_CONFIG: invalid JSON: ", e.what());
  }
  STRATA_CHECK(j.is_object(), "TF_CONFIG: expected a JSON object, got ", j.type_name());

  ClusterResolver r;
  r.source_ = ClusterSource::TfConfig;

  STRATA_CHECK(j.contains("cluster"), "TF_CONFIG: missing \"cluster\"");
  const auto& cluster = j["cluster"];
  STRATA_CHECK(cluster.is_object(), "TF_CONFIG: \"cluster\" must be an object of job -> list, got ",
               cluster.type_name());
  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& [job, tasks] : cluster.items()) {
    STRATA_CHECK(known_job(job), "TF_CONFIG: unknown job ", quote_str(job),
                 " in \"cluster\" (expected chief, worker, ps or evaluator)");
    STRATA_CHECK(tasks.is_array(), "TF_CONFIG: cluster.", job,
                 " must be a list of \"host:port\" strings, got ", tasks.type_name());
    std::vector<std::string> addresses;
    for (size_t i = 0; i < tasks.size(); ++i) {
      STRATA_CHECK(tasks[i].is_string(), "TF_CONFIG: cluster.", job, "[", i,
                   "] must be a \"host:port\" string, got ", tasks[i].dump());
      const std::string address = tasks[i].get<std::string>();
      split_host_port(address, "TF_CONFIG: cluster." + job + "[" + std::to_string(i) + "]");
      addresses.push_back(address);
    }
    jobs[job] = std::move(addresses);
  }
  r.spec_ = ClusterSpec(std::move(jobs));
  STRATA_CHECK(r.spec_.num_tasks("chief") <= 1,
               "TF_CONFIG: the \"chief\" job can only have one task, got ", r.spec_.num_tasks("chief"));
  STRATA_CHECK(r.spec_.num_tasks("evaluator") <= 1,
               "TF_CONFIG: the \"evaluator\" job can only have one task, got ",
               r.spec_.num_tasks("evaluator"));
  STRATA_CHECK(r.spec_.num_tasks("chief") + r.spec_.num_tasks("worker") >= 1,
               "TF_CONFIG: the cluster has no \"chief\" or \"worker\" task: ", r.spec_.to_json());

  STRATA_CHECK(j.contains("task"), "TF_CONFIG: missing \"task\" (expected {\"type\": ..., \"index\": ...})");
  const auto& task = j["task"];
  STRATA_CHECK(task.is_object(), "TF_CONFIG: \"task\" must be an object, got ", task.type_name());
  STRATA_CHECK(task.contains("type") && task["type"].is_string(),
               "TF_CONFIG: task.type must be a string (chief, worker, ps or evaluator)");
  r.task_type_ = task["type"].get<std::string>();
  STRATA_CHECK(known_job(r.task_type_), "TF_CONFIG: unknown task type ", quote_str(r.task_type_),
               " (expected chief, worker, ps or evaluator)");
  STRATA_CHECK(task.contains("index"), "TF_CONFIG: missing task.index");
  const auto& index = task["index"];
  std::optional<int64_t> id;
  if (index.is_number_integer()) {
    id = index.get<int64_t>();
  } else if (index.is_string()) {
    id = parse_nonneg(index.get<std::string>());  // TensorFlow applies int() to it
  }
  STRATA_CHECK(id && *id >= 0 && *id <= 1 << 30,
               "TF_CONFIG: task.index must be a non-negative integer, got ", index.dump());
  r.task_id_ = int(*id);
  if (r.task_type_ == "evaluator" && !r.spec_.has_job("evaluator")) {
    // TensorFlow lets the evaluator sit outside the cluster.
    STRATA_CHECK(r.task_id_ == 0, "TF_CONFIG: evaluator index ", r.task_id_,
                 " is out of range (there is only one evaluator)");
  } else {
    STRATA_CHECK(r.spec_.has_job(r.task_type_), "TF_CONFIG: task type ", quote_str(r.task_type_),
                 " is not a job of the cluster ", r.spec_.to_json());
    const int n = r.spec_.num_tasks(r.task_type_);
    STRATA_CHECK(r.task_id_ < n, "TF_CONFIG: task index ", r.task_id_, " is out of range for job ",
                 quote_str(r.task_type_), " with ", n, " task(s)");
  }

  for (const char* key : {"rpc_layer", "environment"}) {
    if (!j.contains(key)) continue;
    STRATA_CHECK(j[key].is_string(), "TF_CONFIG: \"", key, "\" must be a string, got ", j[key].dump());
    (std::string(key) == "rpc_layer" ? r.rpc_layer_ : r.environment_) = j[key].get<std::string>();
  }

  const std::string& leader = r.spec_.has_job("chief") ? r.spec_.task_address("chief", 0)
                                                        : r.spec_.task_address("worker", 0);
  std::tie(r.rendezvous_host_, r.rendezvous_port_) = split_host_port(leader, "TF_CONFIG: leader");

  // Local rank: this task's position among the collective workers on the same host.
  if (r.task_type_ == "chief" || r.task_type_ == "worker") {
    std::vector<std::string> ordered;
    if (r.spec_.has_job("chief")) ordered.push_back(r.spec_.task_address("chief", 0));
    for (const auto& a : r.spec_.as_map().count("worker") ? r.spec_.job_tasks("worker")
                                                          : std::vector<std::string>{})
      ordered.push_back(a);
    const int me = r.worker_rank();
    const std::string my_host = split_host_port(ordered[size_t(me)], "TF_CONFIG").first;
    r.local_size_ = 0;
    for (int i = 0; i < int(ordered.size()); ++i) {
      if (split_host_port(ordered[size_t(i)], "TF_CONFIG").first != my_host) continue;
      if (i < me) ++r.local_rank_;
      ++r.local_size_;
    }
  }
  r.replicas_per_worker_ = replicas_from_env(env);
  return r;
}

ClusterResolver ClusterResolver::from_mpi_env(const EnvLookup& env) {
  ClusterResolver r;
  r.source_ = ClusterSource::Mpi;
  int size = 0, rank = 0;
  std::string rank_var, size_var;
  if (env("OMPI_COMM_WORLD_SIZE")) {
    rank_var = "OMPI_COMM_WORLD_RANK";
    size_var = "OMPI_COMM_WORLD_SIZE";
    r.local_rank_ = env_int_opt(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    r.local_size_ = env_int_opt(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
  } else {
    rank_var = "PMI_RANK";
    size_var = "PMI_SIZE";
    r.local_rank_ = env_int_opt(env, "MPI_LOCALRANKID").value_or(0);
    r.local_size_ = env_int_opt(env, "MPI_LOCALNRANKS").value_or(1);
  }
  size = env_int(env, size_var);
  rank = env_int(env, rank_var);
  check_rank(rank, size, rank_var, size_var);
  STRATA_CHECK(r.local_size_ >= 1 && r.local_rank_ < r.local_size_, "cluster resolver: mpirun local rank ",
               r.local_rank_, " is out of range for local size ", r.local_size_);
  r.task_id_ = rank;
  r.rendezvous_port_ = master_port(env);
  const bool single_host = r.local_size_ == size;
  if (auto addr = first_set(env, {"MASTER_ADDR"})) {
    r.rendezvous_host_ = *addr;
  } else {
    STRATA_CHECK(single_host, "cluster resolver: mpirun ranks span several hosts (local size ",
                 r.local_size_, " of ", size,
                 "): set MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=host0)");
    r.rendezvous_host_ = "127.0.0.1";
  }
  // mpirun does not publish other ranks' hosts; on one host they are all local.
  std::vector<std::string> workers(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i)
    if (single_host || i == 0) workers[size_t(i)] = join_address(r.rendezvous_host_, r.rendezvous_port_ + i);
  r.spec_ = ClusterSpec({{"worker", workers}});
  r.replicas_per_worker_ = replicas_from_env(env);
  return r;
}

ClusterResolver ClusterResolver::from_slurm_env(const EnvLookup& env) {
  ClusterResolver r;
  r.source_ = ClusterSource::Slurm;
  // Inside an srun step, SLURM_STEP_NUM_TASKS is the step's size; SLURM_NTASKS may be the
  // allocation's.
  const std::string size_var = env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  const int size = env_int(env, size_var);
  const int rank = env_int(env, "SLURM_PROCID");
  check_rank(rank, size, "SLURM_PROCID", size_var);
  r.task_id_ = rank;
  r.local_rank_ = env_int_opt(env, "SLURM_LOCALID").value_or(0);
  const int node_id = env_int_opt(env, "SLURM_NODEID").value_or(0);
  const int port_base = master_port(env);

  std::string list_var, tpn_var;
  auto hostlist = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &list_var);
  auto tpn = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tpn_var);
  std::vector<std::string> workers(static_cast<size_t>(size));
  std::vector<std::string> hosts;
  std::vector<int> per_node;
  if (tpn) per_node = expand_slurm_tasks_per_node(*tpn);
  if (hostlist) {
    hosts = expand_slurm_hostlist(*hostlist);
    if (!tpn) {
      STRATA_CHECK(size % int(hosts.size()) == 0, "cluster resolver: ", size_var, "=", size,
                   " tasks do not spread evenly over ", hosts.size(), " node(s) of ", list_var,
                   " and SLURM_TASKS_PER_NODE is not set");
      per_node.assign(hosts.size(), size / int(hosts.size()));
    }
    STRATA_CHECK(per_node.size() == hosts.size(), "cluster resolver: ", tpn_var, "=", quote_str(*tpn),
                 " lists ", per_node.size(), " node(s) but ", list_var, "=", quote_str(*hostlist), " has ",
                 hosts.size());
  }
  if (!per_node.empty()) {
    int64_t total = 0;
    for (int n : per_node) total += n;
    STRATA_CHECK(total == size, "cluster resolver: ", tpn_var, " adds up to ", total, " tasks but ",
                 size_var, "=", size);
    STRATA_CHECK(node_id < int(per_node.size()), "cluster resolver: SLURM_NODEID=", node_id,
                 " is out of range for ", per_node.size(), " node(s)");
    r.local_size_ = per_node[size_t(node_id)];
  } else {
    r.local_size_ = env_int_opt(env, "SLURM_NTASKS_PER_NODE").value_or(1);
  }
  if (!hosts.empty()) {
    // Slurm's default block distribution: consecutive ranks fill a node, ports count up
    // from the base on each node (TensorFlow's SlurmClusterResolver does the same).
    size_t t = 0;
    for (size_t h = 0; h < hosts.size(); ++h)
      for (int j = 0; j < per_node[h]; ++j) workers[t++] = join_address(hosts[h], port_base + j);
  }
  STRATA_CHECK(r.local_size_ >= 1 && r.local_rank_ < r.local_size_, "cluster resolver: SLURM_LOCALID=",
               r.local_rank_, " is out of range for ", r.local_size_, " task(s) on this node");
  if (auto addr = first_set(env, {"MASTER_ADDR"})) {
    r.rendezvous_host_ = *addr;
    r.rendezvous_port_ = port_base;
  } else {
    STRATA_CHECK(!hosts.empty(),
                 "cluster resolver: Slurm: set MASTER_ADDR or SLURM_JOB_NODELIST to find rank 0's host");
    r.rendezvous_host_ = hosts[0];
    r.rendezvous_port_ = port_base;
  }
  if (workers[0].empty()) workers[0] = join_address(r.rendezvous_host_, r.rendezvous_port_);
  r.spec_ = ClusterSpec({{"worker", workers}});
  r.replicas_per_worker_ = replicas_from_env(env);
  return r;
}

ClusterResolver ClusterResolver::from_torch_env(const EnvLookup& env) {
  ClusterResolver r;
  r.source_ = ClusterSource::TorchEnv;
  const int size = env_int(env, "WORLD_SIZE");
  const int rank = env_int(env, "RANK");
  check_rank(rank, size, "RANK", "WORLD_SIZE");
  r.task_id_ = rank;
  r.local_rank_ = env_int_opt(env, "LOCAL_RANK").value_or(0);
  r.local_size_ = env_int_opt(env, "LOCAL_WORLD_SIZE").value_or(std::max(1, r.local_rank_ + 1));
  STRATA_CHECK(r.local_rank_ < r.local_size_, "cluster resolver: LOCAL_RANK=", r.local_rank_,
               " is out of range for LOCAL_WORLD_SIZE=", r.local_size_);
  auto addr = first_set(env, {"MASTER_ADDR"});
  STRATA_CHECK(addr.has_value(), "cluster resolver: RANK/WORLD_SIZE are set but MASTER_ADDR is not");
  r.rendezvous_host_ = *addr;
  r.rendezvous_port_ = master_port(env);
  std::vector<std::string> workers(static_cast<size_t>(size));
  workers[0] = join_address(r.rendezvous_host_, r.rendezvous_port_);
  r.spec_ = ClusterSpec({{"worker", workers}});
  r.replicas_per_worker_ = replicas_from_env(env);
  return r;
}

int ClusterResolver::num_workers() const {
  if (source_ == ClusterSource::Local) return 1;
  return spec_.num_tasks("chief") + spec_.num_tasks("worker");
}

int ClusterResolver::worker_rank() const {
  if (task_type_ == "chief") return 0;
  STRATA_CHECK(task_type_ == "worker", "cluster resolver: a ", task_type_,
               " task takes no part in collectives (only chief and worker tasks have a rank)");
  return task_id_ + (spec_.has_job("chief") ? 1 : 0);
}

bool ClusterResolver::is_chief() const {
  if (task_type_ == "chief" || task_type_ == "evaluator") return true;
  return task_type_ == "worker" && task_id_ == 0 && !spec_.has_job("chief");
}

std::string ClusterResolver::task_address() const {
  if (source_ == ClusterSource::Local || spec_.num_tasks(task_type_) <= task_id_) return {};
  return spec_.task_address(task_type_, task_id_);
}

std::string ClusterResolver::rendezvous_address() const {
  return join_address(rendezvous_host_, rendezvous_port_);
}

std::string ClusterResolver::describe() const {
  std::ostringstream os;
  os << cluster_source_name(source_) << " " << task_type_ << " " << task_id_;
  if (task_type_ == "chief" || task_type_ == "worker")
    os << " (rank " << worker_rank() << " of " << num_workers() << ", ";
  else
    os << " (";
  os << "chief: " << (is_chief() ? "yes" : "no") << ", store " << rendezvous_address() << ")";
  return os.str();
}

}  // namespace strata::distribute
