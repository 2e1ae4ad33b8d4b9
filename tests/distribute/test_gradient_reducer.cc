// GradientReducer (distribute/gradient_reducer.h): buckets filled in gradient-ready order
// and reduced on a communication thread while backward goes on; the same weights as the
// reduction after backward under every strategy (in one process and across 2 worker
// processes); a replica failing with buckets in flight releases the others; replicas
// disagreeing about which variables got gradients are told so.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <strata/autograd/autograd.h>
#include <strata/autograd/gradient_hook.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include <strata/data/dataset.h>
#include <strata/distribute/collective/gloo_communicator.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/gradient_accumulator.h>
#include <strata/distribute/gradient_reducer.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/no_sync.h>
#include <strata/distribute/strategy.h>
#include <strata/train/losses.h>
#include <strata/train/nn/activations.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>
#include "child_process.h"
#include "strategy_cases.h"
#include "tests/distribute/equivalence_helpers.h"
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;
using Catch::Matchers::Contains;

namespace {

// An event log shared by the compute thread and the communication thread.
struct EventLog {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> events;
  void add(const std::string& e) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      events.push_back(e);
    }
    cv.notify_all();
  }
  // Waits (bounded) until an event starting with `prefix` was logged.
  bool wait_for(const std::string& prefix) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] {
      for (const auto& e : events)
        if (e.rfind(prefix, 0) == 0) return true;
      return false;
    });
  }
};

Variable make_var(const std::string& name, const Shape& shape, uint64_t seed) {
  autograd::VariableOptions o;
  o.name = name;
  return Variable(random::uniform(shape, seed, -0.5, 0.5), o);
}

// The GradientAccumulator tests' ways to sum micro-batches: the accumulator, the accumulator
// with the tape returning the replicas' sums, and by hand with the gradients reduced only
// in apply_gradients (the reference).
enum class AccumulationMode { Accumulator, AccumulatorAggregated, OverlapOff };

CommunicationOptions accumulation_options(AccumulationMode mode) {
  CommunicationOptions o;
  o.overlap_gradient_reduction = mode != AccumulationMode::OverlapOff;
  o.aggregate_gradients_in_backward = mode == AccumulationMode::AccumulatorAggregated;
  return o;
}

}  // namespace

TEST_CASE("gradient reducer: the first bucket's all-reduce starts before backward ends", "[reducer]") {
  // Three layers, each gradient 64x64 floats = 16 KiB = one bucket. The transport is slow:
  // it blocks until the test releases it. The bottom layer's backward (a custom gradient)
  // waits until the top layer's bucket has started reducing: that can only happen if the
  // reduction runs beside backward rather than after it.
  EventLog log;
  std::atomic<bool> release{false};
  GradientReducer::Options options;
  options.bytes_per_pack = 64 * 64 * 4;
  GradientReducer reducer(
      [&](const std::vector<Tensor>& gradients, const Tensor& bucket, const std::string& what) {
        log.add("start " + what);
        GradientReducer::pack_into(gradients, bucket);
        std::unique_lock<std::mutex> lock(log.mutex);
        log.cv.wait_for(lock, std::chrono::seconds(30), [&] { return release.load(); });
        lock.unlock();
        bucket.copy_(bucket * 2.0);  // two "replicas" holding the same gradient
        log.add("end " + what);
      },
      options);
  Variable w1 = make_var("bottom", {64, 64}, 1), w2 = make_var("middle", {64, 64}, 2),
           w3 = make_var("top", {64, 64}, 3);
  bool overlapped = false;
  std::vector<Tensor> grads;
  {
    autograd::GradientHookScope hook(&reducer);
    autograd::GradientTape tape;
    Tensor x = random::uniform({8, 64}, 4, -1.0, 1.0);
    Tensor h1 = matmul(x, w1.read());
    Tensor marked = autograd::custom_gradient({h1}, [&](const std::vector<Tensor>& in) {
      autograd::CustomVjp vjp = [&](const Tensor& g) {
        overlapped = log.wait_for("start gradient bucket 0");
        log.add("bottom backward");
        return std::vector<Tensor>{g};
      };
      return autograd::CustomResult{in[0] * 1.0, vjp};
    });
    Tensor h2 = tanh(matmul(marked, w2.read()));
    Tensor loss = sum(matmul(h2, w3.read()));
    grads = tape.gradient(loss, std::vector<Variable>{w1, w2, w3});
    log.add("backward end");
  }
  REQUIRE(overlapped);
  REQUIRE(reducer.buckets_launched() == 3);
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    REQUIRE(log.events.size() >= 3);
    CHECK_THAT(log.events[0], Contains("start gradient bucket 0") && Contains("top"));
    CHECK(log.events[1] == "bottom backward");
    // Nothing finished before backward ended: the transport was still blocked.
    for (const auto& e : log.events) CHECK(e.rfind("end", 0) != 0);
  }
  release = true;
  log.cv.notify_all();
  const std::vector<Tensor> summed = reducer.take(grads);
  for (size_t i = 0; i < grads.size(); ++i) {
    REQUIRE(summed[i].defined());
    const Tensor want = grads[i] * 2.0;
    REQUIRE(std::memcmp(summed[i].contiguous().raw_data(), want.contiguous().raw_data(), want.nbytes()) == 0);
  }
  // A gradient it never saw is not its to reduce.
  REQUIRE_FALSE(reducer.take({grads[0] * 1.0})[0].defined());
  reducer.end_step(false);
  REQUIRE(reducer.buckets_launched() == 0);
}

