// MNIST with a hand-written training loop, as in TensorFlow's "custom training" tutorial:
// a GradientTape step, Adam, streaming metrics, checkpoints every epoch through a
// CheckpointManager (a rerun with the same --model-dir resumes) and TensorBoard summaries.
//
//   example_mnist_custom_loop [--data DIR] [--model-dir DIR] [--epochs 10] [--batch-size 64]
//
// DIR holds MNIST IDX files (t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz],
// or the train-* pair): the first 8,000 images train, the last 2,000 evaluate. Without
// the files the synthetic image dataset stands in, with a message. The model: conv3x3-32
// relu, maxpool2, conv3x3-64 relu, maxpool2, flatten, dense 128 relu, dense 10.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <CLI/CLI.hpp>

#include <strata/autograd/autograd.h>
#include <strata/data/mnist.h>
#include <strata/data/synthetic.h>
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/losses.h>
#include <strata/train/metrics.h>
#include <strata/train/nn/nn.h>
#include <strata/train/summary_writer.h>

using namespace strata;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// ../shared/data/mnist seen from the working directory, else from the repository that
// holds this executable (build-*/bin/... two or three levels up).
std::string default_data_dir() {
  const fs::path rel = fs::path("..") / "shared" / "data" / "mnist";
  if (fs::exists(rel)) return rel.string();
  std::error_code ec;
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (int up = 0; !ec && up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (fs::exists(dir / rel)) return fs::weakly_canonical(dir / rel).string();
    if (dir == dir.root_path()) break;
  }
  return rel.string();
}

