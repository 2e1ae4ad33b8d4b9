// strata-train: the main job. Trains a named model on a dataset under a strategy through
// the Orbit-style Controller, with checkpoints, TensorBoard summaries and a JSON report.
// The flags and report keys are a contract (../shared/DESIGN.md); run --help for them.
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include <strata/strata.h>
#include "tools/train/ps_train.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

struct Config {
  std::string model = "mlp", data = "synthetic", strategy = "default", devices, model_dir, report,
              precision = "float32", optimizer = "adam";
  int replicas = 0;
  int64_t steps = 1000, steps_per_loop = 100, global_batch = 128, eval_steps = -1, eval_interval = 0, seed = 1;
  double learning_rate = 1e-3;
  int64_t train_examples = 8000, eval_examples = 2000;
  bool quiet = false, verbose = false;
};

struct Datasets {
  data::LabeledArrays train, eval;
  std::string description;
};

Datasets load_data(const Config& c) {
  Datasets d;
  const bool images = c.model == "cnn";
  if (c.data == "synthetic") {
    data::SyntheticOptions o;
    o.num_examples = c.train_examples + c.eval_examples;
    o.seed = uint64_t(c.seed);
    if (images) o.feature_shape = data::kSyntheticImageShape;
    data::LabeledArrays all = data::make_synthetic_classification(o);
    d.train = all.slice(0, c.train_examples);
    d.eval = all.slice(c.train_examples, all.size());
    d.description = "synthetic (" + std::to_string(o.num_examples) + " examples)";
  } else if (c.data.rfind("mnist:", 0) == 0) {
    const std::string dir = c.data.substr(6);
    data::LabeledArrays all = data::read_mnist(dir, data::Split::Test);
    STRATA_CHECK(all.size() >= c.train_examples + c.eval_examples, "strata-train: ", dir, " holds ", all.size(),
                 " images, fewer than --train-examples + --eval-examples = ", c.train_examples + c.eval_examples);
    d.train = all.slice(0, c.train_examples);
    d.eval = all.slice(all.size() - c.eval_examples, all.size());
    d.description = "mnist " + dir + " (first " + std::to_string(c.train_examples) + " train, last " +
                    std::to_string(c.eval_examples) + " evaluate)";
  } else {
    fail("strata-train: unknown --data '", c.data, "' (expected synthetic or mnist:DIR)");
  }
  if (!images) {
    d.train.features = reshape(d.train.features, {d.train.size(), -1});
    d.eval.features = reshape(d.eval.features, {d.eval.size(), -1});
  }
  return d;
}

nn::Sequential build_model(const std::string& name, int64_t features) {
  if (name == "mlp") {
    return nn::Sequential{nn::Dense(features, 256), nn::ReLU(), nn::Dense(256, 256), nn::ReLU(), nn::Dense(256, 10)};
  }
  // The MNIST CNN: conv3x3-32, maxpool, conv3x3-64, maxpool, dense 128, dense 10.
  return nn::Sequential{nn::Conv2D(1, 32, 3), nn::ReLU(), nn::MaxPool2D(2), nn::Conv2D(32, 64, 3), nn::ReLU(),
                        nn::MaxPool2D(2), nn::Flatten(), nn::Dense(5 * 5 * 64, 128), nn::ReLU(), nn::Dense(128, 10)};
}

std::unique_ptr<distribute::Strategy> build_strategy(const Config& c) {
  distribute::StrategyOptions o;
  o.replicas = c.replicas;
  if (!c.devices.empty()) {
    std::stringstream ss(c.devices);
    std::string item;
    while (std::getline(ss, item, ',')) o.devices.push_back(Device::parse(item));
  }
  return distribute::make_strategy(c.strategy, o);
}

class Trainer final : public train::StandardTrainer {
 public:
  Trainer(distribute::Strategy& s, distribute::DistributedDataset ds, Variable step, nn::Sequential& model,
          optim::Optimizer opt, int64_t global_batch)
      : StandardTrainer(s, std::move(ds), std::move(step)), model_(model), opt_(opt), global_batch_(global_batch) {}
  int64_t examples_per_step() const override { return global_batch_; }

