// The MNIST CNN trained under MirroredStrategy in float32 and in mixed precision, side by
// side: the same initial weights, data order and steps for each precision, then the
// evaluation accuracy and the training speed of each.
//
//   example_mnist_mixed_precision --data DIR                       # float32, mixed_bfloat16
//   example_mnist_mixed_precision --data DIR --precisions float32,mixed_bfloat16,mixed_float16
//
// Mixed precision takes two lines in a training program: set the global policy before
// building the model (layers then keep float32 variables and compute in the half
// format), and for float16 wrap the optimizer in a LossScaleOptimizer, scaling the loss
// before the backward pass and unscaling the gradients after it. Losses run in float32.
//
// DIR holds the MNIST IDX files of the 10k test set (t10k-images-idx3-ubyte[.gz], ...):
// the first 8,000 images train and the last 2,000 evaluate. On CPU the half formats are
// computed in float32 inside each kernel, so mixed precision shows its accuracy here, not
// its speed (that needs tensor cores).
#include <chrono>
#include <cstdio>
#include <sstream>

#include <CLI/CLI.hpp>

#include <strata/autograd/autograd.h>
#include <strata/data/mnist.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include <strata/train/adam.h>
#include <strata/train/loss_scale_optimizer.h>
#include <strata/train/losses.h>
#include <strata/train/metrics.h>
#include <strata/train/nn/nn.h>
#include <strata/train/policy.h>

using namespace strata;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string data_dir = "../shared/data/mnist";
  int replicas = 2, epochs = 3;
  int64_t global_batch = 64;
  double learning_rate = 1e-3;
  uint64_t seed = 1;
};

struct Result {
  double accuracy = 0, steps_per_second = 0, final_loss = 0, loss_scale = 0;
  int64_t steps = 0;
};