TEST_CASE("gradient reducer: a small first bucket, then 25 MiB ones, per dtype, in ready order", "[reducer]") {
  std::vector<std::pair<std::string, int64_t>> buckets;  // name, elements
  GradientReducer::Options options;
  options.asynchronous = false;
  GradientReducer reducer([&](const std::vector<Tensor>&, const Tensor& b, const std::string& what) { buckets.emplace_back(what, b.numel()); },
                          options);
  // 64 KiB float32 gradients: four fill the 256 KiB first bucket; the other 60 (3.75 MiB)
  // stay below 25 MiB and are launched when backward ends. A float64 one has its own.
  Variable v = make_var("v", {1}, 1);
  for (int i = 0; i < 64; ++i) reducer.gradient_ready(v, zeros({16384}));
  reducer.gradient_ready(v, zeros({3}, kFloat64));
  REQUIRE(buckets.size() == 1);
  REQUIRE(buckets[0].second == 4 * 16384);
  CHECK_THAT(buckets[0].first, Contains("gradient bucket 0 (float32[65536]"));
  reducer.backward_done();
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[1].second == 60 * 16384);  // float32 before float64: the same on every replica
  CHECK(buckets[2].second == 3);
  CHECK_THAT(buckets[2].first, Contains("float64[3]"));
  reducer.end_step(false);

  // bytes_per_pack caps every bucket; a larger gradient goes alone.
  buckets.clear();
  options.bytes_per_pack = 100;
  GradientReducer small([&](const std::vector<Tensor>&, const Tensor& b, const std::string& what) { buckets.emplace_back(what, b.numel()); },
                        options);
  for (int64_t n : {10, 10, 10, 40, 5}) small.gradient_ready(v, zeros({n}));
  small.backward_done();
  std::vector<int64_t> sizes;
  for (auto& b : buckets) sizes.push_back(b.second);
  CHECK(sizes == std::vector<int64_t>{20, 10, 40, 5});
}

namespace {

// A stream-ordered work as NCCL's all_reduce_async returns (comm_work.h), on the CPU: it
// is complete for wait() at once, but its result (the bucket doubled: two "replicas"
// holding the same gradient) appears only when a consumer is ordered after it, and
// synchronize() records that the host waited for it. A reducer that skipped the ordering
// would hand out unsummed gradients.
struct StreamLog {
  std::vector<std::string> events;
  std::thread::id launch_thread;
};

class FakeStreamWork final : public CommWork {
 public:
  FakeStreamWork(std::string what, Tensor bucket, StreamLog& log, std::string sync_error)
      : CommWork(std::move(what)), bucket_(std::move(bucket)), log_(log), sync_error_(std::move(sync_error)) {
    finish();
  }
  void order_consumer(const Stream& consumer) const override {
    log_.events.push_back("order " + std::to_string(consumer.id()) + " " + what());
    if (!ordered_) bucket_.copy_(bucket_ * 2.0);
    ordered_ = true;
  }
  void synchronize(double) const override {
    log_.events.push_back("synchronize " + what());
    if (!sync_error_.empty()) throw Error(sync_error_);
  }

 private:
  Tensor bucket_;
  StreamLog& log_;
  std::string sync_error_;
  mutable bool ordered_ = false;
};

}  // namespace

