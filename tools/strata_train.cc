// strata-train: the main job. Trains a named model on a dataset under a strategy through
// the Orbit-style Controller, with checkpoints, TensorBoard summaries and a JSON report.
// The flags and report keys are a contract (../shared/DESIGN.md); run --help for them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include <strata/strata.h>
#include <strata/train/checkpoint_file.h>
#include <strata/train/directory_lock.h>
#include <strata/train/preemption.h>
#include "tools/train/ps_train.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

struct Config {
  std::string model = "mlp", data = "synthetic", strategy = "default", devices, model_dir, report,
              precision = "float32", optimizer = "adam";
  int replicas = 0;
  // Logical replicas per GPU (docs/GPU.md); communication between workers (multi_worker).
  int virtual_gpus = 0;
  std::string communication = "auto";
  int64_t steps = 1000, steps_per_loop = 100, global_batch = 128, eval_steps = -1, eval_interval = 0, seed = 1;
  double learning_rate = 1e-3;
  // Multi-worker collectives: a stalled worker (no heartbeat) is named after
  // collective_timeout; a live but lagging one after collective_hard_timeout (0: the
  // larger of 300 s and collective_timeout).
  double collective_timeout = 60.0, collective_hard_timeout = 0.0;
  int64_t train_examples = 8000, eval_examples = 2000;
  // Whether --train-examples / --eval-examples were given (they override the MNIST split).
  bool train_examples_given = false, eval_examples_given = false;
  bool quiet = false, verbose = false;
  // Keras's TerminateOnNaN (on unless --no-terminate-on-nan); --restore-checkpoint PATH
  // resumes from PATH instead of the latest checkpoint (e.g. when the latest is damaged).
  bool no_terminate_on_nan = false;
  // ZeRO-1: each replica keeps only its share of the optimizer state (docs/ZERO.md).
  bool shard_optimizer_state = false;
  bool share_cpu_variables = false;
  bool aggregate_gradients_in_backward = false;
  bool checkpoint_on_preemption = false;
  bool async_checkpoint = false;
  int64_t gradient_accumulation_steps = 1;
  std::string restore_checkpoint;
};

// Integer flags: CLI11's range check would call "abc" "not in range"; say what is wrong.
const CLI::Validator kIntegerFlag(
    [](std::string& v) {
      int64_t parsed = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
      if (ec == std::errc::result_out_of_range) return "'" + v + "' is out of the 64-bit integer range";
      if (ec != std::errc() || end != v.data() + v.size()) return "'" + v + "' is not an integer";
      return std::string();
    },
    "INT", "integer");

