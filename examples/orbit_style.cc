// An Orbit-style training program, shaped like TensorFlow Model Garden's BERT classifier
// trainer (official/core/base_trainer.py) but on MNIST: a StandardTrainer subclass owns
// the training step (AdamW with BERT's warmup + polynomial decay, gradient clipping, the
// global step advanced inside strategy.run), a StandardEvaluator subclass owns the
// evaluation step, and a Controller runs them with checkpoints, TensorBoard summaries and
// progress. Rerunning with the same --model-dir resumes exactly where the last run stopped.
//
//   example_orbit_style [--data DIR] [--strategy mirrored --replicas 2] [--steps 2000]
//                       [--steps-per-loop 100] [--eval-interval 500] [--model-dir DIR]
//
// DIR holds MNIST IDX files (t10k-* or train-*, gzip or raw; default: ../shared/data/mnist
// found from the working directory or the executable). Without them the built-in synthetic
// dataset stands in, with a message. The first --train-examples images train, the last
// --eval-examples evaluate.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include <strata/strata.h>

using namespace strata;
namespace fs = std::filesystem;

namespace {

std::string default_data_dir() {
  const fs::path rel = fs::path("..") / "shared" / "data" / "mnist";
  if (fs::exists(rel)) return rel.string();
  std::error_code ec;
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (int up = 0; !ec && up < 5 && !dir.empty() && dir != dir.root_path(); ++up, dir = dir.parent_path()) {
    if (fs::exists(dir / rel)) return fs::weakly_canonical(dir / rel).string();
  }
  return rel.string();
}

// Flattened images [N, 784] in [0, 1] and labels [N].
data::LabeledArrays load(const std::string& dir, int64_t needed) {
  data::LabeledArrays all;
  for (data::Split split : {data::Split::Test, data::Split::Train}) {
    try {
      data::mnist_paths(dir, split);
    } catch (const Error&) {
      continue;  // this split's files are absent
    }
    all = data::read_mnist(dir, split);
    std::fprintf(stderr, "MNIST from %s: %lld images\n", dir.c_str(), static_cast<long long>(all.size()));
    break;
  }
  if (!all.labels.defined()) {
    std::fprintf(stderr, "no MNIST IDX files in %s: using the built-in synthetic dataset instead\n", dir.c_str());
    data::SyntheticOptions o;
    o.num_examples = needed;
    all = data::make_synthetic_classification(o);
  }
  STRATA_CHECK(all.size() >= needed, "orbit_style: need ", needed, " examples, the data has ", all.size());
  all.features = reshape(all.features, {all.size(), -1});
  return all;
}

// The training half of the task (Model Garden's Trainer.train_step / train_loop_end).
class ClassifierTrainer final : public train::StandardTrainer {
 public:
  ClassifierTrainer(distribute::Strategy& strategy, distribute::DistributedDataset dataset, Variable global_step,
                    nn::Sequential model, optim::Optimizer optimizer, int64_t global_batch)
      : StandardTrainer(strategy, std::move(dataset), global_step),
        model_(std::move(model)),
        optimizer_(std::move(optimizer)),
        global_batch_(global_batch),
        // Metrics are variables: created in the strategy's scope (sync-on-read there).
        train_loss_([&] {
          auto scope = strategy.scope();
          return metrics::Mean("training_loss");
        }()),
        train_accuracy_([&] {
          auto scope = strategy.scope();
          return metrics::SparseCategoricalAccuracy("training_accuracy");
        }()) {}
  int64_t examples_per_step() const override { return global_batch_; }

 protected:
  void train_loop_begin() override {
    train_loss_.reset_state();
    train_accuracy_.reset_state();
  }

  void train_step(distribute::DistributedIterator& iterator) override {
    const auto batch = next_batch(iterator);
    const auto variables = model_.trainable_variables();
    strategy().run(
        [&](const data::Batch& b) {
          autograd::GradientTape tape;
          Tensor logits = model_(b[0]);
          Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
          Tensor loss = distribute::compute_average_loss(per_example, global_batch_);
          auto grads = tape.gradient(loss, variables);
          optimizer_.apply_gradients(grads, variables);  // all-reduces across replicas
          train_loss_.update_state(per_example);
          train_accuracy_.update_state(b[1], logits);
          // As Model Garden does: every replica increments, OnlyFirstReplica counts it once.
          global_step().assign_add(Tensor::scalar(int64_t(1), kInt64));
        },
        batch);
    // Recorded on the Controller's summary_interval only.
    if (train::summary::should_record()) train::summary::scalar("learning_rate", optimizer_.learning_rate());
  }

