// NCCL and the strategies on a real GPU (label cuda; run by scripts/gpu-check.sh). Without a
// CUDA device, or in a build without NCCL, the executable reports "skipped" (exit code 77).
// A lent machine has one GPU, so: 1-rank NCCL collectives in every dtype (local and
// process groups), a 2-rank group whose second rank never joins (the bounded
// initialisation must abort and name it), Mirrored over 2 logical GPUs of cuda:0 and
// OneDevice(cuda:0) against the CPU run of the same training, a batch fetched to the GPU
// without waiting for the work queued there (distribute/device_fetch.h), all_reduce_async on the
// communication stream against the synchronous all_reduce, and the gradient reducer's
// stream path against its synchronous one, bitwise. With two or more GPUs,
// Mirrored over distinct GPUs runs NCCL between ranks, a failing replica must release
// the other, and a killed worker process (strata-train --strategy multi_worker over NCCL)
// must make the other fail within its timeout, naming the lost rank.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <random>
#include <vector>

#include <strata/autograd/autograd.h>
#include <strata/core/ops.h>
#include <strata/core/stream.h>
#include <strata/core/random.h>
#include <strata/distribute/collective/nccl_communicator.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/collective/tcp_store.h>
#include <strata/distribute/gradient_reducer.h>
#include <strata/distribute/job_secret.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include <strata/train/losses.h>
#include <strata/train/nn/activations.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>
#include "tests/distribute/child_process.h"

using namespace strata;
using namespace strata::distribute;

namespace cuda_nccl_test {

constexpr int kSkip = 77;
const std::vector<DType> kAllDTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64};

// Small integers, exact in every dtype, on `d`.
Tensor small_ints(Device d, DType dtype, int64_t rows, int64_t cols) {
  std::vector<float> v(size_t(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 13) - 6);
  return cast(Tensor::from_vector(v, {rows, cols}, kFloat32, Device()), dtype).to(d);
}

std::vector<double> host(const Tensor& t) { return t.to(Device()).to_vector<double>(); }

// Every collective of a 1-rank communicator leaves the values as they are (Mean divides
// by one), in every dtype; a tensor on the wrong device is refused.
void check_one_rank(Communicator& comm, Device gpu) {
  REQUIRE(comm.size() == 1);
  REQUIRE(comm.backend() == "nccl");
  REQUIRE(comm.buffer_device() == gpu);
  DeviceGuard on(gpu);
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor expected = small_ints(gpu, dtype, 4, 5);
    const std::vector<double> want = host(expected);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
      Tensor buffer = expected.clone();
      comm.all_reduce(buffer, op);
      REQUIRE(host(buffer) == want);
    }
    Tensor b = expected.clone();
    comm.broadcast(b, 0);
    REQUIRE(host(b) == want);
    Tensor gathered = zeros({4, 5}, dtype, gpu);
    comm.all_gather(expected, gathered);
    REQUIRE(host(gathered) == want);
    Tensor scattered = zeros({4, 5}, dtype, gpu);
    comm.reduce_scatter(expected, scattered, ReduceOp::Sum);
    REQUIRE(host(scattered) == want);
  }
  Tensor flags = cast(ones({3}, kFloat32, gpu), kBool);
  comm.all_reduce(flags, ReduceOp::Max);
  REQUIRE(host(flags) == std::vector<double>{1, 1, 1});
  REQUIRE_THROWS_WITH(comm.all_reduce(flags, ReduceOp::Sum), Catch::Contains("bool"));
  // Explicitly on the CPU: the DeviceGuard above makes cuda:0 the default device.
  Tensor on_host = ones({2}, kFloat32, cpu());
  REQUIRE_THROWS_WITH(comm.all_reduce(on_host, ReduceOp::Sum),
                      Catch::Contains("is on cpu:0") && Catch::Contains("rank 0"));
  comm.barrier();
}

