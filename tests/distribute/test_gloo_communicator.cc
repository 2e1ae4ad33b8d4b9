// GlooCommunicator: every collective with 1-4 ranks as threads (each with its own store
// client and Gloo context), failures (a rank that never joins, one that stops calling,
// one that dies), and real worker processes started through strata-launch.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "child_process.h"
#include <strata/core/error.h>
#include <strata/core/tensor.h>
#include <strata/distribute/collective/gloo_communicator.h>
#include <strata/distribute/collective/tcp_store.h>

using namespace strata;
using namespace strata::distribute;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What a rank thread reports: "" when every check passed, otherwise what went wrong.
using RankFn = std::function<std::string(int rank, Communicator& comm)>;

struct GroupSpec {
  GroupSpec(int s = 2, double t = 20.0) : size(s), timeout(t) {}  // NOLINT: {n} reads well at call sites
  int size = 2;
  double timeout = 20.0;
  std::function<void(GlooCommunicatorOptions&)> tweak;
  std::vector<int> absent;  // ranks that never join
};

std::string next_prefix() {
  static std::atomic<int> id{0};
  return "test" + std::to_string(id++);
}

// Runs `fn` on one thread per rank, each with its own TcpStore client and communicator.
// Returns each rank's report (exceptions become "error: <what>"). Catch2 assertions stay
// on the main thread.
std::vector<std::string> run_group(const GroupSpec& spec, const RankFn& fn) {
  TcpStoreServer server(0, "127.0.0.1");
  const std::string prefix = next_prefix();
  std::vector<std::string> reports(size_t(spec.size));
  std::vector<std::thread> threads;
  for (int r = 0; r < spec.size; ++r) {
    if (std::find(spec.absent.begin(), spec.absent.end(), r) != spec.absent.end()) continue;
    threads.emplace_back([&, r] {
      try {
        GlooCommunicatorOptions o;
        o.rank = r;
        o.size = spec.size;
        o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), spec.timeout);
        o.prefix = prefix;
        o.hostname = "127.0.0.1";
        o.comm.timeout_seconds = spec.timeout;
        if (spec.tweak) spec.tweak(o);
        auto comm = make_gloo_communicator(o);
        reports[size_t(r)] = fn(r, *comm);
      } catch (const std::exception& e) {
        reports[size_t(r)] = std::string("error: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return reports;
}

void require_all_ok(const std::vector<std::string>& reports) {
  for (size_t r = 0; r < reports.size(); ++r) {
    INFO("rank " << r << ": " << reports[r]);
    CHECK(reports[r].empty());
  }
}

// Element i of rank r: (r + 1) * (i % 7 + 1) — small integers, exact in every dtype.
double value_at(int r, int64_t i) { return double((r + 1) * (i % 7 + 1)); }

Tensor filled(int rank, const Shape& shape, DType dtype) {
  const int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value_at(rank, i);
  return Tensor::from_vector(v, shape, dtype);
}

double expected(ReduceOp op, int size, int64_t i, DType dtype) {
  const double k = double(i % 7 + 1);
  const double sum = size * (size + 1) / 2.0 * k;
  switch (op) {
    case ReduceOp::Sum: return sum;
    case ReduceOp::Max: return size * k;
    case ReduceOp::Min: return k;
    case ReduceOp::Mean: return is_integral(dtype) ? std::trunc(sum / size) : sum / size;
  }
  return 0;
}

const char* op_str(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

// Checks an all-reduce of `count` elements; returns a report line on mismatch.
std::string check_all_reduce(int rank, Communicator& comm, int64_t count, DType dtype, ReduceOp op) {
  Tensor t = filled(rank, {count}, dtype);
  comm.all_reduce(t, op);
  const auto got = t.to_vector<double>();
  for (int64_t i = 0; i < count; ++i) {
    const double want = expected(op, comm.size(), i, dtype);
    if (got[size_t(i)] != want) {
      std::ostringstream os;
      os << "all_reduce " << op_str(op) << " " << dtype_name(dtype) << " x" << count << ": element " << i << " is "
         << got[size_t(i)] << ", expected " << want;
      return os.str();
    }
  }
  return {};
}

bool skip_without_gloo() {
  if (gloo_available()) return false;
  WARN("skipped: strata was built without Gloo");
  return true;
}

}  // namespace

TEST_CASE("make_gloo_communicator reports a build without Gloo", "[gloo]") {
#ifdef STRATA_HAS_GLOO
  CHECK(gloo_available());
#else
  CHECK_FALSE(gloo_available());
  GlooCommunicatorOptions o;
  REQUIRE_THROWS_WITH(make_gloo_communicator(o), Catch::Contains("built without Gloo"));
#endif
}

TEST_CASE("Gloo all_reduce: every dtype and op with 2, 3 and 4 ranks", "[gloo]") {
  if (skip_without_gloo()) return;
  for (int size : {2, 3, 4}) {
    INFO("ranks: " << size);
    require_all_ok(run_group({size}, [](int rank, Communicator& comm) -> std::string {
      for (DType dtype : {kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16})
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min})
          for (int64_t count : {int64_t(1), int64_t(7), int64_t(1000), int64_t(100003)})
            if (auto r = check_all_reduce(rank, comm, count, dtype, op); !r.empty()) return r;
      // A 2-D buffer is reduced as its flat elements; an empty one is a no-op.
      Tensor m = filled(rank, {30, 40}, kFloat32);
      comm.all_reduce(m, ReduceOp::Sum);
      if (m.to_vector<double>()[1199] != expected(ReduceOp::Sum, comm.size(), 1199, kFloat32)) return "2-D sum";
      Tensor empty = Tensor::empty({0, 3}, kFloat32);
      comm.all_reduce(empty, ReduceOp::Sum);
      return {};
    }));
  }
}

TEST_CASE("Gloo all_reduce: direct, scatter_gather, bcube and ring all reduce correctly at every size", "[gloo]") {
  if (skip_without_gloo()) return;
  for (int size : {2, 3, 4}) {
    for (std::string algorithm : {"direct", "scatter_gather", "bcube", "ring"}) {
      INFO("ranks: " << size << ", " << algorithm << " everywhere");
      GroupSpec spec{size};
      spec.tweak = [algorithm](GlooCommunicatorOptions& o) {
        o.comm.shared_memory = false;  // TCP: the algorithms under test
        if (algorithm == "ring") o.comm.implementation = CommunicationImplementation::Ring;
        o.direct_max_bytes = algorithm == "direct" ? (int64_t(1) << 40) : 0;
        o.direct_again_bytes = int64_t(1) << 41;
        o.bcube_min_bytes = algorithm == "scatter_gather" ? (int64_t(1) << 40) : 0;
        o.ring_min_bytes = algorithm == "ring" ? 0 : (int64_t(1) << 40);
      };
      require_all_ok(run_group(spec, [algorithm](int rank, Communicator& comm) -> std::string {
#ifdef STRATA_HAS_GLOO
        auto& gc = dynamic_cast<GlooCommunicator&>(comm);
        if (gc.allreduce_algorithm(1 << 20) != algorithm) return "algorithm choice";
#endif
        // 600001 floats are 5 segments of the direct exchange; scatter_gather splits them
        // into unequal parts (600001 leaves a remainder of 1 with 2, 3 and 4 ranks) of 2-3
        // segments each, and runs the direct exchange for fewer elements than ranks.
        for (int64_t count : {int64_t(1), int64_t(2), int64_t(5), int64_t(4099), int64_t(600001)})
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
            if (auto r = check_all_reduce(rank, comm, count, kFloat32, op); !r.empty()) return r;
        return {};
      }));
    }
  }
#ifdef STRATA_HAS_GLOO
  // The defaults over TCP: with 2 ranks the direct exchange up to 512 KB, Gloo's
  // algorithms above.
  GroupSpec tcp2{2};
  tcp2.tweak = [](GlooCommunicatorOptions& o) { o.comm.shared_memory = false; };
  require_all_ok(run_group(tcp2, [](int, Communicator& comm) -> std::string {
    auto& gc = dynamic_cast<GlooCommunicator&>(comm);
    if (std::string(gc.allreduce_algorithm(1024)) != "direct") return "1 KB should use direct";
    if (std::string(gc.allreduce_algorithm(512 << 10)) != "direct") return "512 KB should use direct";
    if (std::string(gc.allreduce_algorithm(1 << 20)) != "bcube") return "1 MB should use bcube";
    if (std::string(gc.allreduce_algorithm(4 << 20)) != "ring") return "4 MB should use ring";
    if (std::string(gc.allreduce_algorithm(16 << 20)) != "ring") return "16 MB should use ring";
    if (std::string(gc.allreduce_algorithm(64 << 20)) != "ring") return "64 MB should use ring";
    return {};
  }));
  // Larger groups: direct up to 768 KB (each rank sends n-1 copies), then scatter_gather
  // below 4 MB, the ring from 4 MB.
  GroupSpec tcp4{4};
  tcp4.tweak = tcp2.tweak;
  require_all_ok(run_group(tcp4, [](int, Communicator& comm) -> std::string {
    auto& gc = dynamic_cast<GlooCommunicator&>(comm);
    if (std::string(gc.allreduce_algorithm(768 << 10)) != "direct") return "768 KB with 4 ranks should use direct";
    if (std::string(gc.allreduce_algorithm(1 << 20)) != "scatter_gather")
      return "1 MB with 4 ranks should use scatter_gather";
    if (std::string(gc.allreduce_algorithm((4 << 20) - 4)) != "scatter_gather")
      return "4 MB - 4 bytes with 4 ranks should use scatter_gather";
    if (std::string(gc.allreduce_algorithm(4 << 20)) != "ring") return "4 MB with 4 ranks should use ring";
    if (std::string(gc.allreduce_algorithm(64 << 20)) != "ring") return "64 MB with 4 ranks should use ring";
    return {};
  }));
#endif
}

TEST_CASE("Gloo direct, scatter_gather and shared-memory all_reduce sum in rank order: every rank gets the same bits",
          "[gloo]") {
  if (skip_without_gloo()) return;
  // Values whose float sums depend on the order of addition; more segments than the
  // exchange keeps in flight (its window), so scratch slots are reused.
  const int64_t count = 9 * (int64_t(512) << 10) / 4 + 5;
  auto values = [count](int rank) {
    std::vector<float> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      v[size_t(i)] = float(std::pow(10.0, double((i * 7 + rank * 3) % 13) - 6.0)) * (i % 2 ? 1.0f : -1.0f);
    return v;
  };
  for (int size : {2, 3, 4}) {
    for (const std::string mode : {"direct", "scatter_gather", "shared_memory"}) {
      INFO("ranks: " << size << ", " << mode);
      const bool scatter_gather = mode == "scatter_gather", shared = mode == "shared_memory";
      std::vector<float> want = values(0);
      for (int r = 1; r < size; ++r) {
        const auto v = values(r);
        for (int64_t i = 0; i < count; ++i) want[size_t(i)] += v[size_t(i)];
      }
      GroupSpec spec{size};
      spec.tweak = [scatter_gather, shared](GlooCommunicatorOptions& o) {
        o.direct_max_bytes = scatter_gather ? 0 : int64_t(1) << 40;
        o.bcube_min_bytes = int64_t(1) << 40;
        o.comm.shared_memory = shared;
      };
      require_all_ok(run_group(spec, [&](int rank, Communicator& comm) -> std::string {
#ifdef STRATA_HAS_GLOO
        auto& gc = dynamic_cast<GlooCommunicator&>(comm);
        if (gc.uses_shared_memory() != shared) return "shared memory in use: " + gc.shared_memory_unavailable();
#endif
        Tensor t = Tensor::from_vector(values(rank));
        comm.all_reduce(t, ReduceOp::Sum);
        const float* got = t.data<float>();
        for (int64_t i = 0; i < count; ++i)
          if (std::memcmp(&got[i], &want[size_t(i)], sizeof(float)) != 0)
            return "element " + std::to_string(i) + " differs from the rank-order sum";
        // Again: buffers (the shared-memory slots, the scratch) are reused across calls.
        t = Tensor::from_vector(values(rank));
        comm.all_reduce(t, ReduceOp::Sum);
        if (std::memcmp(t.data<float>(), want.data(), want.size() * sizeof(float)) != 0) return "second call differs";
        return {};
      }));
    }
  }
}

TEST_CASE("Gloo direct, scatter_gather and shared-memory all_reduce: NaN in max and min as std::max and std::min",
          "[gloo]") {
  if (skip_without_gloo()) return;
  // Rank r holds r + 1 everywhere but element r, which is NaN. Folding in rank order with
  // std::max / std::min (as gloo::max and gloo::min do) keeps a NaN already in the running
  // result and drops one that arrives later: only rank 0's NaN survives. A sum keeps all.
  // scatter_gather folds each part on its owner (parts of 2, 1 and 1 elements here).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::string mode : {"direct", "scatter_gather", "shared_memory"}) {
    INFO(mode);
    const bool scatter_gather = mode == "scatter_gather", shared = mode == "shared_memory";
    GroupSpec spec{3};
    spec.tweak = [scatter_gather, shared](GlooCommunicatorOptions& o) {
      o.direct_max_bytes = scatter_gather ? 0 : int64_t(1) << 40;
      o.bcube_min_bytes = int64_t(1) << 40;
      o.comm.shared_memory = shared;
    };
    require_all_ok(run_group(spec, [nan](int rank, Communicator& comm) -> std::string {
      const std::vector<std::pair<ReduceOp, std::vector<float>>> cases = {
          {ReduceOp::Max, {nan, 3, 2, 3}}, {ReduceOp::Min, {nan, 1, 1, 1}}, {ReduceOp::Sum, {nan, nan, nan, 6}}};
      for (const auto& [op, want] : cases) {
        std::vector<float> v(4, float(rank + 1));
        v[size_t(rank)] = nan;
        Tensor t = Tensor::from_vector(v);
        comm.all_reduce(t, op);
        const auto got = t.to_vector<float>();
        for (size_t i = 0; i < want.size(); ++i) {
          const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
          if (!same)
            return std::string(op_str(op)) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                   ", expected " + std::to_string(want[i]);
        }
      }
      return {};
    }));
  }
}

