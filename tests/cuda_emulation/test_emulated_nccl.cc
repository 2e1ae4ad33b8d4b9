// MirroredStrategy on (emulated) GPUs: the NCCL path of the strategies, run in CI. The
// emulated NCCL backend (emulated_nccl.cc) reduces with the in-process communicator, so
// what is tested here is the strategy logic on GPUs — NcclAllReduce chosen by default for
// distinct GPUs, logical GPUs sharing one device reducing in device memory, the same
// training as on CPUs (also under ZeRO-1), a synchronized BatchNormalization, and
// failures that release the other replicas naming the culprit.
// The model is a small MLP written with broadcasting multiplies and sums (matmul is a
// cuBLAS call, which the emulator cannot run).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <utility>
#include <random>
#include <vector>

#include <strata/autograd/autograd.h>
#include <strata/core/ops.h>
#include <strata/distribute/collective/nccl_communicator.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/make_strategy.h>
#include <strata/distribute/strategy.h>
#include <strata/train/loss_scale_optimizer.h>
#include <strata/train/nn/normalization.h>
#include <strata/train/sgd.h>
#include <strata/train/sharded_optimizer_state.h>
#include "tests/cuda_emulation/emulated_nccl.h"

using namespace strata;
using namespace strata::distribute;

namespace emulated_nccl_test {

constexpr int64_t kFeatures = 6, kHidden = 8, kOutputs = 2, kGlobalBatch = 16, kSteps = 4;

// A fixed regression problem: kSteps global batches of inputs and targets (host tensors).
struct Problem {
  std::vector<Tensor> x, y;
};

Problem make_problem() {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Problem p;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<float> x(size_t(kGlobalBatch * kFeatures)), y(size_t(kGlobalBatch * kOutputs));
    for (auto& v : x) v = normal(gen);
    for (int64_t i = 0; i < kGlobalBatch; ++i) {
      y[size_t(i * kOutputs)] = x[size_t(i * kFeatures)] - 0.5f * x[size_t(i * kFeatures + 1)];
      y[size_t(i * kOutputs + 1)] = x[size_t(i * kFeatures + 2)] * x[size_t(i * kFeatures + 3)];
    }
    p.x.push_back(Tensor::from_vector(x, {kGlobalBatch, kFeatures}, kFloat32, Device()));
    p.y.push_back(Tensor::from_vector(y, {kGlobalBatch, kOutputs}, kFloat32, Device()));
  }
  return p;
}

Tensor initial(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> v(size_t(rows * cols));
  for (auto& e : v) e = u(gen);
  return Tensor::from_vector(v, {rows, cols}, kFloat32, Device());
}

// x [b, in] times w [in, out] without matmul: sum over `in` of x[b, in, 1] * w[1, in, out].
Tensor dense(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t n = x.dim(0), in = w.dim(0), out = w.dim(1);
  return sum(reshape(x, {n, in, 1}) * reshape(w, {1, in, out}), std::vector<int64_t>{1}) + b;
}