// A small MLP trained for a few SGD steps on fixed data; the loss of every step.
std::vector<float> mlp_losses(Strategy& strategy) {
  constexpr int64_t kIn = 16, kHidden = 32, kClasses = 4, kBatch = 32, kSteps = 5;
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(kBatch * kIn));
  for (auto& v : x) v = normal(gen);
  std::vector<int64_t> y(static_cast<size_t>(kBatch));
  for (int64_t i = 0; i < kBatch; ++i) y[size_t(i)] = (x[size_t(i * kIn)] > 0) + 2 * (x[size_t(i * kIn + 1)] > 0);
  const Tensor gx = Tensor::from_vector(x, {kBatch, kIn}, kFloat32, Device());
  const Tensor gy = Tensor::from_vector(y, {kBatch}, kInt64, Device());
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = nn::Sequential{nn::Dense(kIn, kHidden, {.kernel_initializer = nn::glorot_uniform(11)}), nn::ReLU(),
                           nn::Dense(kHidden, kClasses, {.kernel_initializer = nn::glorot_uniform(12)})};
    opt = optim::SGD(0.1, {.momentum = 0.9});
  }
  const int64_t per_replica = kBatch / strategy.num_replicas_in_sync();
  std::vector<float> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    auto part = [&](const Tensor& global) {
      return strategy.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
        return global.slice(0, ctx.replica_id_in_sync_group * per_replica,
                            (ctx.replica_id_in_sync_group + 1) * per_replica);
      });
    };
    auto per_replica_loss = strategy.run(
        [&](const Tensor& bx, const Tensor& by) {
          GradientTape tape;
          Tensor logits = model(bx);
          Tensor loss = compute_average_loss(
              losses::sparse_categorical_crossentropy(by, logits, /*from_logits=*/true), kBatch);
          auto vars = model.trainable_variables();
          opt.apply_gradients(tape.gradient(loss, vars), vars);
          return loss;
        },
        part(gx), part(gy));
    losses.push_back(strategy.reduce(ReduceOp::Sum, per_replica_loss).to(Device()).item<float>());
  }
  return losses;
}

void require_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    INFO("step " << s << ": " << got[s] << " vs the CPU's " << want[s]);
    // float32 on cuBLAS vs the CPU's GEMM: a few ulps per op, accumulated over the steps.
    REQUIRE(got[s] == Approx(want[s]).epsilon(1e-3));
  }
  REQUIRE(want.back() < want.front());
}

}  // namespace cuda_nccl_test

using namespace cuda_nccl_test;

TEST_CASE("nccl: 1-rank local group, every collective and dtype", "[nccl]") {
  auto group = nccl_backend()->local_group({cuda(0)}, {.timeout_seconds = 60});
  check_one_rank(group->communicator(0), cuda(0));
}

TEST_CASE("nccl: 1-rank process group through the TCP store", "[nccl]") {
  TcpStoreServer server(0, "127.0.0.1");
  auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 30.0);
  auto comm = nccl_backend()->process_group(
      {.rank = 0, .size = 1, .device = cuda(0), .store = store, .prefix = "one", .comm = {.timeout_seconds = 60}});
  check_one_rank(*comm, cuda(0));
}

