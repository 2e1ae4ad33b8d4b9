// ParameterServerStrategy and ClusterCoordinator (distribute/ps/).
//
// In-process tests run the parameter servers (and, where closures are scheduled, the
// workers) as threads of this process on 127.0.0.1, each worker with its own strategy
// and connections, exactly as separate processes would have: partitioners, placement
// and sharding, the step scope, schedule/join/fetch, concurrent updates, per-worker
// datasets, checkpoints. Multi-process tests start strata_ps_helper as every task of a
// job (tests/distribute/helpers/ps_helper.cc): a killed worker, a killed parameter
// server, and training the synthetic MLP next to MirroredStrategy(2). Every wait is
// bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include <strata/autograd/autograd.h>
#include <strata/core/ops.h>
#include <strata/data/dataset.h>
#include <strata/distribute/collective/tcp_store.h>
#include <strata/distribute/ps/cluster_coordinator.h>
#include <strata/distribute/ps/parameter_server.h>
#include <strata/distribute/ps/parameter_server_strategy.h>
#include <strata/distribute/ps/protocol.h>
#include <strata/distribute/ps/rpc.h>
#include "tests/distribute/child_process.h"
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/nn/activations.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>

using namespace strata;
using namespace strata::distribute;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

#define PS_REQUIRE_RPC()                                                           \
  do {                                                                             \
    if (!ps::rpc_available()) {                                                    \
      WARN("skipped: strata was built without ZeroMQ (STRATA_HAS_ZMQ is off)");    \
      return;                                                                      \
    }                                                                              \
  } while (0)

ParameterServerStrategyOptions fast_strategy_options() {
  ParameterServerStrategyOptions o;
  o.rpc_timeout_seconds = 5;
  o.startup_timeout_seconds = 20;
  return o;
}

ClusterCoordinatorOptions fast_coordinator_options() {
  ClusterCoordinatorOptions o;
  o.heartbeat_interval_seconds = 0.05;
  o.heartbeat_timeout_seconds = 1.0;
  o.closure_timeout_seconds = 60;
  o.worker_wait_timeout_seconds = 30;
  o.server.chief_timeout_seconds = 20;
  o.server.startup_timeout_seconds = 60;
  return o;
}

// A port for an in-process cluster's task: random in [20000, 32768), below Linux's
// ephemeral range (32768-60999), and free right now. The kernel's own pick
// (find_free_port) comes from the ephemeral range, which every concurrently running test
// process draws from too -- for its servers and for the source ports of its outgoing
// connections -- so a port picked there and released could be bound by another process
// before this cluster's task bound it. Seen twice under `ctest -j2`: the task failed to
// bind, and the chief sent its closures to another test's parameter server at that
// address ("unknown method 'run'"). Here only another test's random pick could collide.
int pick_cluster_port(const std::set<int>& taken) {
  static std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> range(20000, 32767);
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = range(rng);
    if (taken.count(port) != 0) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (free) return port;
  }
  FAIL("no free port in [20000, 32768) after 1000 tries");
  return 0;
}

json make_cluster(int num_ps, int num_workers) {
  json cluster;
  // Distinct ports: a worker sharing a parameter server's port sent its closures to the
  // server.
  std::set<int> taken;
  auto addr = [&] {
    const int port = pick_cluster_port(taken);
    taken.insert(port);
    return "127.0.0.1:" + std::to_string(port);
  };
  cluster["chief"] = json::array({addr()});
  for (int i = 0; i < num_workers; ++i) cluster["worker"].push_back(addr());
  for (int i = 0; i < num_ps; ++i) cluster["ps"].push_back(addr());
  return cluster;
}

std::string tf_config(const json& cluster, const std::string& type, int index) {
  return json{{"cluster", cluster}, {"task", {{"type", type}, {"index", index}}}}.dump();
}

// Parameter servers on threads of this process.
struct InProcessCluster {
  json cluster;
  std::vector<std::unique_ptr<ParameterServer>> servers;

  InProcessCluster(int num_ps, int num_workers) : cluster(make_cluster(num_ps, num_workers)) {
    ServerOptions so;
    so.chief_timeout_seconds = 30;
    for (int i = 0; i < num_ps; ++i) {
      servers.push_back(std::make_unique<ParameterServer>(cluster["ps"][size_t(i)].get<std::string>(),
                                                          "/job:ps/replica:0/task:" + std::to_string(i), "chief", so));
    }
  }
  ClusterResolver resolver(const std::string& type, int index) const {
    return ClusterResolver::from_tf_config(tf_config(cluster, type, index));
  }
};

// Worker tasks on threads: each builds its strategy, runs `build` (the same program as
// the chief's) and serves closures until the chief shuts the job down.
struct WorkerThreads {
  using Build = std::function<void(ParameterServerStrategy&, ClusterCoordinator&)>;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> errors;

  void start(const InProcessCluster& c, int index, VariablePartitioner partitioner, Build build) {
    threads.emplace_back([this, &c, index, partitioner, build] {
      try {
        ParameterServerStrategy strategy(c.resolver("worker", index), partitioner, fast_strategy_options());
        ClusterCoordinator coordinator(strategy, fast_coordinator_options());
        build(strategy, coordinator);
        coordinator.serve();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(e.what());
      }
    });
  }
  ~WorkerThreads() {
    for (auto& t : threads) t.join();
  }
};

autograd::VariableOptions var_options(const std::string& name, bool trainable = true) {
  autograd::VariableOptions o;
  o.name = name;
  o.trainable = trainable;
  return o;
}

}  // namespace