 protected:
  void train_loop_begin() override { loss_sum_ = 0, steps_ = 0; }
  void train_step(distribute::DistributedIterator& it) override {
    auto batch = next_batch(it);
    auto per_replica = strategy().run(
        [&](const data::Batch& b) {
          autograd::GradientTape tape;
          Tensor logits = model_(b[0]);
          Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
          Tensor loss = distribute::compute_average_loss(per_example, global_batch_);
          // mixed_float16: a LossScaleOptimizer scales the loss and unscales the gradients.
          auto lso = optim::LossScaleOptimizer::of(opt_);
          auto grads = tape.gradient(lso ? lso->get_scaled_loss(loss) : loss, model_.trainable_variables());
          if (lso) grads = lso->get_unscaled_gradients(grads);
          opt_.apply_gradients(grads, model_.trainable_variables());
          return loss;
        },
        batch);
    loss_sum_ += strategy().reduce(distribute::ReduceOp::Sum, per_replica).item<double>();
    ++steps_;
  }
  train::Outputs train_loop_end() override { return {{"loss", steps_ ? loss_sum_ / double(steps_) : 0.0}}; }

 private:
  nn::Sequential& model_;
  optim::Optimizer opt_;
  int64_t global_batch_;
  double loss_sum_ = 0;
  int64_t steps_ = 0;
};

class Evaluator final : public train::StandardEvaluator {
 public:
  Evaluator(distribute::Strategy& s, distribute::DistributedDataset ds, nn::Sequential& model)
      : StandardEvaluator(s, std::move(ds)), model_(model) {}

 protected:
  void eval_begin() override {
    loss_ = 0, correct_ = 0, count_ = 0;
    model_.set_training(false);
  }
  std::optional<train::Outputs> eval_step(distribute::DistributedIterator& it) override {
    auto batch = it.next();
    if (!batch) return std::nullopt;
    auto per_replica = strategy().run(
        [&](const data::Batch& b) {
          Tensor logits = model_(b[0]);
          Tensor loss = sum(losses::sparse_categorical_crossentropy(b[1], logits, true));
          Tensor correct = sum(cast(equal(argmax(logits, -1), cast(b[1], kInt64)), kFloat32));
          return stack({loss, correct, full({}, double(b[1].dim(0)))});
        },
        *batch);
    Tensor totals = strategy().reduce(distribute::ReduceOp::Sum, per_replica);
    auto v = totals.to_vector<double>();
    loss_ += v[0], correct_ += v[1], count_ += v[2];
    return train::Outputs{};
  }
  train::Outputs eval_end() override {
    model_.set_training(true);
    return {{"loss", count_ ? loss_ / count_ : 0.0}, {"accuracy", count_ ? correct_ / count_ : 0.0}};
  }

 private:
  nn::Sequential& model_;
  double loss_ = 0, correct_ = 0, count_ = 0;
};

// --strategy parameter_server: every task of the job (chief, workers, parameter servers)
// runs tools/train/ps_train.cc's driver.
int run_parameter_server_job(const Config& c) {
  STRATA_CHECK(c.replicas <= 1 && c.devices.empty(), "strata-train: --strategy parameter_server runs one replica "
               "per worker task (strata-launch --workers N --ps M); --replicas and --devices do not apply");
  tools::PsTrainJob job;
  job.model = c.model, job.data = c.data, job.model_dir = c.model_dir, job.report = c.report;
  job.precision = c.precision, job.optimizer = c.optimizer;
  job.steps = c.steps, job.steps_per_loop = c.steps_per_loop, job.global_batch = c.global_batch;
  job.eval_steps = c.eval_steps, job.eval_interval = c.eval_interval, job.seed = c.seed;
  job.learning_rate = c.learning_rate, job.quiet = c.quiet, job.verbose = c.verbose;
  job.load_data = [&c] {
    Datasets d = load_data(c);
    return tools::PsTrainData{std::move(d.train), std::move(d.eval), std::move(d.description)};
  };
  job.build_model = [&c](const tools::PsTrainData& d) {
    return build_model(c.model, d.train.features.ndim() == 2 ? d.train.features.dim(1) : 0);
  };
  return tools::run_parameter_server_training(job);
}