TEST_CASE("gradient reducer: a stream transport launches inline and orders the consumer stream", "[reducer]") {
  StreamLog log;
  std::string launch_error, sync_error;
  GradientReducer::Options options;
  options.bytes_per_pack = 64 * 4;  // a bucket per gradient below
  GradientReducer reducer(GradientReducer::StreamTransport{[&](const Tensor& bucket, const std::string& what) {
                            log.launch_thread = std::this_thread::get_id();
                            log.events.push_back("launch " + what);
                            if (!launch_error.empty()) throw Error(launch_error);
                            return std::make_shared<FakeStreamWork>(what, bucket, log, sync_error);
                          }},
                          options);
  Variable a = make_var("a", {64}, 1), b = make_var("b", {8, 8}, 2);
  const Tensor ga = random::uniform({64}, 3, -1.0, 1.0), gb = random::uniform({8, 8}, 4, -1.0, 1.0);
  // A stream of its own for the consumer: the reducer must order the thread's current one.
  const Stream consumer = create_stream(Device());
  StreamGuard on(consumer);

  reducer.gradient_ready(a, ga);
  reducer.gradient_ready(b, gb);
  reducer.backward_done();
  REQUIRE(reducer.buckets_launched() == 2);
  REQUIRE(log.launch_thread == std::this_thread::get_id());  // no communication thread
  REQUIRE(log.events.size() == 2);                            // launched, nothing ordered yet
  const std::vector<Tensor> summed = reducer.take({ga, gb, ga * 1.0});
  REQUIRE(log.events.size() == 4);
  CHECK_THAT(log.events[2], Contains("order " + std::to_string(consumer.id()) + " gradient bucket 0") &&
                                Contains(": a)"));
  CHECK_THAT(log.events[3], Contains("order " + std::to_string(consumer.id()) + " gradient bucket 1"));
  REQUIRE_FALSE(summed[2].defined());  // not a gradient it saw
  for (size_t i = 0; i < 2; ++i) {
    const Tensor want = (i == 0 ? ga : gb) * 2.0;
    REQUIRE(summed[i].shape() == want.shape());
    REQUIRE(std::memcmp(summed[i].contiguous().raw_data(), want.contiguous().raw_data(), want.nbytes()) == 0);
  }
  // take() did not block the host on the collectives; the end of the step does, once each.
  reducer.end_step(false);
  REQUIRE(log.events.size() == 6);
  CHECK_THAT(log.events[4], Contains("synchronize gradient bucket 0"));
  CHECK_THAT(log.events[5], Contains("synchronize gradient bucket 1"));
  REQUIRE(reducer.buckets_launched() == 0);

  // A failure after enqueueing (a peer died while the GPU ran it) fails the step that
  // used the sums, at its end; a failed step drops it.
  sync_error = "nccl all_reduce_async failed on rank 0 of 2: rank(s) 1 gone";
  reducer.gradient_ready(a, ga);
  reducer.backward_done();
  (void)reducer.take({ga});
  REQUIRE_THROWS_WITH(reducer.end_step(false), Contains("rank(s) 1 gone"));
  reducer.gradient_ready(a, ga);
  reducer.backward_done();
  (void)reducer.take({ga});
  REQUIRE_NOTHROW(reducer.end_step(true));
  sync_error.clear();

  // A launch that fails (NCCL refused the call) is reported where the sums are taken.
  launch_error = "nccl all_reduce_async: NCCL refused the call";
  reducer.gradient_ready(a, ga);
  reducer.backward_done();
  REQUIRE_THROWS_WITH(reducer.take({ga}), Contains("NCCL refused the call"));
  REQUIRE_NOTHROW(reducer.end_step(true));
}

TEST_CASE("gradient reducer: the synchronous packing keeps layout and undefined tensors", "[reducer]") {
  std::vector<int64_t> sizes;
  const std::vector<Tensor> values{tensor({1, 2}), Tensor(), tensor({{3, 4}, {5, 6}}), tensor({7.0f}).cast(kFloat64)};
  auto out = GradientReducer::reduce_packed(values, 0, [&](const Tensor& b) {
    sizes.push_back(b.numel());
    b.copy_(b * 10.0);
  });
  CHECK(sizes == std::vector<int64_t>{6, 1});  // one pack per dtype
  REQUIRE_FALSE(out[1].defined());
  REQUIRE_ALLCLOSE(out[2], tensor({{30, 40}, {50, 60}}));
  REQUIRE(out[3].dtype() == kFloat64);
  REQUIRE_ALLCLOSE(values[0], tensor({1, 2}));  // the inputs are not reduced in place
}

namespace {

constexpr int64_t kReducerFeatures = 12, kReducerHidden = 24, kReducerClasses = 4, kReducerGlobalBatch = 12, kReducerExamples = 48;

data::Dataset make_reducer_dataset() {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(kReducerExamples * kReducerFeatures));
  for (auto& v : x) v = normal(gen);
  std::vector<int64_t> y(static_cast<size_t>(kReducerExamples));
  for (int64_t i = 0; i < kReducerExamples; ++i) y[size_t(i)] = (x[size_t(i * kReducerFeatures)] > 0 ? 1 : 0) + (i % 2) * 2;
  return data::Dataset::from_tensor_slices(
             std::vector<Tensor>{Tensor::from_vector(x, {kReducerExamples, kReducerFeatures}), Tensor::from_vector(y, {kReducerExamples})})
      .batch(kReducerGlobalBatch);
}

enum class Variant { Plain, ClippedAfterBackward, UnusedVariable };