TEST_CASE("ParameterServer rpc: tensors, errors and deadlines over ZeroMQ", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  ps::RpcServer server("127.0.0.1", 0, "test server");
  std::atomic<bool> slow_started{false};
  server.add_method("echo", [](const ps::RpcMessage& m) { return m; });
  server.add_method("throw", [](const ps::RpcMessage&) -> ps::RpcMessage { fail("handler failed on purpose"); });
  server.add_method("sleep", [](const ps::RpcMessage& m) {
    std::this_thread::sleep_for(std::chrono::milliseconds(m.header.at("ms").get<int>()));
    return ps::RpcMessage{json{{"slept", m.header.at("ms")}}, {}};
  });
  server.add_method(
      "background",
      [&](const ps::RpcMessage&) {
        slow_started = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        return ps::RpcMessage{json{{"done", true}}, {}};
      },
      /*background=*/true);
  server.start();
  CHECK_THROWS_WITH(server.add_method("late", [](const ps::RpcMessage& m) { return m; }),
                    Catch::Contains("already started"));
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  ps::RpcClient client(address, "test server");

  // Tensors of every kind round-trip exactly (non-contiguous ones are sent contiguous).
  ps::RpcMessage msg;
  msg.header = {{"k", "v"}};
  msg.tensors = {arange(0, 6).reshape({2, 3}).transpose(), Tensor::from_vector<int64_t>({-1, 1ll << 40}),
                 Tensor::from_vector<bool>({true, false, true}), cast(tensor({0.5f, -2.f}), kFloat16),
                 zeros({0, 3}), Tensor::scalar(7, kFloat64)};
  const ps::RpcMessage back = client.call("echo", msg, 5);
  CHECK(back.header == msg.header);
  REQUIRE(back.tensors.size() == msg.tensors.size());
  for (size_t i = 0; i < msg.tensors.size(); ++i) {
    INFO("tensor " << i);
    CHECK(back.tensors[i].dtype() == msg.tensors[i].dtype());
    CHECK(back.tensors[i].shape() == msg.tensors[i].shape());
    CHECK(back.tensors[i].to_vector<double>() == msg.tensors[i].to_vector<double>());
  }

  // A handler's exception comes back as a remote error; an unknown method too.
  try {
    client.call("throw", {}, 5);
    FAIL("no error");
  } catch (const ps::RpcError& e) {
    CHECK(e.status() == ps::RpcStatus::RemoteError);
    CHECK_THAT(std::string(e.what()), Catch::Contains("handler failed on purpose"));
  }
  CHECK_THROWS_WITH(client.call("nope", {}, 5), Catch::Contains("unknown method 'nope'"));

  // A reply later than the deadline is an error, and is not mistaken for the next reply.
  try {
    client.call("sleep", ps::RpcMessage{json{{"ms", 400}}, {}}, 0.1);
    FAIL("no deadline");
  } catch (const ps::RpcError& e) {
    CHECK(e.status() == ps::RpcStatus::DeadlineExceeded);
    CHECK(e.peer_unreachable());
  }
  CHECK(client.call("sleep", ps::RpcMessage{json{{"ms", 1}}, {}}, 5).header.at("slept") == 1);

  // Inline methods are answered while a background one runs.
  ps::RpcClient other(address, "test server");
  const uint64_t id = other.send("background", {}, 5);
  while (!slow_started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto t0 = Clock::now();
  client.call("echo", {}, 5);
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 0.3);
  std::optional<ps::RpcClient::Reply> r;
  for (int k = 0; k < 50 && !r; ++k) r = other.receive(0.1);
  REQUIRE(r);
  CHECK(r->id == id);
  CHECK(r->message.header.at("done") == true);

  // Nobody listening: the call fails within its deadline.
  server.stop();
  ps::RpcClient nobody("127.0.0.1:" + std::to_string(find_free_port("127.0.0.1")), "absent server");
  const auto t1 = Clock::now();
  try {
    nobody.call("echo", {}, 0.3);
    FAIL("no error");
  } catch (const ps::RpcError& e) {
    CHECK(e.status() == ps::RpcStatus::Unavailable);
    CHECK_THAT(std::string(e.what()), Catch::Contains("absent server"));
  }
  CHECK(std::chrono::duration<double>(Clock::now() - t1).count() < 2.0);

  // A port in use cannot be served twice.
  ps::RpcServer first("127.0.0.1", 0, "first");
  first.start();
  ps::RpcServer second("127.0.0.1", first.port(), "second");
  CHECK_THROWS_WITH(second.start(), Catch::Contains("second): cannot listen on tcp://127.0.0.1:"));
}

TEST_CASE("VariableClient: calls to a parameter server declared failed stop waiting and name it",
          "[distribute][ps]") {
  PS_REQUIRE_RPC();
  // Server 0 is a parameter server; server 1 never answers a read (until the test releases
  // it), as a server that died with the request in flight.
  InProcessCluster c(1, 1);
  json cluster = c.cluster;
  cluster["ps"].push_back("127.0.0.1:" + std::to_string(find_free_port("127.0.0.1")));
  const ClusterSpec spec = ClusterResolver::from_tf_config(tf_config(cluster, "chief", 0)).cluster_spec();
  const auto [host, port] = split_host_port(cluster["ps"][1].get<std::string>(), "test");
  std::atomic<bool> release{false};
  ps::RpcServer silent(host, port, "silent server");
  silent.add_method(ps::kRead, [&](const ps::RpcMessage&) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return ps::RpcMessage{};
  });
  silent.start();
  // The RPC timeout is long: only mark_failed can end these waits in time.
  VariableClient client(spec, "chief", /*rpc_timeout_seconds=*/60, /*startup_timeout_seconds=*/60);
  client.create(0, {{"v", ps::kCreateOverwrite, zeros({2})}});
  const std::string error = "parameter server " + client.ps_label(1) + " failed: no reply to heartbeats (test)";
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  // A request sent and waiting for its reply.
  std::thread marker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    client.mark_failed(1, error);
  });
  auto t0 = Clock::now();
  try {
    client.read(1, {"v"});
    FAIL("no error");
  } catch (const ParameterServerUnavailable& e) {
    CHECK(e.ps_index() == 1);
    CHECK(std::string(e.what()) == error);
  }
  CHECK(seconds_since(t0) < 10);
  marker.join();
  release = true;
  silent.stop();
  // Later calls fail at once, with the same error; the other server still answers.
  t0 = Clock::now();
  CHECK_THROWS_WITH(client.update(1, {{"v", ps::kOpAdd, ones({2})}}), error);
  CHECK(seconds_since(t0) < 1);
  CHECK(client.read(0, {"v"})[0].to_vector<float>() == std::vector<float>{0, 0});
  // A request that cannot be sent (nobody listens any more) stops waiting too.
  VariableClient fresh(spec, "chief", 60, 60);
  std::thread late_marker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    fresh.mark_failed(1, error);
  });
  t0 = Clock::now();
  CHECK_THROWS_AS(fresh.read(1, {"v"}), ParameterServerUnavailable);
  CHECK(seconds_since(t0) < 10);
  late_marker.join();
}

