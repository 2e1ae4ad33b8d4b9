// The in-process collectives behind MirroredStrategy: the cross-device ops agree bitwise
// (cross_device_ops_test.py's reduce/all-reduce assertions), and every failure — a
// replica throwing, collectives issued in different orders, a replica that never
// arrives — is reported, never a hang; replica-context all-reduce and all-gather are
// differentiable.
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/thread_pool.h>
#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/strategy.h>
#include "tests/distribute/strategy_cases.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;
using Clock = std::chrono::steady_clock;

namespace {
Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<double> v(size_t(numel_of(shape)));
  if (is_floating(dtype)) {
    std::normal_distribution<double> d(0.0, 3.0);
    for (auto& x : v) x = d(gen);
  } else {
    std::uniform_int_distribution<int> d(-1000, 1000);
    for (auto& x : v) x = d(gen);
  }
  return Tensor::from_vector(v, shape, dtype);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

TEST_CASE("cross-device ops: ReductionToOneDevice and HierarchicalCopyAllReduce agree bitwise") {
  const std::vector<DType> dtypes = {kFloat32, kFloat64, kInt32, kInt64};
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};
  for (int n : {2, 3, 4}) {
    MirroredStrategy one(MirroredStrategy::cpu_devices(n), CrossDeviceOps::ReductionToOneDevice);
    MirroredStrategy hier(MirroredStrategy::cpu_devices(n), CrossDeviceOps::HierarchicalCopyAllReduce);
    REQUIRE(one.cross_device_ops() == CrossDeviceOps::ReductionToOneDevice);
    REQUIRE(hier.cross_device_ops() == CrossDeviceOps::HierarchicalCopyAllReduce);
    for (DType dtype : dtypes) {
      for (ReduceOp op : ops) {
        for (int64_t size : {int64_t(1), int64_t(2), int64_t(7), int64_t(1000), int64_t(4099)}) {
          INFO("replicas " << n << " dtype " << dtype_name(dtype) << " op " << reduce_op_name(op) << " size " << size);
          auto values = one.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
            return random_tensor({size}, dtype, uint32_t(1000 * ctx.replica_id_in_sync_group + size));
          });
          auto step = [op](const Tensor& v) { return get_replica_context()->all_reduce(op, v); };
          auto a = one.run(step, values);
          auto b = hier.run(step, values);
          for (int r = 0; r < n; ++r) {
            REQUIRE(bitwise_equal(a[size_t(r)], a[0]));  // every replica has the same result
            REQUIRE(bitwise_equal(b[size_t(r)], a[0]));  // and both algorithms agree bitwise
            REQUIRE(a[size_t(r)].device() == cpu(r));
          }
          // Cross-replica reductions agree with the collective bitwise too.
          REQUIRE(bitwise_equal(one.extended().reduce_to(op, values, cpu(0)), a[0]));
          REQUIRE(bitwise_equal(hier.extended().reduce_to(op, values, cpu(0)), a[0]));
          // And with a reference fold in double precision.
          std::vector<double> want = values[0].to_vector<double>();
          for (int r = 1; r < n; ++r) {
            auto x = values[size_t(r)].to_vector<double>();
            for (size_t i = 0; i < want.size(); ++i) {
              if (op == ReduceOp::Max) want[i] = std::max(want[i], x[i]);
              else if (op == ReduceOp::Min) want[i] = std::min(want[i], x[i]);
              else want[i] += x[i];
            }
          }
          if (op == ReduceOp::Mean) {
            for (auto& w : want) w = is_floating(dtype) ? w / n : double(int64_t(w / n));
          }
          REQUIRE_ALLCLOSE(a[0], Tensor::from_vector(want, {size}, dtype), 1e-5, 1e-4);
        }
      }
    }
  }
}