// Trains 2 epochs and returns every variable's final value and the last step's loss.
std::vector<Tensor> train(Strategy& strategy, Variant variant) {
  nn::Sequential model;
  optim::Optimizer opt;
  Variable unused;
  {
    auto scope = strategy.scope();
    model = nn::Sequential{nn::Dense(kReducerFeatures, kReducerHidden, {.kernel_initializer = nn::glorot_uniform(1)}), nn::ReLU(),
                           nn::Dense(kReducerHidden, kReducerHidden, {.kernel_initializer = nn::glorot_uniform(2)}), nn::ReLU(),
                           nn::Dense(kReducerHidden, kReducerClasses, {.kernel_initializer = nn::glorot_uniform(3)})};
    opt = optim::SGD(0.1, {.momentum = 0.9});
    autograd::VariableOptions o;
    o.name = "unused";
    unused = Variable(ones({5}), o);
  }
  std::vector<Variable> vars = model.trainable_variables();
  if (variant == Variant::UnusedVariable) vars.push_back(unused);
  auto step = [&](const data::Batch& b) {
    autograd::GradientTape tape;
    if (variant == Variant::UnusedVariable) (void)unused.read();  // watched, never used
    Tensor logits = model(b[0]);
    Tensor loss =
        compute_average_loss(losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true), kReducerGlobalBatch);
    auto grads = tape.gradient(loss, vars);
    if (variant == Variant::ClippedAfterBackward) {
      // New tensors: the reducer's buckets are not theirs, apply_gradients reduces them.
      for (Tensor& g : grads)
        if (g.defined()) g = clip(g, -0.05, 0.05);
    }
    opt.apply_gradients(grads, vars);
    return loss;
  };
  Tensor last_loss;
  auto dist = strategy.experimental_distribute_dataset(make_reducer_dataset());
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& batch : dist) last_loss = strategy.reduce(ReduceOp::Sum, strategy.run(step, batch));
  }
  std::vector<Tensor> out{last_loss.clone()};
  for (const Variable& v : vars) {
    for (const Tensor& c : strategy.experimental_local_results(v)) out.push_back(c.clone());
  }
  return out;
}

using strata::distribute::testing::bitwise_equal;

std::unique_ptr<Strategy> make(const std::string& kind, CommunicationOptions o) {
  if (kind == "mirrored(2)")
    return std::make_unique<MirroredStrategy>(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
  if (kind == "mirrored(3, hierarchical)")
    return std::make_unique<MirroredStrategy>(MirroredStrategy::cpu_devices(3),
                                              CrossDeviceOps::HierarchicalCopyAllReduce, o);
  if (kind == "mirrored(4)")  // more replicas than this machine's cores, often
    return std::make_unique<MirroredStrategy>(MirroredStrategy::cpu_devices(4), CrossDeviceOps::Default, o);
  return std::make_unique<CentralStorageStrategy>(MirroredStrategy::cpu_devices(2), std::nullopt, o);
}

}  // namespace

TEST_CASE("gradient reducer: every strategy trains bitwise the same with and without overlap", "[reducer]") {
  for (const std::string kind : {"mirrored(2)", "mirrored(3, hierarchical)", "mirrored(4)", "central_storage(2)"}) {
    for (Variant variant : {Variant::Plain, Variant::ClippedAfterBackward, Variant::UnusedVariable}) {
      for (int64_t pack : {int64_t(0), int64_t(512)}) {  // one bucket; a bucket per layer or so
        INFO(kind << ", variant " << int(variant) << ", bytes_per_pack " << pack);
        CommunicationOptions off;
        off.overlap_gradient_reduction = false;
        off.bytes_per_pack = pack;
        CommunicationOptions on = off;
        on.overlap_gradient_reduction = true;
        const auto reference = train(*make(kind, off), variant);
        const auto overlapped = train(*make(kind, on), variant);
        REQUIRE(bitwise_equal(reference, overlapped));
      }
    }
  }
  // And the same as one replica doing the whole batch (to float32 rounding).
  const auto single = train(DefaultStrategy::instance(), Variant::Plain);
  const auto mirrored = train(*make("mirrored(2)", {}), Variant::Plain);
  REQUIRE(std::abs(single[0].item<float>() - mirrored[0].item<float>()) <= 1e-5f * std::abs(single[0].item<float>()));
}

TEST_CASE("gradient reducer: aggregating in backward trains bitwise the same as reducing in apply_gradients",
          "[reducer]") {
  for (const std::string kind : {"mirrored(2)", "mirrored(3, hierarchical)", "mirrored(4)", "central_storage(2)"}) {
    for (Variant variant : {Variant::Plain, Variant::UnusedVariable}) {
      for (int64_t pack : {int64_t(0), int64_t(512)}) {
        INFO(kind << ", variant " << int(variant) << ", bytes_per_pack " << pack);
        CommunicationOptions usual;
        usual.bytes_per_pack = pack;
        CommunicationOptions aggregated = usual;
        aggregated.aggregate_gradients_in_backward = true;
        REQUIRE(bitwise_equal(train(*make(kind, usual), variant), train(*make(kind, aggregated), variant)));
      }
    }
  }
  // One copy of the variables that both replicas update in halves (the bench's fastest).
  CommunicationOptions aggregated;
  aggregated.aggregate_gradients_in_backward = true;
  auto one_copy = make("mirrored(2)", aggregated);
  one_copy->set_share_cpu_variables(true);
  REQUIRE(bitwise_equal(train(*make("mirrored(2)", {}), Variant::Plain), train(*one_copy, Variant::Plain)));
}

