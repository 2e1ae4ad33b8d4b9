#include "tools/train/ps_train.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include <strata/strata.h>
#include <strata/distribute/ps/cluster_coordinator.h>
#include <strata/distribute/ps/parameter_server.h>
#include <strata/distribute/ps/parameter_server_strategy.h>
#include <strata/train/directory_lock.h>

namespace strata::tools {

namespace {

namespace fs = std::filesystem;
using distribute::ClusterCoordinator;
using distribute::ParameterServerStrategy;
using Clock = std::chrono::steady_clock;

// Variables bigger than this are sharded across the parameter servers (TensorFlow's
// MinSizePartitioner default); at most one shard per server.
constexpr int64_t kMinShardBytes = 256 << 10;

// The chief's trainer: one closure per step, scheduled on whichever worker is idle. The
// global step advances on the chief once the loop's closures have all finished: a closure
// may run twice when its worker is lost (closures run at least once), which must not
// advance the step twice.
class PsTrainer final : public train::AbstractTrainer {
 public:
  PsTrainer(ClusterCoordinator& coordinator, distribute::PerWorkerIterator iterator, Variable global_step,
            int64_t global_batch)
      : coordinator_(coordinator), iterator_(iterator), global_step_(std::move(global_step)), batch_(global_batch) {}

  train::Outputs train(int64_t num_steps) override {
    std::vector<distribute::RemoteValue> losses;
    losses.reserve(size_t(num_steps));
    for (int64_t i = 0; i < num_steps; ++i) losses.push_back(coordinator_.schedule("train_step", {iterator_}));
    coordinator_.join();
    double sum = 0;
    for (const auto& l : losses) sum += l.fetch().at(0).item<double>();
    global_step_.assign_add(Tensor::scalar(num_steps, kInt64));
    return {{"loss", num_steps ? sum / double(num_steps) : 0.0}};
  }
  int64_t examples_per_step() const override { return batch_; }

 private:
  ClusterCoordinator& coordinator_;
  distribute::PerWorkerIterator iterator_;
  Variable global_step_;
  int64_t batch_;
};

// The chief's evaluator: the model on the chief, over one snapshot of the variables (a
// StepScope that is never committed fetches each variable once per evaluation).
class PsEvaluator final : public train::AbstractEvaluator {
 public:
  PsEvaluator(ParameterServerStrategy& strategy, data::Dataset dataset, nn::Sequential& model)
      : strategy_(strategy), dataset_(std::move(dataset)), model_(model) {}

  train::Outputs evaluate(int64_t num_steps) override {
    distribute::StepScope snapshot(strategy_);
    autograd::StopRecording no_tape;
    model_.set_training(false);
    double loss = 0, correct = 0, count = 0;
    auto it = dataset_.make_iterator();
    for (int64_t step = 0; num_steps < 0 || step < num_steps; ++step) {
      auto b = it.next();
      if (!b) break;
      const Tensor logits = model_((*b)[0]);
      loss += sum(losses::sparse_categorical_crossentropy((*b)[1], logits, /*from_logits=*/true)).item<double>();
      correct += sum(cast(equal(argmax(logits, -1), cast((*b)[1], kInt64)), kFloat32)).item<double>();
      count += double((*b)[1].dim(0));
    }
    model_.set_training(true);
    return {{"loss", count ? loss / count : 0.0}, {"accuracy", count ? correct / count : 0.0}};
  }