TEST_CASE("Gloo broadcast from every root, any dtype", "[gloo]") {
  if (skip_without_gloo()) return;
  for (int size : {2, 4}) {
    require_all_ok(run_group({size}, [](int rank, Communicator& comm) -> std::string {
      for (int root = 0; root < comm.size(); ++root) {
        for (DType dtype : {kFloat32, kInt64, kBFloat16}) {
          Tensor t = filled(rank, {3, 1000}, dtype);
          comm.broadcast(t, root);
          const auto got = t.to_vector<double>();
          for (int64_t i = 0; i < 3000; ++i)
            if (got[size_t(i)] != value_at(root, i)) return "broadcast from " + std::to_string(root);
        }
        Tensor flags = Tensor::from_vector(std::vector<bool>{rank == root, rank != root});
        comm.broadcast(flags, root);
        if (flags.to_vector<bool>() != std::vector<bool>{true, false}) return "bool broadcast";
      }
      return {};
    }));
  }
}

// Sets comm.shared_memory and checks that the communicator took that path: the
// collectives run over TCP and through shared memory, with the same results.
GroupSpec spec_over(int size, bool shared) {
  GroupSpec spec{size};
  spec.tweak = [shared](GlooCommunicatorOptions& o) { o.comm.shared_memory = shared; };
  return spec;
}