// Trains kSteps SGD steps under `strategy`; returns the global loss of every step. With
// a 16-bit `compute` dtype it is Keras's mixed precision (mixed_float16 /
// mixed_bfloat16): float32 variables, the forward and backward pass in `compute`, the
// loss in float32; float16 scales the loss through a dynamic LossScaleOptimizer (2^15, as
// Keras), bfloat16 has float32's range and needs none.
// `state_bytes`, when given, receives the optimizer's slot bytes after training.
std::vector<float> train_losses(Strategy& strategy, const Problem& p, DType compute = kFloat32,
                                optim::OptimizerStateBytes* state_bytes = nullptr) {
  std::vector<Variable> vars;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    vars = {Variable(initial(kFeatures, kHidden, 1)), Variable(initial(1, kHidden, 2)),
            Variable(initial(kHidden, kOutputs, 3)), Variable(initial(1, kOutputs, 4))};
    opt = optim::SGD(0.05, {.momentum = 0.9});
    if (compute == kFloat16) opt = optim::LossScaleOptimizer(opt);
  }
  const auto scaling = optim::LossScaleOptimizer::of(opt);
  auto in_compute = [&](const Tensor& t) { return t.dtype() == compute ? t : cast(t, compute); };
  const int n = strategy.num_replicas_in_sync();
  const int64_t per_replica = kGlobalBatch / n;
  std::vector<float> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    auto slice = [&](const Tensor& global, const ValueContext& ctx) {
      return global.slice(0, ctx.replica_id_in_sync_group * per_replica,
                          (ctx.replica_id_in_sync_group + 1) * per_replica);
    };
    PerReplica<Tensor> xs = strategy.experimental_distribute_values_from_function(
        [&](const ValueContext& ctx) { return slice(p.x[size_t(s)], ctx); });
    PerReplica<Tensor> ys = strategy.experimental_distribute_values_from_function(
        [&](const ValueContext& ctx) { return slice(p.y[size_t(s)], ctx); });
    auto per_replica_loss = strategy.run(
        [&](const Tensor& x, const Tensor& y) {
          GradientTape tape;
          auto w = [&](size_t i) { return in_compute(vars[i].read()); };
          Tensor h = relu(dense(in_compute(x), w(0), w(1)));
          Tensor pred = dense(h, w(2), w(3));
          if (pred.dtype() != kFloat32) pred = cast(pred, kFloat32);
          Tensor per_example = mean(square(pred - y), std::vector<int64_t>{1});
          Tensor loss = compute_average_loss(per_example, kGlobalBatch);
          std::vector<Tensor> grads = tape.gradient(scaling ? scaling->get_scaled_loss(loss) : loss, vars);
          if (scaling) grads = scaling->get_unscaled_gradients(grads);
          for (const Tensor& g : grads)
            STRATA_CHECK(g.defined() && g.dtype() == kFloat32, "emulated NCCL test: a gradient is undefined or not "
                         "float32");
          opt.apply_gradients(grads, vars);
          return loss;
        },
        xs, ys);
    losses.push_back(strategy.reduce(ReduceOp::Sum, per_replica_loss).to(Device()).item<float>());
  }
  if (state_bytes) *state_bytes = optim::optimizer_state_bytes(opt);
  return losses;
}

}  // namespace emulated_nccl_test

using namespace emulated_nccl_test;

TEST_CASE("emulated NCCL: MirroredStrategy() takes every GPU and NcclAllReduce", "[nccl]") {
  REQUIRE(nccl_available());
  MirroredStrategy strategy;
  REQUIRE(strategy.devices() == std::vector<Device>{cuda(0), cuda(1)});
  REQUIRE(strategy.cross_device_ops() == CrossDeviceOps::NcclAllReduce);
  REQUIRE(strategy.local_collectives() != nullptr);
  REQUIRE(nccl_backend()->name() == "nccl (emulated: in-process)");
  // A replica-context all-reduce runs on each rank's NCCL communicator, on its own GPU.
  const int64_t before = cuda_emulation::nccl_collectives();
  auto sums = strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    return ctx->all_reduce(ReduceOp::Sum, full({2}, double(ctx->replica_id_in_sync_group() + 1), kFloat32, ctx->device()));
  });
  REQUIRE(cuda_emulation::nccl_collectives() - before == 2);
  REQUIRE(sums[1].device() == cuda(1));
  REQUIRE(sums[1].to(Device()).to_vector<float>() == std::vector<float>{3, 3});
  // Logical GPUs sharing a device: NCCL refuses them, so they reduce in device memory.
  MirroredStrategy shared({cuda(0), cuda(0)});
  REQUIRE(shared.cross_device_ops() == CrossDeviceOps::HierarchicalCopyAllReduce);
  REQUIRE(shared.local_collectives() == nullptr);
  REQUIRE_THROWS_WITH(MirroredStrategy({cuda(0), cuda(0)}, CrossDeviceOps::NcclAllReduce),
                      Catch::Contains("NcclAllReduce is not available for the devices [cuda:0, cuda:0]"));
  REQUIRE_THROWS_WITH(MirroredStrategy({cpu(0), cpu(0)}), Catch::Contains("listed twice"));
  // make_strategy's virtual GPUs: each visible GPU split in two.
  auto virt = make_strategy("mirrored", {.virtual_gpus = 2});
  REQUIRE(virt->devices() == std::vector<Device>{cuda(0), cuda(0), cuda(1), cuda(1)});
  REQUIRE_THROWS_WITH(make_strategy("mirrored", {.devices = {cpu(0)}, .virtual_gpus = 2}),
                      Catch::Contains("not one"));
}