TEST_CASE("all_reduce packs by dtype and bytes_per_pack, undefined gradients stay undefined") {
  for (int64_t pack : {int64_t(0), int64_t(64), int64_t(1 << 20)}) {
    INFO("bytes_per_pack " << pack);
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(3), CrossDeviceOps::Default,
                              {.bytes_per_pack = pack, .timeout_seconds = 30});
    auto out = strategy.run([] {
      const double r = get_replica_context()->replica_id_in_sync_group();
      std::vector<Tensor> grads = {full({3, 4}, r), Tensor(), full({5}, 2 * r, kFloat64), full({7}, r),
                                   full({2, 2}, r + 1, kInt32), zeros({0})};
      return get_replica_context()->all_reduce(ReduceOp::Sum, grads);
    });
    for (int r = 0; r < 3; ++r) {
      const auto& g = out[size_t(r)];
      REQUIRE(g.size() == 6);
      REQUIRE_ALLCLOSE(g[0], full({3, 4}, 3.0));
      REQUIRE(!g[1].defined());
      REQUIRE(g[2].dtype() == kFloat64);
      REQUIRE_ALLCLOSE(g[2], full({5}, 6.0, kFloat64));
      REQUIRE_ALLCLOSE(g[3], full({7}, 3.0));
      REQUIRE(g[4].dtype() == kInt32);
      REQUIRE(g[4].to_vector<int>() == std::vector<int>(4, 6));
      REQUIRE(g[5].shape() == Shape{0});
    }
    // The inputs themselves are not modified (the reduction works on a packed copy).
    auto inputs_kept = strategy.run([] {
      Tensor x = ones({4});
      get_replica_context()->all_reduce(ReduceOp::Sum, x);
      return x;
    });
    REQUIRE_ALLCLOSE(inputs_kept[1], ones({4}));
  }
}

TEST_CASE("ReplicaContext::all_reduce: Sum and Mean are differentiable through an all-reduce in backward") {
  // Replica r: y = all_reduce(op, c_r x_r), loss_r = sum(w_r y), c_r = r + 1, w_r = 10^r.
  // x_r reaches every replica's y, so d(loss_r)/d(x_r) as TensorFlow defines it is
  // c_r times the all-reduce of the w's: c_r (1 + 10 + 100) for Sum, a third of it for Mean.
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}) {
    INFO(reduce_op_name(op));
    auto grads = strategy.run([op] {
      ReplicaContext* ctx = get_replica_context();
      const double r = ctx->replica_id_in_sync_group();
      const Tensor x = full({2}, 1.0, kFloat64);
      autograd::GradientTape tape;
      tape.watch(x);
      const Tensor y = ctx->all_reduce(op, x * (r + 1));
      const Tensor loss = sum(y * std::pow(10.0, r));
      return tape.gradient(loss, x, autograd::UnconnectedGradients::Zero);
    });
    const double total = op == ReduceOp::Sum ? 111.0 : op == ReduceOp::Mean ? 37.0 : 0.0;
    for (int r = 0; r < 3; ++r) REQUIRE_ALLCLOSE(grads[size_t(r)], full({2}, (r + 1) * total, kFloat64));
  }
}

TEST_CASE("ReplicaContext::all_gather is differentiable: each replica gets its slice of the summed gradient") {
  // Replica r gathers c_r x_r (r + 1 elements, c_r = r + 1) into y (6 elements); loss_r =
  // sum(w_r y) with w_r[j] = 10^r (j + 1). So d(loss_r)/d(x_r)[i] = c_r * 111 (o_r + i + 1),
  // o_r = r (r + 1) / 2 being where r's slice starts.
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  auto grads = strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    const int r = ctx->replica_id_in_sync_group();
    const Tensor x = full({r + 1}, 1.0, kFloat64);
    autograd::GradientTape tape;
    tape.watch(x);
    const Tensor y = ctx->all_gather(x * double(r + 1), 0);
    const Tensor w = arange(1, 7, 1, kFloat64) * std::pow(10.0, r);
    return tape.gradient(sum(y * w), x);
  });
  for (int r = 0; r < 3; ++r) {
    std::vector<double> want;
    for (int i = 0; i <= r; ++i) want.push_back((r + 1) * 111.0 * (r * (r + 1) / 2 + i + 1));
    REQUIRE_ALLCLOSE(grads[size_t(r)], Tensor::from_vector(want, {r + 1}, kFloat64));
  }
}