TEST_CASE("ParameterServer: partitioners follow TensorFlow's arithmetic", "[distribute][ps]") {
  CHECK(FixedShardsPartitioner(2)({5}, kFloat32) == 2);
  CHECK(FixedShardsPartitioner(4)({3, 7}, kFloat32) == 3);  // at most one shard per row
  CHECK(FixedShardsPartitioner(4)({}, kFloat32) == 1);      // scalars are not partitioned
  // MinSize: as many shards as keep >= min_shard_bytes each, capped by max_shards and rows.
  CHECK(MinSizePartitioner(4, 2)({6, 1}, kFloat32) == 2);
  CHECK(MinSizePartitioner(4, 10)({6, 1}, kFloat32) == 6);
  CHECK(MinSizePartitioner(256 << 10, 4)({1000, 100}, kFloat32) == 2);  // 400 kB -> ceil(1.53)
  CHECK(MinSizePartitioner(256 << 10, 4)({10, 10}, kFloat32) == 1);
  CHECK(MinSizePartitioner(8, 8)({4, 4}, kFloat64) == 4);
  // MaxSize: as few shards as keep <= max_shard_bytes each (a row may exceed it).
  CHECK(MaxSizePartitioner(4)({6, 1}, kFloat32) == 6);
  CHECK(MaxSizePartitioner(4, 2)({6, 1}, kFloat32) == 2);
  CHECK(MaxSizePartitioner(100)({10, 10}, kFloat32) == 5);  // 40-byte rows, 2 per shard
  CHECK(MaxSizePartitioner(1)({3, 10}, kFloat32) == 3);
  CHECK(MaxSizePartitioner(1 << 20)({3, 10}, kFloat32) == 1);
  CHECK(shard_rows(10, 3) == std::vector<int64_t>{4, 3, 3});
  CHECK(shard_rows(6, 2) == std::vector<int64_t>{3, 3});
  CHECK_THROWS_WITH(FixedShardsPartitioner(0), Catch::Contains("num_shards must be >= 1"));
  CHECK_THROWS_WITH(MinSizePartitioner(0), Catch::Contains("min_shard_bytes"));
  CHECK_THROWS_WITH(MaxSizePartitioner(16, 0), Catch::Contains("max_shards"));
  CHECK_THROWS_WITH(shard_rows(2, 3), Catch::Contains("cannot split 2 rows into 3 shards"));
}

TEST_CASE("ParameterServer: the strategy needs a chief, workers and parameter servers", "[distribute][ps]") {
  json cluster = make_cluster(1, 1);
  json no_ps = cluster;
  no_ps.erase("ps");
  CHECK_THROWS_WITH(ParameterServerStrategy(ClusterResolver::from_tf_config(tf_config(no_ps, "chief", 0))),
                    Catch::Contains("at least one 'ps' task"));
  json no_chief = cluster;
  no_chief.erase("chief");
  CHECK_THROWS_WITH(ParameterServerStrategy(ClusterResolver::from_tf_config(tf_config(no_chief, "worker", 0))),
                    Catch::Contains("exactly one 'chief'"));
  CHECK_THROWS_WITH(ParameterServerStrategy(ClusterResolver::from_tf_config(tf_config(cluster, "ps", 0))),
                    Catch::Contains("run_parameter_server"));
  CHECK_THROWS_WITH(run_parameter_server(ClusterResolver::from_tf_config(tf_config(cluster, "worker", 0))),
                    Catch::Contains("not a parameter server"));
}

TEST_CASE("ParameterServer: variables are placed round-robin on the parameter servers", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  InProcessCluster c(2, 1);
  ParameterServerStrategy strategy(c.resolver("chief", 0), {}, fast_strategy_options());
  std::vector<Variable> vars;
  {
    auto scope = strategy.scope();
    vars.emplace_back(tensor({1, 2, 3}), var_options("a"));
    vars.emplace_back(tensor({{1, 2}, {3, 4}}), var_options("b"));
    vars.emplace_back(Tensor::scalar(5, kInt64), var_options("c", false));
    vars.emplace_back(tensor({7, 8}), var_options("a"));  // same name: a#1
  }
  const std::vector<int> expected_ps{0, 1, 0, 1};
  const std::vector<std::string> keys{"a#0", "b#0", "c#0", "a#1"};
  for (size_t i = 0; i < vars.size(); ++i) {
    const VariablePlacement& p = strategy.placement(vars[i]);
    CHECK(p.key == keys[i]);
    REQUIRE(p.shards.size() == 1);
    CHECK(p.shards[0].ps == expected_ps[i]);
    CHECK(c.servers[size_t(expected_ps[i])]->variables().count(keys[i]) == 1);
    CHECK(c.servers[size_t(1 - expected_ps[i])]->variables().count(keys[i]) == 0);
    CHECK(vars[i].impl().kind() == "ParameterServerVariable");
  }
  // Reads fetch from the servers; updates outside a step are applied at once.
  REQUIRE_ALLCLOSE(vars[1].value(), tensor({{1, 2}, {3, 4}}));
  CHECK(vars[2].value().item<int64_t>() == 5);
  CHECK(vars[2].dtype() == kInt64);
  vars[0].assign_add(tensor({10, 10, 10}));
  vars[0].assign_sub(Tensor::scalar(1));  // broadcast
  REQUIRE_ALLCLOSE(vars[0].value(), tensor({10, 11, 12}));
  vars[3].assign(tensor({0, -1}));
  REQUIRE_ALLCLOSE(vars[3].value(), tensor({0, -1}));
  vars[2].assign_add(Tensor::scalar(2, kInt64));
  CHECK(vars[2].value().item<int64_t>() == 7);
  CHECK_THROWS_WITH(vars[3].assign(tensor({1, 2, 3})), Catch::Contains("does not match the variable's shape [2]"));
  CHECK_THROWS_WITH(vars[3].assign_add(tensor({1, 2, 3})), Catch::Contains("assign_add"));
  Variable local(tensor({1}));
  CHECK_THROWS_WITH(strategy.placement(local), Catch::Contains("was not created in this strategy's scope"));
}