TEST_CASE("nccl: all_reduce_async on the communication stream equals the synchronous all_reduce (1 rank)",
          "[nccl]") {
  auto group = nccl_backend()->local_group({cuda(0)}, {.timeout_seconds = 60});
  Communicator& comm = group->communicator(0);
  DeviceGuard on(cuda(0));
  const Stream compute = current_stream(cuda(0));
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
      INFO("dtype " << dtype_name(dtype) << ", " << reduce_op_name(op));
      // The buffer is produced on the compute stream just before: the collective must run
      // after those kernels (the communication stream waits for them).
      const Tensor base = small_ints(cuda(0), dtype, 256, 64);
      Tensor sync_buffer = base * 2;
      comm.all_reduce(sync_buffer, op);
      Tensor async_buffer = base * 2;
      auto work = comm.all_reduce_async(async_buffer, op);
      work->wait(60);
      work->order_consumer(compute);
      REQUIRE(host(async_buffer) == host(sync_buffer));  // read on the compute stream
      work->synchronize(60);
    }
  }
  // A consumer on another device type cannot be ordered after a GPU event.
  Tensor buffer = ones({8}, kFloat32, cuda(0));
  auto work = comm.all_reduce_async(buffer, ReduceOp::Sum);
  work->wait(60);
  REQUIRE(work->done());  // enqueued and ordered: complete in wait()'s sense
  REQUIRE_THROWS_WITH(work->order_consumer(Stream::default_for(cpu())), Catch::Contains("needs a stream of cuda:0"));
  work->synchronize(60);
  // The process group's communicator takes the same path.
  TcpStoreServer server(0, "127.0.0.1");
  auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 30.0);
  auto process = nccl_backend()->process_group(
      {.rank = 0, .size = 1, .device = cuda(0), .store = store, .prefix = "async", .comm = {.timeout_seconds = 60}});
  Tensor x = small_ints(cuda(0), kFloat32, 32, 32) * 3;
  const std::vector<double> want = host(x);
  auto pw = process->all_reduce_async(x, ReduceOp::Sum);
  pw->wait(60);
  pw->order_consumer(compute);
  REQUIRE(host(x) == want);
  pw->synchronize(60);
}

TEST_CASE("nccl: the gradient reducer on the communication stream gives the synchronous path's gradients bitwise",
          "[nccl]") {
  // One rank (one GPU): the sums are the gradients themselves, so what is checked is the
  // ordering — each bucket all-reduced on the communication stream after the backward
  // kernels that produced it, the optimizer's stream ordered after the bucket. Large
  // layers keep backward busy while the first buckets run.
  auto group = nccl_backend()->local_group({cuda(0)}, {.timeout_seconds = 60});
  Communicator& comm = group->communicator(0);
  DeviceGuard on(cuda(0));
  constexpr int64_t kWidth = 512, kLayers = 6, kBatch = 256;
  std::vector<Variable> vars;
  for (int64_t l = 0; l < kLayers; ++l) {
    vars.push_back(Variable(random::uniform({kWidth, kWidth}, uint64_t(10 + l), -0.05, 0.05).to(cuda(0))));
  }
  const Tensor x = random::uniform({kBatch, kWidth}, 5, -1.0, 1.0).to(cuda(0));
  auto gradients = [&](GradientReducer& reducer) {
    std::vector<Tensor> grads;
    {
      autograd::GradientHookScope hook(&reducer);
      GradientTape tape;
      Tensor h = x;
      for (const Variable& v : vars) h = tanh(matmul(h, v.read()));
      grads = tape.gradient(sum(h * h), vars);
    }
    std::vector<Tensor> summed = reducer.take(grads);
    std::vector<std::vector<double>> out;
    for (size_t i = 0; i < summed.size(); ++i) {
      REQUIRE(summed[i].defined());
      out.push_back(host(summed[i] * 1.0));  // a kernel on the compute stream reads the sum
    }
    reducer.end_step(false);
    return out;
  };
  GradientReducer::Options options;
  options.bytes_per_pack = kWidth * kWidth * 4;  // one bucket per layer
  options.asynchronous = false;
  GradientReducer sync_reducer(
      [&](const std::vector<Tensor>& gradients, const Tensor& b, const std::string&) {
        GradientReducer::pack_into(gradients, b);
        comm.all_reduce(b, ReduceOp::Sum);
      },
      options);
  GradientReducer stream_reducer(
      GradientReducer::StreamTransport{
          [&](const Tensor& b, const std::string&) { return comm.all_reduce_async(b, ReduceOp::Sum); }},
      options);
  const auto want = gradients(sync_reducer);
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    REQUIRE(gradients(stream_reducer) == want);
  }
}