// Fails now, before any data is loaded or step trained, when the report could not be
// written at the end (an unwritable --report used to fail only after the whole run). The
// probe opens the file itself for writing without truncating it, and removes it again
// when it did not exist (missing parent directories are created, as the run would).
void check_report_writable(const fs::path& report) {
  std::error_code ec;
  const bool existed = fs::exists(report, ec);
  STRATA_CHECK(!fs::is_directory(report, ec), "--report ", report.string(), " is a directory");
  // The report may live in a directory the run creates (often --model-dir): create it now.
  if (report.has_parent_path() && !fs::exists(report.parent_path(), ec)) {
    fs::create_directories(report.parent_path(), ec);
    STRATA_CHECK(!ec, "--report ", report.string(), " cannot be written: creating ", report.parent_path().string(),
                 " failed (", ec.message(), "); checked before training so that a run's result is not lost");
  }
  {
    std::ofstream probe(report, std::ios::app);
    STRATA_CHECK(probe.good(), "--report ", report.string(), " cannot be written (",
                 std::strerror(errno), "); checked before training so that a run's result is not lost");
  }
  if (!existed) fs::remove(report, ec);
}

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
  } else if (c.data.rfind("mnist:", 0) == 0 && data::has_mnist_split(c.data.substr(6), data::Split::Train)) {
    // Keras's split: the train files (60,000 images) train, the test files (10,000)
    // evaluate; --train-examples / --eval-examples keep the first N of each.
    const std::string dir = c.data.substr(6);
    data::LabeledArrays train = data::read_mnist(dir, data::Split::Train);
    data::LabeledArrays test = data::read_mnist(dir, data::Split::Test);
    const int64_t n_train = c.train_examples_given ? c.train_examples : train.size();
    const int64_t n_eval = c.eval_examples_given ? c.eval_examples : test.size();
    STRATA_CHECK(n_train <= train.size() && n_eval <= test.size(), "strata-train: ", dir, " holds ", train.size(),
                 " train and ", test.size(), " test images, fewer than --train-examples ", n_train,
                 " / --eval-examples ", n_eval);
    d.train = train.slice(0, n_train);
    d.eval = test.slice(0, n_eval);
    d.description = "mnist " + dir + " (" + std::to_string(n_train) + " train images train, " +
                    std::to_string(n_eval) + " test images evaluate)";
  } else if (c.data.rfind("mnist:", 0) == 0) {
    // Only the test files: the first 8,000 train and the last 2,000 evaluate.
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
  o.virtual_gpus = c.virtual_gpus;
  o.shard_optimizer_state = c.shard_optimizer_state;
  o.share_cpu_variables = c.share_cpu_variables;
  o.communication.implementation = c.communication == "nccl"   ? distribute::CommunicationImplementation::Nccl
                                   : c.communication == "ring" ? distribute::CommunicationImplementation::Ring
                                                               : distribute::CommunicationImplementation::Auto;
  o.communication.stall_timeout_seconds = c.collective_timeout;
  o.communication.aggregate_gradients_in_backward = c.aggregate_gradients_in_backward;
  o.communication.timeout_seconds =
      c.collective_hard_timeout > 0 ? c.collective_hard_timeout : std::max(300.0, c.collective_timeout);
  STRATA_CHECK(o.communication.timeout_seconds >= c.collective_timeout, "--collective-hard-timeout (",
               c.collective_hard_timeout, " s) is shorter than --collective-timeout (", c.collective_timeout,
               " s); a stall could then never be told from a slow step");
  return distribute::make_strategy(c.strategy, o);
}

class Trainer final : public train::StandardTrainer {
 public:
  // accumulation_steps > 1: each replica's batch is cut into that many micro-batches whose
  // gradients are summed with nothing communicated until the last micro-batch, whose
  // backward reduces the totals (distribute::GradientAccumulator), then applied once (the
  // activations of one micro-batch at a time; the same update up to the order of sums).
  Trainer(distribute::Strategy& s, distribute::DistributedDataset ds, Variable step, nn::Sequential& model,
          optim::Optimizer opt, int64_t global_batch, int64_t accumulation_steps)
      : StandardTrainer(s, std::move(ds), std::move(step)),
        model_(model),
        opt_(opt),
        global_batch_(global_batch),
        accumulation_steps_(accumulation_steps) {}
  int64_t examples_per_step() const override { return global_batch_; }