TEST_CASE("emulated NCCL: Mirrored training on 2 GPUs and on 2 logical GPUs matches the CPU run", "[nccl]") {
  const Problem p = make_problem();
  MirroredStrategy on_cpus(MirroredStrategy::cpu_devices(2));
  const std::vector<float> cpu_losses = train_losses(on_cpus, p);

  const int64_t before = cuda_emulation::nccl_collectives();
  const int64_t before_async = cuda_emulation::nccl_async_collectives();
  MirroredStrategy on_gpus({cuda(0), cuda(1)});
  const std::vector<float> nccl_losses = train_losses(on_gpus, p);
  // Each step's gradient all-reduce ran through the NCCL communicators (one per rank), the
  // gradient buckets through all_reduce_async (the reducer's communication-stream path).
  REQUIRE(cuda_emulation::nccl_collectives() - before >= 2 * kSteps);
  REQUIRE(cuda_emulation::nccl_async_collectives() - before_async >= 2 * kSteps);
  // Bitwise the same as one reduction after backward (no bucket overlap, synchronous).
  const int64_t before_sync = cuda_emulation::nccl_async_collectives();
  MirroredStrategy no_overlap({cuda(0), cuda(1)}, CrossDeviceOps::Default, {.overlap_gradient_reduction = false});
  REQUIRE(train_losses(no_overlap, p) == nccl_losses);
  REQUIRE(cuda_emulation::nccl_async_collectives() == before_sync);

  const int64_t before_virtual = cuda_emulation::nccl_collectives();
  MirroredStrategy on_one_gpu({cuda(0), cuda(0)});
  const std::vector<float> virtual_losses = train_losses(on_one_gpu, p);
  REQUIRE(cuda_emulation::nccl_collectives() == before_virtual);  // device memory, no NCCL

  REQUIRE(cpu_losses.size() == size_t(kSteps));
  for (int64_t s = 0; s < kSteps; ++s) {
    INFO("step " << s << ": cpu " << cpu_losses[size_t(s)] << ", nccl " << nccl_losses[size_t(s)] << ", virtual "
                 << virtual_losses[size_t(s)]);
    REQUIRE(nccl_losses[size_t(s)] == Approx(cpu_losses[size_t(s)]).epsilon(1e-5));
    REQUIRE(virtual_losses[size_t(s)] == Approx(cpu_losses[size_t(s)]).epsilon(1e-5));
  }
  // It trains: the last batch's loss is below the first's (every step updates the weights:
  // the gradients are defined, checked in the step).
  REQUIRE(cpu_losses.back() < cpu_losses.front());
}

TEST_CASE("emulated NCCL: ZeRO-1 on 2 GPUs and on 2 logical GPUs trains as without it", "[nccl]") {
  const Problem p = make_problem();
  for (const std::vector<Device>& devices : {std::vector<Device>{cuda(0), cuda(1)}, std::vector<Device>{cuda(0), cuda(0)}}) {
    INFO("devices " << devices[0] << ", " << devices[1]);
    MirroredStrategy plain(devices);
    optim::OptimizerStateBytes whole, shards;
    const std::vector<float> reference = train_losses(plain, p, kFloat32, &whole);
    MirroredStrategy sharded(devices);
    sharded.set_shard_optimizer_state(true);
    const int64_t before = cuda_emulation::nccl_collectives();
    const std::vector<float> losses = train_losses(sharded, p, kFloat32, &shards);
    if (devices[0] != devices[1]) REQUIRE(cuda_emulation::nccl_collectives() - before >= 2 * kSteps);
    REQUIRE(losses == reference);  // bitwise, as on CPUs
    // SGD's momentum slots: whole on each replica without ZeRO-1, about half with it.
    REQUIRE(whole.per_replica == whole.total);
    REQUIRE(shards.total == whole.total);
    REQUIRE(shards.per_replica <= whole.total / 2 + 64);
  }
}