  train::Outputs train_loop_end() override {
    return {{"training_loss", train_loss_.result().item<double>()},
            {"training_accuracy", train_accuracy_.result().item<double>()}};
  }

 private:
  nn::Sequential model_;
  optim::Optimizer optimizer_;
  int64_t global_batch_;
  metrics::Mean train_loss_;
  metrics::SparseCategoricalAccuracy train_accuracy_;
};

// The evaluation half (Model Garden's Trainer.eval_begin / eval_step / eval_end).
class ClassifierEvaluator final : public train::StandardEvaluator {
 public:
  ClassifierEvaluator(distribute::Strategy& strategy, distribute::DistributedDataset dataset, nn::Sequential model)
      : StandardEvaluator(strategy, std::move(dataset)),
        model_(std::move(model)),
        loss_([&] {
          auto scope = strategy.scope();
          return metrics::Mean("validation_loss");
        }()),
        accuracy_([&] {
          auto scope = strategy.scope();
          return metrics::SparseCategoricalAccuracy("validation_accuracy");
        }()) {}

 protected:
  void eval_begin() override {
    loss_.reset_state();
    accuracy_.reset_state();
    model_.set_training(false);
  }
  std::optional<train::Outputs> eval_step(distribute::DistributedIterator& iterator) override {
    auto batch = iterator.next();
    if (!batch) return std::nullopt;
    strategy().run(
        [&](const data::Batch& b) {
          Tensor logits = model_(b[0]);
          loss_.update_state(losses::sparse_categorical_crossentropy(b[1], logits, true));
          accuracy_.update_state(b[1], logits);
        },
        *batch);
    return train::Outputs{};
  }
  train::Outputs eval_end() override {
    model_.set_training(true);
    return {{"validation_loss", loss_.result().item<double>()},
            {"validation_accuracy", accuracy_.result().item<double>()}};
  }

 private:
  nn::Sequential model_;
  metrics::Mean loss_;
  metrics::SparseCategoricalAccuracy accuracy_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Orbit-style MNIST classifier: StandardTrainer + StandardEvaluator under a Controller"};
  std::string data_dir = default_data_dir(), strategy_name = "mirrored", model_dir;
  int replicas = 2;
  int64_t steps = 2000, steps_per_loop = 100, eval_interval = 500, eval_steps = -1, global_batch = 64;
  int64_t train_examples = 8000, eval_examples = 2000, warmup_steps = 100;
  double learning_rate = 2e-3;
  uint64_t seed = 1;
  bool quiet = false;
  app.add_option("--data", data_dir, "directory with the MNIST IDX files")->capture_default_str();
  app.add_option("--strategy", strategy_name, "distribution strategy")
      ->check(CLI::IsMember(distribute::strategy_names()))
      ->capture_default_str();
  app.add_option("--replicas", replicas, "replicas (mirrored, central_storage)")->check(CLI::Range(1, 64));
  app.add_option("--steps", steps, "global step to train up to")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps-per-loop", steps_per_loop, "steps per Controller loop")->check(CLI::PositiveNumber);
  app.add_option("--eval-interval", eval_interval, "steps between evaluations")->check(CLI::NonNegativeNumber);
  app.add_option("--eval-steps", eval_steps, "evaluation steps (-1: the whole split)");
  app.add_option("--global-batch", global_batch, "global batch size")->check(CLI::PositiveNumber);
  app.add_option("--train-examples", train_examples, "the first N examples train")->check(CLI::PositiveNumber);
  app.add_option("--eval-examples", eval_examples, "the last N examples evaluate")->check(CLI::PositiveNumber);
  app.add_option("--learning-rate", learning_rate, "peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--warmup-steps", warmup_steps, "linear warmup steps")->check(CLI::NonNegativeNumber);
  app.add_option("--model-dir", model_dir, "checkpoints and summaries (default: a temporary directory, removed)");
  app.add_option("--seed", seed, "initialisation and shuffling seed");
  app.add_flag("--quiet", quiet, "no progress output");
  CLI11_PARSE(app, argc, argv);