 protected:
  void train_loop_begin() override { loss_sum_ = 0, steps_ = 0; }
  void train_step(distribute::DistributedIterator& it) override {
    auto batch = next_batch(it);
    auto per_replica = strategy().run(
        [&](const data::Batch& b) {
          // mixed_float16: a LossScaleOptimizer scales the loss and unscales the gradients.
          auto lso = optim::LossScaleOptimizer::of(opt_);
          auto vars = model_.trainable_variables();
          auto forward = [&](const Tensor& x, const Tensor& y) {
            Tensor logits = model_(x);
            Tensor per_example = losses::sparse_categorical_crossentropy(y, logits, /*from_logits=*/true);
            return distribute::compute_average_loss(per_example, global_batch_);
          };
          auto scaled = [&](const Tensor& loss) { return lso ? lso->get_scaled_loss(loss) : loss; };
          std::vector<Tensor> grads;
          Tensor loss;
          if (accumulation_steps_ == 1) {
            autograd::GradientTape tape;
            loss = forward(b[0], b[1]);
            grads = tape.gradient(scaled(loss), vars);
          } else {
            // Every replica adds its last micro-batch once (the one that communicates), even
            // with fewer rows than micro-batches, or none: then fewer, or one empty one.
            const int64_t rows = b[0].dim(0), pieces = std::max<int64_t>(1, std::min(accumulation_steps_, rows));
            distribute::GradientAccumulator accumulated(vars);
            for (int64_t k = 0; k < pieces; ++k) {
              const int64_t begin = rows * k / pieces, end = rows * (k + 1) / pieces;
              autograd::GradientTape tape;
              const Tensor l = forward(b[0].slice(0, begin, end), b[1].slice(0, begin, end));
              accumulated.add(tape, scaled(l), /*last=*/k + 1 == pieces);
              loss = k == 0 ? l : loss + l;
            }
            grads = accumulated.gradients();
          }
          if (lso) grads = lso->get_unscaled_gradients(grads);
          opt_.apply_gradients(grads, vars);
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
  int64_t accumulation_steps_;
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
  job.terminate_on_nan = !c.no_terminate_on_nan;
  job.async_checkpoint = c.async_checkpoint;
  job.load_data = [&c] {
    Datasets d = load_data(c);
    return tools::PsTrainData{std::move(d.train), std::move(d.eval), std::move(d.description)};
  };
  job.build_model = [&c](const tools::PsTrainData& d) {
    return build_model(c.model, d.train.features.ndim() == 2 ? d.train.features.dim(1) : 0);
  };
  return tools::run_parameter_server_training(job);
}

// Errors raised in this file already start with "strata-train: "; others get it added.
std::string with_program_prefix(const std::string& message) {
  static const std::string prefix = "strata-train: ";
  return message.rfind(prefix, 0) == 0 ? message : prefix + message;
}

int run(const Config& c) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!c.report.empty()) check_report_writable(c.report);
  STRATA_CHECK(c.restore_checkpoint.empty() || train::checkpoint_exists(c.restore_checkpoint),
               "--restore-checkpoint ", c.restore_checkpoint, ": no checkpoint there (expected ",
               c.restore_checkpoint, ".manifest.json; give the prefix, e.g. DIR/checkpoints/ckpt-200)");
  STRATA_CHECK(c.restore_checkpoint.empty() || c.strategy != "parameter_server",
               "--restore-checkpoint is not supported with --strategy parameter_server");
  STRATA_CHECK(!c.shard_optimizer_state || c.strategy != "parameter_server",
               "--shard-optimizer-state applies to the synchronous strategies (mirrored, multi_worker); with "
               "--strategy parameter_server the parameter servers already hold one copy of the optimizer state");
  STRATA_CHECK(c.gradient_accumulation_steps == 1 || c.strategy != "parameter_server",
               "--gradient-accumulation-steps applies to the synchronous strategies (with --strategy "
               "parameter_server each step is one closure on one worker)");
  STRATA_CHECK(!c.checkpoint_on_preemption || c.strategy != "parameter_server",
               "--checkpoint-on-preemption applies to the synchronous strategies; with --strategy parameter_server "
               "the chief's checkpoints are the recovery point");
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
  Trainer trainer(*strategy, train_ds, global_step, model, opt, c.global_batch, c.gradient_accumulation_steps);
  Evaluator evaluator(*strategy, eval_ds, model);

  fs::path model_dir = c.model_dir;
  if (model_dir.empty()) {
    // Every worker of a job must agree on the directory (the chief writes it, the others
    // resume from it), so a job's default is named after its rendezvous address.
    // strata-launch's STRATA_JOB_ID stays the same across --max-restarts relaunches (the
    // rendezvous port does not), so a relaunched job finds its checkpoints.
    const auto* mw = dynamic_cast<const distribute::MultiWorkerMirroredStrategy*>(strategy.get());
    const char* job_id = std::getenv("STRATA_JOB_ID");
    const std::string id = mw && strategy->num_workers() > 1
                               ? "job-" + (job_id && *job_id ? std::string(job_id)
                                                             : std::to_string(mw->cluster_resolver().rendezvous_port()))
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
  // One job per model directory: the chief, which writes it, holds its lock until exit.
  std::optional<train::DirectoryLock> model_dir_lock;
  if (chief) {
    model_dir_lock.emplace(model_dir, "strata-train");
    if (model_dir_lock->took_over_stale())
      std::cerr << "strata-train: took over the lock of a job that ended without releasing it ("
                << model_dir_lock->path().string() << ")\n";
  }
  distribute::WriteDir checkpoint_dir(model_dir / "checkpoints", *strategy);
  train::CheckpointManager manager(checkpoint, checkpoint_dir.path(), /*max_to_keep=*/3,
                                   /*checkpoint_interval=*/c.steps_per_loop * 5, global_step);
  if (checkpoint_dir.temporary() && c.restore_checkpoint.empty()) {
    const std::optional<std::string> latest =
        train::CheckpointManager(checkpoint, model_dir / "checkpoints", 1).latest_checkpoint();
    if (latest) {
      auto scope = strategy->scope();
      // Through this worker's manager, so that it counts the checkpoint interval from the
      // restored step as the chief's does: every worker then saves at the same steps,
      // which a save that is a collective needs (whole ZeRO-1 slots, sync-on-read values).
      manager.restore(*latest);
      std::cerr << "strata-train: worker " << strategy->worker_index() << " resumed from " << *latest << "\n";
    }
  }
  train::ControllerOptions co;
  co.strategy = strategy.get();
  co.trainer = &trainer;
  co.evaluator = &evaluator;
  co.global_step = global_step;
  co.steps_per_loop = c.steps_per_loop;
  co.checkpoint_manager = &manager;
  co.terminate_on_nan = !c.no_terminate_on_nan;
  co.enable_async_checkpointing = c.async_checkpoint;
  co.initial_checkpoint = c.restore_checkpoint;
  co.summary_dir = chief ? (model_dir / "summaries").string() : "";
  co.eval_summary_dir = chief ? (model_dir / "summaries" / "eval").string() : "";
  co.progress.verbosity = c.quiet ? train::Verbosity::Quiet : (c.verbose ? train::Verbosity::Verbose : train::Verbosity::Normal);
  std::cerr << "strata-train: " << c.model << " on " << d.description << ", strategy " << strategy->name() << " with "
            << strategy->num_replicas_in_sync() << " replica(s), global batch " << c.global_batch << "\n";
  // SIGTERM (a preemption notice) saves a checkpoint at the end of the current loop, on
  // every worker together, and stops the job with kPreemptedExitCode (train/preemption.h).
  std::optional<train::PreemptionCheckpointHandler> preemption;
  if (c.checkpoint_on_preemption) {
    train::TerminationConfig termination;
    // Said while the handler still holds SIGTERM: once the error has unwound past it, the
    // launcher stopping the other workers could end this process before main says it.
    termination.exit_fn = [](const train::PreemptedError& preemption) {
      std::cerr << with_program_prefix(preemption.what()) << std::endl;
      throw preemption;
    };
    preemption.emplace(*strategy, manager, std::move(termination));
    co.train_actions.push_back(train::SaveCheckpointIfPreempted(*preemption));
  }
  train::Controller controller(co);
  const int64_t start_step = controller.global_step();
  if (start_step >= c.steps) {
    std::cerr << "strata-train: nothing to train: " << (model_dir / "checkpoints").string() << " is at step "
              << start_step << " and --steps is " << c.steps << "; evaluating the restored model\n";
  }
  const auto train_t0 = std::chrono::steady_clock::now();
  controller.train_and_evaluate(c.steps, c.eval_steps, c.eval_interval > 0 ? c.eval_interval : c.steps);
  const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - train_t0).count();
  const auto& eval = controller.last_eval_outputs();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double trained_steps = double(controller.global_step() - start_step);
  // Only what this run measured: values it did not measure (no step trained, so no train
  // loss or throughput) are null, never a zero that reads like a result.
  const bool trained = trained_steps > 0 && train_seconds > 0;
  const auto& train_out = controller.last_train_outputs();
  // The steady throughput: the median of the inner train loops' own rates (no start-up,
  // evaluation or checkpoint in them), what a benchmark against another framework's
  // timed training loop compares.
  nlohmann::json steady_examples_per_sec;
  if (std::vector<double> loops = controller.train_loop_steps_per_second(); !loops.empty()) {
    std::sort(loops.begin(), loops.end());
    steady_examples_per_sec = loops[loops.size() / 2] * double(c.global_batch);
  }
  nlohmann::json report = {
      {"steps", controller.global_step()},
      {"trained_steps", int64_t(trained_steps)},
      {"final_train_loss", trained && train_out.count("loss") ? nlohmann::json(train_out.at("loss")) : nlohmann::json()},
      {"eval_loss", eval.count("loss") ? nlohmann::json(eval.at("loss")) : nlohmann::json()},
      {"eval_accuracy", eval.count("accuracy") ? nlohmann::json(eval.at("accuracy")) : nlohmann::json()},
      {"examples_per_sec", trained ? nlohmann::json(trained_steps * double(c.global_batch) / train_seconds) : nlohmann::json()},
      {"steps_per_sec", trained ? nlohmann::json(trained_steps / train_seconds) : nlohmann::json()},
      {"steady_examples_per_sec", steady_examples_per_sec},
      {"wall_seconds", wall},
      {"replicas", strategy->num_replicas_in_sync()},
      {"workers", strategy->num_workers()},
      {"strategy", strategy->name()},
      {"precision", c.precision},
      {"model", c.model},
      {"data", c.data},
      {"train_examples", d.train.size()},
      {"eval_examples", d.eval.size()},
      {"checkpoint", controller.last_checkpoint()},
  };
  // ZeRO-1 (docs/ZERO.md): the optimizer's slot bytes, one whole copy and the most one
  // replica holds (the same unsharded; about 1/replicas of it sharded).
  const optim::OptimizerStateBytes state_bytes = optim::optimizer_state_bytes(opt);
  report["shard_optimizer_state"] = strategy->shard_optimizer_state();
  report["share_cpu_variables"] = strategy->share_cpu_variables();
  report["aggregate_gradients_in_backward"] = strategy->communication_options().aggregate_gradients_in_backward;
  report["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  report["optimizer_state_bytes_per_replica"] = state_bytes.per_replica;
  report["optimizer_state_bytes_total"] = state_bytes.total;
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
      ->check(kIntegerFlag)->check(CLI::Range(1, 64));
  app.add_option("--devices", c.devices, "comma-separated devices, e.g. cpu:0,cpu:1 or cuda:0,cuda:1");
  app.add_option("--virtual-gpus", c.virtual_gpus,
                 "logical replicas per GPU of --devices (default: every visible GPU); mirrored, central_storage, "
                 "multi_worker")
      ->check(kIntegerFlag)->check(CLI::Range(1, 64));
  app.add_option("--communication", c.communication, "collectives between workers (multi_worker): auto (NCCL for "
                 "GPU replicas, else Gloo), ring (Gloo), nccl")
      ->check(CLI::IsMember({"auto", "ring", "nccl"}));
  app.add_option("--steps", c.steps, "global step to train up to")->check(kIntegerFlag)->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_option("--steps-per-loop", c.steps_per_loop, "steps per inner loop (summaries, progress)")
      ->check(kIntegerFlag)->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--global-batch", c.global_batch, "global batch size across all replicas")
      ->check(kIntegerFlag)->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  app.add_option("--eval-steps", c.eval_steps, "evaluation steps (-1: the whole evaluation split)")
      ->check(kIntegerFlag)->check(CLI::Range(int64_t(-1), int64_t(1) << 40))
      ->check(CLI::Validator(
          [](std::string& v) { return v == "0" ? std::string("must be -1 (the whole split) or positive") : std::string(); },
          "", "not zero"));
  app.add_option("--eval-interval", c.eval_interval, "train steps between evaluations (default: only at the end)")
      ->check(kIntegerFlag)->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_option("--model-dir", c.model_dir, "checkpoints and summaries (an existing one is resumed)");
  app.add_option("--learning-rate", c.learning_rate, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", c.optimizer, "optimizer")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--seed", c.seed, "seed for initialisation and shuffling")->check(kIntegerFlag);
  app.add_option("--precision", c.precision, "compute precision")
      ->check(CLI::IsMember({"float32", "mixed_float16", "mixed_bfloat16"}));
  app.add_option("--train-examples", c.train_examples,
                 "examples used for training (mnist: the first N of the train files, or of the test file without "
                 "them; default: all 60,000 train images, or 8,000)")
      ->check(kIntegerFlag)->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--eval-examples", c.eval_examples,
                 "examples used for evaluation (mnist: the first N test images with the train files, else the last "
                 "N; default: all 10,000, or 2,000)")
      ->check(kIntegerFlag)->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--report", c.report, "write a JSON report here (checked writable before training)");
  app.add_flag("--no-terminate-on-nan", c.no_terminate_on_nan,
               "keep training when the loss becomes NaN or infinite (default: stop with an error, as Keras's "
               "TerminateOnNaN)");
  app.add_option("--restore-checkpoint", c.restore_checkpoint,
                 "resume from this checkpoint prefix (e.g. DIR/checkpoints/ckpt-200) instead of the latest");
  app.add_option("--collective-timeout", c.collective_timeout,
                 "multi_worker: fail naming a worker whose process stops running (no heartbeat) for this many "
                 "seconds; a dead worker is reported at once")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 1e6));
  app.add_option("--collective-hard-timeout", c.collective_hard_timeout,
                 "multi_worker: fail naming a worker that runs but does not reach a collective for this many seconds "
                 "(default: the larger of 300 and --collective-timeout)")
      ->check(CLI::Range(0.1, 1e6));
  app.add_flag("--shard-optimizer-state", c.shard_optimizer_state,
               "ZeRO-1: each replica keeps and updates only its 1/replicas share of the optimizer state "
               "(gradients reduce-scattered, parameters all-gathered); mirrored, multi_worker (no effect with one "
               "replica); checkpoints stay interchangeable with unsharded runs");
  app.add_flag("--share-cpu-variables", c.share_cpu_variables,
               "mirrored, multi_worker with several replicas on logical CPU devices: one copy of each variable and "
               "of its optimizer slots that the local replicas share, its update split between them "
               "(Strategy::set_share_cpu_variables); the same results, 1/replicas of the memory");
  app.add_flag("--aggregate-gradients-in-backward", c.aggregate_gradients_in_backward,
               "mirrored, multi_worker, central_storage: the gradient tape returns the gradients summed over the "
               "replicas, as PyTorch DDP (CommunicationOptions::aggregate_gradients_in_backward); the same results, "
               "with replicas of one process on CPU devices summing each weight gradient from its factors");
  app.add_option("--gradient-accumulation-steps", c.gradient_accumulation_steps,
                 "cut each replica's batch into N micro-batches whose gradients are summed without communication until "
                 "the last one's backward reduces the totals (distribute::GradientAccumulator), then applied once: the "
                 "same update with one micro-batch's activations at a time")
      ->check(kIntegerFlag)->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_flag("--checkpoint-on-preemption", c.checkpoint_on_preemption,
               "on SIGTERM (a preemption notice), save a checkpoint at the end of the current loop on every worker "
               "and exit with status 75, so that a restart resumes from it (not with --strategy parameter_server)");
  app.add_flag("--async-checkpoint", c.async_checkpoint,
               "write each checkpoint on a background thread while training goes on (a host copy of the state is "
               "taken at the save's step; Orbit's enable_async_checkpointing); the run ends with its checkpoints "
               "written");
  app.add_flag("--quiet", c.quiet, "no progress output");
  app.add_flag("--verbose", c.verbose, "progress after every loop");
  try {
    app.parse(argc, argv);
    c.train_examples_given = app.count("--train-examples") > 0;
    c.eval_examples_given = app.count("--eval-examples") > 0;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "strata-train: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    return run(c);
  } catch (const train::PreemptedError& e) {
    return e.exit_code();  // said by the exit_fn
  } catch (const distribute::PeerFailure& e) {
    // Another worker failed first: say so in the line strata-launch looks for, so it
    // blames that worker (and stops it, if it is stalled) rather than this one.
    std::cerr << with_program_prefix(e.what()) << "\n" << distribute::peer_failure_marker(e) << std::endl;
    return distribute::kPeerFailureExitCode;
  } catch (const std::exception& e) {
    std::cerr << with_program_prefix(e.what()) << "\n";
    return 1;
  }
}