TEST_CASE("emulated NCCL: ReplicaContext::all_gather on 2 GPUs: NCCL for even parts, the host for uneven, gradients both ways",
          "[nccl]") {
  // Replica r gathers (r + 1) x_r, x_r of `rows[r]` rows of 2 ones; loss_r = sum(w_r y)
  // with w_r = 10^r (1, 2, ...): the gradient of x_r is (r + 1) times the sum over
  // replicas of w at x_r's slice (as on CPUs, tests/distribute/test_collectives.cc).
  for (const std::vector<int64_t>& rows : {std::vector<int64_t>{2, 2}, std::vector<int64_t>{1, 3}}) {
    const bool even = rows[0] == rows[1];
    INFO((even ? "even parts" : "uneven parts"));
    MirroredStrategy strategy({cuda(0), cuda(1)});
    const int64_t before = cuda_emulation::nccl_collectives();
    auto out = strategy.run([&] {
      ReplicaContext* ctx = get_replica_context();
      const int r = ctx->replica_id_in_sync_group();
      const Tensor x = ones({rows[size_t(r)], 2}, kFloat32, ctx->device());
      GradientTape tape;
      tape.watch(x);
      const Tensor y = ctx->all_gather(x * float(r + 1), 0);
      const Tensor w = (arange(1, 9, 1, kFloat32) * std::pow(10.0, r)).reshape({4, 2}).to(ctx->device());
      const Tensor dx = tape.gradient(sum(y * w), x);
      return std::vector<Tensor>{y.to(Device()), dx.to(Device())};
    });
    // Two ranks, the forward gather through NCCL only for even parts; the backward
    // all-reduce always.
    REQUIRE(cuda_emulation::nccl_collectives() - before == (even ? 4 : 2));
    std::vector<float> want_y;
    for (int r = 0; r < 2; ++r)
      for (int64_t i = 0; i < 2 * rows[size_t(r)]; ++i) want_y.push_back(float(r + 1));
    for (int r = 0; r < 2; ++r) {
      REQUIRE(out[size_t(r)][0].to_vector<float>() == want_y);
      std::vector<float> want_dx;
      const int64_t start = r == 0 ? 0 : 2 * rows[0];
      for (int64_t i = 0; i < 2 * rows[size_t(r)]; ++i) want_dx.push_back(float((r + 1) * 11 * (start + i + 1)));
      REQUIRE(out[size_t(r)][1].to_vector<float>() == want_dx);
    }
  }
}

TEST_CASE("emulated NCCL: a synchronized BatchNormalization on 2 GPUs normalises as on 2 CPUs", "[nccl]") {
  // Forward statistics all-reduced through NCCL, and the input gradient through the
  // all-reduces in backward; compared with the same layer on two CPU replicas.
  const Problem p = make_problem();
  auto run = [&](Strategy& strategy) {
    nn::BatchNormalization bn;
    {
      auto scope = strategy.scope();
      nn::BatchNormalizationOptions o;
      o.synchronized = true;
      bn = nn::BatchNormalization(kFeatures, o);
    }
    const int64_t per_replica = kGlobalBatch / 2;
    PerReplica<Tensor> xs = strategy.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
      return p.x[0].slice(0, ctx.replica_id_in_sync_group * per_replica, (ctx.replica_id_in_sync_group + 1) * per_replica);
    });
    auto out = strategy.run(
        [&](const Tensor& x) {
          GradientTape tape;
          tape.watch(x);
          const Tensor y = bn(x);
          const Tensor dx = tape.gradient(sum(y * y * x), x);
          return std::vector<Tensor>{y.to(Device()), dx.to(Device())};
        },
        xs);
    return std::vector<Tensor>{concat({out[0][0], out[1][0]}, 0), concat({out[0][1], out[1][1]}, 0)};
  };
  MirroredStrategy on_cpus(MirroredStrategy::cpu_devices(2));
  const std::vector<Tensor> cpu = run(on_cpus);
  const int64_t before = cuda_emulation::nccl_collectives();
  MirroredStrategy on_gpus({cuda(0), cuda(1)});
  const std::vector<Tensor> gpu = run(on_gpus);
  REQUIRE(cuda_emulation::nccl_collectives() - before == 2 * 4);  // 2 forward and 2 backward, each rank
  for (size_t k = 0; k < 2; ++k) {
    const std::vector<float> a = cpu[k].to_vector<float>(), b = gpu[k].to_vector<float>();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == Approx(a[i]).epsilon(1e-4).margin(1e-5));
  }
}