int run(const Config& c) {
  const auto t0 = std::chrono::steady_clock::now();
  if (c.strategy == "parameter_server") return run_parameter_server_job(c);
  auto strategy = build_strategy(c);
  Datasets d = load_data(c);
  STRATA_CHECK(c.global_batch >= strategy->num_replicas_in_sync(), "strata-train: --global-batch ", c.global_batch,
               " is smaller than the number of replicas (", strategy->num_replicas_in_sync(), ")");
  const int64_t features = d.train.features.ndim() == 2 ? d.train.features.dim(1) : 0;
  nn::Sequential model;
  optim::Optimizer opt;
  Variable global_step;
  {
    auto scope = strategy->scope();
    nn::set_global_seed(uint64_t(c.seed));
    mixed_precision::set_global_policy(c.precision);  // layers: float32 variables, compute dtype
    model = build_model(c.model, features);
    opt = optim::make_optimizer(c.optimizer, {{"lr", c.learning_rate}});
    if (c.precision == "mixed_float16") opt = optim::LossScaleOptimizer(opt);
    global_step = train::create_global_step();
  }
  auto train_ds = strategy->experimental_distribute_dataset(
      d.train.dataset().shuffle(d.train.size(), uint64_t(c.seed)).repeat().batch(c.global_batch, true).prefetch(2));
  auto eval_ds = strategy->experimental_distribute_dataset(d.eval.dataset().batch(c.global_batch).prefetch(2));
  Trainer trainer(*strategy, train_ds, global_step, model, opt, c.global_batch);
  Evaluator evaluator(*strategy, eval_ds, model);

  fs::path model_dir = c.model_dir;
  if (model_dir.empty()) {
    // Every worker of a job must agree on the directory (the chief writes it, the others
    // resume from it), so a job's default is named after its rendezvous address.
    const auto* mw = dynamic_cast<const distribute::MultiWorkerMirroredStrategy*>(strategy.get());
    const std::string id = mw && strategy->num_workers() > 1
                               ? "job-" + std::to_string(mw->cluster_resolver().rendezvous_port())
                               : std::to_string(::getpid());
    model_dir = fs::temp_directory_path() / ("strata-train-" + id);
  }
  // The input position is checkpointed too, so a resumed run sees exactly the batches it
  // would have seen.
  train::Checkpoint checkpoint{{"model", model}, {"optimizer", opt}, {"global_step", global_step},
                               {"train_input", trainer.input_state()}};
  const bool chief = strategy->worker_index() == 0;
  // Multi-worker: only the chief writes under --model-dir; the other workers write their
  // checkpoints to temporary directories that they delete (TensorFlow's write_dirpath)
  // and resume from the chief's latest checkpoint.
  distribute::WriteDir checkpoint_dir(model_dir / "checkpoints", *strategy);
  if (checkpoint_dir.temporary()) {
    const std::optional<std::string> latest =
        train::CheckpointManager(checkpoint, model_dir / "checkpoints", 1).latest_checkpoint();
    if (latest) {
      auto scope = strategy->scope();
      checkpoint.restore(*latest);
      std::cerr << "strata-train: worker " << strategy->worker_index() << " resumed from " << *latest << "\n";
    }
  }
  train::CheckpointManager manager(checkpoint, checkpoint_dir.path(), /*max_to_keep=*/3,
                                   /*checkpoint_interval=*/c.steps_per_loop * 5, global_step);
  train::ControllerOptions co;
  co.strategy = strategy.get();
  co.trainer = &trainer;
  co.evaluator = &evaluator;
  co.global_step = global_step;
  co.steps_per_loop = c.steps_per_loop;
  co.checkpoint_manager = &manager;
  co.summary_dir = chief ? (model_dir / "summaries").string() : "";
  co.eval_summary_dir = chief ? (model_dir / "summaries" / "eval").string() : "";
  co.progress.verbosity = c.quiet ? train::Verbosity::Quiet : (c.verbose ? train::Verbosity::Verbose : train::Verbosity::Normal);
  std::cerr << "strata-train: " << c.model << " on " << d.description << ", strategy " << strategy->name() << " with "
            << strategy->num_replicas_in_sync() << " replica(s), global batch " << c.global_batch << "\n";
  train::Controller controller(co);
  const int64_t start_step = controller.global_step();
  const auto train_t0 = std::chrono::steady_clock::now();
  controller.train_and_evaluate(c.steps, c.eval_steps, c.eval_interval > 0 ? c.eval_interval : c.steps);
  const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - train_t0).count();
  const auto& eval = controller.last_eval_outputs();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double trained_steps = double(controller.global_step() - start_step);
  nlohmann::json report = {
      {"steps", controller.global_step()},
      {"final_train_loss", controller.last_train_outputs().count("loss") ? controller.last_train_outputs().at("loss") : 0.0},
      {"eval_loss", eval.count("loss") ? eval.at("loss") : 0.0},
      {"eval_accuracy", eval.count("accuracy") ? eval.at("accuracy") : 0.0},
      {"examples_per_sec", train_seconds > 0 ? trained_steps * double(c.global_batch) / train_seconds : 0.0},
      {"steps_per_sec", train_seconds > 0 ? trained_steps / train_seconds : 0.0},
      {"wall_seconds", wall},
      {"replicas", strategy->num_replicas_in_sync()},
      {"workers", strategy->num_workers()},
      {"strategy", strategy->name()},
      {"precision", c.precision},
      {"model", c.model},
      {"data", c.data},
      {"checkpoint", controller.last_checkpoint()},
  };
  if (chief) {
    std::cerr << "strata-train: eval accuracy " << report["eval_accuracy"] << ", loss " << report["eval_loss"]
              << " after " << report["steps"] << " steps (" << wall << " s)\n"
              << "strata-train: checkpoints in " << (model_dir / "checkpoints").string() << "\n"
              << "strata-train: summaries in " << (model_dir / "summaries").string()
              << " (view with: tensorboard --logdir " << (model_dir / "summaries").string() << ")\n";
    if (!c.report.empty()) {
      std::ofstream f(c.report);
      f << report.dump(2) << "\n";
      STRATA_CHECK(f.good(), "strata-train: cannot write the report to ", c.report);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-train: train a model under a distribution strategy (Orbit-style Controller)"};
  Config c;
  app.add_option("--model", c.model, "model to train")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--data", c.data, "synthetic (built in) or mnist:DIR (IDX files, gzip or raw)");
  app.add_option("--strategy", c.strategy, "distribution strategy")
      ->check(CLI::IsMember({"default", "one_device", "mirrored", "multi_worker", "central_storage", "parameter_server"}));
  app.add_option("--replicas", c.replicas, "replicas on logical CPU devices (mirrored, central_storage)")
      ->check(CLI::Range(1, 64));
  app.add_option("--devices", c.devices, "comma-separated devices, e.g. cpu:0,cpu:1");
  app.add_option("--steps", c.steps, "global step to train up to")->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_option("--steps-per-loop", c.steps_per_loop, "steps per inner loop (summaries, progress)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--global-batch", c.global_batch, "global batch size across all replicas")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  app.add_option("--eval-steps", c.eval_steps, "evaluation steps (-1: the whole evaluation split)")
      ->check(CLI::Range(int64_t(-1), int64_t(1) << 40))
      ->check(CLI::Validator(
          [](std::string& v) { return v == "0" ? std::string("must be -1 (the whole split) or positive") : std::string(); },
          "", "not zero"));
  app.add_option("--eval-interval", c.eval_interval, "train steps between evaluations (default: only at the end)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_option("--model-dir", c.model_dir, "checkpoints and summaries (an existing one is resumed)");
  app.add_option("--learning-rate", c.learning_rate, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", c.optimizer, "optimizer")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--seed", c.seed, "seed for initialisation and shuffling");
  app.add_option("--precision", c.precision, "compute precision")
      ->check(CLI::IsMember({"float32", "mixed_float16", "mixed_bfloat16"}));
  app.add_option("--train-examples", c.train_examples, "examples used for training (mnist: the first N)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--eval-examples", c.eval_examples, "examples used for evaluation (mnist: the last N)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--report", c.report, "write a JSON report here");
  app.add_flag("--quiet", c.quiet, "no progress output");
  app.add_flag("--verbose", c.verbose, "progress after every loop");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "strata-train: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::cerr << "strata-train: " << e.what() << "\n";
    return 1;
  }
}
