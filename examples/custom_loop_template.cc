// A template for a custom training loop under any distribution strategy, chosen on the
// command line (tf.distribute's "custom training loop" tutorial in C++): a train loop, a
// validation loop after every epoch and a test loop at the end, each a step function run
// on every replica with strategy.run and reduced across replicas. Copy it and replace the
// parts marked "your ...".
//
//   example_custom_loop_template --strategy mirrored --replicas 2 --epochs 3
//   example_custom_loop_template --strategy central_storage --replicas 2 --steps-per-epoch 20
//   example_custom_loop_template --strategy default --model-dir /tmp/run   (resumable)
//
// The data: the built-in synthetic classification set (784 features, 10 classes), split
// into train / validation / test.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include <strata/strata.h>

using namespace strata;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"Custom training loop template: train / validation / test under a strategy from the command line"};
  std::string strategy_name = "mirrored", devices, model_dir;
  int replicas = 2;
  int epochs = 3;
  int64_t global_batch = 64, steps_per_epoch = 0, examples = 6000;
  double learning_rate = 1e-3;
  uint64_t seed = 1;
  app.add_option("--strategy", strategy_name, "distribution strategy")
      ->check(CLI::IsMember(distribute::strategy_names()))
      ->capture_default_str();
  app.add_option("--replicas", replicas, "replicas on logical CPU devices (mirrored, central_storage)")
      ->check(CLI::Range(1, 64));
  app.add_option("--devices", devices, "comma-separated devices instead of --replicas, e.g. cpu:0,cpu:1");
  app.add_option("--epochs", epochs, "passes over the training split")->check(CLI::PositiveNumber);
  app.add_option("--steps-per-epoch", steps_per_epoch, "stop an epoch after N steps (0: the whole split)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--global-batch", global_batch, "global batch size (split across replicas)")
      ->check(CLI::PositiveNumber);
  app.add_option("--examples", examples, "examples in all (70% train, 15% validation, 15% test)")
      ->check(CLI::Range(int64_t(20), int64_t(1) << 30));
  app.add_option("--learning-rate", learning_rate, "Adam's learning rate")->check(CLI::PositiveNumber);
  app.add_option("--model-dir", model_dir, "checkpoint every epoch here and resume from it");
  app.add_option("--seed", seed, "initialisation and shuffling seed");
  CLI11_PARSE(app, argc, argv);

  try {
    // ---- the strategy, from the command line ----
    distribute::StrategyOptions so;
    if (!devices.empty()) {
      std::stringstream ss(devices);
      for (std::string d; std::getline(ss, d, ',');) so.devices.push_back(Device::parse(d));
    } else if (strategy_name == "mirrored" || strategy_name == "central_storage") {
      so.replicas = replicas;
    }
    std::unique_ptr<distribute::Strategy> strategy = distribute::make_strategy(strategy_name, so);
    std::printf("strategy %s, %d replica(s) in sync, global batch %lld\n", strategy->name().c_str(),
                strategy->num_replicas_in_sync(), static_cast<long long>(global_batch));

    // ---- your data: global batches, split across the replicas ----
    data::SyntheticOptions data_options;
    data_options.num_examples = examples;
    data_options.seed = seed;
    const data::LabeledArrays all = data::make_synthetic_classification(data_options);
    const int64_t n_train = examples * 70 / 100, n_val = examples * 15 / 100;
    const auto train_set = all.slice(0, n_train), val_set = all.slice(n_train, n_train + n_val),
               test_set = all.slice(n_train + n_val, examples);
    auto train_ds = strategy->experimental_distribute_dataset(
        train_set.dataset().shuffle(n_train, seed).batch(global_batch).prefetch(2));
    auto val_ds = strategy->experimental_distribute_dataset(val_set.dataset().batch(global_batch));
    auto test_ds = strategy->experimental_distribute_dataset(test_set.dataset().batch(global_batch));

    // ---- your model, optimizer and metrics: created in the strategy's scope ----
    nn::Sequential model;
    optim::Optimizer optimizer;
    metrics::Mean train_loss, val_loss;
    metrics::SparseCategoricalAccuracy train_accuracy, val_accuracy, test_accuracy;
    Variable epoch_counter;
    {
      auto scope = strategy->scope();
      nn::set_global_seed(seed);
      model = nn::Sequential{nn::Dense(784, 128), nn::ReLU(), nn::Dense(128, 10)};
      optimizer = optim::Adam(learning_rate);
      train_loss = metrics::Mean("train_loss");
      val_loss = metrics::Mean("val_loss");
      train_accuracy = metrics::SparseCategoricalAccuracy("train_accuracy");
      val_accuracy = metrics::SparseCategoricalAccuracy("val_accuracy");
      test_accuracy = metrics::SparseCategoricalAccuracy("test_accuracy");
      autograd::VariableOptions vo;
      vo.name = "epoch";
      vo.trainable = false;
      vo.aggregation = autograd::VariableAggregation::OnlyFirstReplica;
      epoch_counter = Variable(zeros({}, kInt64), vo);
    }
    const std::vector<Variable> variables = model.trainable_variables();

    // Optional: checkpoint every epoch; an existing directory is resumed.
    std::optional<train::CheckpointManager> manager;
    if (!model_dir.empty()) {
      train::Checkpoint checkpoint{{"model", model}, {"optimizer", optimizer}, {"epoch", epoch_counter}};
      manager.emplace(checkpoint, fs::path(model_dir) / "checkpoints", /*max_to_keep=*/2, 0, epoch_counter);
      if (const std::string restored = manager->restore_or_initialize(); !restored.empty()) {
        std::printf("resumed from %s after epoch %lld\n", restored.c_str(),
                    static_cast<long long>(epoch_counter.value().item<int64_t>()));
      }
    }

    // ---- the step functions: run on every replica ----
    // The loss is the per-example loss summed and divided by the GLOBAL batch size (the
    // rows of this step over all replicas), so the replicas' gradients add up to the
    // gradient of the mean — the same as one device would compute.
    auto train_step = [&](const distribute::PerReplica<data::Batch>& batch) {
      int64_t rows = 0;
      for (const auto& part : batch) rows += part[0].dim(0);
      auto per_replica = strategy->run(
          [&](const data::Batch& b) {
            autograd::GradientTape tape;
            Tensor logits = model(b[0]);
            Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
            Tensor loss = distribute::compute_average_loss(per_example, rows);
            auto grads = tape.gradient(loss, variables);
            optimizer.apply_gradients(grads, variables);  // sums the gradients across replicas
            train_loss.update_state(per_example);
            train_accuracy.update_state(b[1], logits);
            return loss;
          },
          batch);
      return strategy->reduce(distribute::ReduceOp::Sum, per_replica).item<double>();
    };
    auto eval_step = [&](const distribute::PerReplica<data::Batch>& batch, const metrics::Mean* loss,
                         const metrics::SparseCategoricalAccuracy& accuracy) {
      strategy->run(
          [&](const data::Batch& b) {
            Tensor logits = model(b[0]);
            if (loss) loss->update_state(losses::sparse_categorical_crossentropy(b[1], logits, true));
            accuracy.update_state(b[1], logits);
          },
          batch);
    };

    // ---- the loops ----
    using Clock = std::chrono::steady_clock;
    for (int64_t epoch = epoch_counter.value().item<int64_t>(); epoch < epochs; ++epoch) {
      const auto t0 = Clock::now();
      train_loss.reset_state();
      train_accuracy.reset_state();
      val_loss.reset_state();
      val_accuracy.reset_state();

      // Train loop: one pass over the training split (or steps_per_epoch steps).
      int64_t steps = 0;
      double loss_sum = 0;
      for (auto& batch : train_ds) {
        loss_sum += train_step(batch);
        if (++steps == steps_per_epoch) break;
      }
      // Validation loop, in inference mode.
      model.set_training(false);
      for (auto& batch : val_ds) eval_step(batch, &val_loss, val_accuracy);
      model.set_training(true);

      epoch_counter.assign(Tensor::scalar(epoch + 1, kInt64));
      if (manager) manager->save();
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("epoch %lld: %lld steps, loss %.4f (mean of step losses %.4f), accuracy %.4f, "
                  "val loss %.4f, val accuracy %.4f, %.1f s\n",
                  static_cast<long long>(epoch + 1), static_cast<long long>(steps),
                  train_loss.result().item<double>(), steps ? loss_sum / double(steps) : 0.0,
                  train_accuracy.result().item<double>(), val_loss.result().item<double>(),
                  val_accuracy.result().item<double>(), seconds);
    }

    // Test loop: once, at the end.
    model.set_training(false);
    for (auto& batch : test_ds) eval_step(batch, nullptr, test_accuracy);
    std::printf("test accuracy %.4f\n", test_accuracy.result().item<double>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loop_template: %s\n", e.what());
    return 1;
  }
  return 0;
}