TEST_CASE("gradient reducer: aggregating in backward, GradientTape::gradient returns the replicas' sums", "[reducer]") {
  // The same weights and per-replica batches under both options: the usual mode's
  // per-replica gradients, folded in rank order, are what the aggregating mode's tape
  // returns on every replica; its three kernels' gradients were summed from factors.
  auto run = [](bool aggregate) {
    CommunicationOptions o;
    o.aggregate_gradients_in_backward = aggregate;
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
    nn::Sequential model;
    {
      auto scope = strategy.scope();
      model = nn::Sequential{nn::Dense(40, 30, {.kernel_initializer = nn::glorot_uniform(1)}), nn::ReLU(),
                             nn::Dense(30, 20, {.kernel_initializer = nn::glorot_uniform(2)}), nn::ReLU(),
                             nn::Dense(20, 5, {.kernel_initializer = nn::glorot_uniform(3)})};
    }
    auto vars = model.trainable_variables();
    std::vector<size_t> products(2);
    auto per_replica = strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      autograd::GradientTape tape;
      Tensor loss = sum(square(model(random::uniform({8 + 4 * r, 40}, uint64_t(50 + r), -1.0, 1.0))));
      auto grads = tape.gradient(loss, vars);
      auto* local = dynamic_cast<LocalReplicaContext*>(get_replica_context());
      products[size_t(r)] = local->gradient_hook()->product_buckets_launched();
      std::vector<Tensor> out;
      for (const Tensor& g : grads) out.push_back(g.clone());
      return out;
    });
    return std::make_pair(per_replica, products);
  };
  const auto [usual, usual_products] = run(false);
  const auto [aggregated, products] = run(true);
  CHECK(usual_products == std::vector<size_t>{0, 0});
  CHECK(products == std::vector<size_t>{3, 3});
  REQUIRE(usual[0].size() == 6);
  for (size_t v = 0; v < usual[0].size(); ++v) {
    INFO("variable " << v);
    const Tensor sum_of_replicas = usual[0][v] + usual[1][v];
    REQUIRE(bitwise_equal({aggregated[0][v]}, {sum_of_replicas}));
    REQUIRE(bitwise_equal({aggregated[1][v]}, {sum_of_replicas}));
  }
}

TEST_CASE("gradient reducer: aggregating in backward, products of other dtypes are computed per replica and summed",
          "[reducer]") {
  // Only float32 and float64 products are summed from factors; a float16 (or bfloat16)
  // weight's gradient is computed by each replica and reduced like any other gradient.
  for (DType dtype : {kFloat16, kBFloat16, kFloat64}) {
    INFO(dtype_name(dtype));
    auto run = [&](bool aggregate) {
      CommunicationOptions o;
      o.aggregate_gradients_in_backward = aggregate;
      MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
      Variable w;
      {
        auto scope = strategy.scope();
        w = Variable(cast(random::uniform({6, 3}, uint64_t(5), -1.0, 1.0), dtype));
      }
      std::vector<size_t> products(2);
      auto grads = strategy.run([&] {
        const int r = get_replica_context()->replica_id_in_sync_group();
        autograd::GradientTape tape;
        const Tensor x = cast(random::uniform({4, 6}, uint64_t(60 + r), -1.0, 1.0), dtype);
        auto g = tape.gradient(sum(square(matmul(x, w.read()))), std::vector<Variable>{w});
        products[size_t(r)] = dynamic_cast<LocalReplicaContext*>(get_replica_context())->gradient_hook()->product_buckets_launched();
        return g[0].clone();
      });
      return std::make_pair(grads, products);
    };
    const auto usual = run(false).first;
    const auto [aggregated, products] = run(true);
    CHECK(products == std::vector<size_t>{dtype == kFloat64 ? 1u : 0u, dtype == kFloat64 ? 1u : 0u});
    const Tensor sum_of_replicas = usual[0] + usual[1];
    REQUIRE(bitwise_equal({aggregated[0]}, {sum_of_replicas}));
    REQUIRE(bitwise_equal({aggregated[1]}, {sum_of_replicas}));
  }
}

TEST_CASE("gradient reducer: aggregating in backward is refused with ZeRO-1 or without overlap", "[reducer]") {
  for (bool zero : {false, true}) {
    CommunicationOptions o;
    o.aggregate_gradients_in_backward = true;
    o.overlap_gradient_reduction = zero;
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
    if (zero) strategy.set_shard_optimizer_state(true);
    Variable w;
    {
      auto scope = strategy.scope();
      w = Variable(ones({3}));
    }
    REQUIRE_THROWS_WITH(strategy.run([&] {
      autograd::GradientTape tape;
      (void)tape.gradient(sum(w.read()), std::vector<Variable>{w});
    }),
                        Contains("aggregate_gradients_in_backward needs overlap_gradient_reduction on"));
  }
}