 private:
  ParameterServerStrategy& strategy_;
  data::Dataset dataset_;
  nn::Sequential& model_;
};

// One training step on a worker: forward, loss over the closure's batch, gradients, and
// the optimizer's update (committed to the parameter servers when the closure returns).
Tensor train_step(nn::Sequential& model, optim::Optimizer& opt, const data::Batch& b, int64_t global_batch) {
  autograd::GradientTape tape;
  const Tensor logits = model(b[0]);
  const Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
  const Tensor loss = distribute::compute_average_loss(per_example, global_batch);
  const auto vars = model.trainable_variables();
  opt.apply_gradients(tape.gradient(loss, vars), vars);
  return loss;
}

int run_chief_or_worker(const PsTrainJob& job, const distribute::ClusterResolver& resolver,
                        Clock::time_point start) {
  const bool chief = resolver.task_type() == "chief";
  const int num_ps = resolver.cluster_spec().num_tasks("ps");
  ParameterServerStrategy strategy(resolver, distribute::MinSizePartitioner(kMinShardBytes, num_ps));
  const PsTrainData d = job.load_data();

  // Every task builds the same variables in the same order: the chief creates them on the
  // parameter servers, the workers find them.
  nn::Sequential model;
  optim::Optimizer opt;
  Variable global_step;
  {
    auto scope = strategy.scope();
    nn::set_global_seed(uint64_t(job.seed));
    mixed_precision::set_global_policy(job.precision);
    model = job.build_model(d);
    opt = optim::make_optimizer(job.optimizer, {{"lr", job.learning_rate}});
    global_step = train::create_global_step();
    // Slots and the iteration counter now, so that a worker's first step finds them and
    // the chief's checkpoints hold them.
    opt.build(model.trainable_variables());
  }

  ClusterCoordinator coordinator(strategy);
  const int64_t batch = job.global_batch;
  const uint64_t seed = uint64_t(job.seed);
  auto per_worker = coordinator.create_per_worker_dataset([&d, batch, seed](const data::InputContext& ctx) {
    // Each worker trains on its own shard of the training split, reshuffled each epoch.
    return d.train.dataset()
        .shard(ctx.num_input_pipelines(), ctx.input_pipeline_id())
        .shuffle(d.train.size(), seed + uint64_t(ctx.input_pipeline_id()))
        .repeat()
        .batch(batch, /*drop_remainder=*/true)
        .prefetch(2);
  });
  coordinator.register_function("train_step", [&](distribute::ClosureArgs& args) {
    const data::Batch b = args.next(0);
    auto loss = strategy.run([&](const data::Batch& x) { return train_step(model, opt, x, batch); }, b);
    return std::vector<Tensor>{loss[0]};
  });
  if (!chief) {
    coordinator.serve();  // returns when the chief shuts the job down
    return 0;
  }

  const int num_workers = strategy.cluster_num_workers();
  STRATA_CHECK(int64_t(d.train.size()) / num_workers >= batch, "strata-train: --global-batch ", batch,
               " is larger than each worker's shard of the training data (", d.train.size(), " examples over ",
               num_workers, " workers)");
  PsTrainer trainer(coordinator, per_worker.make_iterator(), global_step, batch);
  PsEvaluator evaluator(strategy, d.eval.dataset().batch(batch), model);
  const fs::path model_dir = job.model_dir.empty()
                                 ? fs::temp_directory_path() / ("strata-train-" + std::to_string(::getpid()))
                                 : fs::path(job.model_dir);
  // One job per model directory: the chief, which writes it, holds its lock until exit.
  train::DirectoryLock model_dir_lock(model_dir, "strata-train");
  if (model_dir_lock.took_over_stale())
    std::cerr << "strata-train: took over the lock of a job that ended without releasing it ("
              << model_dir_lock.path().string() << ")\n";
  // No "train_input": the input lives in the workers' per-worker iterators, which a
  // resumed job recreates.
  train::Checkpoint checkpoint{{"model", model}, {"optimizer", opt}, {"global_step", global_step}};
  train::CheckpointManager manager(checkpoint, model_dir / "checkpoints", /*max_to_keep=*/3,
                                   /*checkpoint_interval=*/job.steps_per_loop * 5, global_step);
  train::ControllerOptions co;
  co.strategy = &strategy;
  co.trainer = &trainer;
  co.evaluator = &evaluator;
  co.global_step = global_step;
  co.steps_per_loop = job.steps_per_loop;
  co.checkpoint_manager = &manager;
  co.terminate_on_nan = job.terminate_on_nan;
  co.enable_async_checkpointing = job.async_checkpoint;
  co.summary_dir = (model_dir / "summaries").string();
  co.eval_summary_dir = (model_dir / "summaries" / "eval").string();
  co.progress.verbosity =
      job.quiet ? train::Verbosity::Quiet : (job.verbose ? train::Verbosity::Verbose : train::Verbosity::Normal);
  std::cerr << "strata-train: " << job.model << " on " << d.description << ", strategy parameter_server with "
            << num_workers << " worker(s) and " << num_ps << " parameter server(s), " << batch
            << " examples per step\n";
  train::Controller controller(co);
  const int64_t start_step = controller.global_step();
  if (start_step >= job.steps) {
    std::cerr << "strata-train: nothing to train: " << (model_dir / "checkpoints").string() << " is at step "
              << start_step << " and --steps is " << job.steps << "; evaluating the restored model\n";
  }
  const auto train_t0 = Clock::now();
  // A failure here (a NaN loss, a lost parameter server) unwinds through the
  // coordinator's destructor, which shuts the workers and parameter servers down.
  controller.train_and_evaluate(job.steps, job.eval_steps, job.eval_interval > 0 ? job.eval_interval : job.steps);
  const double train_seconds = std::chrono::duration<double>(Clock::now() - train_t0).count();
  const int64_t final_step = controller.global_step();
  const auto stats = coordinator.stats();
  const auto& eval = controller.last_eval_outputs();
  const auto& train_out = controller.last_train_outputs();
  const double trained_steps = double(final_step - start_step);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  // Only what this run measured: with no step trained there is no train loss or
  // throughput (null, never a zero that reads like a result).
  const bool trained = trained_steps > 0 && train_seconds > 0;
  using nlohmann::json;
  nlohmann::json report = {
      {"steps", final_step},
      {"trained_steps", int64_t(trained_steps)},
      {"final_train_loss", trained && train_out.count("loss") ? json(train_out.at("loss")) : json()},
      {"eval_loss", eval.count("loss") ? json(eval.at("loss")) : json()},
      {"eval_accuracy", eval.count("accuracy") ? json(eval.at("accuracy")) : json()},
      {"examples_per_sec", trained ? json(trained_steps * double(batch) / train_seconds) : json()},
      {"steps_per_sec", trained ? json(trained_steps / train_seconds) : json()},
      {"wall_seconds", wall},
      // Each worker is one replica training asynchronously.
      {"replicas", num_workers},
      {"workers", num_workers},
      {"parameter_servers", num_ps},
      {"strategy", strategy.name()},
      {"precision", job.precision},
      {"model", job.model},
      {"data", job.data},
      {"checkpoint", controller.last_checkpoint()},
      {"closures_completed", stats.closures_completed},
      {"closures_rescheduled", stats.closures_rescheduled},
      {"worker_failures", stats.worker_failures},
      {"reschedule_seconds", stats.reschedule_seconds},
  };
  // Every task stops only now: the variables are unreadable afterwards.
  coordinator.shutdown();
  std::cerr << "strata-train: eval accuracy " << report["eval_accuracy"] << ", loss " << report["eval_loss"]
            << " after " << report["steps"] << " steps (" << wall << " s)\n"
            << "strata-train: checkpoints in " << (model_dir / "checkpoints").string() << "\n"
            << "strata-train: summaries in " << (model_dir / "summaries").string()
            << " (view with: tensorboard --logdir " << (model_dir / "summaries").string() << ")\n";
  if (!job.report.empty()) {
    std::ofstream f(job.report);
    f << report.dump(2) << "\n";
    STRATA_CHECK(f.good(), "strata-train: cannot write the report to ", job.report);
  }
  return 0;
}

}  // namespace

int run_parameter_server_training(const PsTrainJob& job) {
  const auto start = Clock::now();
  const auto resolver = distribute::ClusterResolver::from_environment();
  const auto& spec = resolver.cluster_spec();
  STRATA_CHECK(spec.num_tasks("ps") > 0 && spec.num_tasks("chief") == 1,
               "strata-train: --strategy parameter_server needs a cluster with a chief, workers and parameter "
               "servers in TF_CONFIG (run it under strata-launch --workers N --ps M); this process's cluster is ",
               spec.to_json());
  // mixed_float16's dynamic loss scale would be one more variable every worker updates
  // from a stale value; it is not supported here.
  STRATA_CHECK(job.precision != "mixed_float16", "strata-train: --precision mixed_float16 is not supported with "
               "--strategy parameter_server (use float32 or mixed_bfloat16)");
  if (resolver.task_type() == "ps") {
    distribute::run_parameter_server(resolver);  // returns when the chief shuts the job down
    return 0;
  }
  return run_chief_or_worker(job, resolver, start);
}

}  // namespace strata::tools
