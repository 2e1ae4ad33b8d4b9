// MNIST CNN trained with a custom loop under a distribution strategy (DESIGN.md's
// north star): variables created in the strategy's scope, a distributed dataset, the
// step run on every replica with strategy.run, and the loss reduced across replicas.
//
//   example_mnist_mirrored --data DIR                      # Mirrored(2) on cpu:0, cpu:1
//   example_mnist_mirrored --data DIR --strategy default   # the same job on one replica
//
// DIR holds the MNIST IDX files of the 10k test set (t10k-images-idx3-ubyte[.gz], ...):
// the first 8,000 images train and the last 2,000 evaluate. Prints the evaluation
// accuracy and the training speed (steps/s after the first 10 steps).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include <strata/autograd/autograd.h>
#include <strata/data/mnist.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/make_strategy.h>
#include <strata/train/adam.h>
#include <strata/train/losses.h>
#include <strata/train/metrics.h>
#include <strata/train/nn/nn.h>

using namespace strata;

int main(int argc, char** argv) {
  CLI::App app{"Train the MNIST CNN under a distribution strategy"};
  std::string data_dir = "data/mnist", strategy_name = "mirrored", cross_device_ops = "default";
  int replicas = 2, epochs = 4, max_steps = 0;
  int64_t global_batch = 64;
  double learning_rate = 1e-3;
  uint64_t seed = 1;
  app.add_option("--data", data_dir, "directory with the MNIST t10k IDX files");
  app.add_option("--strategy", strategy_name, "default | one_device | mirrored | central_storage");
  app.add_option("--replicas", replicas, "replicas (logical CPU devices) for mirrored / central_storage");
  app.add_option("--cross-device-ops", cross_device_ops, "default | reduction_to_one_device | hierarchical_copy");
  app.add_option("--global-batch", global_batch, "examples per step, split across the replicas");
  app.add_option("--epochs", epochs, "passes over the 8,000 training images");
  app.add_option("--max-steps", max_steps, "stop training after this many steps (0: no limit)");
  app.add_option("--lr", learning_rate, "Adam's learning rate");
  app.add_option("--seed", seed, "shuffle and initializer seed");
  CLI11_PARSE(app, argc, argv);

  try {
    distribute::StrategyOptions options;
    if (strategy_name == "mirrored" || strategy_name == "central_storage") options.replicas = replicas;
    if (strategy_name == "mirrored") options.cross_device_ops = distribute::cross_device_ops_from_name(cross_device_ops);
    auto strategy = distribute::make_strategy(strategy_name, options);

    const auto all = data::read_mnist(data_dir, data::Split::Test);
    const auto train_set = all.slice(0, 8000), eval_set = all.slice(8000, 10000);

    // Variables made in the scope are mirrored (one copy per replica) under Mirrored.
    nn::Sequential model;
    optim::Optimizer opt;
    metrics::SparseCategoricalAccuracy eval_accuracy;  // sync-on-read: summed over replicas on read
    {
      auto scope = strategy->scope();
      // The MNIST CNN of strata-train: conv3x3-32, maxpool, conv3x3-64, maxpool, dense 128,
      // dense 10.
      model = nn::Sequential{nn::Conv2D(1, 32, 3, {.kernel_initializer = nn::glorot_uniform(seed)}),
                             nn::ReLU(),
                             nn::MaxPool2D(2),
                             nn::Conv2D(32, 64, 3, {.kernel_initializer = nn::glorot_uniform(seed + 1)}),
                             nn::ReLU(),
                             nn::MaxPool2D(2),
                             nn::Flatten(),
                             nn::Dense(5 * 5 * 64, 128, {.kernel_initializer = nn::glorot_uniform(seed + 2)}),
                             nn::ReLU(),
                             nn::Dense(128, 10, {.kernel_initializer = nn::glorot_uniform(seed + 3)})};
      opt = optim::Adam(learning_rate);
      eval_accuracy = metrics::SparseCategoricalAccuracy("eval_accuracy");
    }
    const auto vars = model.trainable_variables();

    auto train_ds = strategy->experimental_distribute_dataset(
        train_set.dataset().shuffle(8000, seed).batch(global_batch).prefetch(2));
    auto eval_ds = strategy->experimental_distribute_dataset(eval_set.dataset().batch(global_batch));

    auto train_step = [&](const data::Batch& b) {
      autograd::GradientTape tape;
      Tensor logits = model(b[0]);
      Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
      // Divided by the global batch: the replicas' gradients sum to the full batch's.
      Tensor loss = distribute::compute_average_loss(per_example, global_batch);
      auto grads = tape.gradient(loss, vars);
      opt.apply_gradients(grads, vars);  // all-reduces the gradients across replicas
      return loss;
    };
    auto eval_step = [&](const data::Batch& b) { eval_accuracy.update_state(b[1], model(b[0])); };

    using Clock = std::chrono::steady_clock;
    int64_t steps = 0, timed_steps = 0;
    Clock::time_point timing_start;
    const auto train_start = Clock::now();
    for (int epoch = 0; epoch < epochs && (max_steps == 0 || steps < max_steps); ++epoch) {
      double loss_sum = 0;
      int64_t epoch_steps = 0;
      model.set_training(true);
      for (auto& batch : train_ds) {
        auto per_replica = strategy->run(train_step, batch);
        Tensor loss = strategy->reduce(distribute::ReduceOp::Sum, per_replica);
        loss_sum += loss.item<double>();
        ++epoch_steps;
        ++steps;
        if (steps == 10) timing_start = Clock::now();
        if (steps > 10) ++timed_steps;
        if (max_steps > 0 && steps >= max_steps) break;
      }
      std::fprintf(stderr, "epoch %d: %lld steps, train loss %.4f\n", epoch + 1, static_cast<long long>(steps),
                   loss_sum / double(std::max<int64_t>(epoch_steps, 1)));
    }
    const double train_seconds = std::chrono::duration<double>(Clock::now() - train_start).count();
    const double timed_seconds = std::chrono::duration<double>(Clock::now() - timing_start).count();
    const double steps_per_second = timed_steps > 0 ? double(timed_steps) / timed_seconds : 0.0;

    model.set_training(false);
    for (auto& batch : eval_ds) strategy->run(eval_step, batch);
    const double accuracy = eval_accuracy.result().item<double>();

    std::printf("strategy %s, replicas %d%s%s, global batch %lld\n", strategy->name().c_str(),
                strategy->num_replicas_in_sync(), strategy->name() == "mirrored" ? ", cross-device ops " : "",
                strategy->name() == "mirrored" ? distribute::cross_device_ops_name(strategy->cross_device_ops()) : "",
                static_cast<long long>(global_batch));
    std::printf("trained %lld steps in %.1f s: %.2f steps/s (%.0f examples/s) after the first 10 steps\n",
                static_cast<long long>(steps), train_seconds, steps_per_second,
                steps_per_second * double(global_batch));
    std::printf("eval accuracy on the last 2,000 images: %.4f\n", accuracy);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