TEST_CASE("communicator collectives: broadcast, all_gather, reduce_scatter, barrier") {
  for (CrossDeviceOps ops : {CrossDeviceOps::ReductionToOneDevice, CrossDeviceOps::HierarchicalCopyAllReduce}) {
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(3), ops);
    auto results = strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      InProcessCommunicator& comm = strategy.replica_context(r).communicator();
      REPLICA_REQUIRE(comm.rank() == r);
      REPLICA_REQUIRE(comm.size() == 3);
      REPLICA_REQUIRE(comm.backend() == "in-process");
      Tensor b = full({4}, double(r));
      comm.broadcast(b, 2);
      Tensor gathered = zeros({6, 2});
      comm.all_gather(full({2, 2}, double(r)), gathered);
      Tensor scattered = zeros({2});
      comm.reduce_scatter(arange(0, 6), scattered, ReduceOp::Sum);
      comm.barrier();
      Tensor mean = full({5}, double(r));
      comm.all_reduce(mean, ReduceOp::Mean);
      return std::vector<Tensor>{b, gathered, scattered, mean};
    });
    for (int r = 0; r < 3; ++r) {
      const auto& x = results[size_t(r)];
      REQUIRE_ALLCLOSE(x[0], full({4}, 2.0));
      REQUIRE(x[1].to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
      REQUIRE(x[2].to_vector<float>() == std::vector<float>{float(3 * (2 * r)), float(3 * (2 * r + 1))});
      REQUIRE_ALLCLOSE(x[3], full({5}, 1.0));
    }
    REQUIRE_THROWS_WITH(strategy.run([&] {
      strategy.replica_context(get_replica_context()->replica_id_in_sync_group()).communicator().all_gather(ones({2}), zeros({5}));
    }),
                        Catch::Contains("all_gather: output shape [5]"));
    REQUIRE_THROWS_WITH(strategy.run([&] {
      strategy.replica_context(get_replica_context()->replica_id_in_sync_group()).communicator().broadcast(ones({2}), 3);
    }),
                        Catch::Contains("root 3 out of range"));
  }
}

TEST_CASE("all_reduce_parts: a bucket summed straight from unpacked parts equals packing and all_reduce, bitwise") {
  // Parts of uneven sizes (one 2-D, one strided) so that the ranks' slices of the bucket
  // start and end inside parts; sums, maxima and minima, in float32 and int64.
  for (int n : {2, 3, 4}) {
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    for (DType dtype : {kFloat32, kInt64}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
        INFO("replicas " << n << " dtype " << dtype_name(dtype) << " op " << reduce_op_name(op));
        auto results = strategy.run([&] {
          const int r = get_replica_context()->replica_id_in_sync_group();
          InProcessCommunicator& comm = strategy.replica_context(r).communicator();
          const uint32_t seed = uint32_t(100 * r);
          const std::vector<Tensor> parts{random_tensor({3}, dtype, seed + 1), random_tensor({5, 7}, dtype, seed + 2),
                                          random_tensor({1}, dtype, seed + 3),
                                          random_tensor({6, 4}, dtype, seed + 4).transpose(0, 1)};
          Tensor bucket = Tensor::empty({3 + 35 + 1 + 24}, dtype);
          comm.all_reduce_parts(parts, bucket, op, "bucket");
          std::vector<Tensor> flat;
          for (const Tensor& p : parts) flat.push_back(reshape(p.contiguous(), {p.numel()}));
          Tensor packed = concat(flat, 0);
          comm.all_reduce(packed, op, "packed");
          return std::vector<Tensor>{bucket, packed};
        });
        for (int r = 0; r < n; ++r) {
          REQUIRE(bitwise_equal(results[size_t(r)][0], results[size_t(r)][1]));
          REQUIRE(bitwise_equal(results[size_t(r)][0], results[0][0]));
        }
      }
    }
    // Replicas whose parts differ in size are told so, not summed out of step.
    REQUIRE_THROWS_WITH(strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      const std::vector<Tensor> parts{ones({r == 1 ? 3 : 2}), ones({r == 1 ? 1 : 2})};
      strategy.replica_context(r).communicator().all_reduce_parts(parts, zeros({4}), ReduceOp::Sum, "bucket");
    }),
                        Catch::Contains("part 0 has"));
    REQUIRE_THROWS_WITH(strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      strategy.replica_context(r).communicator().all_reduce_parts({ones({2})}, zeros({3}), ReduceOp::Sum, "bucket");
    }),
                        Catch::Contains("the output must be a contiguous tensor of 2 elements"));
  }
}