std::string check_path(Communicator& comm, bool shared) {
#ifdef STRATA_HAS_GLOO
  auto& gc = dynamic_cast<GlooCommunicator&>(comm);
  if (gc.uses_shared_memory() != shared) return "shared memory in use: " + gc.shared_memory_unavailable();
#endif
  (void)comm, (void)shared;
  return {};
}

// Runs `fn` on a group of each size, over TCP and then through shared memory.
template <typename Fn>
void run_over_tcp_and_shared_memory(std::initializer_list<int> sizes, Fn fn) {
  for (bool shared : {false, true}) {
    for (int size : sizes) {
      INFO("ranks: " << size << (shared ? ", shared memory" : ", TCP"));
      require_all_ok(run_group(spec_over(size, shared), [&](int rank, Communicator& comm) -> std::string {
        if (auto r = check_path(comm, shared); !r.empty()) return r;
        return fn(rank, comm);
      }));
    }
  }
}

TEST_CASE("Gloo all_gather concatenates along axis 0, over TCP and through shared memory", "[gloo]") {
  if (skip_without_gloo()) return;
  run_over_tcp_and_shared_memory({2, 3, 4}, [](int rank, Communicator& comm) -> std::string {
    const int n = comm.size();
    Tensor in = filled(rank, {3, 2}, kFloat32);
    Tensor out = Tensor::empty({3 * n, 2}, kFloat32);
    comm.all_gather(in, out);
    const auto got = out.to_vector<double>();
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 6; ++i)
        if (got[size_t(r * 6 + i)] != value_at(r, i)) return "all_gather [3,2]";
    // Scalars gather into a vector; an input that is its own slot of the output works.
    Tensor s = Tensor::scalar(double(rank * 10), kInt32);
    Tensor vec = Tensor::empty({n}, kInt32);
    comm.all_gather(s, vec);
    for (int r = 0; r < n; ++r)
      if (vec.to_vector<int32_t>()[size_t(r)] != r * 10) return "all_gather scalars";
    Tensor whole = Tensor::from_vector(std::vector<int64_t>(size_t(n), int64_t(-1)));
    whole.slice(0, rank, rank + 1).copy_(Tensor::from_vector(std::vector<int64_t>{int64_t(rank + 100)}));
    comm.all_gather(whole.slice(0, rank, rank + 1), whole);
    for (int r = 0; r < n; ++r)
      if (whole.to_vector<int64_t>()[size_t(r)] != r + 100) return "in-place all_gather";
    // Parts larger than a shared-memory round (1 MB), of an odd number of bytes.
    const int64_t count = 1500001;
    const auto flag = [](int64_t i, int r) { return (i * 31 + r * 7) % 3 == 0; };
    std::vector<bool> part(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) part[size_t(i)] = flag(i, rank);
    Tensor flags_out = Tensor::empty({count * n}, kBool);
    comm.all_gather(Tensor::from_vector(part), flags_out);
    const bool* got_flags = flags_out.data<bool>();
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < count; ++i)
        if (got_flags[r * count + i] != flag(i, r))
          return "large all_gather: rank " + std::to_string(r) + "'s element " + std::to_string(i);
    return {};
  });
}