TEST_CASE("ParameterServer: partitioned variables are sharded along axis 0", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  InProcessCluster c(2, 1);
  ParameterServerStrategy strategy(c.resolver("chief", 0), FixedShardsPartitioner(3), fast_strategy_options());
  const Tensor a_init = arange(0, 20).reshape({10, 2});
  Variable a, b, s;
  {
    auto scope = strategy.scope();
    a = Variable(a_init, var_options("a"));
    b = Variable(tensor({1, 2}), var_options("b"));
    s = Variable(Tensor::scalar(3), var_options("s"));
  }
  const VariablePlacement& pa = strategy.placement(a);
  REQUIRE(pa.shards.size() == 3);
  CHECK(a.impl().kind() == "ShardedVariable");
  const std::vector<int64_t> rows{4, 3, 3}, offsets{0, 4, 7};
  const std::vector<int> ps_of{0, 1, 0};  // each shard on the next server
  for (size_t i = 0; i < 3; ++i) {
    CHECK(pa.shards[i].rows == rows[i]);
    CHECK(pa.shards[i].row_offset == offsets[i]);
    CHECK(pa.shards[i].ps == ps_of[i]);
    CHECK(pa.shards[i].key == "a#0/part_" + std::to_string(i));
    auto held = c.servers[size_t(ps_of[i])]->variables();
    REQUIRE(held.count(pa.shards[i].key) == 1);
    CHECK(held[pa.shards[i].key].second == Shape{rows[i], 2});
  }
  const VariablePlacement& pb = strategy.placement(b);
  REQUIRE(pb.shards.size() == 2);  // min(3 shards, 2 rows)
  CHECK(pb.shards[0].ps == 1);
  CHECK(pb.shards[1].ps == 0);
  CHECK(strategy.placement(s).shards.size() == 1);  // scalars are never sharded
  CHECK(strategy.placement(s).shards[0].ps == 1);

  REQUIRE_ALLCLOSE(a.value(), a_init);
  a.assign(full({10, 2}, 2.0));
  a.assign_add(arange(0, 2));  // broadcast over rows
  REQUIRE_ALLCLOSE(a.value(), add(full({10, 2}, 2.0), arange(0, 2).broadcast_to({10, 2})));

  // Optimizer slots are sharded like their variable.
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    opt = optim::Adam(0.1);
  }
  opt.build({a});
  const Variable m = *opt.find_slot(a, "m");
  const VariablePlacement& pm = strategy.placement(m);
  REQUIRE(pm.shards.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(pm.shards[i].ps == pa.shards[i].ps);
    CHECK(pm.shards[i].rows == pa.shards[i].rows);
  }
  REQUIRE_ALLCLOSE(m.value(), zeros({10, 2}));

  SECTION("MinSizePartitioner and MaxSizePartitioner") {
    ParameterServerStrategy min_size(c.resolver("chief", 0), MinSizePartitioner(64, 3), fast_strategy_options());
    ParameterServerStrategy max_size(c.resolver("chief", 0), MaxSizePartitioner(48), fast_strategy_options());
    Variable x, y, z;
    {
      auto scope = min_size.scope();
      x = Variable(zeros({8, 4}), var_options("min_x"));  // 128 bytes -> 2 shards of >= 64
      y = Variable(zeros({2, 2}), var_options("min_y"));  // 16 bytes -> 1
    }
    {
      auto scope = max_size.scope();
      z = Variable(arange(0, 32).reshape({8, 4}), var_options("max_z"));  // 16-byte rows, 3 per shard
    }
    CHECK(min_size.placement(x).shards.size() == 2);
    CHECK(min_size.placement(y).shards.size() == 1);
    REQUIRE(max_size.placement(z).shards.size() == 3);
    CHECK(max_size.placement(z).shards[0].rows == 3);
    CHECK(max_size.placement(z).shards[2].rows == 2);
    REQUIRE_ALLCLOSE(z.value(), arange(0, 32).reshape({8, 4}));
  }
}

TEST_CASE("ParameterServer: workers find the variables the chief created", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  InProcessCluster c(2, 1);
  ParameterServerStrategy chief(c.resolver("chief", 0), FixedShardsPartitioner(2), fast_strategy_options());
  auto worker_options = fast_strategy_options();
  worker_options.startup_timeout_seconds = 0.5;
  ParameterServerStrategy worker(c.resolver("worker", 0), FixedShardsPartitioner(2), worker_options);
  Variable on_chief, mismatched;
  {
    auto scope = chief.scope();
    on_chief = Variable(tensor({{1, 2}, {3, 4}, {5, 6}}), var_options("w"));
    mismatched = Variable(tensor({1, 2}), var_options("m"));
  }
  Variable on_worker;
  {
    auto scope = worker.scope();
    on_worker = Variable(zeros({3, 2}), var_options("w"));  // its own initial value is ignored
    CHECK_THROWS_WITH(Variable(zeros({3}), var_options("m")), Catch::Contains("every task must build the same model"));
    CHECK_THROWS_WITH(Variable(zeros({3}), var_options("never")), Catch::Contains("was not created by the chief"));
  }
  REQUIRE_ALLCLOSE(on_worker.value(), tensor({{1, 2}, {3, 4}, {5, 6}}));
  CHECK(worker.placement(on_worker).to_json() == chief.placement(on_chief).to_json());
  on_worker.assign_add(ones({3, 2}));
  REQUIRE_ALLCLOSE(on_chief.value(), tensor({{2, 3}, {4, 5}, {6, 7}}));
}