TEST_CASE("gradient reducer: no_sync accumulates micro-batches with nothing communicated until apply_gradients",
          "[reducer]") {
  // Three micro-batches per replica, their gradients summed, one update. Under no_sync no
  // bucket is launched during the micro-batches; the weights end bitwise as when the
  // gradients are reduced only in apply_gradients (overlap off), and as with overlap on
  // without no_sync, which launches buckets for every micro-batch that nobody takes.
  enum class Mode { NoSync, OverlapOff, OverlapOnly };
  auto run = [](Mode mode) {
    CommunicationOptions o;
    o.overlap_gradient_reduction = mode != Mode::OverlapOff;
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
    nn::Sequential model;
    optim::Optimizer opt;
    {
      auto scope = strategy.scope();
      model = nn::Sequential{nn::Dense(12, 8, {.kernel_initializer = nn::glorot_uniform(4)}), nn::ReLU(),
                             nn::Dense(8, 3, {.kernel_initializer = nn::glorot_uniform(5)})};
      opt = optim::SGD(0.1);
    }
    auto vars = model.trainable_variables();
    std::vector<size_t> launched(2);
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      std::vector<Tensor> total;
      for (int k = 0; k < 3; ++k) {
        std::optional<NoSyncScope> local;
        if (mode == Mode::NoSync) local.emplace();
        autograd::GradientTape tape;
        Tensor loss = sum(square(model(random::uniform({4 + k, 12}, uint64_t(70 + 10 * r + k), -1.0, 1.0))));
        auto grads = tape.gradient(loss, vars);
        if (total.empty()) {
          total = grads;
        } else {
          for (size_t v = 0; v < grads.size(); ++v) total[v] = total[v] + grads[v];
        }
      }
      auto* ctx = dynamic_cast<LocalReplicaContext*>(get_replica_context());
      launched[size_t(r)] = ctx->gradient_hook() ? ctx->gradient_hook()->buckets_launched() : 0;
      opt.apply_gradients(total, vars);
    });
    std::vector<Tensor> weights;
    for (const Variable& v : vars) weights.push_back(v.value().clone());
    return std::make_pair(weights, launched);
  };
  const auto [quiet, quiet_launched] = run(Mode::NoSync);
  const auto [reference, reference_launched] = run(Mode::OverlapOff);
  const auto [busy, busy_launched] = run(Mode::OverlapOnly);
  CHECK(quiet_launched == std::vector<size_t>{0, 0});
  CHECK(busy_launched[0] >= 3);  // at least one bucket per micro-batch, all wasted
  CHECK(bitwise_equal(quiet, reference));
  CHECK(bitwise_equal(busy, reference));
}

TEST_CASE("gradient reducer: GradientAccumulator reduces the totals during the last micro-batch's backward",
          "[reducer]") {
  // Three micro-batches per replica; the second layer's bias is not reached by the last one
  // (its loss reads only the first layer's output there). Nothing is launched before the
  // last micro-batch, buckets are launched during it, and the weights end bitwise as with
  // the gradients reduced in apply_gradients (overlap off), also when the tape returns the
  // replicas' sums (aggregate_gradients_in_backward, where no_sync is refused).
  using Mode = AccumulationMode;
  auto run = [](Mode mode) {
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, accumulation_options(mode));
    Variable w1, b1, w2, b2;
    optim::Optimizer opt;
    {
      auto scope = strategy.scope();
      w1 = make_var("w1", {12, 8}, 1), b1 = make_var("b1", {8}, 2);
      w2 = make_var("w2", {8, 3}, 3), b2 = make_var("b2", {3}, 4);
      opt = optim::SGD(0.1);
    }
    const std::vector<Variable> vars{w1, b1, w2, b2};
    std::vector<std::vector<size_t>> launched(2);
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      auto* ctx = dynamic_cast<LocalReplicaContext*>(get_replica_context());
      std::vector<Tensor> total;
      GradientAccumulator accumulated(vars);
      for (int k = 0; k < 3; ++k) {
        autograd::GradientTape tape;
        const Tensor x = random::uniform({4 + k, 12}, uint64_t(70 + 10 * r + k), -1.0, 1.0);
        const Tensor h = relu(matmul(x, w1.read()) + b1.read());
        const Tensor loss = k < 2 ? sum(square(matmul(h, w2.read()) + b2.read())) : sum(square(matmul(h, w2.read())));
        if (mode == Mode::OverlapOff) {
          auto grads = tape.gradient(loss, vars);
          if (total.empty()) {
            total = grads;
          } else {
            for (size_t v = 0; v < grads.size(); ++v)
              if (grads[v].defined()) total[v] = total[v] + grads[v];
          }
        } else {
          accumulated.add(tape, loss, k == 2);
          launched[size_t(r)].push_back(ctx->gradient_hook()->buckets_launched());
        }
      }
      opt.apply_gradients(mode == Mode::OverlapOff ? total : accumulated.gradients(), vars);
    });
    std::vector<Tensor> weights;
    for (const Variable& v : vars) weights.push_back(v.value().clone());
    return std::make_pair(weights, launched);
  };
  const auto [reference, unused] = run(Mode::OverlapOff);
  for (Mode mode : {Mode::Accumulator, Mode::AccumulatorAggregated}) {
    INFO("aggregated " << (mode == Mode::AccumulatorAggregated));
    const auto [weights, launched] = run(mode);
    for (const auto& per_micro_batch : launched) {
      REQUIRE(per_micro_batch.size() == 3);
      CHECK(per_micro_batch[0] == 0);
      CHECK(per_micro_batch[1] == 0);
      CHECK(per_micro_batch[2] >= 1);
    }
    CHECK(bitwise_equal(weights, reference));
  }
}