TEST_CASE("Gloo reduce_scatter leaves each rank its reduced slice, over TCP and through shared memory", "[gloo]") {
  if (skip_without_gloo()) return;
  run_over_tcp_and_shared_memory({2, 3, 4}, [](int rank, Communicator& comm) -> std::string {
    const int n = comm.size();
    for (DType dtype : {kFloat32, kInt64, kFloat16}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min}) {
        Tensor in = filled(rank, {4 * n, 3}, dtype);
        const auto before = in.to_vector<double>();
        Tensor out = Tensor::empty({4, 3}, dtype);
        comm.reduce_scatter(in, out, op);
        const auto got = out.to_vector<double>();
        for (int64_t i = 0; i < 12; ++i)
          if (got[size_t(i)] != expected(op, n, rank * 12 + i, dtype))
            return std::string("reduce_scatter ") + op_str(op) + " " + dtype_name(dtype);
        if (in.to_vector<double>() != before) return "reduce_scatter modified its input";
      }
    }
    // Several segments per slice; then an output that is a slice of the input itself.
    const int64_t rows = 300001;
    Tensor big = filled(rank, {rows * n}, kFloat32);
    Tensor mine = Tensor::empty({rows}, kFloat32);
    comm.reduce_scatter(big, mine, ReduceOp::Sum);
    const auto got = mine.to_vector<double>();
    for (int64_t i = 0; i < rows; ++i)
      if (got[size_t(i)] != expected(ReduceOp::Sum, n, rank * rows + i, kFloat32)) return "large reduce_scatter";
    Tensor whole = filled(rank, {4 * n, 3}, kFloat32);
    comm.reduce_scatter(whole, whole.slice(0, 0, 4), ReduceOp::Max);
    const auto head = whole.slice(0, 0, 4).to_vector<double>();
    for (int64_t i = 0; i < 12; ++i)
      if (head[size_t(i)] != expected(ReduceOp::Max, n, rank * 12 + i, kFloat32))
        return "reduce_scatter into a slice of its input";
    return {};
  });
}