TEST_CASE("ParameterServer: a StepScope caches reads and commits updates atomically", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  InProcessCluster c(2, 1);
  ParameterServerStrategy strategy(c.resolver("chief", 0), FixedShardsPartitioner(2), fast_strategy_options());
  Variable v, flag;
  {
    auto scope = strategy.scope();
    v = Variable(zeros({4, 2}), var_options("v"));
    flag = Variable(Tensor::scalar(0, kBool), var_options("flag", false));
  }
  {
    StepScope step(strategy);
    const Tensor first = v.value();
    CHECK(v.value().id() == first.id());  // the same tensor for the whole step (tapes find it)
    first.copy_(ones({4, 2}));             // an in-place update, as optimizers do
    REQUIRE_ALLCLOSE(v.value(), ones({4, 2}));
    CHECK_THROWS_WITH(StepScope{strategy}, Catch::Contains("already active"));
  }  // not committed: discarded
  REQUIRE_ALLCLOSE(v.value(), zeros({4, 2}));
  {
    StepScope step(strategy);
    v.value().copy_(full({4, 2}, 2.0));
    v.assign_add(ones({4, 2}));
    flag.assign(Tensor::scalar(1, kBool));
    step.commit();
    step.commit();  // nothing changed since: no second update
  }
  REQUIRE_ALLCLOSE(v.value(), full({4, 2}, 3.0));
  CHECK(flag.value().item<bool>());

  // Two steps that start from the same value both count (deltas, not overwrites).
  std::barrier sync(2);
  auto racer = [&] {
    StepScope step(strategy);
    const Tensor t = v.value();
    sync.arrive_and_wait();  // both have read 3
    t.copy_(add(t, ones({4, 2})));
    step.commit();
  };
  std::thread t1(racer), t2(racer);
  t1.join();
  t2.join();
  REQUIRE_ALLCLOSE(v.value(), full({4, 2}, 5.0));

  // An assign in a step is an assign: the last commit wins.
  {
    StepScope step(strategy);
    v.assign(full({4, 2}, -1.0));
    step.commit();
  }
  REQUIRE_ALLCLOSE(v.value(), full({4, 2}, -1.0));

  // Strategy::run needs a step scope, which makes the optimizer's in-place update stick.
  auto scope = strategy.scope();
  CHECK_THROWS_WITH(strategy.run([&] { return v.value(); }), Catch::Contains("without a StepScope"));
  optim::Optimizer opt = optim::SGD(0.5);
  {
    StepScope step(strategy);
    strategy.run([&] {
      autograd::GradientTape tape;
      Tensor loss = sum(mul(v.read(), v.read()));
      opt.apply_gradients(tape.gradient(loss, {v}), {v});  // v -= 0.5 * 2v
    });
    step.commit();
  }
  REQUIRE_ALLCLOSE(v.value(), zeros({4, 2}));
  CHECK(opt.iterations_value() == 1);
}

TEST_CASE("ClusterCoordinator: schedule, join, done and fetch", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  InProcessCluster c(1, 2);
  auto program = [](ParameterServerStrategy&, ClusterCoordinator& coordinator) {
    coordinator.register_function("double", [](ClosureArgs& args) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return std::vector<Tensor>{mul(args.tensor(0), Tensor::scalar(2)), Tensor::scalar(args.worker_index(), kInt64)};
    });
    coordinator.register_function("fail", [](ClosureArgs&) -> std::vector<Tensor> { fail("boom"); });
  };
  WorkerThreads workers;
  for (int w = 0; w < 2; ++w) workers.start(c, w, {}, program);
  ParameterServerStrategy strategy(c.resolver("chief", 0), {}, fast_strategy_options());
  ClusterCoordinator coordinator(strategy, fast_coordinator_options());
  program(strategy, coordinator);

  // Closures go to whichever worker is idle: schedule rounds until both have taken some
  // (a worker that starts late joins in as soon as it answers).
  std::set<int64_t> workers_used;
  int scheduled = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (workers_used.size() < 2 && Clock::now() < deadline) {
    std::vector<RemoteValue> values;
    for (int i = 0; i < 12; ++i, ++scheduled) values.push_back(coordinator.schedule("double", {Tensor::scalar(i)}));
    coordinator.join();
    CHECK(coordinator.done());
    for (int i = 0; i < 12; ++i) {
      CHECK(values[size_t(i)].status() == RemoteValue::Status::Ready);
      const auto out = values[size_t(i)].fetch();
      REQUIRE(out.size() == 2);
      CHECK(out[0].item<float>() == float(2 * i));
      workers_used.insert(out[1].item<int64_t>());
      CHECK(values[size_t(i)].worker() == out[1].item<int64_t>());
    }
  }
  CHECK(workers_used == std::set<int64_t>{0, 1});
  CHECK(coordinator.stats().closures_completed == scheduled);

  // fetch() waits for its closure.
  RemoteValue later = coordinator.schedule("double", {Tensor::scalar(21)});
  CHECK(later.fetch()[0].item<float>() == 42.0f);

  // A failing closure: join raises it once, naming the function; the coordinator goes on.
  RemoteValue bad = coordinator.schedule("fail");
  CHECK_THROWS_WITH(coordinator.join(), Catch::Contains("closure 'fail' failed on worker /job:worker") &&
                                            Catch::Contains("boom"));
  CHECK_THROWS_WITH(bad.fetch(), Catch::Contains("boom"));
  CHECK(bad.status() == RemoteValue::Status::Failed);
  CHECK(coordinator.done());
  RemoteValue again = coordinator.schedule("double", {Tensor::scalar(1)});
  coordinator.join();
  CHECK(again.fetch()[0].item<float>() == 2.0f);

  CHECK_THROWS_WITH(coordinator.schedule("missing"), Catch::Contains("no function named 'missing'"));
  CHECK_THROWS_WITH(coordinator.schedule("double", {Tensor()}), Catch::Contains("undefined tensor"));
  CHECK_THROWS_WITH(coordinator.serve(), Catch::Contains("only workers serve closures"));
  {
    ParameterServerStrategy worker_strategy(c.resolver("worker", 0), {}, fast_strategy_options());
    ClusterCoordinator on_worker(worker_strategy, fast_coordinator_options());
    CHECK_THROWS_WITH(on_worker.schedule("double"), Catch::Contains("only the chief schedules"));
  }
  coordinator.shutdown();
  CHECK_THROWS_WITH(coordinator.schedule("double", {Tensor::scalar(1)}), Catch::Contains("shut down"));
  CHECK(workers.errors.empty());
}