TEST_CASE("gradient reducer: GradientAccumulator gives each variable its own total when the tape reports one "
          "gradient for several",
          "[reducer]") {
  // The last micro-batch's loss reads a + b: the tape hands the same gradient tensor to a
  // and b, whose totals differ (only a was reached before). Compared with the totals
  // summed by hand and reduced in apply_gradients (overlap off), with the tape's
  // gradients and with the replicas' sums (aggregate_gradients_in_backward).
  using Mode = AccumulationMode;
  auto run = [](Mode mode) {
    MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, accumulation_options(mode));
    Variable a, b;
    optim::Optimizer opt;
    {
      auto scope = strategy.scope();
      a = make_var("a", {5}, 1), b = make_var("b", {5}, 2);
      opt = optim::SGD(0.1);
    }
    const std::vector<Variable> vars{a, b};
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      std::vector<Tensor> total(2);
      GradientAccumulator accumulated(vars);
      for (int k = 0; k < 2; ++k) {
        autograd::GradientTape tape;
        const Tensor x = random::uniform({5}, uint64_t(40 + 10 * r + k), -1.0, 1.0);
        const Tensor loss = k == 0 ? sum(square(a.read() * x)) : sum(square((a.read() + b.read()) * x));
        if (mode == Mode::OverlapOff) {
          auto grads = tape.gradient(loss, vars);
          for (size_t v = 0; v < 2; ++v)
            if (grads[v].defined()) total[v] = total[v].defined() ? total[v] + grads[v] : grads[v];
        } else {
          accumulated.add(tape, loss, k == 1);
        }
      }
      opt.apply_gradients(mode == Mode::OverlapOff ? total : accumulated.gradients(), vars);
    });
    return std::vector<Tensor>{a.value().clone(), b.value().clone()};
  };
  const std::vector<Tensor> reference = run(Mode::OverlapOff);
  for (Mode mode : {Mode::Accumulator, Mode::AccumulatorAggregated}) {
    INFO("aggregated " << (mode == Mode::AccumulatorAggregated));
    CHECK(bitwise_equal(run(mode), reference));
  }
}

TEST_CASE("gradient reducer: GradientAccumulator refuses what would apply unreduced or stale totals", "[reducer]") {
  CommunicationOptions o;
  o.aggregate_gradients_in_backward = true;
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
  Variable a;
  {
    auto scope = strategy.scope();
    a = make_var("a", {5}, 1);
  }
  // A variable listed twice.
  REQUIRE_THROWS_WITH(GradientAccumulator({a, a}), Contains("variable 1 ('a') is listed twice"));
  // gradients() before the last micro-batch, where apply_gradients expects the sums.
  REQUIRE_THROWS_WITH(strategy.run([&] {
    GradientAccumulator accumulated({a});
    autograd::GradientTape tape;
    accumulated.add(tape, sum(square(a.read())), /*last=*/false);
    (void)accumulated.gradients();
  }),
                      Contains("aggregate_gradients_in_backward") && Contains("this replica's own totals"));
  // A gradient the tape computed without reporting it (a variable watched as a tensor).
  REQUIRE_THROWS_WITH(strategy.run([&] {
    GradientAccumulator accumulated({a});
    autograd::GradientTape tape(/*persistent=*/false, /*watch_accessed_variables=*/false);
    tape.watch(a.value());
    accumulated.add(tape, sum(square(a.value())), /*last=*/true);
  }),
                      Contains("did not report to the gradient reducer"));
}

TEST_CASE("gradient reducer: no_sync is refused when gradients are summed in backward", "[reducer]") {
  CommunicationOptions o;
  o.aggregate_gradients_in_backward = true;
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
  REQUIRE_THROWS_WITH(strategy.run([&] { auto local = no_sync(); }),
                      Contains("no_sync") && Contains("would be applied unreduced"));
  auto outside = no_sync();  // outside replica context: nothing to do, nothing refused
}