TEST_CASE("Gloo reduce_scatter sums in rank order over TCP and through shared memory: the bits of all_reduce",
          "[gloo]") {
  if (skip_without_gloo()) return;
  // Values whose float sums depend on the order of addition; parts of several
  // shared-memory rounds (each round stages a piece of every rank's part).
  const int64_t part = 700003;
  auto values = [part](int rank, int size) {
    std::vector<float> v(static_cast<size_t>(part * size));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = float(std::pow(10.0, double((int64_t(i) * 7 + rank * 3) % 13) - 6.0)) * (i % 2 ? 1.0f : -1.0f);
    return v;
  };
  for (bool shared : {false, true}) {
    for (int size : {2, 3}) {
      INFO("ranks: " << size << (shared ? ", shared memory" : ", TCP"));
      std::vector<float> want = values(0, size);
      for (int r = 1; r < size; ++r) {
        const auto v = values(r, size);
        for (size_t i = 0; i < want.size(); ++i) want[i] += v[i];
      }
      require_all_ok(run_group(spec_over(size, shared), [&](int rank, Communicator& comm) -> std::string {
        if (auto r = check_path(comm, shared); !r.empty()) return r;
        Tensor out = Tensor::empty({part}, kFloat32);
        for (int call = 0; call < 2; ++call) {  // the slots are reused by the second call
          comm.reduce_scatter(Tensor::from_vector(values(rank, size)), out, ReduceOp::Sum);
          if (std::memcmp(out.data<float>(), want.data() + rank * part, size_t(part) * sizeof(float)) != 0)
            return "call " + std::to_string(call) + " differs from the rank-order sum";
        }
        // And an all_reduce afterwards still agrees (the rounds stay in step).
        Tensor whole = Tensor::from_vector(values(rank, size));
        comm.all_reduce(whole, ReduceOp::Sum);
        if (std::memcmp(whole.data<float>(), want.data(), want.size() * sizeof(float)) != 0)
          return "all_reduce after reduce_scatter differs";
        return {};
      }));
    }
  }
}

TEST_CASE("Gloo barrier waits for the slowest rank", "[gloo]") {
  if (skip_without_gloo()) return;
  std::vector<double> waited(3, 0.0);
  require_all_ok(run_group({3}, [&](int rank, Communicator& comm) -> std::string {
    comm.barrier();
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    const auto t0 = Clock::now();
    comm.barrier();
    waited[size_t(rank)] = since(t0);
    return {};
  }));
  CHECK(waited[0] > 0.3);
  CHECK(waited[1] > 0.3);
  CHECK(waited[0] < 5.0);
}

TEST_CASE("Gloo with a single rank is a local no-op", "[gloo]") {
  if (skip_without_gloo()) return;
  require_all_ok(run_group({1}, [](int rank, Communicator& comm) -> std::string {
    if (auto r = check_all_reduce(rank, comm, 10, kFloat32, ReduceOp::Mean); !r.empty()) return r;
    Tensor in = filled(0, {2}, kFloat32), out = Tensor::empty({2}, kFloat32);
    comm.all_gather(in, out);
    comm.reduce_scatter(in, out, ReduceOp::Sum);
    comm.broadcast(in, 0);
    comm.barrier();
    return out.to_vector<double>() == std::vector<double>{1, 2} ? "" : "size-1 collectives";
  }));
}

