// strata_distribute_helper: a worker program for the multi-process tests of
// tests/distribute, started directly or through strata-launch (it reads its place in the
// job from TF_CONFIG through ClusterResolver). Subcommands:
//   print-env               print TF_CONFIG, STRATA_REPLICAS_PER_WORKER and the resolver's view
//   fail-one --index I --code C   worker I exits with C after a moment; the others wait
//   gloo-check              run every collective through GlooCommunicator and verify it
//   gloo-die --die-rank K   rank K exits after the first collective; the others must get a
//                           strata::Error naming rank K within the timeout
//   bench                   all-reduce bus bandwidth, GlooCommunicator vs gloo::allreduce
// Exit status 0 means the checks passed.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include <strata/core/error.h>
#include <strata/core/tensor.h>
#include <strata/distribute/cluster_resolver.h>
#include <strata/distribute/collective/gloo_communicator.h>
#include <strata/distribute/collective/tcp_store.h>

#ifdef STRATA_HAS_GLOO
#include <gloo/allreduce.h>
#include <gloo/math.h>
#endif

using namespace strata;
using namespace strata::distribute;
using Clock = std::chrono::steady_clock;

namespace {

struct Group {
  ClusterResolver cluster;
  std::unique_ptr<TcpStoreServer> server;  // rank 0 hosts the store
  std::shared_ptr<TcpStore> store;
  std::unique_ptr<Communicator> comm;
  int rank = 0;
  int size = 1;
};

Group join(double timeout) {
  Group g;
  g.cluster = ClusterResolver::from_environment();
  g.rank = g.cluster.worker_rank();
  g.size = g.cluster.num_workers();
  if (g.rank == 0) g.server = std::make_unique<TcpStoreServer>(g.cluster.rendezvous_port(), "127.0.0.1");
  g.store = std::make_shared<TcpStore>(g.cluster.rendezvous_host(), g.cluster.rendezvous_port(), timeout);
  GlooCommunicatorOptions o;
  o.rank = g.rank;
  o.size = g.size;
  o.store = g.store;
  o.prefix = "helper";
  o.hostname = "127.0.0.1";
  o.comm.timeout_seconds = timeout;
  g.comm = make_gloo_communicator(o);
  return g;
}

int print_env() {
  const char* tf = std::getenv("TF_CONFIG");
  const char* rep = std::getenv("STRATA_REPLICAS_PER_WORKER");
  std::cout << "TF_CONFIG=" << (tf ? tf : "<unset>") << "\n";
  std::cout << "STRATA_REPLICAS_PER_WORKER=" << (rep ? rep : "<unset>") << "\n";
  // The job secret, never printed: its length and a fingerprint (HMAC of a fixed label),
  // so that a test can tell that every worker got the same one and each job a new one.
  if (const auto secret = JobSecret::from_environment()) {
    const Digest d = secret->mac("fingerprint");
    char hex[17];
    for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", unsigned(d[size_t(i)]));
    std::cout << "STRATA_JOB_SECRET: " << secret->text().size() << " bytes, fingerprint " << hex << "\n";
  } else {
    std::cout << "STRATA_JOB_SECRET: <unset>\n";
  }
  std::cout << "resolver: " << ClusterResolver::from_environment().describe() << std::endl;
  std::cerr << "a line on stderr" << std::endl;
  std::cout << "a partial line" << std::flush;
  return 0;
}

int fail_one(int index, int code) {
  const int me = ClusterResolver::from_environment().task_id();
  if (me == index) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::cout << "failing on purpose with status " << code << std::endl;
    return code;
  }
  std::cout << "waiting to be stopped" << std::endl;
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::cout << "was never stopped" << std::endl;
  return 0;
}

// Element i of rank r holds (r + 1) * (i % 7 + 1): small integers, exact in every dtype.
double value_at(int r, int64_t i) { return double((r + 1) * (i % 7 + 1)); }

Tensor filled(int rank, int64_t n, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value_at(rank, i);
  return Tensor::from_vector(v, {n}, dtype);
}

bool expect(bool ok, const std::string& what, int& failures) {
  if (!ok) {
    std::cout << "MISMATCH: " << what << std::endl;
    ++failures;
  }
  return ok;
}