// Images [N,28,28,1] in [0,1] and labels [N]: MNIST when its files are there, else the
// synthetic image dataset.
data::LabeledArrays load(const std::string& dir, int64_t needed) {
  for (data::Split split : {data::Split::Test, data::Split::Train}) {
    try {
      data::mnist_paths(dir, split);  // throws when this split's files are absent
    } catch (const Error&) {
      continue;
    }
    data::LabeledArrays all = data::read_mnist(dir, split);
    std::fprintf(stderr, "MNIST %s set from %s: %lld images\n",
                 split == data::Split::Test ? "t10k" : "train", dir.c_str(),
                 static_cast<long long>(all.size()));
    return all;
  }
  std::fprintf(stderr,
               "no MNIST IDX files in %s: falling back to the built-in synthetic image dataset "
               "(accuracy figures are then not MNIST's)\n",
               dir.c_str());
  data::SyntheticOptions options;
  options.num_examples = needed;
  options.feature_shape = data::kSyntheticImageShape;
  return data::make_synthetic_classification(options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small CNN on MNIST with a custom GradientTape loop"};
  std::string data_dir = default_data_dir();
  std::string model_dir;
  int epochs = 10;
  int64_t batch_size = 64, train_examples = 8000, eval_examples = 2000;
  double learning_rate = 1e-3;
  uint64_t seed = 1;
  app.add_option("--data", data_dir, "directory with the MNIST IDX files")->capture_default_str();
  app.add_option("--model-dir", model_dir, "checkpoints and summaries (default: a fresh temp dir)");
  app.add_option("--epochs", epochs, "passes over the training images")->capture_default_str();
  app.add_option("--batch-size", batch_size, "examples per step")->capture_default_str();
  app.add_option("--train-examples", train_examples, "the first N images train")->capture_default_str();
  app.add_option("--eval-examples", eval_examples, "the last N images evaluate")->capture_default_str();
  app.add_option("--lr", learning_rate, "Adam's learning rate")->capture_default_str();
  app.add_option("--seed", seed, "initializer and shuffle seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    STRATA_CHECK(epochs > 0 && batch_size > 0 && train_examples > 0 && eval_examples > 0,
                 "epochs, batch size and example counts must be positive");
    if (model_dir.empty())
      model_dir = (fs::temp_directory_path() / ("strata_mnist_custom_loop_" + std::to_string(::getpid()))).string();
    fs::create_directories(model_dir);

    const data::LabeledArrays all = load(data_dir, train_examples + eval_examples);
    STRATA_CHECK(all.size() >= train_examples + eval_examples, "need ", train_examples + eval_examples,
                 " images, the data has ", all.size());
    const auto train_set = all.slice(0, train_examples);
    const auto eval_set = all.slice(all.size() - eval_examples, all.size());
    const data::Dataset train_ds = train_set.dataset().shuffle(train_examples, seed).batch(batch_size).prefetch(2);
    const data::Dataset eval_ds = eval_set.dataset().batch(500);
    const int64_t steps_per_epoch = (train_examples + batch_size - 1) / batch_size;

    nn::set_global_seed(seed);
    nn::Sequential model{nn::Conv2D(1, 32, 3), nn::ReLU(), nn::MaxPool2D(2),
                         nn::Conv2D(32, 64, 3), nn::ReLU(), nn::MaxPool2D(2),
                         nn::Flatten(), nn::Dense(5 * 5 * 64, 128), nn::ReLU(), nn::Dense(128, 10)};
    optim::Adam optimizer(learning_rate);
    losses::SparseCategoricalCrossentropy loss_object(/*from_logits=*/true);
    metrics::Mean train_loss("train_loss"), test_loss("test_loss");
    metrics::SparseCategoricalAccuracy train_accuracy("train_accuracy"), test_accuracy("test_accuracy");
    const auto vars = model.trainable_variables();

    // The optimizer's iteration counter doubles as the global step.
    train::Checkpoint checkpoint{{"model", model}, {"optimizer", optimizer}};
    train::CheckpointManager manager(checkpoint, fs::path(model_dir) / "checkpoints", /*max_to_keep=*/3,
                                     /*checkpoint_interval=*/0, optimizer.iterations());
    if (const std::string restored = manager.restore_or_initialize(); !restored.empty())
      std::fprintf(stderr, "resumed from %s (step %lld)\n", restored.c_str(),
                   static_cast<long long>(optimizer.iterations_value()));
    train::SummaryWriter train_writer(fs::path(model_dir) / "train", 30.0);
    train::SummaryWriter test_writer(fs::path(model_dir) / "test", 30.0);

    auto train_step = [&](const Tensor& images, const Tensor& labels) {
      autograd::GradientTape tape;
      Tensor logits = model(images);
      Tensor loss = loss_object(labels, logits);
      auto grads = tape.gradient(loss, vars);
      optimizer.apply_gradients(grads, vars);
      train_loss.update_state(loss);
      train_accuracy.update_state(labels, logits);
    };
    auto test_step = [&](const Tensor& images, const Tensor& labels) {
      Tensor logits = model(images);
      test_loss.update_state(loss_object(labels, logits));
      test_accuracy.update_state(labels, logits);
    };

    double train_seconds = 0, accuracy = 0;
    int64_t timed_steps = 0;
    for (int64_t epoch = optimizer.iterations_value() / steps_per_epoch; epoch < epochs; ++epoch) {
      for (auto m : {train_loss, test_loss}) m.reset_state();
      for (auto m : {train_accuracy, test_accuracy}) m.reset_state();

      model.set_training(true);
      // make_iterator(epoch): the epoch's shuffle order is a function of (seed, epoch), so
      // a resumed run sees the orders an uninterrupted one would.
      data::Iterator it = train_ds.make_iterator(uint64_t(epoch));
      const auto start = Clock::now();
      int64_t steps = 0;
      while (auto batch = it.next()) {
        train_step((*batch)[0], (*batch)[1]);
        ++steps;
        const int64_t step = optimizer.iterations_value();
        if (step % 50 == 0) train_writer.scalar("loss", train_loss.result().item<double>(), step);
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      train_seconds += seconds;
      timed_steps += steps;

      model.set_training(false);
      for (auto& batch : eval_ds) test_step(batch[0], batch[1]);
      const int64_t step = optimizer.iterations_value();
      accuracy = test_accuracy.result().item<double>();
      train_writer.scalar("loss", train_loss.result().item<double>(), step);
      train_writer.scalar("accuracy", train_accuracy.result().item<double>(), step);
      test_writer.scalar("loss", test_loss.result().item<double>(), step);
      test_writer.scalar("accuracy", accuracy, step);
      const std::string saved = manager.save();
      std::printf("epoch %lld: loss %.4f, accuracy %.2f%%, test loss %.4f, test accuracy %.2f%% "
                  "(%.1f steps/s, %.1f ms/step) -> %s\n",
                  static_cast<long long>(epoch + 1), train_loss.result().item<double>(),
                  100 * train_accuracy.result().item<double>(), test_loss.result().item<double>(),
                  100 * accuracy, double(steps) / seconds, 1000 * seconds / double(steps), saved.c_str());
      std::fflush(stdout);
    }
    train_writer.close();
    test_writer.close();
    if (timed_steps > 0)
      std::printf("trained %lld steps in %.1f s (%.2f steps/s, batch %lld); final test accuracy %.2f%% on %lld "
                  "held-out images; model dir %s\n",
                  static_cast<long long>(timed_steps), train_seconds, double(timed_steps) / train_seconds,
                  static_cast<long long>(batch_size), 100 * accuracy, static_cast<long long>(eval_examples),
                  model_dir.c_str());
    else
      std::printf("nothing to train: the checkpoint in %s is already at epoch %d\n", model_dir.c_str(), epochs);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