TEST_CASE("Gloo misuse throws strata::Error naming the op and the rule", "[gloo]") {
  if (skip_without_gloo()) return;
  require_all_ok(run_group({2}, [](int rank, Communicator& comm) -> std::string {
    // Every rank makes the same bad call, so the group stays in step.
    auto expect_error = [](const std::function<void()>& f, const std::string& text) -> std::string {
      try {
        f();
      } catch (const Error& e) {
        return std::string(e.what()).find(text) != std::string::npos ? "" : std::string("wrong message: ") + e.what();
      }
      return "no error for: " + text;
    };
    Tensor m = filled(rank, {2, 3}, kFloat32);
    for (auto r : {
             expect_error([&] { comm.all_reduce(m.transpose(), ReduceOp::Sum); }, "is not contiguous"),
             expect_error([&] { comm.all_reduce(Tensor::from_vector(std::vector<bool>{true}), ReduceOp::Sum); },
                          "cannot reduce a bool tensor"),
             expect_error([&] { comm.all_reduce(Tensor(), ReduceOp::Sum); }, "undefined tensor"),
             expect_error([&] { comm.broadcast(m, 2); }, "root 2 is out of range for a group of 2"),
             expect_error([&] { comm.all_gather(m, Tensor::empty({4, 2}, kFloat32)); },
                          "all_gather: output has shape [4,2], expected [4,3]"),
             expect_error([&] { comm.all_gather(m, Tensor::empty({4, 3}, kFloat64)); }, "differs from output dtype"),
             expect_error([&] { comm.reduce_scatter(Tensor::empty({3}, kFloat32), Tensor::empty({1}, kFloat32),
                                                    ReduceOp::Sum); },
                          "cannot be split into 2 equal parts"),
             expect_error([&] { comm.reduce_scatter(m, Tensor::empty({2, 3}, kFloat32), ReduceOp::Sum); },
                          "output has shape [2,3], expected [1,3]"),
         })
      if (!r.empty()) return r;
    // Argument errors happen before any communication: the group is still usable.
    return check_all_reduce(rank, comm, 5, kFloat32, ReduceOp::Sum);
  }));
  GlooCommunicatorOptions bad;
  bad.rank = 2;
  bad.size = 2;
  REQUIRE_THROWS_WITH(make_gloo_communicator(bad), Catch::Contains("rank 2 is out of range for a group of 2"));
  bad.rank = 0;
  REQUIRE_THROWS_WITH(make_gloo_communicator(bad), Catch::Contains("no rendezvous store"));
}

TEST_CASE("Gloo rendezvous: a rank that never joins is named within the timeout", "[gloo]") {
  if (skip_without_gloo()) return;
  GroupSpec spec{3, 1.5};
  spec.absent = {2};
  const auto t0 = Clock::now();
  auto reports = run_group(spec, [](int, Communicator&) { return std::string("joined without rank 2"); });
  const double took = since(t0);
  for (int r : {0, 1}) {
    INFO(reports[size_t(r)]);
    CHECK(reports[size_t(r)].find("rank(s) 2 to join") != std::string::npos);
    CHECK(reports[size_t(r)].find("never arrived") != std::string::npos);
  }
  CHECK(took < 1.5 + 3.0);
}

TEST_CASE("Gloo: a connection attempt that fails on one rank is retried by the whole group", "[gloo]") {
  if (skip_without_gloo()) return;
  GroupSpec spec{3, 10.0};
  // Rank 1's first attempt fails after its mesh connected, before the attempt's barrier;
  // ranks 0 and 2 connected their side and must give that mesh up too.
  spec.tweak = [](GlooCommunicatorOptions& o) {
    if (o.rank == 1)
      o.connect_fault_for_testing = [](int attempt) {
        if (attempt == 0) throw std::runtime_error("injected: connect [127.0.0.1]:1: Connection refused");
      };
  };
  const auto t0 = Clock::now();
  auto reports = run_group(spec, [](int rank, Communicator& comm) -> std::string {
    const int attempts = dynamic_cast<GlooCommunicator&>(comm).connect_attempts();
    if (attempts != 2) return "connected in " + std::to_string(attempts) + " attempts, expected 2";
    Tensor t = filled(rank, {1000}, kFloat32);
    comm.all_reduce(t, ReduceOp::Sum);
    const float got = t.data<float>()[999];  // (1 + 2 + 3) * (999 % 7 + 1)
    return got == 36.0f ? "" : "all_reduce gave " + std::to_string(got) + ", expected 36";
  });
  require_all_ok(reports);
  CHECK(since(t0) < 10.0);  // the verdicts, not a timeout, start the second attempt
}

TEST_CASE("Gloo: a group whose every connection attempt fails names the failing rank on every rank", "[gloo]") {
  if (skip_without_gloo()) return;
  GroupSpec spec{3, 10.0};
  spec.tweak = [](GlooCommunicatorOptions& o) {
    if (o.rank == 2)
      o.connect_fault_for_testing = [](int) { throw std::runtime_error("injected: Connection refused"); };
  };
  const auto t0 = Clock::now();
  auto reports = run_group(spec, [](int, Communicator&) { return std::string("connected despite the fault"); });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << reports[size_t(r)]);
    CHECK(reports[size_t(r)].find("could not connect group") != std::string::npos);
    CHECK(reports[size_t(r)].find("in 3 attempts") != std::string::npos);
    CHECK(reports[size_t(r)].find("rank 2: injected: Connection refused") != std::string::npos);
  }
  CHECK(since(t0) < 10.0);
}