  const bool temporary_dir = model_dir.empty();
  if (temporary_dir) {
    model_dir = (fs::temp_directory_path() / ("strata_orbit_style_" + std::to_string(::getpid()))).string();
  }
  int status = 0;
  try {
    distribute::StrategyOptions so;
    so.replicas = strategy_name == "mirrored" || strategy_name == "central_storage" ? replicas : 0;
    auto strategy = distribute::make_strategy(strategy_name, so);
    const data::LabeledArrays all = load(data_dir, train_examples + eval_examples);
    const auto train_set = all.slice(0, train_examples);
    const auto eval_set = all.slice(all.size() - eval_examples, all.size());

    nn::Sequential model;
    optim::Optimizer optimizer;
    Variable global_step;
    {
      auto scope = strategy->scope();
      nn::set_global_seed(seed);
      model = nn::Sequential{nn::Dense(784, 256), nn::ReLU(), nn::Dense(256, 256), nn::ReLU(), nn::Dense(256, 10)};
      optim::AdamWOptions ao;
      ao.global_clipnorm = 1.0;
      optimizer = optim::AdamW(optim::polynomial_decay_with_warmup(learning_rate, steps, warmup_steps), ao);
      global_step = train::create_global_step();
    }
    auto train_ds = strategy->experimental_distribute_dataset(
        train_set.dataset().shuffle(train_examples, seed).repeat().batch(global_batch, true).prefetch(2));
    auto eval_ds = strategy->experimental_distribute_dataset(eval_set.dataset().batch(global_batch));
    ClassifierTrainer trainer(*strategy, train_ds, global_step, model, optimizer, global_batch);
    ClassifierEvaluator evaluator(*strategy, eval_ds, model);

    train::Checkpoint checkpoint{{"model", model},
                                 {"optimizer", optimizer},
                                 {"global_step", global_step},
                                 {"train_input", trainer.input_state()}};
    train::CheckpointManager manager(checkpoint, fs::path(model_dir) / "checkpoints", /*max_to_keep=*/3,
                                     /*checkpoint_interval=*/eval_interval > 0 ? eval_interval : steps);
    train::ControllerOptions co;
    co.strategy = strategy.get();
    co.trainer = &trainer;
    co.evaluator = &evaluator;
    co.global_step = global_step;
    co.steps_per_loop = steps_per_loop;
    co.checkpoint_manager = &manager;
    co.summary_interval = steps_per_loop;
    co.summary_dir = (fs::path(model_dir) / "train").string();
    co.eval_summary_dir = (fs::path(model_dir) / "eval").string();
    co.progress.verbosity = quiet ? train::Verbosity::Quiet : train::Verbosity::Normal;
    train::Controller controller(co);  // resumes from model_dir when it holds checkpoints

    const train::Outputs eval = controller.train_and_evaluate(steps, eval_steps, eval_interval);
    const auto& last = controller.last_eval_outputs();
    std::printf("step %lld: validation accuracy %.4f, loss %.4f (strategy %s, %d replica(s))\n",
                static_cast<long long>(controller.global_step()),
                last.count("validation_accuracy") ? last.at("validation_accuracy") : 0.0,
                last.count("validation_loss") ? last.at("validation_loss") : 0.0, strategy->name().c_str(),
                strategy->num_replicas_in_sync());
    if (eval.empty() && controller.global_step() >= steps) {
      std::printf("(already trained to step %lld in %s)\n", static_cast<long long>(steps), model_dir.c_str());
    }
    if (!temporary_dir) std::printf("checkpoints and summaries in %s\n", model_dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orbit_style: %s\n", e.what());
    status = 1;
  }
  if (temporary_dir) {
    std::error_code ec;
    fs::remove_all(model_dir, ec);
  }
  return status;
}