TEST_CASE("ClusterCoordinator: several workers update the same variables without losing any", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  InProcessCluster c(2, 2);
  struct State {
    Variable counter, vec;
  };
  auto program = [](ParameterServerStrategy& strategy, ClusterCoordinator& coordinator,
                    std::shared_ptr<State> state) {
    {
      auto scope = strategy.scope();
      state->counter = Variable(Tensor::scalar(0), var_options("counter", false));
      state->vec = Variable(zeros({8, 3}), var_options("vec", false));
    }
    coordinator.register_function("add", [state](ClosureArgs&) {
      const float seen = state->counter.value().item<float>();
      for (int k = 0; k < 3; ++k) {
        state->counter.assign_add(Tensor::scalar(1));
        state->vec.assign_add(ones({8, 3}));
      }
      return std::vector<Tensor>{Tensor::scalar(seen)};
    });
  };
  WorkerThreads workers;
  for (int w = 0; w < 2; ++w) {
    workers.start(c, w, FixedShardsPartitioner(2), [program](ParameterServerStrategy& s, ClusterCoordinator& co) {
      program(s, co, std::make_shared<State>());
    });
  }
  ParameterServerStrategy strategy(c.resolver("chief", 0), FixedShardsPartitioner(2), fast_strategy_options());
  ClusterCoordinator coordinator(strategy, fast_coordinator_options());
  auto state = std::make_shared<State>();
  program(strategy, coordinator, state);
  CHECK(strategy.placement(state->vec).shards.size() == 2);

  // Meanwhile the chief adds directly (no step scope) from several threads.
  std::vector<std::thread> direct;
  for (int t = 0; t < 3; ++t)
    direct.emplace_back([&] {
      for (int k = 0; k < 20; ++k) state->counter.assign_add(Tensor::scalar(1));
    });
  // At least 60 closures, and until both workers have run some (they race on the same
  // variables from the same starting values).
  int scheduled = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  auto both_ran = [&] {
    const auto st = coordinator.stats();
    return st.completed_per_worker[0] > 0 && st.completed_per_worker[1] > 0;
  };
  while (scheduled < 60 || (!both_ran() && Clock::now() < deadline)) {
    for (int i = 0; i < 20; ++i, ++scheduled) coordinator.schedule("add");
    coordinator.join();
  }
  for (auto& t : direct) t.join();
  CHECK(both_ran());
  CHECK(state->counter.value().item<float>() == float(scheduled * 3 + 3 * 20));
  REQUIRE_ALLCLOSE(state->vec.value(), full({8, 3}, 3.0 * scheduled));
  coordinator.shutdown();
  CHECK(workers.errors.empty());
}

TEST_CASE("ClusterCoordinator: per-worker datasets give each worker its shard", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  InProcessCluster c(1, 2);
  // Every process registers the same datasets and functions in the same order.
  auto program = [](ParameterServerStrategy&, ClusterCoordinator& coordinator) {
    PerWorkerDataset ds = coordinator.create_per_worker_dataset([](const data::InputContext& ctx) {
      return data::Dataset::range(0, 80).shard(ctx.num_input_pipelines(), ctx.input_pipeline_id()).batch(4);
    });
    coordinator.register_function("next", [](ClosureArgs& args) {
      data::Batch b = args.next(0);
      return std::vector<Tensor>{b[0], Tensor::scalar(args.worker_index(), kInt64)};
    });
    return ds;
  };
  WorkerThreads workers;
  for (int w = 0; w < 2; ++w) workers.start(c, w, {}, [program](auto& s, auto& co) { program(s, co); });
  ParameterServerStrategy strategy(c.resolver("chief", 0), {}, fast_strategy_options());
  ClusterCoordinator coordinator(strategy, fast_coordinator_options());
  PerWorkerDataset ds = program(strategy, coordinator);
  CHECK(ds.id() == 0);
  const PerWorkerIterator it = ds.make_iterator(), other = ds.make_iterator();
  CHECK(other.iterator != it.iterator);
  std::vector<RemoteValue> values;  // 8 of each worker's 10 batches at most
  for (int i = 0; i < 8; ++i) values.push_back(coordinator.schedule("next", {it}));
  coordinator.join();
  std::map<int64_t, std::vector<int64_t>> seen;  // worker -> elements, in order
  for (auto& v : values) {
    const auto out = v.fetch();
    const int64_t w = out[1].item<int64_t>();
    for (int64_t x : out[0].to_vector<int64_t>()) {
      CHECK(x % 2 == w);  // shard w of 2
      seen[w].push_back(x);
    }
  }
  for (auto& [w, xs] : seen)
    for (size_t i = 0; i < xs.size(); ++i) CHECK(xs[i] == w + 2 * int64_t(i));  // one iterator per worker advances
  // A second iterator starts at the beginning; an exhausted one fails its closure.
  const auto first = coordinator.schedule("next", {other}).fetch();
  CHECK(first[0].to_vector<int64_t>()[0] == first[1].item<int64_t>());
  // 28 > 2 x 10 batches. The error comes from join(), or from a later schedule() when a
  // closure already failed while the loop was still scheduling (as TensorFlow's schedule
  // raises a failed closure's error); which one depends on timing (seen under ASan).
  CHECK_THROWS_WITH(
      [&] {
        for (int i = 0; i < 20; ++i) coordinator.schedule("next", {it});
        coordinator.join();
      }(),
      Catch::Contains("is exhausted"));
  coordinator.shutdown();
  CHECK(workers.errors.empty());
}

