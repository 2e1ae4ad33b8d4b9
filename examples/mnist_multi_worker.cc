// MNIST MLP trained across worker processes with MultiWorkerMirroredStrategy: the same
// custom loop as mnist_mirrored.cc, with the cluster read from the environment
// (TF_CONFIG from strata-launch, or mpirun / Slurm variables) and TensorFlow's chief
// duties: only the chief keeps checkpoints in --model-dir; the other workers write to
// temporary directories that they delete. A relaunch resumes from the latest checkpoint.
//
//   strata-launch --workers 2 -- example_mnist_multi_worker --data DIR --model-dir /tmp/mnist_mw
//   strata-launch --workers 2 --replicas-per-worker 2 -- example_mnist_multi_worker --data DIR
//
// DIR holds the MNIST IDX files of the 10k test set: the first 8,000 images train and the
// last 2,000 evaluate. The global batch is split across every replica of every worker.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>

#include <strata/autograd/autograd.h>
#include <strata/core/ops.h>
#include <strata/data/mnist.h>
#include <strata/distribute/distributed_file_utils.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/multi_worker_mirrored_strategy.h>
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>

using namespace strata;

int main(int argc, char** argv) {
  CLI::App app{"Train an MNIST MLP across worker processes (run it under strata-launch)"};
  std::string data_dir = "data/mnist", model_dir;
  int epochs = 2;
  int64_t global_batch = 128;
  double timeout = 60;
  app.add_option("--data", data_dir, "directory with the MNIST t10k IDX files");
  app.add_option("--model-dir", model_dir, "checkpoints (the chief's); an existing one is resumed");
  app.add_option("--epochs", epochs, "passes over the 8,000 training images");
  app.add_option("--global-batch", global_batch, "examples per step across every replica of every worker");
  app.add_option("--timeout", timeout, "seconds before a collective waiting for a lost worker fails");
  CLI11_PARSE(app, argc, argv);

  try {
    distribute::MultiWorkerMirroredStrategy strategy(distribute::ClusterResolver::from_environment(),
                                                     {.timeout_seconds = timeout});
    const bool chief = strategy.is_chief();
    const auto all = data::read_mnist(data_dir, data::Split::Test);
    const auto train_set = all.slice(0, 8000), eval_set = all.slice(8000, 10000);
    const auto flat = [](const data::LabeledArrays& a) {
      data::LabeledArrays out = a;
      out.features = reshape(a.features, {a.size(), -1});
      return out;
    };

    nn::Sequential model;
    optim::Optimizer opt;
    Variable epoch_counter;
    {
      auto scope = strategy.scope();  // mirrored variables; initial values from worker 0
      model = nn::Sequential{nn::Dense(784, 256), nn::ReLU(), nn::Dense(256, 10)};
      opt = optim::Adam(1e-3);
      epoch_counter = Variable(Tensor::from_vector(std::vector<int64_t>{0}, {}, kInt64), {.name = "epoch",
                                                                                         .trainable = false});
    }
    const auto vars = model.trainable_variables();

    // Chief duties: the chief's checkpoints in --model-dir, the others' in a temporary
    // directory (deleted on exit); every worker resumes from the chief's latest.
    std::optional<distribute::WriteDir> write_dir;
    std::optional<train::CheckpointManager> manager;
    train::Checkpoint checkpoint{{"model", model}, {"optimizer", opt}, {"epoch", epoch_counter}};
    if (!model_dir.empty()) {
      write_dir.emplace(std::filesystem::path(model_dir), strategy);
      if (auto latest = train::CheckpointManager(checkpoint, model_dir, 1).latest_checkpoint()) {
        auto scope = strategy.scope();
        checkpoint.restore(*latest);
        std::fprintf(stderr, "worker %d: resumed from %s\n", strategy.worker_index(), latest->c_str());
      }
      manager.emplace(checkpoint, write_dir->path(), /*max_to_keep=*/2);
    }

    // Every worker reads the same shuffled batches and keeps its replicas' parts.
    auto train_ds = strategy.experimental_distribute_dataset(
        flat(train_set).dataset().shuffle(8000, /*seed=*/1).batch(global_batch, true).prefetch(2));
    auto eval_ds = strategy.experimental_distribute_dataset(flat(eval_set).dataset().batch(global_batch));
    auto train_step = [&](const data::Batch& b) {
      autograd::GradientTape tape;
      Tensor per_example = losses::sparse_categorical_crossentropy(b[1], model(b[0]), /*from_logits=*/true);
      Tensor loss = distribute::compute_average_loss(per_example, global_batch);
      opt.apply_gradients(tape.gradient(loss, vars), vars);  // all-reduced across every worker
      return loss;
    };
    auto eval_step = [&](const data::Batch& b) {
      Tensor correct = sum(cast(equal(argmax(model(b[0]), -1), cast(b[1], kInt64)), kFloat32));
      return stack({correct, full({}, double(b[1].dim(0)))});
    };

    const auto start = std::chrono::steady_clock::now();
    int64_t steps = 0;
    for (int64_t epoch = epoch_counter.value().item<int64_t>(); epoch < epochs; ++epoch) {
      double loss_sum = 0;
      int64_t epoch_steps = 0;
      for (auto& batch : train_ds) {
        loss_sum += strategy.reduce(distribute::ReduceOp::Sum, strategy.run(train_step, batch)).item<double>();
        ++epoch_steps, ++steps;
      }
      epoch_counter.assign(Tensor::from_vector(std::vector<int64_t>{epoch + 1}, {}, kInt64));
      if (manager) manager->save(epoch + 1);
      if (chief) std::fprintf(stderr, "epoch %lld: train loss %.4f\n", static_cast<long long>(epoch + 1),
                              loss_sum / double(std::max<int64_t>(epoch_steps, 1)));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Tensor totals = zeros({2});
    for (auto& batch : eval_ds) totals = totals + strategy.reduce(distribute::ReduceOp::Sum, strategy.run(eval_step, batch));
    const auto t = totals.to_vector<double>();
    if (chief) {
      std::printf("%d workers x %d replicas, global batch %lld: %lld steps in %.1f s (%.0f examples/s)\n",
                  strategy.num_workers(), strategy.num_local_replicas(), static_cast<long long>(global_batch),
                  static_cast<long long>(steps), seconds, seconds > 0 ? double(steps * global_batch) / seconds : 0.0);
      std::printf("eval accuracy on the last 2,000 images: %.4f\n", t[1] > 0 ? t[0] / t[1] : 0.0);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