TEST_CASE("nccl: Mirrored over distinct GPUs trains bitwise the same with buckets on the stream (needs 2)",
          "[nccl]") {
  if (MirroredStrategy::visible_gpus() < 2) {
    WARN("one GPU: the reducer's NCCL path between ranks needs two (covered for 1 rank above)");
    return;
  }
  MirroredStrategy overlapped({cuda(0), cuda(1)}, CrossDeviceOps::Default, {.timeout_seconds = 60});
  MirroredStrategy after_backward({cuda(0), cuda(1)}, CrossDeviceOps::Default,
                                  {.timeout_seconds = 60, .overlap_gradient_reduction = false});
  REQUIRE(mlp_losses(overlapped) == mlp_losses(after_backward));
}

TEST_CASE("nccl: a rank that never joins makes initialisation fail within the timeout, naming it", "[nccl]") {
  TcpStoreServer server(0, "127.0.0.1");
  auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 30.0);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(nccl_backend()->process_group({.rank = 0, .size = 2, .device = cuda(0), .store = store,
                                                     .prefix = "lonely", .comm = {.timeout_seconds = 5}}),
                      Catch::Contains("rank 0 of 2") && Catch::Contains("rank(s) 1 never joined"));
  REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
}

TEST_CASE("nccl: OneDevice(cuda:0) and Mirrored over 2 logical GPUs of cuda:0 (also under ZeRO-1) train as the CPU does",
          "[nccl]") {
  MirroredStrategy on_cpus(MirroredStrategy::cpu_devices(2));
  const std::vector<float> cpu = mlp_losses(on_cpus);
  OneDeviceStrategy one_gpu(cuda(0));
  require_close(mlp_losses(one_gpu), cpu);
  MirroredStrategy virtual_gpus({cuda(0), cuda(0)});
  REQUIRE(virtual_gpus.cross_device_ops() == CrossDeviceOps::HierarchicalCopyAllReduce);
  require_close(mlp_losses(virtual_gpus), cpu);
  // ZeRO-1: the momentum slots split between the two logical GPUs.
  MirroredStrategy sharded({cuda(0), cuda(0)});
  sharded.set_shard_optimizer_state(true);
  require_close(mlp_losses(sharded), cpu);
}

TEST_CASE("gpu input: a batch fetched to a GPU replica does not wait for the work queued on its stream", "[nccl]") {
  // Queue ~100 large products on cuda:0's default stream, then take the next distributed
  // batch on this thread (no prefetch): its upload runs on the input stream, so the
  // default stream must still be busy when the batch is handed over (before, the upload
  // was a blocking copy behind the products). Reading the batch afterwards orders the
  // read after the copy: the values must be the dataset's.
  OneDeviceStrategy strategy(cuda(0));
  std::vector<float> x(64 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97);
  const Tensor rows = Tensor::from_vector(x, {64, 32}, kFloat32, Device());
  InputOptions options;
  options.experimental_per_replica_buffer_size = 0;
  DistributedIterator it =
      strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices(rows).batch(64), options).make_iterator();
  const Tensor a = random::uniform({4096, 4096}, 5).to(cuda(0));
  synchronize(cuda(0));
  const Stream compute = current_stream(cuda(0));
  for (int i = 0; i < 100; ++i) (void)matmul(a, a);
  const auto element = it.next();
  const cudaError_t busy = cudaStreamQuery(static_cast<cudaStream_t>(compute.native_handle()));
  (void)cudaGetLastError();
  REQUIRE(element.has_value());
  const Tensor batch = (*element)[0][0];
  CHECK(batch.device() == cuda(0));
  CHECK(busy == cudaErrorNotReady);
  const Tensor doubled = add(batch, batch);  // on the default stream, after the upload
  CHECK(doubled.to(Device()).to_vector<float>() == add(rows, rows).to_vector<float>());
}