Result train(const std::string& precision, const data::LabeledArrays& train_set, const data::LabeledArrays& eval_set,
             const Options& o) {
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(o.replicas));
  nn::Sequential model;
  optim::Optimizer opt;
  metrics::SparseCategoricalAccuracy eval_accuracy;
  {
    auto scope = strategy.scope();
    // Layers built from here on take the policy: float32 variables, half computations.
    mixed_precision::set_global_policy(precision);
    const uint64_t s = o.seed;
    model = nn::Sequential{nn::Conv2D(1, 32, 3, {.kernel_initializer = nn::glorot_uniform(s)}),
                           nn::ReLU(),
                           nn::MaxPool2D(2),
                           nn::Conv2D(32, 64, 3, {.kernel_initializer = nn::glorot_uniform(s + 1)}),
                           nn::ReLU(),
                           nn::MaxPool2D(2),
                           nn::Flatten(),
                           nn::Dense(5 * 5 * 64, 128, {.kernel_initializer = nn::glorot_uniform(s + 2)}),
                           nn::ReLU(),
                           nn::Dense(128, 10, {.kernel_initializer = nn::glorot_uniform(s + 3)})};
    opt = optim::Adam(o.learning_rate);
    // float16's narrow range needs loss scaling; bfloat16 has float32's range.
    if (precision == "mixed_float16") opt = optim::LossScaleOptimizer(opt);
    eval_accuracy = metrics::SparseCategoricalAccuracy("eval_accuracy");
    mixed_precision::set_global_policy("float32");
  }
  const auto vars = model.trainable_variables();
  const auto lso = optim::LossScaleOptimizer::of(opt);

  auto train_ds = strategy.experimental_distribute_dataset(
      train_set.dataset().shuffle(train_set.size(), o.seed).batch(o.global_batch).prefetch(2));
  auto eval_ds = strategy.experimental_distribute_dataset(eval_set.dataset().batch(o.global_batch));

  auto train_step = [&](const data::Batch& b) {
    autograd::GradientTape tape;
    Tensor logits = model(b[0]);  // in the compute dtype
    // float32, whatever the logits' dtype.
    Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
    Tensor loss = distribute::compute_average_loss(per_example, o.global_batch);
    std::vector<Tensor> grads;
    if (lso) {
      grads = lso->get_unscaled_gradients(tape.gradient(lso->get_scaled_loss(loss), vars));
    } else {
      grads = tape.gradient(loss, vars);
    }
    opt.apply_gradients(grads, vars);  // float32 gradients onto float32 variables
    return loss;
  };
  auto eval_step = [&](const data::Batch& b) { eval_accuracy.update_state(b[1], model(b[0])); };

  Result r;
  int64_t timed_steps = 0;
  Clock::time_point timing_start;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    double loss_sum = 0;
    int64_t epoch_steps = 0;
    model.set_training(true);
    for (auto& batch : train_ds) {
      Tensor loss = strategy.reduce(distribute::ReduceOp::Sum, strategy.run(train_step, batch));
      loss_sum += loss.item<double>();
      ++epoch_steps;
      ++r.steps;
      if (r.steps == 10) timing_start = Clock::now();  // after warm-up (allocations, slots)
      if (r.steps > 10) ++timed_steps;
    }
    r.final_loss = loss_sum / double(std::max<int64_t>(epoch_steps, 1));
    std::fprintf(stderr, "  %s epoch %d: train loss %.4f%s\n", precision.c_str(), epoch + 1, r.final_loss,
                 lso ? (", loss scale " + std::to_string(lso->loss_scale())).c_str() : "");
  }
  const double timed_seconds = std::chrono::duration<double>(Clock::now() - timing_start).count();
  r.steps_per_second = timed_steps > 0 ? double(timed_steps) / timed_seconds : 0.0;
  if (lso) r.loss_scale = lso->loss_scale();
  model.set_training(false);
  for (auto& batch : eval_ds) strategy.run(eval_step, batch);
  r.accuracy = eval_accuracy.result().item<double>();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The MNIST CNN in float32 and mixed precision under MirroredStrategy"};
  Options o;
  std::string precisions = "float32,mixed_bfloat16";
  app.add_option("--data", o.data_dir, "directory with the MNIST t10k IDX files")->capture_default_str();
  app.add_option("--precisions", precisions, "comma-separated: float32, mixed_bfloat16, mixed_float16")
      ->capture_default_str();
  app.add_option("--replicas", o.replicas, "MirroredStrategy replicas (logical CPU devices)")->capture_default_str();
  app.add_option("--epochs", o.epochs, "passes over the 8,000 training images")->capture_default_str();
  app.add_option("--global-batch", o.global_batch, "examples per step, split across the replicas")
      ->capture_default_str();
  app.add_option("--lr", o.learning_rate, "Adam's learning rate")->capture_default_str();
  app.add_option("--seed", o.seed, "shuffle and initializer seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    STRATA_CHECK(o.replicas > 0 && o.epochs > 0 && o.global_batch >= o.replicas,
                 "replicas and epochs must be positive and the global batch at least the replica count");
    const auto all = data::read_mnist(o.data_dir, data::Split::Test);
    STRATA_CHECK(all.size() >= 10000, o.data_dir, " holds ", all.size(), " images; expected the 10k test set");
    const auto train_set = all.slice(0, 8000), eval_set = all.slice(all.size() - 2000, all.size());

    std::vector<std::pair<std::string, Result>> results;
    std::stringstream list(precisions);
    for (std::string p; std::getline(list, p, ',');) {
      (void)mixed_precision::Policy(p);  // validates the name before training anything
      std::fprintf(stderr, "training in %s (Mirrored(%d), global batch %lld, %d epochs)\n", p.c_str(), o.replicas,
                   static_cast<long long>(o.global_batch), o.epochs);
      results.emplace_back(p, train(p, train_set, eval_set, o));
    }
    std::printf("%-16s %10s %10s %12s %11s\n", "precision", "accuracy", "steps/s", "train loss", "loss scale");
    for (const auto& [p, r] : results) {
      std::printf("%-16s %9.2f%% %10.2f %12.4f %11s\n", p.c_str(), 100 * r.accuracy, r.steps_per_second, r.final_loss,
                  r.loss_scale > 0 ? std::to_string(int64_t(r.loss_scale)).c_str() : "-");
    }
    for (size_t i = 1; i < results.size(); ++i)
      std::printf("%s - %s: %+.2f accuracy points\n", results[i].first.c_str(), results[0].first.c_str(),
                  100 * (results[i].second.accuracy - results[0].second.accuracy));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