TEST_CASE("Gloo: a pair whose far end does not prove the job secret is never used", "[gloo]") {
  if (skip_without_gloo()) return;
  // Rank 2 proves another secret over its pairs: what a stranger that reached a rank's
  // Gloo port before the real peer would present (Gloo's pairs accept whoever connects
  // first). Every attempt fails on both sides of its pairs, and no collective runs.
  GroupSpec spec{3, 10.0};
  spec.tweak = [](GlooCommunicatorOptions& o) {
    if (o.rank == 2) o.pair_secret_for_testing = JobSecret::generate();
  };
  auto reports = run_group(spec, [](int, Communicator&) { return std::string("connected despite the stranger"); });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << reports[size_t(r)]);
    CHECK(reports[size_t(r)].find("could not connect group") != std::string::npos);
    CHECK(reports[size_t(r)].find("in 3 attempts") != std::string::npos);
    CHECK(reports[size_t(r)].find("in rank 2's place did not prove the job secret") != std::string::npos);
  }
}

TEST_CASE("Gloo: a store prefix reused by a second group is refused", "[gloo]") {
  if (skip_without_gloo()) return;
  TcpStoreServer server(0, "127.0.0.1");
  auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 5.0);
  GlooCommunicatorOptions o;
  o.rank = 0;
  o.size = 1;
  o.store = store;
  o.prefix = "shared";
  o.hostname = "127.0.0.1";
  o.comm.timeout_seconds = 5.0;
  auto first = make_gloo_communicator(o);
  REQUIRE_THROWS_WITH(make_gloo_communicator(o), Catch::Contains("store prefix 'shared'") &&
                                                     Catch::Contains("was already used by another group"));
}

TEST_CASE("Gloo: a rank that stops calling collectives makes the others fail in time", "[gloo]") {
  if (skip_without_gloo()) return;
  std::promise<void> rank0_done;
  auto done = rank0_done.get_future().share();
  double took = 0;
  std::string second_call;
  auto reports = run_group({2, 1.0}, [&](int rank, Communicator& comm) -> std::string {
    if (rank == 1) {
      // Alive and connected, but never enters the all_reduce.
      done.wait_for(std::chrono::seconds(20));
      return {};
    }
    Tensor t = filled(rank, {1000}, kFloat32);
    const auto t0 = Clock::now();
    std::string message;
    try {
      comm.all_reduce(t, ReduceOp::Sum);
      message = "all_reduce succeeded alone";
    } catch (const Error& e) {
      message = e.what();
    }
    took = since(t0);
    try {
      comm.barrier();
    } catch (const Error& e) {
      second_call = e.what();
    }
    rank0_done.set_value();
    return message;
  });
  INFO(reports[0]);
  CHECK(reports[0].find("gloo all_reduce failed on rank 0 of 2") != std::string::npos);
  CHECK(reports[0].find("slow or stuck") != std::string::npos);
  CHECK(took >= 0.9);
  CHECK(took < 1.0 + 3.0);
  CHECK(second_call.find("unusable after an earlier failure") != std::string::npos);
  CHECK(reports[1].empty());
}

TEST_CASE("Gloo: a rank whose process is gone is named by the survivors", "[gloo]") {
  if (skip_without_gloo()) return;
  // In one process, "gone" is rank 2 closing its Gloo context and its store connection.
  TcpStoreServer server(0, "127.0.0.1");
  const std::string prefix = next_prefix();
  std::vector<std::string> reports(3);
  std::vector<double> took(3, 0.0);
  std::promise<void> rank2_left;
  auto left = rank2_left.get_future().share();
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        GlooCommunicatorOptions o;
        o.rank = r;
        o.size = 3;
        o.store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 5.0);
        o.prefix = prefix;
        o.hostname = "127.0.0.1";
        o.comm.timeout_seconds = 5.0;
        auto comm = make_gloo_communicator(o);
        Tensor t = filled(r, {1 << 16}, kFloat32);
        comm->all_reduce(t, ReduceOp::Sum);
        if (r == 2) {
          comm.reset();
          o.store.reset();
          rank2_left.set_value();
          return;
        }
        left.wait_for(std::chrono::seconds(20));
        const auto t0 = Clock::now();
        try {
          comm->all_reduce(t, ReduceOp::Sum);
          reports[size_t(r)] = "all_reduce succeeded without rank 2";
        } catch (const Error& e) {
          reports[size_t(r)] = e.what();
        }
        took[size_t(r)] = since(t0);
      } catch (const std::exception& e) {
        reports[size_t(r)] = std::string("setup error: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 1}) {
    INFO(reports[size_t(r)]);
    CHECK(reports[size_t(r)].find("rank 2 is gone") != std::string::npos);
    CHECK(took[size_t(r)] < 5.0 + 3.0);
  }
}

