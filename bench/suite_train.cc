// train suite: steps/s of the MLP 784-512-512-10 (batch 128) and the MNIST CNN (batch 64)
// under Default, Mirrored(1..cores), Mirrored(2) reducing gradients only after backward
// (overlap_gradient_reduction off), Mirrored(2) with one copy of the variables
// (share_cpu_variables), Mirrored(2) aggregating the gradients in backward
// (aggregate_gradients_in_backward; with copies and with one copy) and CentralStorage(2),
// each next to the Default strategy measured in the same run, in alternating rounds; and
// the data-parallel bound (`independent(2)`, below) that the 2-replica rows are also
// compared with. (bench/compare/ runs the same workloads in PyTorch.) Also: how long a
// checkpoint save holds the training thread, asynchronous against synchronous.
#include "bench/bench.h"
#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include <strata/core/thread_pool.h>
#include <strata/distribute/collective/in_process.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/replica_threads.h>
#include <strata/distribute/strategy.h>
#include <strata/train/checkpoint.h>
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <mutex>
#include <memory>
#include <thread>

namespace strata::bench {

nn::Sequential make_model(bool cnn) {
  if (!cnn) return nn::Sequential{nn::Dense(784, 512), nn::ReLU(), nn::Dense(512, 512), nn::ReLU(), nn::Dense(512, 10)};
  return nn::Sequential{nn::Conv2D(1, 32, 3), nn::ReLU(), nn::Conv2D(32, 64, 3), nn::ReLU(), nn::MaxPool2D(2),
                        nn::Flatten(), nn::Dense(12 * 12 * 64, 128), nn::ReLU(), nn::Dense(128, 10)};
}

std::function<void()> make_trainer(distribute::Strategy& strategy, bool cnn, int64_t batch, int steps) {
  struct State {
    nn::Sequential model;
    optim::SGD opt{0.01};
  };
  auto state = std::make_shared<State>();
  {
    auto scope = strategy.scope();
    state->model = make_model(cnn);
    state->opt = optim::SGD(0.01);
  }
  Shape xs = cnn ? Shape{batch, 28, 28, 1} : Shape{batch, 784};
  Tensor x = random::normal(xs, 1);
  Tensor y = cast(floor(random::uniform({batch}, 2, 0.0, 10.0)), kInt64);
  auto dist = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices({x, y}).batch(batch));
  auto it = dist.make_iterator();
  return [state, per_replica_batch = *it.next(), &strategy, batch, steps] {
    auto step = [&](const data::Batch& b) {
      autograd::GradientTape tape;
      Tensor loss = distribute::compute_average_loss(
          losses::sparse_categorical_crossentropy(b[1], state->model(b[0]), true), batch);
      state->opt.apply_gradients(tape.gradient(loss, state->model.trainable_variables()),
                                 state->model.trainable_variables());
      return loss;
    };
    for (int s = 0; s < steps; ++s) strategy.run(step, per_replica_batch);
    for (const Device& d : strategy.devices()) synchronize(d);  // asynchronous devices (CUDA)
  };
}