TEST_CASE("sum_products_shared: the replicas' weight gradients summed from factors equal each product folded, bitwise") {
  // The MLP's weight-gradient shapes (OpenBLAS and the direct kernel, 12-row blocks split
  // across the ranks), replicas with uneven batches and an empty one, float32 and float64.
  struct Case {
    int64_t m, n;
    std::vector<int64_t> k;  // each replica's batch
    DType dtype;
  };
  const std::vector<Case> cases{{784, 512, {64, 64}, kFloat32},   {512, 10, {64, 64}, kFloat32},
                                {300, 200, {40, 33, 7}, kFloat32}, {61, 37, {5, 0, 9, 3}, kFloat32},
                                {130, 70, {20, 21}, kFloat64}};
  for (const Case& c : cases) {
    const int n = int(c.k.size());
    INFO(c.m << "x" << c.n << " over " << n << " replicas, " << dtype_name(c.dtype));
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    auto results = strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      InProcessCommunicator& comm = strategy.replica_context(r).communicator();
      const Tensor a = random_tensor({c.k[size_t(r)], c.m}, c.dtype, uint32_t(10 + r));
      const Tensor b = random_tensor({c.k[size_t(r)], c.n}, c.dtype, uint32_t(20 + r));
      const Tensor sums = comm.sum_products_shared(a, b, Tensor::empty({c.m * c.n}, c.dtype), "product");
      // The reference: each replica's matmul, folded in rank order.
      const Tensor folded = comm.all_reduce_parts_shared({matmul(a, b, true, false)}, Tensor::empty({c.m * c.n}, c.dtype),
                                                         ReduceOp::Sum, "folded");
      return std::vector<Tensor>{sums.clone(), folded.clone()};
    });
    for (int r = 0; r < n; ++r) {
      REQUIRE(bitwise_equal(results[size_t(r)][0], results[size_t(r)][1]));
      REQUIRE(bitwise_equal(results[size_t(r)][0], results[0][0]));
    }
  }
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  REQUIRE_THROWS_WITH(strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    strategy.replica_context(r).communicator().sum_products_shared(ones({4, r == 1 ? 3 : 2}), ones({4, 5}),
                                                                   Tensor::empty({r == 1 ? 15 : 10}), "product");
  }),
                      Catch::Contains("do not match replica"));
}

TEST_CASE("a replica that throws releases the others blocked in a collective, within a second") {
  for (CrossDeviceOps ops : {CrossDeviceOps::ReductionToOneDevice, CrossDeviceOps::HierarchicalCopyAllReduce}) {
    for (int n : {2, 4}) {
      INFO(cross_device_ops_name(ops) << " x" << n);
      MirroredStrategy strategy(MirroredStrategy::cpu_devices(n), ops);
      for (int failing = 0; failing < n; ++failing) {
        const auto start = Clock::now();
        REQUIRE_THROWS_WITH(strategy.run([&] {
          ReplicaContext* ctx = get_replica_context();
          ctx->all_reduce(ReduceOp::Sum, ones({16}));  // one good collective first
          if (ctx->replica_id_in_sync_group() == failing) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others are waiting by now
            fail("boom on ", failing);
          }
          ctx->all_reduce(ReduceOp::Sum, ones({16}));
        }),
                            Catch::Equals("replica " + std::to_string(failing) + ": boom on " + std::to_string(failing)));
        REQUIRE(seconds_since(start) < 1.0);
        // The strategy is usable again.
        auto r = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::Sum, ones({1})); });
        REQUIRE(r[size_t(n - 1)].item<float>() == float(n));
      }
    }
  }
  // A failure inside merge_call's function releases the replicas waiting for its result.
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3));
  const auto start = Clock::now();
  REQUIRE_THROWS_WITH(strategy.run([] {
    get_replica_context()->merge_call(
        [](const std::vector<Tensor>&) -> Tensor { fail("merge failed"); }, ones({1}));
  }),
                      Catch::Contains("merge failed"));
  REQUIRE(seconds_since(start) < 1.0);
  // A non-strata exception is reported too.
  REQUIRE_THROWS_WITH(strategy.run([] {
    if (get_replica_context()->replica_id_in_sync_group() == 2) throw std::out_of_range("bad index");
    get_replica_context()->barrier();
  }),
                      Catch::Equals("replica 2: bad index"));
}