TEST_CASE("ParameterServer: checkpoints of sharded variables round-trip", "[distribute][ps]") {
  PS_REQUIRE_RPC();
  const auto dir = std::filesystem::temp_directory_path() / ("strata_ps_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto build = [](Strategy& strategy, nn::Sequential& model, optim::Optimizer& opt) {
    auto scope = strategy.scope();
    model = nn::Sequential{nn::Dense(6, 5), nn::ReLU(), nn::Dense(5, 3)};
    opt = optim::Adam(0.01);
  };
  std::map<std::string, Tensor> saved;
  {
    InProcessCluster c(2, 1);
    ParameterServerStrategy strategy(c.resolver("chief", 0), FixedShardsPartitioner(2), fast_strategy_options());
    nn::Sequential model;
    optim::Optimizer opt;
    build(strategy, model, opt);
    opt.build(model.trainable_variables());
    train::Checkpoint ckpt{{"model", model}, {"optimizer", opt}};
    int k = 0;
    for (auto& [path, var] : ckpt.variables_by_path()) {
      var.assign(cast(add(arange(0, double(numel_of(var.shape()))).reshape(var.shape()), Tensor::scalar(++k)),
                      var.dtype()));
      saved[path] = var.value();
    }
    CHECK(strategy.placement(model[0].variables()[0]).sharded());  // the [6,5] kernel
    ckpt.save(dir / "ckpt-1", 1);
  }
  SECTION("into another cluster, sharded differently") {
    InProcessCluster c(3, 1);
    ParameterServerStrategy strategy(c.resolver("chief", 0), MaxSizePartitioner(24), fast_strategy_options());
    nn::Sequential model;
    optim::Optimizer opt;
    build(strategy, model, opt);
    train::Checkpoint ckpt{{"model", model}, {"optimizer", opt}};
    ckpt.restore(dir / "ckpt-1");
    CHECK(strategy.placement(model[0].variables()[0]).shards.size() == 6);  // 20-byte rows
    const auto restored = ckpt.variables_by_path();
    CHECK(restored.size() == saved.size());
    for (auto& [path, var] : restored) {
      INFO(path);
      REQUIRE(saved.count(path));
      REQUIRE_ALLCLOSE(var.value(), saved[path], 0, 0);
    }
  }
  SECTION("into a single process") {
    DefaultStrategy& strategy = DefaultStrategy::instance();
    nn::Sequential model;
    optim::Optimizer opt;
    build(strategy, model, opt);
    train::Checkpoint ckpt{{"model", model}, {"optimizer", opt}};
    ckpt.restore(dir / "ckpt-1");
    for (auto& [path, var] : ckpt.variables_by_path()) {
      INFO(path);
      REQUIRE_ALLCLOSE(var.value(), saved[path], 0, 0);
    }
  }
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------- processes

namespace {

// One multi-process job of strata_ps_helper: a chief, workers and parameter servers.
class HelperJob {
 public:
  HelperJob(int num_ps, int num_workers, std::vector<std::string> args)
      : cluster_(make_cluster(num_ps, num_workers)), args_(std::move(args)) {}

  // Starts (or restarts) a task.
  void start(const std::string& type, int index, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{STRATA_PS_HELPER};
    argv.insert(argv.end(), args_.begin(), args_.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    const std::string name = type + std::to_string(index);
    results_.erase(name);
    tasks_[name] = std::make_unique<testing::ChildProcess>(
        argv, std::map<std::string, std::string>{{"TF_CONFIG", tf_config(cluster_, type, index)},
                                                 {"STRATA_NUM_THREADS", "1"},
                                                 {kJobSecretEnv, secret_.text()}});
  }
  void start_all(int num_ps, int num_workers) {
    for (int i = 0; i < num_ps; ++i) start("ps", i);
    for (int i = 0; i < num_workers; ++i) start("worker", i);
    start("chief", 0);
  }
  pid_t pid(const std::string& type, int index) { return tasks_.at(type + std::to_string(index))->pid(); }
  // Waits (bounded) until a task has printed `text`; false at the deadline.
  bool wait_for_output(const std::string& type, int index, const std::string& text, double seconds) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
    const auto& task = *tasks_.at(type + std::to_string(index));
    while (Clock::now() < deadline) {
      if (task.output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // Waits for a task once (later calls return the same result).
  const testing::ProcessResult& wait(const std::string& type, int index, double seconds) {
    const std::string name = type + std::to_string(index);
    auto it = results_.find(name);
    if (it == results_.end()) it = results_.emplace(name, tasks_.at(name)->wait(seconds)).first;
    return it->second;
  }
  // Every task's output (waiting up to `seconds` for each), for failure messages.
  std::string outputs(double seconds = 10) {
    std::string all;
    for (auto& [name, p] : tasks_) {
      const std::string type = name.substr(0, name.find_first_of("0123456789"));
      const auto& r = wait(type, std::stoi(name.substr(type.size())), seconds);
      all += "---- " + name + " (exit " + std::to_string(r.exit_code) + ", signal " + std::to_string(r.signal) +
             ")\n" + r.output;
    }
    return all;
  }

 private:
  json cluster_;
  std::vector<std::string> args_;
  std::map<std::string, std::unique_ptr<testing::ChildProcess>> tasks_;
  JobSecret secret_ = JobSecret::generate();  // the job's, as strata-launch would make it
  std::map<std::string, testing::ProcessResult> results_;
};

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  return json::parse(in);
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("strata_ps_" + name + "_" + std::to_string(::getpid()) + ".json");
}

}  // namespace

TEST_CASE("ClusterCoordinator: a killed worker's closures complete on another worker, and it rejoins",
          "[distribute][ps][processes]") {
  PS_REQUIRE_RPC();
  const auto report = temp_file("faults");
  std::filesystem::remove(report);
  HelperJob job(1, 2,
                {"faults", "--closures", "24", "--closure-ms", "60", "--heartbeat-timeout", "1.0", "--expect-rejoin",
                 "--die-worker", "1", "--report", report.string()});
  job.start("ps", 0);
  job.start("worker", 0, {"--die-at", "3"});
  job.start("worker", 1, {"--die-at", "3"});
  job.start("chief", 0);
  // Worker 1 kills itself in its third closure; a while later (past the heartbeat
  // timeout) it is restarted, as a cluster manager would.
  const auto killed = job.wait("worker", 1, 60);
  INFO(killed.output);
  REQUIRE(killed.signal == SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  job.start("worker", 1);
  const auto chief = job.wait("chief", 0, 150);
  INFO(chief.output);
  if (chief.exit_code != 0) FAIL(job.outputs());
  const json r = read_json(report);
  INFO(r.dump(2));
  CHECK(r["counter"].get<double>() == r["scheduled"].get<double>());  // each closure counted once
  CHECK(r["vec_ok"].get<bool>());
  CHECK(r["rejoined"].get<bool>());
  CHECK(r["stats"]["closures_rescheduled"].get<int>() >= 1);
  CHECK(r["stats"]["worker_failures"].get<int>() >= 1);
  CHECK(r["stats"]["worker_rejoins"].get<int>() >= 1);
  const auto delays = r["stats"]["reschedule_seconds"].get<std::vector<double>>();
  REQUIRE(!delays.empty());
  // Detected after the 1 s heartbeat timeout, and sent elsewhere right away.
  CHECK(delays[0] >= 0.9);
  CHECK(delays[0] < 5.0);
  WARN("killed worker's closure rescheduled " << delays[0] << " s after its last heartbeat (timeout 1 s)");
  std::filesystem::remove(report);
}

TEST_CASE("ClusterCoordinator: a killed parameter server stops the job with an error naming it",
          "[distribute][ps][processes]") {
  PS_REQUIRE_RPC();
  HelperJob job(2, 2, {"ps-fault", "--closure-ms", "20", "--heartbeat-timeout", "1.0", "--rpc-timeout", "3"});
  const auto started = Clock::now();
  job.start_all(2, 2);
  // Killed once the job is running closures on every worker, not after a fixed sleep: on
  // a loaded machine the tasks may still be starting then, and a server killed before a
  // task first reached it is waited for up to the startup timeout (120 s), not failed.
  REQUIRE(job.wait_for_output("chief", 0, "chief: every worker ran a closure", 90));
  const auto killed_at = Clock::now();
  ::kill(-job.pid("ps", 1), SIGKILL);
  // wait()'s limits count from the task's start: the time it took to get here is added.
  const double before_kill = std::chrono::duration<double>(killed_at - started).count();
  const auto chief = job.wait("chief", 0, before_kill + 60);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  INFO(chief.output);
  CHECK(chief.exit_code == 3);
  CHECK_THAT(chief.output, Catch::Contains("job failed") && Catch::Contains("/job:ps/replica:0/task:1"));
  CHECK(seconds < 20);
  // The workers are told to stop (or stop when the chief is gone).
  CHECK(job.wait("worker", 0, before_kill + 40).exit_code == 0);
  CHECK(job.wait("ps", 0, before_kill + 40).exit_code == 0);
}

TEST_CASE("ClusterCoordinator: a killed chief stops the servers with an error naming it",
          "[distribute][ps][processes]") {
  PS_REQUIRE_RPC();
  HelperJob job(1, 1, {"ps-fault", "--closure-ms", "20", "--chief-timeout", "2"});
  job.start_all(1, 1);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the job is running closures
  ::kill(-job.pid("chief", 0), SIGKILL);
  for (const std::string type : {"worker", "ps"}) {
    const auto& r = job.wait(type, 0, 30);
    INFO(type << ":\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("lost the chief /job:chief/replica:0/task:0"));
  }
}

TEST_CASE("ParameterServerStrategy: the synthetic MLP trains to within 2% of MirroredStrategy's accuracy",
          "[distribute][ps][processes]") {
  PS_REQUIRE_RPC();
  const std::vector<std::string> common{"--steps", "300", "--batch", "64", "--hidden", "64", "--lr", "0.05",
                                        "--shards", "2"};
  const auto ps_report = temp_file("train"), sync_report = temp_file("mirrored");
  std::vector<std::string> ps_args{"train"};
  ps_args.insert(ps_args.end(), common.begin(), common.end());
  ps_args.insert(ps_args.end(), {"--report", ps_report.string()});
  HelperJob job(1, 2, ps_args);
  job.start_all(1, 2);
  const auto chief = job.wait("chief", 0, 200);
  INFO(chief.output);
  if (chief.exit_code != 0) FAIL(job.outputs());
  std::vector<std::string> sync_args{STRATA_PS_HELPER, "mirrored"};
  sync_args.insert(sync_args.end(), common.begin(), common.end());
  sync_args.insert(sync_args.end(), {"--report", sync_report.string()});
  const auto sync = testing::run_process(sync_args, {}, 200);
  INFO(sync.output);
  REQUIRE(sync.exit_code == 0);
  const json ps_r = read_json(ps_report), sync_r = read_json(sync_report);
  const double ps_acc = ps_r["eval_accuracy"], sync_acc = sync_r["eval_accuracy"];
  WARN("eval accuracy: parameter_server (1 ps x 2 workers) " << ps_acc << ", mirrored(2) " << sync_acc
                                                              << "; steps/s " << ps_r["steps_per_sec"] << " vs "
                                                              << sync_r["steps_per_sec"]);
  // Every step's update reached the servers; a closure rescheduled after a missed
  // heartbeat (a loaded machine) may have applied its update before it was re-run: at
  // least once, as TensorFlow's ClusterCoordinator.
  const int64_t iterations = ps_r["iterations"], rescheduled = ps_r["stats"]["closures_rescheduled"];
  CHECK(iterations >= 300);
  CHECK(iterations <= 300 + rescheduled);
  CHECK(sync_acc > 0.5);                            // the task is learnable in 300 steps
  CHECK(ps_acc >= sync_acc - 0.02);
  std::filesystem::remove(ps_report);
  std::filesystem::remove(sync_report);
}

TEST_CASE("strata-launch --ps starts a chief, workers and parameter servers", "[distribute][ps][processes]") {
  PS_REQUIRE_RPC();
  const std::map<std::string, std::string> env{{"STRATA_NUM_THREADS", "1"}};
  auto r = testing::run_process({STRATA_LAUNCH_BIN, "--ps", "1", "--workers", "2", "--grace", "5", "--timeout", "120",
                                 "--", STRATA_PS_HELPER, "train", "--steps", "30", "--hidden", "16", "--shards", "2",
                                 "--train-examples", "512", "--eval-examples", "128"},
                                env, 150);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[ps 0] strata: parameter server /job:ps/replica:0/task:0") &&
                           Catch::Contains("[worker 1] strata: worker /job:worker/replica:0/task:1") &&
                           Catch::Contains("[chief] {"));
  CHECK_THAT(r.output, Catch::Contains("[chief] {") && Catch::Contains("\"mode\":\"parameter_server\""));

  // A worker that dies does not stop the job: the chief finishes on the other worker.
  auto f = testing::run_process({STRATA_LAUNCH_BIN, "--ps", "1", "--workers", "2", "--grace", "5", "--timeout", "120",
                                 "--", STRATA_PS_HELPER, "faults", "--closures", "12", "--closure-ms", "30",
                                 "--heartbeat-timeout", "1", "--die-worker", "1", "--die-at", "2"},
                                env, 150);
  INFO(f.output);
  CHECK(f.exit_code == 0);
  CHECK_THAT(f.output, Catch::Contains("strata-launch: worker 1 was killed by signal 9") &&
                           Catch::Contains("the chief runs its closures on the other workers"));
}