// The data-parallel bound: `replicas` independent trainings, each of its own model on
// batch / replicas examples, under the Default strategy, one per long-lived thread with the
// share of the cores a Mirrored replica gets (Strategy::run_replicas) -- data parallelism
// with free communication and no gradient sums. Mirrored(replicas) at the same global batch
// does the same per-replica work and sums the gradients besides, so it can at best tie this
// row (within the one-copy update's savings). On 2 cores the MLP's Default strategy already
// matches it: its intra-op split loses nothing to independent replicas (bench/README.md).
std::function<void()> make_independent_trainer(bool cnn, int64_t batch, int replicas, int steps) {
  struct State {
    std::vector<std::function<void()>> trainers;
    std::unique_ptr<distribute::ReplicaThreads> threads;
  };
  auto state = std::make_shared<State>();
  for (int r = 0; r < replicas; ++r)
    state->trainers.push_back(make_trainer(distribute::DefaultStrategy::instance(), cnn, batch / replicas, steps));
  const int cores = distribute::ComputeSlot::capacity();  // as Strategy::run_replicas counts them
  state->threads = std::make_unique<distribute::ReplicaThreads>(replicas, [replicas, cores](int) {
    set_thread_parallelism_limit(std::max(1, cores / replicas));
    return std::shared_ptr<void>();
  });
  return [state] {
    std::mutex mutex;
    std::exception_ptr error;
    state->threads->run([&](int r) {
      try {
        state->trainers[size_t(r)]();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
    if (error) std::rethrow_exception(error);
  };
}

double steps_per_second(distribute::Strategy& strategy, bool cnn, int64_t batch, int steps, int reps) {
  const std::function<void()> train = make_trainer(strategy, cnn, batch, steps);
  return double(steps) / time_it(train, reps, 1, 1).median_s;
}


// How long a checkpoint save holds the training thread: a CheckpointManager over one
// float32 variable of 256 MB (4 MB with --quick), saving asynchronously (the wait is the
// host copy of the state; CheckpointOptions::enable_async_checkpoint) against a
// synchronous save (both files written and fsynced) in the same run, alternating. The
// asynchronous write is waited for (sync) between rounds, outside the timing; its whole
// time, save to written, is the row's `write_ms`.
void add_checkpoint_stall(std::vector<Result>& out, const Options& o) {
  const bool quick = o.quick;
  namespace fs = std::filesystem;
  const int64_t floats = quick ? (int64_t(1) << 20) : (int64_t(64) << 20);
  const std::string size = std::to_string(floats * 4 >> 20) + " MB";
  Result r{"train", "checkpoint save of " + size + ", asynchronous: the training thread held", 0, "ms", 0,
           "synchronous save", 0, /*lower_is_better=*/true};
  if (!o.selects(r.name)) return;
  const fs::path dir = fs::temp_directory_path() / ("strata-bench-checkpoint-" + std::to_string(::getpid()));
  try {
    fs::remove_all(dir);
    Variable w(random::normal({floats}, 31));
    train::CheckpointManager manager(train::Checkpoint{{"w", w}}, dir, /*max_to_keep=*/1);
    train::CheckpointOptions async;
    async.enable_async_checkpoint = true;
    using Clock = std::chrono::steady_clock;
    auto ms_since = [](Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
    std::vector<double> held, blocking, written;
    int64_t step = 0;
    const int rounds = quick ? 1 : 5;
    manager.save(step++, true);  // warm-up: the directory, the page cache
    for (int i = 0; i < rounds; ++i) {
      auto t0 = Clock::now();
      manager.save(step++, true);
      blocking.push_back(ms_since(t0));
      t0 = Clock::now();
      manager.save(step++, true, async);
      held.push_back(ms_since(t0));
      manager.sync();
      written.push_back(ms_since(t0));
    }
    const Timing t = summarize(held);
    r.value = t.median_s;  // milliseconds here
    r.spread = t.spread();
    r.baseline_value = summarize(blocking).median_s;
    r.extra = {{"write_ms", summarize(written).median_s}};
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  out.push_back(std::move(r));
}

std::vector<Result> train_suite(const Options& o) {
  std::vector<Result> out;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  for (bool cnn : {false, true}) {
    const int64_t batch = cnn ? 64 : 128;
    const int steps = o.quick ? 2 : (cnn ? 10 : 50);
    const int rounds = o.quick ? 1 : 7;
    const std::string model = cnn ? "CNN b64" : "MLP 784-512-512-10 b128";
    // Every strategy is built first, then timed in alternating rounds (each strategy once
    // per round, Default first): a change of load on the shared machine hits all of them
    // alike. A figure is the median over the rounds; paired_ratio is the median of the
    // per-round ratios to Default, which drifting load cannot skew.
    std::vector<std::pair<std::string, std::unique_ptr<distribute::Strategy>>> strategies;
    for (int n = 1; n <= std::max(2, cores); ++n) {
      strategies.emplace_back("mirrored(" + std::to_string(n) + ")",
                              std::make_unique<distribute::MirroredStrategy>(distribute::MirroredStrategy::cpu_devices(n)));
    }
    // The gradient reduction after backward, as before issue 18 (the overlap's effect).
    distribute::CommunicationOptions after_backward;
    after_backward.overlap_gradient_reduction = false;
    strategies.emplace_back("mirrored(2) no overlap", std::make_unique<distribute::MirroredStrategy>(
                                                          distribute::MirroredStrategy::cpu_devices(2),
                                                          distribute::CrossDeviceOps::Default, after_backward));
    // One copy of every variable that both replicas read, its update split between them
    // (Strategy::set_share_cpu_variables).
    auto one_copy = std::make_unique<distribute::MirroredStrategy>(distribute::MirroredStrategy::cpu_devices(2));
    one_copy->set_share_cpu_variables(true);
    strategies.emplace_back("mirrored(2) one copy", std::move(one_copy));
    // GradientTape::gradient returning the replicas' sums (PyTorch DDP's param.grad), the
    // weight gradients summed from their factors (aggregate_gradients_in_backward); with
    // copies of the variables, and with one copy.
    distribute::CommunicationOptions in_backward;
    in_backward.aggregate_gradients_in_backward = true;
    strategies.emplace_back("mirrored(2) aggregated", std::make_unique<distribute::MirroredStrategy>(
                                                          distribute::MirroredStrategy::cpu_devices(2),
                                                          distribute::CrossDeviceOps::Default, in_backward));
    auto one_copy_aggregated = std::make_unique<distribute::MirroredStrategy>(
        distribute::MirroredStrategy::cpu_devices(2), distribute::CrossDeviceOps::Default, in_backward);
    one_copy_aggregated->set_share_cpu_variables(true);
    strategies.emplace_back("mirrored(2) one copy aggregated", std::move(one_copy_aggregated));
    strategies.emplace_back("central_storage(2)", std::make_unique<distribute::CentralStorageStrategy>(
                                                      distribute::MirroredStrategy::cpu_devices(2)));
    // --filter: the model's trainings run only when one of its rows is asked for.
    bool selected = o.selects(model + " default") || o.selects(model + " independent");
    for (const auto& entry : strategies) selected = selected || o.selects(model + " " + entry.first);
    if (!selected) continue;
    std::vector<std::function<void()>> trainers{
        make_trainer(distribute::DefaultStrategy::instance(), cnn, batch, steps)};
    for (auto& [name, strategy] : strategies) trainers.push_back(make_trainer(*strategy, cnn, batch, steps));
    constexpr int kBoundReplicas = 2;
    const size_t bound = trainers.size();
    trainers.push_back(make_independent_trainer(cnn, batch, kBoundReplicas, steps));
    std::vector<std::vector<double>> seconds(trainers.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < trainers.size(); ++k) {
        seconds[k].push_back(time_it(trainers[k], 1, 1, r == 0 ? 1 : 0).median_s);
      }
    }
    auto rates = [&](size_t k) {
      std::vector<double> rate;
      for (double t : seconds[k]) rate.push_back(steps / t);
      return rate;
    };
    const double base = summarize(rates(0)).median_s;
    // The median over the rounds of row `to`'s time over row k's.
    auto paired = [&](size_t k, size_t to) {
      std::vector<double> ratios;
      for (int r = 0; r < rounds; ++r) ratios.push_back(seconds[to][size_t(r)] / seconds[k][size_t(r)]);
      return summarize(ratios).median_s;
    };
    // Rows of as many replicas as the bound are compared with it too.
    auto row = [&](size_t k, const std::string& name, bool vs_bound) {
      const Timing rate = summarize(rates(k));  // steps/s, not seconds: median and spread
      Result res{"train", model + " " + name, rate.median_s, "steps/s", rate.spread(),
                 k == 0 ? "(itself)" : "default strategy", base};
      if (k > 0) res.extra = {{"paired_ratio", paired(k, 0)}};
      if (vs_bound) res.extra.emplace_back("paired_vs_bound", paired(k, bound));
      out.push_back(std::move(res));
    };
    row(0, "default", false);
    for (size_t k = 0; k < strategies.size(); ++k)
      row(k + 1, strategies[k].first, strategies[k].second->num_replicas_in_sync() == kBoundReplicas);
    row(bound, "independent(" + std::to_string(kBoundReplicas) + ") (no communication: the data-parallel bound)", false);
  }
  add_checkpoint_stall(out, o);
  return out;
}

}  // namespace strata::bench