TEST_CASE("collectives issued in different orders are reported, not deadlocked") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, {.timeout_seconds = 60});
  auto start = Clock::now();
  REQUIRE_THROWS_WITH(strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 0) {
      ctx->all_reduce(ReduceOp::Sum, ones({4}));
      ctx->all_gather(ones({4}), 0);
    } else {
      ctx->all_gather(ones({4}), 0);
      ctx->all_reduce(ReduceOp::Sum, ones({4}));
    }
  }),
                      Catch::Contains("different orders") && Catch::Contains("all_reduce(sum, float32[4])") &&
                          Catch::Contains("all_gather("));
  REQUIRE(seconds_since(start) < 1.0);
  // Same collective, different shapes or ops.
  REQUIRE_THROWS_WITH(strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    ctx->all_reduce(ReduceOp::Sum, ones({4 + ctx->replica_id_in_sync_group()}));
  }),
                      Catch::Contains("float32[4]") && Catch::Contains("float32[5]"));
  REQUIRE_THROWS_WITH(strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    ctx->all_reduce(ctx->replica_id_in_sync_group() == 0 ? ReduceOp::Sum : ReduceOp::Max, ones({4}));
  }),
                      Catch::Contains("all_reduce(max"));
  // A replica that returns without issuing the collective the others wait in.
  start = Clock::now();
  REQUIRE_THROWS_WITH(strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 0) ctx->all_reduce(ReduceOp::Sum, ones({4}));
  }),
                      Catch::Contains("replica 1 returned from its step function without calling it"));
  REQUIRE(seconds_since(start) < 1.0);
  // Still healthy.
  auto r = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::Sum, ones({1})); });
  REQUIRE(r[0].item<float>() == 2.0f);
}

TEST_CASE("a collective times out naming the replica that did not arrive") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3), CrossDeviceOps::Default, {.timeout_seconds = 0.2});
  const auto start = Clock::now();
  REQUIRE_THROWS_WITH(strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ctx->all_reduce(ReduceOp::Sum, ones({4}));
  }),
                      Catch::Contains("timed out after 0.2 s") && Catch::Contains("replica(s) 1 did not arrive"));
  const double took = seconds_since(start);
  REQUIRE(took < 2.5);  // the sleeping replica finishes its sleep, then fails at once
  auto r = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::Sum, ones({1})); });
  REQUIRE(r[2].item<float>() == 3.0f);
}

TEST_CASE("replica threads are long-lived and never keep more threads busy than cores") {
  const int cores = ComputeSlot::capacity();
  for (int n : {2, 4, 8}) {
    INFO("replicas " << n << " cores " << cores);
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(n));
    std::vector<std::thread::id> first(static_cast<size_t>(n)), second(static_cast<size_t>(n));
    std::vector<int> limits(static_cast<size_t>(n));
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      first[size_t(r)] = std::this_thread::get_id();
      limits[size_t(r)] = thread_parallelism_limit();
    });
    strategy.run([&] { second[size_t(get_replica_context()->replica_id_in_sync_group())] = std::this_thread::get_id(); });
    REQUIRE(first == second);  // the same thread serves replica r in every run
    REQUIRE(std::set<std::thread::id>(first.begin(), first.end()).size() == size_t(n));
    REQUIRE(std::count(first.begin(), first.end(), std::this_thread::get_id()) == 0);
    for (int l : limits) REQUIRE(l == std::max(1, cores / n));

    std::atomic<int> busy{0}, max_busy{0};
    auto work = [&] {
      const int now = ++busy;
      int seen = max_busy.load();
      while (now > seen && !max_busy.compare_exchange_weak(seen, now)) {
      }
      const auto until = Clock::now() + std::chrono::milliseconds(15);
      volatile double x = 0;
      while (Clock::now() < until) x = x + 1;
      --busy;
    };
    strategy.run([&] {
      for (int step = 0; step < 3; ++step) {
        work();
        get_replica_context()->all_reduce(ReduceOp::Sum, ones({8}));  // waiting gives the core up
      }
    });
    REQUIRE(max_busy.load() <= cores);
    REQUIRE(max_busy.load() >= 1);
  }
}

TEST_CASE("run may be called from several threads: multi-replica runs are serialized, single-replica ones are not") {
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(3));
  OneDeviceStrategy one(cpu(0));
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto r = mirrored.run([t, i] {
          const int id = get_replica_context()->replica_id_in_sync_group();
          return get_replica_context()->all_reduce(ReduceOp::Sum, full({3}, double(t * 100 + i + id)));
        });
        for (const Tensor& x : r) {
          if (x.to_vector<float>()[0] != float(3 * (t * 100 + i) + 3)) ++wrong;
        }
        auto s = one.run([t] { return get_replica_context()->all_reduce(ReduceOp::Sum, full({1}, double(t))); });
        if (s[0].item<float>() != float(t)) ++wrong;
      }
    });
  }
  for (auto& c : callers) c.join();
  REQUIRE(wrong == 0);
}
