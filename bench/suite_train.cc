// train suite: steps/s of the MLP 784-512-512-10 (batch 128) and the MNIST CNN (batch 64)
// under Default, Mirrored(1..cores), Mirrored(2) reducing gradients only after backward
// (overlap_gradient_reduction off), Mirrored(2) with one copy of the variables
// (share_cpu_variables), Mirrored(2) aggregating the gradients in backward
// (aggregate_gradients_in_backward; with copies and with one copy) and CentralStorage(2),
// each next to the Default strategy measured in the same run, in alternating rounds; and
// the data-parallel bound (`independent(2)`, below) that the 2-replica rows are also
// compared with. (bench/compare/ runs the same workloads in PyTorch.)
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
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>

#include <algorithm>
#include <exception>
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
  return out;
}

}  // namespace strata::bench