TEST_CASE("emulated NCCL: a replica that throws mid-collective releases the other, naming it", "[nccl]") {
  const double timeout = 20;
  MirroredStrategy strategy({cuda(0), cuda(1)}, CrossDeviceOps::Default, {.timeout_seconds = timeout});
  REQUIRE(strategy.local_collectives() != nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    Tensor v = ones({4}, kFloat32, ctx->device());
    if (ctx->replica_id_in_sync_group() == 1) throw Error("boom in replica 1's step");
    ctx->all_reduce(ReduceOp::Sum, v);  // replica 0 waits here for replica 1
  }),
                      Catch::Contains("replica 1") && Catch::Contains("boom"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(waited < timeout / 2);  // released by the failure, not by the timeout

  // A replica that returns without issuing the collective: the other fails at once.
  REQUIRE_THROWS_WITH(strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 0) ctx->all_reduce(ReduceOp::Sum, ones({2}, kFloat32, ctx->device()));
  }),
                      Catch::Contains("replica 1"));

  // The strategy stays usable: the next round reduces normally.
  auto sums = strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    Tensor v = full({3}, double(ctx->replica_id_in_sync_group() + 1), kFloat32, ctx->device());
    return ctx->all_reduce(ReduceOp::Sum, v);
  });
  for (const Tensor& t : sums.values()) REQUIRE(t.to(Device()).to_vector<float>() == std::vector<float>{3, 3, 3});
}

TEST_CASE("emulated NCCL: mixed_float16 and mixed_bfloat16 on 2 GPUs train as on CPUs", "[nccl]") {
  const Problem p = make_problem();
  MirroredStrategy on_cpus(MirroredStrategy::cpu_devices(2));
  const std::vector<float> reference = train_losses(on_cpus, p);  // float32 on CPUs
  // float16 keeps ~3 decimal digits, bfloat16 ~2: the loss curves agree to that.
  for (const auto& [compute, tolerance] : {std::pair{kFloat16, 2e-2}, std::pair{kBFloat16, 6e-2}}) {
    INFO(dtype_name(compute));
    const int64_t before = cuda_emulation::nccl_collectives();
    MirroredStrategy on_gpus({cuda(0), cuda(1)});
    const std::vector<float> gpu = train_losses(on_gpus, p, compute);
    REQUIRE(cuda_emulation::nccl_collectives() - before >= 2 * kSteps);
    MirroredStrategy cpus(MirroredStrategy::cpu_devices(2));
    const std::vector<float> cpu = train_losses(cpus, p, compute);
    for (int64_t s = 0; s < kSteps; ++s) {
      INFO("step " << s << ": float32 " << reference[size_t(s)] << ", cpu " << cpu[size_t(s)] << ", gpu "
                   << gpu[size_t(s)]);
      REQUIRE(std::isfinite(gpu[size_t(s)]));
      REQUIRE(gpu[size_t(s)] == Approx(cpu[size_t(s)]).epsilon(tolerance));
      REQUIRE(gpu[size_t(s)] == Approx(reference[size_t(s)]).epsilon(tolerance));
    }
  }
}

TEST_CASE("emulated NCCL: one GPU's overflow skips the step on every GPU and halves every loss scale", "[nccl]") {
  MirroredStrategy strategy({cuda(0), cuda(1)});
  Variable w;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    w = Variable(full({4}, 1.0, kFloat32, Device()));
    opt = optim::LossScaleOptimizer(optim::SGD(0.1), /*dynamic=*/true, /*initial_scale=*/1024.0);
  }
  const auto scaling = *optim::LossScaleOptimizer::of(opt);
  auto step = [&](bool overflow_on_replica_1) {
    strategy.run([&] {
      ReplicaContext* ctx = get_replica_context();
      GradientTape tape;
      // float16 compute: 1e5 * 1024 overflows float16's 65504 on replica 1 only.
      const double factor = overflow_on_replica_1 && ctx->replica_id_in_sync_group() == 1 ? 1e5 : 1.0;
      Tensor loss = cast(sum(cast(w.read(), kFloat16) * factor), kFloat32);
      auto grads = scaling.get_unscaled_gradients(tape.gradient(scaling.get_scaled_loss(loss), {w}));
      opt.apply_gradients(grads, {w});
    });
  };
  step(true);
  // Skipped everywhere: the weights are untouched on both GPUs, and both scales halved.
  for (const Tensor& c : strategy.experimental_local_results(w))
    REQUIRE(c.to(Device()).to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  for (const Tensor& c : strategy.experimental_local_results(scaling.loss_scale_variable()))
    REQUIRE(c.to(Device()).item<float>() == 512.0f);
  step(false);
  // Applied everywhere: w - 0.1 * (sum of 2 replicas' gradient 1) = 0.8.
  for (const Tensor& c : strategy.experimental_local_results(w)) {
    REQUIRE(c.device().is_cuda());
    for (float v : c.to(Device()).to_vector<float>()) REQUIRE(v == Approx(0.8f));
  }
}