int gloo_check(double timeout) {
  Group g = join(timeout);
  int failures = 0;
  const int n = g.size;
  const double rank_sum = n * (n + 1) / 2.0;  // sum of (r + 1)
  for (DType dtype : {kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16}) {
    for (int64_t count : {int64_t(1), int64_t(1000), int64_t(300000)}) {
      Tensor t = filled(g.rank, count, dtype);
      g.comm->all_reduce(t, ReduceOp::Sum);
      auto got = t.to_vector<double>();
      bool ok = true;
      for (int64_t i = 0; i < count; ++i) ok = ok && got[size_t(i)] == rank_sum * (i % 7 + 1);
      expect(ok, std::string("all_reduce sum ") + dtype_name(dtype) + " x" + std::to_string(count), failures);
    }
  }
  Tensor mx = filled(g.rank, 100, kFloat32);
  g.comm->all_reduce(mx, ReduceOp::Max);
  expect(mx.to_vector<double>()[3] == n * 4.0, "all_reduce max", failures);
  Tensor mean = filled(g.rank, 100, kFloat64);
  g.comm->all_reduce(mean, ReduceOp::Mean);
  expect(std::abs(mean.to_vector<double>()[0] - rank_sum / n) < 1e-12, "all_reduce mean", failures);

  Tensor b = filled(g.rank, 5000, kFloat32);
  g.comm->broadcast(b, n - 1);
  expect(b.to_vector<double>()[6] == value_at(n - 1, 6), "broadcast", failures);

  Tensor in = filled(g.rank, 10, kInt64);
  Tensor out = Tensor::empty({10 * n}, kInt64);
  g.comm->all_gather(in, out);
  auto gathered = out.to_vector<double>();
  bool ok = true;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 10; ++i) ok = ok && gathered[size_t(r * 10 + i)] == value_at(r, i);
  expect(ok, "all_gather", failures);

  Tensor rs_in = filled(g.rank, 12 * n, kFloat32);
  Tensor rs_out = Tensor::empty({12}, kFloat32);
  g.comm->reduce_scatter(rs_in, rs_out, ReduceOp::Sum);
  auto rs = rs_out.to_vector<double>();
  ok = true;
  for (int i = 0; i < 12; ++i) ok = ok && rs[size_t(i)] == rank_sum * ((g.rank * 12 + i) % 7 + 1);
  expect(ok, "reduce_scatter", failures);

  g.comm->barrier();
  std::cout << "rank " << g.rank << " of " << n << ": " << (failures ? "FAILED" : "gloo collectives ok") << std::endl;
  return failures ? 1 : 0;
}