TEST_CASE("nccl: Mirrored over distinct GPUs (needs 2)", "[nccl]") {
  if (MirroredStrategy::visible_gpus() < 2) {
    WARN("one GPU: NCCL between ranks needs two (NCCL refuses two ranks on one GPU)");
    return;
  }
  MirroredStrategy strategy({cuda(0), cuda(1)}, CrossDeviceOps::Default, {.timeout_seconds = 20});
  REQUIRE(strategy.cross_device_ops() == CrossDeviceOps::NcclAllReduce);
  MirroredStrategy on_cpus(MirroredStrategy::cpu_devices(2));
  require_close(mlp_losses(strategy), mlp_losses(on_cpus));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 1) throw Error("boom in replica 1");
    ctx->all_reduce(ReduceOp::Sum, ones({1024}, kFloat32, ctx->device()));
  }),
                      Catch::Contains("replica 1"));
  REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20);
  auto sums = strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    return ctx->all_reduce(ReduceOp::Sum, ones({8}, kFloat32, ctx->device()));
  });
  for (const Tensor& t : sums.values()) REQUIRE(host(t) == std::vector<double>(8, 2.0));
}

TEST_CASE("nccl: a worker killed mid-training makes the other fail within the timeout, naming it (needs 2)",
          "[nccl]") {
  if (MirroredStrategy::visible_gpus() < 2) {
    WARN("one GPU: NCCL between worker processes needs two (NCCL refuses two ranks on one GPU)");
    return;
  }
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata_cuda_nccl_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int p0 = find_free_port(), p1 = find_free_port();
  const std::string secret = JobSecret::generate().text();
  std::vector<std::unique_ptr<strata::testing::ChildProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    const std::string tf_config = R"({"cluster": {"worker": ["127.0.0.1:)" + std::to_string(p0) +
                                  R"(", "127.0.0.1:)" + std::to_string(p1) +
                                  R"("]}, "task": {"type": "worker", "index": )" + std::to_string(w) + "}}";
    // Each worker sees its own GPU as cuda:0; NCCL joins the two processes.
    workers.push_back(std::make_unique<strata::testing::ChildProcess>(
        std::vector<std::string>{STRATA_TRAIN_BIN, "--strategy", "multi_worker", "--communication", "nccl",
                                 "--devices", "cuda:0", "--model", "mlp", "--data", "synthetic", "--steps", "1000000",
                                 "--steps-per-loop", "10", "--collective-timeout", "5", "--collective-hard-timeout",
                                 "20", "--quiet", "--model-dir", (dir / "model").string()},
        std::map<std::string, std::string>{{"TF_CONFIG", tf_config},
                                           {"CUDA_VISIBLE_DEVICES", std::to_string(w)},
                                           {kJobSecretEnv, secret}}));
  }
  // Training has begun once the chief wrote its first checkpoint (bounded wait).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::error_code ec;
  while (std::chrono::steady_clock::now() < deadline &&
         !(fs::exists(dir / "model" / "checkpoints", ec) && !fs::is_empty(dir / "model" / "checkpoints", ec)))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(fs::exists(dir / "model" / "checkpoints"));
  ::kill(workers[1]->pid(), SIGKILL);
  const auto survivor = workers[0]->wait(60);
  workers[1]->wait(10);
  INFO(survivor.output);
  CHECK_FALSE(survivor.timed_out);  // released by the watchdog, not hung in a kernel
  CHECK(survivor.exit_code != 0);
  CHECK_THAT(survivor.output, Catch::Contains("nccl") && Catch::Contains("rank 0 of 2") &&
                                  (Catch::Contains("rank(s) 1 gone") || Catch::Contains("NCCL reported an error")));
  fs::remove_all(dir);
}

int main(int argc, char** argv) {
  const int gpus = MirroredStrategy::visible_gpus();
  if (gpus == 0) {
    std::printf("skipped: no CUDA device\n");
    return kSkip;
  }
  if (nccl_backend() == nullptr) {
    std::printf("skipped: strata was built without NCCL\n");
    return kSkip;
  }
  std::printf("%s, %d GPU(s)\n", nccl_backend()->name().c_str(), gpus);
  return Catch::Session().run(argc, argv);
}