TEST_CASE("gradient reducer: a replica failing with buckets in flight releases the others", "[reducer]") {
  CommunicationOptions o;
  o.timeout_seconds = 60;  // a release by timeout would show as a timeout message, not this one
  o.bytes_per_pack = 256;  // a bucket per layer: some launched before the failure
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
  nn::Sequential model;
  optim::Optimizer opt;
  Variable extra;
  {
    auto scope = strategy.scope();
    model = nn::Sequential{nn::Dense(8, 16), nn::ReLU(), nn::Dense(16, 16), nn::ReLU(), nn::Dense(16, 2)};
    opt = optim::SGD(0.1);
    autograd::VariableOptions o;
    o.name = "extra";
    extra = Variable(ones({64}), o);  // 256 bytes: a bucket of its own
  }
  auto vars = model.trainable_variables();
  vars.push_back(extra);
  // Before backward: replica 0's buckets wait for replica 1's, which never come; inside
  // backward: replica 1 launched its first bucket, not the others; after backward: all.
  for (const std::string where : {"before backward", "inside backward", "after backward"}) {
    INFO(where);
    auto step = [&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      autograd::GradientTape tape;
      Tensor h = model(ones({4, 8}));
      if (r == 1 && where == "before backward") throw Error("replica 1 broke before backward");
      if (where == "inside backward") {
        // Replica 1 fails in backward after `extra` (read last, so final first) was
        // reported and its bucket launched, before the model's gradients exist.
        h = autograd::custom_gradient({h}, [&](const std::vector<Tensor>& in) {
          autograd::CustomVjp vjp = [r](const Tensor& g) {
            if (r == 1) throw Error("replica 1 broke in backward");
            return std::vector<Tensor>{g};
          };
          return autograd::CustomResult{in[0] * 1.0, vjp};
        });
      }
      auto grads = tape.gradient(sum(h) + sum(extra.read()), vars);
      if (r == 1 && where == "after backward") throw Error("replica 1 broke after backward");
      opt.apply_gradients(grads, vars);
    };
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE_THROWS_WITH(strategy.run(step), Contains("replica 1") && Contains("broke"));
    INFO("took " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
    // The strategy is usable again: the next step runs on every replica.
    strategy.run([&] {
      autograd::GradientTape tape;
      opt.apply_gradients(tape.gradient(sum(model(ones({4, 8}))) + sum(extra.read()), vars), vars);
    });
  }
}

TEST_CASE("gradient reducer: replicas disagreeing about which variables got gradients are told", "[reducer]") {
  CommunicationOptions o;
  o.timeout_seconds = 20;
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2), CrossDeviceOps::Default, o);
  Variable a, b;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    autograd::VariableOptions va, vb;
    va.name = "alpha";
    vb.name = "beta";
    a = Variable(ones({3}), va);
    b = Variable(ones({3}), vb);
    opt = optim::SGD(0.1);
  }
  auto step = [&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    autograd::GradientTape tape;
    // Replica 1's loss does not use beta: it gets no gradient there.
    Tensor loss = r == 0 ? sum(a.read() * b.read()) : sum(a.read() * 2.0);
    auto grads = tape.gradient(loss, std::vector<Variable>{a, b});
    opt.apply_gradients(grads, {a, b});
  };
  REQUIRE_THROWS_WITH(strategy.run(step), Contains("gradient bucket 0") && Contains("alpha") && Contains("beta"));
}

namespace {
std::vector<double> read_numbers(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<double> out;
  for (double x; in >> x;) out.push_back(x);
  return out;
}
}  // namespace

TEST_CASE("gradient reducer: 2 worker processes train the same with and without overlap",
          "[reducer][mwms][multiprocess]") {
  if (!gloo_available()) {
    WARN("skipped: strata was built without Gloo");
    return;
  }
  char tmpl[] = "/tmp/strata_reducer_XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(tmpl);
  std::map<std::string, std::vector<double>> weights;
  for (const std::string mode : {"overlap", "no-overlap"}) {
    const std::string out = (dir / mode).string();
    std::vector<std::string> argv{STRATA_LAUNCH_BIN, "--workers", "2",  "--timeout",        "120", "--",
                                  STRATA_MWMS_HELPER, "train",   "--out", out, "--bytes-per-pack", "256"};
    if (mode == "no-overlap") argv.push_back("--no-overlap");
    auto r = strata::testing::run_process(argv, {}, 150.0);
    INFO(mode << ": " << r.output);
    REQUIRE(r.exit_code == 0);
    weights[mode] = read_numbers(out + ".0");
    REQUIRE(weights[mode] == read_numbers(out + ".1"));
    REQUIRE_FALSE(weights[mode].empty());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  // Two workers: a + b == b + a, so the weights agree to the last bit (printed to 9 digits).
  REQUIRE(weights["overlap"] == weights["no-overlap"]);
}