int gloo_die(int die_rank, double timeout) {
  Group g = join(timeout);
  Tensor t = filled(g.rank, 1 << 20, kFloat32);
  g.comm->all_reduce(t, ReduceOp::Sum);
  if (g.rank == die_rank) {
    std::cout << "rank " << g.rank << " exits without a word" << std::endl;
    ::_exit(0);
  }
  const auto t0 = Clock::now();
  bool ok = false;
  try {
    g.comm->all_reduce(t, ReduceOp::Sum);
    std::cout << "rank " << g.rank << ": the all_reduce succeeded without rank " << die_rank << std::endl;
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string msg = e.what();
    ok = msg.find("rank " + std::to_string(die_rank)) != std::string::npos && s < timeout + 3.0;
    std::cout << "rank " << g.rank << " caught after " << s << " s: " << msg << std::endl;
  }
  // Survivors leave together: one that exits early would look gone to the others' checks
  // (and rank 0 hosts the store).
  if (die_rank != 0) {
    try {
      g.store->add("survivors", 1);
      const auto end = Clock::now() + std::chrono::milliseconds(int64_t(timeout * 2000));
      while (g.store->add("survivors", 0) < g.size - 1 && Clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (g.rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the others read it
    } catch (const Error& e) {
      std::cout << "rank " << g.rank << ": store error while finishing: " << e.what() << std::endl;
    }
  }
  return ok ? 0 : 4;
}

// ---- benchmark ----

// Seconds per call of `op`: the fastest of 7 batches, each timed as the slowest rank's
// mean, with the same batch length on every rank (rank 0 picks it to fill the budget).
// The fastest batch, not the median, because the 2-core test machines are shared: it is
// the estimate least disturbed by other processes.
template <typename Op>
double time_op(Communicator& comm, Op&& op, double budget_seconds) {
  op();
  op();  // warm up connections and buffers
  comm.barrier();
  auto t0 = Clock::now();
  op();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  Tensor iters = Tensor::from_vector(
      std::vector<int64_t>{std::clamp<int64_t>(int64_t(budget_seconds / 7 / once), 1, 1000)});
  comm.broadcast(iters, 0);
  const int64_t n = iters.item<int64_t>();
  std::vector<double> batches;
  for (int b = 0; b < 7; ++b) {
    comm.barrier();
    t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) op();
    Tensor seconds = Tensor::from_vector(
        std::vector<double>{std::chrono::duration<double>(Clock::now() - t0).count() / double(n)});
    comm.all_reduce(seconds, ReduceOp::Max);
    batches.push_back(seconds.item<double>());
  }
  return *std::min_element(batches.begin(), batches.end());
}

int bench(double budget_seconds) {
  Group g = join(120.0);
  const int n = g.size;
  if (g.rank == 0) {
    std::printf("all-reduce float32, %d processes over loopback: busbw = algbw * 2(n-1)/n, GB/s = 1e9 B/s\n", n);
    std::printf("%10s  %-6s %12s %10s  %12s %10s  %12s %10s\n", "bytes", "algo", "strata us", "busbw", "gloo ring us",
                "busbw", "gloo bcube us", "busbw");
  }
#ifdef STRATA_HAS_GLOO
  auto* gc = dynamic_cast<GlooCommunicator*>(g.comm.get());
  STRATA_CHECK(gc != nullptr, "bench: not a GlooCommunicator");
  const double bus_factor = 2.0 * (n - 1) / n;
  uint32_t tag = 1u << 30;
  for (int64_t bytes = 1 << 10; bytes <= int64_t(64) << 20; bytes *= 4) {
    const int64_t count = bytes / 4;
    Tensor buf = Tensor::from_vector(std::vector<float>(size_t(count), 0.0f));
    const double t_strata = time_op(*g.comm, [&] { g.comm->all_reduce(buf, ReduceOp::Sum); }, budget_seconds);
    auto direct = [&](gloo::AllreduceOptions::Algorithm algo) {
      return time_op(*g.comm, [&] {
        gloo::AllreduceOptions opts(gc->gloo_context());
        opts.setOutput(buf.data<float>(), size_t(count));
        opts.setReduceFunction([](void* c, const void* a, const void* b, size_t k) { gloo::sum<float>(c, a, b, k); });
        opts.setAlgorithm(algo);
        opts.setTag(tag++);
        gloo::allreduce(opts);
      }, budget_seconds);
    };
    const double t_ring = direct(gloo::AllreduceOptions::Algorithm::RING);
    const double t_bcube = direct(gloo::AllreduceOptions::Algorithm::BCUBE);
    auto busbw = [&](double t) { return double(bytes) / t / 1e9 * bus_factor; };
    if (g.rank == 0)
      std::printf("%10lld  %-6s %12.1f %10.3f  %12.1f %10.3f  %12.1f %10.3f\n", (long long)bytes,
                  gc->allreduce_algorithm(bytes), t_strata * 1e6, busbw(t_strata), t_ring * 1e6, busbw(t_ring),
                  t_bcube * 1e6, busbw(t_bcube));
    std::fflush(stdout);
  }
  g.comm->barrier();
  return 0;
#else
  std::cout << "bench: built without Gloo" << std::endl;
  return 1;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata_distribute_helper: worker program for the distribute tests"};
  app.require_subcommand(1);
  int index = 0, code = 1, die_rank = 1;
  double timeout = 30.0, budget = 0.3;
  auto* env_cmd = app.add_subcommand("print-env", "print the worker's environment");
  auto* fail_cmd = app.add_subcommand("fail-one", "one worker fails, the others wait");
  fail_cmd->add_option("--index", index)->required();
  fail_cmd->add_option("--code", code)->required();
  auto* check_cmd = app.add_subcommand("gloo-check", "verify every collective");
  check_cmd->add_option("--timeout", timeout);
  auto* die_cmd = app.add_subcommand("gloo-die", "one rank dies; the others must name it");
  die_cmd->add_option("--die-rank", die_rank)->required();
  die_cmd->add_option("--timeout", timeout);
  auto* bench_cmd = app.add_subcommand("bench", "all-reduce bus bandwidth");
  bench_cmd->add_option("--seconds", budget, "time budget per measurement");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*env_cmd) return print_env();
    if (*fail_cmd) return fail_one(index, code);
    if (*check_cmd) return gloo_check(timeout);
    if (*die_cmd) return gloo_die(die_rank, timeout);
    if (*bench_cmd) return bench(budget);
  } catch (const std::exception& e) {
    std::cout << "helper error: " << e.what() << std::endl;
    return 2;
  }
  return 1;
}