TEST_CASE("Gloo on one machine all-reduces through shared memory unless told not to", "[gloo]") {
  if (skip_without_gloo()) return;
#ifdef STRATA_HAS_GLOO
  for (std::string mode : {"default", "off", "ring"}) {
    INFO(mode);
    GroupSpec spec{3};
    spec.tweak = [mode](GlooCommunicatorOptions& o) {
      if (mode == "off") o.comm.shared_memory = false;
      if (mode == "ring") o.comm.implementation = CommunicationImplementation::Ring;
    };
    require_all_ok(run_group(spec, [mode](int rank, Communicator& comm) -> std::string {
      auto& gc = dynamic_cast<GlooCommunicator&>(comm);
      const bool want = mode == "default";
      if (gc.uses_shared_memory() != want) return "uses_shared_memory: " + gc.shared_memory_unavailable();
      const std::string algorithm = gc.allreduce_algorithm(1 << 20);
      if (want && algorithm != "shared_memory") return "algorithm " + algorithm;
      if (!want && algorithm == "shared_memory") return "shared memory although " + mode;
      // Several chunks, an odd tail, and every op.
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min})
        if (auto r = check_all_reduce(rank, comm, (int64_t(5) << 18) + 3, kFloat32, op); !r.empty()) return r;
      return {};
    }));
  }
#endif
}

TEST_CASE("Gloo shared memory: a rank whose collective fails releases the ranks waiting for it", "[gloo]") {
  if (skip_without_gloo()) return;
  // Rank 1 never enters the all_reduce. Rank 0 gives up after its 1 s timeout; rank 2,
  // whose own timeout is 20 s, must not wait that long: rank 0's failure aborts the group.
  std::promise<void> finished;
  auto done = finished.get_future().share();
  std::atomic<int> failed{0};
  std::vector<double> took(3, 0.0);
  GroupSpec spec{3, 20.0};
  spec.tweak = [](GlooCommunicatorOptions& o) { o.comm.timeout_seconds = o.rank == 0 ? 1.0 : 20.0; };
  auto reports = run_group(spec, [&](int rank, Communicator& comm) -> std::string {
    if (rank == 1) {
      done.wait_for(std::chrono::seconds(30));
      return {};
    }
    Tensor t = filled(rank, {1000}, kFloat32);
    const auto t0 = Clock::now();
    std::string message = "all_reduce succeeded without rank 1";
    try {
      comm.all_reduce(t, ReduceOp::Sum);
    } catch (const Error& e) {
      message = e.what();
    }
    took[size_t(rank)] = since(t0);
    if (++failed == 2) finished.set_value();
    return message;
  });
  INFO(reports[0] << "\n" << reports[2]);
  CHECK(reports[0].find("gloo all_reduce failed on rank 0 of 3") != std::string::npos);
  CHECK(reports[0].find("rank 1 did not arrive") != std::string::npos);
  CHECK(reports[2].find("rank 0 aborted the group") != std::string::npos);
  CHECK(took[0] >= 0.9);
  CHECK(took[2] < 1.0 + 5.0);
  CHECK(reports[1].empty());
}

// ---- real processes ----

namespace {

testing::ProcessResult launch(int workers, const std::vector<std::string>& helper_args, double timeout) {
  std::vector<std::string> argv{STRATA_LAUNCH_BIN, "--workers", std::to_string(workers), "--timeout",
                                std::to_string(int(timeout)), "--", STRATA_DISTRIBUTE_HELPER};
  argv.insert(argv.end(), helper_args.begin(), helper_args.end());
  return testing::run_process(argv, {}, timeout + 30.0);
}

}  // namespace

TEST_CASE("Gloo across worker processes started by strata-launch", "[gloo][multiprocess]") {
  if (skip_without_gloo()) return;
  for (int workers : {2, 4}) {
    auto r = launch(workers, {"gloo-check", "--timeout", "60"}, 120);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(r.timed_out);
    for (int i = 0; i < workers; ++i) {
      const std::string line = "[worker " + std::to_string(i) + "] rank " + std::to_string(i) + " of " +
                               std::to_string(workers) + ": gloo collectives ok";
      CHECK(r.output.find(line) != std::string::npos);
    }
  }
}

TEST_CASE("Gloo across processes: a worker that dies is named by the others", "[gloo][multiprocess]") {
  if (skip_without_gloo()) return;
  for (int die_rank : {1, 0}) {  // rank 0 also hosts the store
    auto r = launch(3, {"gloo-die", "--die-rank", std::to_string(die_rank), "--timeout", "5"}, 60);
    INFO(r.output);
    CHECK(r.exit_code == 0);  // every survivor caught an error naming the dead rank in time
    for (int i = 0; i < 3; ++i) {
      if (i == die_rank) continue;
      const std::string caught = "[worker " + std::to_string(i) + "] rank " + std::to_string(i) + " caught after";
      CHECK(r.output.find(caught) != std::string::npos);
    }
  }
}

TEST_CASE("Bench: all-reduce bus bandwidth, GlooCommunicator vs gloo::allreduce", "[.bench]") {
  if (skip_without_gloo()) return;
  for (int workers : {2, 4}) {
    auto r = launch(workers, {"bench", "--seconds", "0.3"}, 280);
    std::cout << r.output << std::endl;
    CHECK(r.exit_code == 0);
  }
}