TEST_CASE("emulated NCCL: variable updates with a value on another device, merge_call results on each GPU", "[nccl]") {
  MirroredStrategy strategy({cuda(0), cuda(1)});
  CentralStorageStrategy central({cuda(0), cuda(1)}, cuda(0));
  Variable mirrored, mean, first, aggregating;
  {
    auto scope = strategy.scope();
    mirrored = Variable(zeros({2}), {.name = "m"});
    mean = Variable(zeros({2}), {.name = "mean", .trainable = false,
                                 .synchronization = autograd::VariableSynchronization::OnRead,
                                 .aggregation = autograd::VariableAggregation::Mean});
    first = Variable(zeros({2}), {.name = "first", .aggregation = autograd::VariableAggregation::OnlyFirstReplica});
  }
  {
    auto scope = central.scope();
    aggregating = Variable(zeros({2}), {.name = "c", .aggregation = autograd::VariableAggregation::Sum});
  }
  auto host_values = [](Strategy& s, const Variable& v) {
    std::vector<std::vector<float>> out;
    for (const Tensor& c : s.experimental_local_results(v)) {
      REQUIRE(c.device().is_cuda());
      out.push_back(c.to(Device()).to_vector<float>());
    }
    return out;
  };
  using Values = std::vector<std::vector<float>>;
  // Cross-replica context, a host delta: each GPU component takes a copy of it.
  REQUIRE_NOTHROW(mirrored.assign_add(ones({2})));
  REQUIRE(host_values(strategy, mirrored) == Values{{1, 1}, {1, 1}});
  REQUIRE_NOTHROW(mirrored.assign_sub(full({2}, 0.5)));
  REQUIRE(host_values(strategy, mirrored) == Values{{0.5, 0.5}, {0.5, 0.5}});
  REQUIRE_NOTHROW(mean.assign_add(ones({2})));
  REQUIRE(host_values(strategy, mean) == Values{{1, 1}, {1, 1}});
  REQUIRE_NOTHROW(aggregating.assign_add(ones({2})));
  REQUIRE(host_values(central, aggregating) == Values{{1, 1}});
  // Replica context: replica 0's value (on cuda:0) is applied on cuda:1 too.
  REQUIRE_NOTHROW(strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    first.assign_add(full({2}, double(ctx->replica_id_in_sync_group() + 1), kFloat32, ctx->device()));
  }));
  REQUIRE(host_values(strategy, first) == Values{{1, 1}, {1, 1}});
  // merge_call: each replica receives the result on its own GPU; a host scalar stays.
  auto results = strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    Tensor on_gpu = ctx->merge_call([](const std::vector<Tensor>& v) { return add(v[0], v[1].to(v[0].device())); },
                                    full({2}, 1.0, kFloat32, ctx->device()));
    Tensor on_host = ctx->merge_call([](const std::vector<Tensor>&) { return full({}, 3.0, kFloat32, cpu(0)); },
                                     full({2}, 1.0, kFloat32, ctx->device()));
    return std::vector<Tensor>{on_gpu, on_host};
  });
  REQUIRE(results[0][0].device() == cuda(0));
  REQUIRE(results[1][0].device() == cuda(1));
  REQUIRE(results[1][0].to(Device()).to_vector<float>() == std::vector<float>{2, 2});
  REQUIRE(results[1][1].device().is_cpu());
}
