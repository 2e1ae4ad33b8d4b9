// strata_ps_helper: the program of the parameter-server tests' multi-process jobs. Every
// task (chief, worker, ps) runs it with the same arguments and finds its role in
// TF_CONFIG, as a ParameterServerStrategy program does. Subcommands:
//   train        trains an MLP on the synthetic dataset through a ClusterCoordinator; the
//                chief writes a JSON report (steps/s, eval accuracy, coordinator stats)
//   mirrored     the same model, data and steps under MirroredStrategy(2) in one process
//                (no TF_CONFIG): the synchronous baseline
//   faults       closures that count into variables; worker --die-worker kills itself
//                (SIGKILL) in its --die-at-th closure; the chief checks that every
//                closure ran once and (--expect-rejoin) that the worker came back
//   ps-fault     closures run until the job fails; the chief exits with status 3 and
//                prints the error (the test kills a parameter server once the chief has
//                printed "chief: every worker ran a closure")
// Exit status 0 means the checks passed.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include <strata/autograd/autograd.h>
#include <strata/core/ops.h>
#include <strata/data/synthetic.h>
#include <strata/distribute/cluster_resolver.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/ps/cluster_coordinator.h>
#include <strata/distribute/ps/parameter_server.h>
#include <strata/distribute/ps/parameter_server_strategy.h>
#include <strata/distribute/strategy.h>
#include <strata/train/adam.h>
#include <strata/train/losses.h>
#include <strata/train/nn/activations.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>

using namespace strata;
using namespace strata::distribute;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

struct Config {
  int64_t steps = 300;
  int64_t batch = 64;
  int64_t hidden = 64;
  int64_t hidden_layers = 1;
  double lr = 0.05;
  std::string optimizer = "sgd";
  int64_t shards = 0;  // FixedShardsPartitioner(shards) when > 0
  int64_t train_examples = 8000;
  int64_t eval_examples = 2000;
  uint64_t seed = 1;
  std::string report;
  double heartbeat_timeout = 1.0;
  double chief_timeout = 30.0;
  double rpc_timeout = 10.0;
  int die_worker = -1;
  int die_at = 0;
  int64_t closures = 20;
  int closure_ms = 50;
  bool expect_rejoin = false;
};

autograd::VariableOptions var_options(const std::string& name, bool trainable = false) {
  autograd::VariableOptions o;
  o.name = name;
  o.trainable = trainable;
  return o;
}

void write_report(const Config& c, const json& j) {
  std::cout << j.dump() << std::endl;
  if (c.report.empty()) return;
  std::ofstream out(c.report + ".tmp");
  out << j.dump(2) << "\n";
  out.close();
  std::filesystem::rename(c.report + ".tmp", c.report);
}

data::Dataset all_examples(const Config& c) {
  data::SyntheticOptions o;
  o.num_examples = c.train_examples + c.eval_examples;
  o.seed = c.seed;
  return data::synthetic_classification(o);
}

nn::DenseOptions seeded(uint64_t seed) {
  nn::DenseOptions o;
  o.kernel_initializer = nn::glorot_uniform(seed);
  return o;
}

// 784 -> hidden (x hidden_layers, ReLU) -> 10; --hidden 256 --hidden-layers 2 is strata-train's mlp.
nn::Sequential make_mlp(const Config& c) {
  nn::Sequential model;
  int64_t in = 784;
  for (int64_t i = 0; i < c.hidden_layers; ++i) {
    model.add(nn::Dense(in, c.hidden, seeded(c.seed + uint64_t(i))));
    model.add(nn::ReLU());
    in = c.hidden;
  }
  model.add(nn::Dense(in, 10, seeded(c.seed + uint64_t(c.hidden_layers))));
  return model;
}

optim::Optimizer make_optimizer(const Config& c) {
  if (c.optimizer == "adam") return optim::Adam(c.lr);
  return optim::SGD(c.lr);
}

double evaluate(const nn::Sequential& model, const Config& c) {
  autograd::StopRecording no_tape;
  auto it = all_examples(c).skip(c.train_examples).batch(c.eval_examples).make_iterator();
  data::Batch b = *it.next();
  Tensor predicted = argmax(model(b[0]), 1);
  return mean(cast(equal(predicted, b[1]), kFloat32)).item<double>();
}

// Forward, loss over the step's batch, gradients, optimizer update.
auto make_step(nn::Sequential& model, optim::Optimizer& opt) {
  return [&model, &opt](const data::Batch& b, int64_t global_batch) {
    autograd::GradientTape tape;
    Tensor logits = model(b[0]);
    Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
    Tensor loss = compute_average_loss(per_example, global_batch);
    auto vars = model.trainable_variables();
    opt.apply_gradients(tape.gradient(loss, vars), vars);
    return loss;
  };
}

ClusterCoordinatorOptions coordinator_options(const Config& c) {
  ClusterCoordinatorOptions o;
  o.heartbeat_interval_seconds = std::min(0.25, c.heartbeat_timeout / 4);
  o.heartbeat_timeout_seconds = c.heartbeat_timeout;
  o.worker_wait_timeout_seconds = 120;
  o.closure_timeout_seconds = 120;
  o.server.chief_timeout_seconds = c.chief_timeout;
  o.server.startup_timeout_seconds = 120;
  return o;
}

// Runs body(resolver, strategy) on the chief and the workers; parameter servers serve.
template <typename Body>
int as_task(const Config& c, Body body) {
  const ClusterResolver resolver = ClusterResolver::from_environment();
  if (resolver.task_type() == "ps") {
    run_parameter_server(resolver, coordinator_options(c).server);
    return 0;
  }
  VariablePartitioner partitioner;
  if (c.shards > 0) partitioner = FixedShardsPartitioner(c.shards);
  ParameterServerStrategyOptions so;
  so.rpc_timeout_seconds = c.rpc_timeout;
  so.startup_timeout_seconds = 120;
  ParameterServerStrategy strategy(resolver, partitioner, so);
  return body(resolver, strategy);
}

json stats_json(const ClusterCoordinator::Stats& s) {
  return {{"closures_completed", s.closures_completed}, {"closures_failed", s.closures_failed},
          {"closures_rescheduled", s.closures_rescheduled}, {"worker_failures", s.worker_failures},
          {"worker_rejoins", s.worker_rejoins}, {"completed_per_worker", s.completed_per_worker},
          {"reschedule_seconds", s.reschedule_seconds}};
}

int run_train(const Config& c) {
  return as_task(c, [&](const ClusterResolver& resolver, ParameterServerStrategy& strategy) {
    nn::Sequential model;
    optim::Optimizer opt;
    {
      auto scope = strategy.scope();
      model = make_mlp(c);
      opt = make_optimizer(c);
    }
    ClusterCoordinator coordinator(strategy, coordinator_options(c));
    auto per_worker = coordinator.create_per_worker_dataset([&](const data::InputContext& ctx) {
      return all_examples(c)
          .take(c.train_examples)
          .shard(ctx.num_input_pipelines(), ctx.input_pipeline_id())
          .shuffle(4096, c.seed + uint64_t(ctx.input_pipeline_id()))
          .repeat()
          .batch(c.batch, /*drop_remainder=*/true);
    });
    auto step = make_step(model, opt);
    coordinator.register_function("train_step", [&](ClosureArgs& args) {
      const data::Batch batch = args.next(0);
      auto losses = strategy.run(step, batch, c.batch);
      return std::vector<Tensor>{losses[0]};
    });
    if (resolver.task_type() == "worker") {
      coordinator.serve();
      return 0;
    }
    const PerWorkerIterator it = per_worker.make_iterator();
    // Warm-up (connections, first slot creation) outside the timing.
    const int64_t warmup = std::min<int64_t>(10, c.steps);
    for (int64_t i = 0; i < warmup; ++i) coordinator.schedule("train_step", {it});
    coordinator.join();
    const auto start = Clock::now();
    std::vector<RemoteValue> losses;
    for (int64_t i = warmup; i < c.steps; ++i) losses.push_back(coordinator.schedule("train_step", {it}));
    coordinator.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    double last_loss = 0;
    const size_t tail = std::min<size_t>(20, losses.size());
    for (size_t i = losses.size() - tail; i < losses.size(); ++i) last_loss += losses[i].fetch()[0].item<double>();
    const double accuracy = evaluate(model, c);
    write_report(c, {{"mode", "parameter_server"},
                     {"steps", c.steps},
                     {"timed_steps", c.steps - warmup},
                     {"seconds", seconds},
                     {"steps_per_sec", double(c.steps - warmup) / seconds},
                     {"examples_per_sec", double((c.steps - warmup) * c.batch) / seconds},
                     {"final_train_loss", tail ? last_loss / double(tail) : 0.0},
                     {"eval_accuracy", accuracy},
                     {"iterations", opt.iterations_value()},
                     {"stats", stats_json(coordinator.stats())}});
    coordinator.shutdown();
    return 0;
  });
}

int run_mirrored(const Config& c) {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = make_mlp(c);
    opt = make_optimizer(c);
  }
  auto step = make_step(model, opt);
  auto ds = strategy.experimental_distribute_dataset(
      all_examples(c).take(c.train_examples).shuffle(4096, c.seed).repeat().batch(c.batch, true));
  auto iterator = ds.make_iterator();
  const int64_t warmup = std::min<int64_t>(10, c.steps);
  Clock::time_point start = Clock::now();
  double last_loss = 0;
  for (int64_t i = 0; i < c.steps; ++i) {
    if (i == warmup) start = Clock::now();
    auto batch = iterator.next();
    Tensor loss = strategy.reduce(ReduceOp::Sum, strategy.run(step, *batch, c.batch));
    if (i >= c.steps - 20) last_loss += loss.item<double>();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  write_report(c, {{"mode", "mirrored"},
                   {"replicas", 2},
                   {"steps", c.steps},
                   {"timed_steps", c.steps - warmup},
                   {"seconds", seconds},
                   {"steps_per_sec", double(c.steps - warmup) / seconds},
                   {"examples_per_sec", double((c.steps - warmup) * c.batch) / seconds},
                   {"final_train_loss", last_loss / double(std::min<int64_t>(20, c.steps))},
                   {"eval_accuracy", evaluate(model, c)}});
  return 0;
}

int run_faults(const Config& c) {
  return as_task(c, [&](const ClusterResolver& resolver, ParameterServerStrategy& strategy) {
    Variable counter, vec;
    {
      auto scope = strategy.scope();
      counter = Variable(Tensor::scalar(0, kFloat32), var_options("counter"));
      vec = Variable(zeros({6, 2}), var_options("vec"));
    }
    ClusterCoordinator coordinator(strategy, coordinator_options(c));
    int executed = 0;  // closures this process has started
    coordinator.register_function("tick", [&](ClosureArgs& args) {
      ++executed;
      if (args.worker_index() == c.die_worker && executed == c.die_at) {
        std::cerr << "worker " << args.worker_index() << ": killing myself in closure " << executed << std::endl;
        ::raise(SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(c.closure_ms));
      counter.assign_add(Tensor::scalar(1));
      vec.assign_add(ones({6, 2}));
      return std::vector<Tensor>{Tensor::scalar(args.worker_index(), kInt64)};
    });
    if (resolver.task_type() == "worker") {
      coordinator.serve();
      return 0;
    }
    int64_t scheduled = 0;
    std::vector<RemoteValue> values;
    for (int64_t i = 0; i < c.closures; ++i, ++scheduled) values.push_back(coordinator.schedule("tick"));
    coordinator.join();
    for (auto& v : values) v.fetch();
    bool rejoined = false;
    if (c.expect_rejoin) {
      // The test restarts the killed worker; keep the workers busy until it takes a closure.
      const auto deadline = Clock::now() + std::chrono::seconds(90);
      while (!rejoined && Clock::now() < deadline) {
        std::vector<RemoteValue> more;
        for (int k = 0; k < 4; ++k, ++scheduled) more.push_back(coordinator.schedule("tick"));
        coordinator.join();
        for (auto& v : more) rejoined = rejoined || v.fetch()[0].item<int64_t>() == c.die_worker;
      }
    }
    const auto stats = coordinator.stats();
    const double count = counter.value().item<double>();
    const auto vec_values = vec.value().to_vector<float>();
    bool vec_ok = true;
    for (float v : vec_values) vec_ok = vec_ok && v == float(scheduled);
    write_report(c, {{"mode", "faults"},
                     {"scheduled", scheduled},
                     {"counter", count},
                     {"vec_ok", vec_ok},
                     {"rejoined", rejoined},
                     {"stats", stats_json(stats)}});
    coordinator.shutdown();
    if (count != double(scheduled) || !vec_ok) {
      std::cerr << "counter " << count << " after " << scheduled << " closures" << std::endl;
      return 1;
    }
    if (c.die_worker >= 0 && stats.closures_rescheduled < 1) return 1;
    if (c.expect_rejoin && !rejoined) return 1;
    return 0;
  });
}

int run_ps_fault(const Config& c) {
  return as_task(c, [&](const ClusterResolver& resolver, ParameterServerStrategy& strategy) {
    std::vector<Variable> vars;
    {
      auto scope = strategy.scope();
      for (int i = 0; i < 4; ++i) vars.emplace_back(zeros({4}), var_options("v"));
    }
    ClusterCoordinator coordinator(strategy, coordinator_options(c));
    coordinator.register_function("tick", [&](ClosureArgs&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(c.closure_ms));
      for (auto& v : vars) v.assign_add(ones({4}));
      return std::vector<Tensor>{};
    });
    if (resolver.task_type() == "worker") {
      coordinator.serve();
      return 0;
    }
    std::cerr << "chief: scheduling" << std::endl;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    bool all_ran = false;
    try {
      while (Clock::now() < deadline) {
        for (int k = 0; k < 8; ++k) coordinator.schedule("tick");
        coordinator.join();
        // The test kills a parameter server only after this line: by then every task has
        // talked to every server (a closure reads and updates variables on both), so the
        // failure is one of a running job, not of one still starting (a worker's first
        // call to a server waits the startup timeout, 120 s, for it to come up).
        if (!all_ran) {
          const auto per_worker = coordinator.stats().completed_per_worker;
          all_ran = std::all_of(per_worker.begin(), per_worker.end(), [](int64_t n) { return n > 0; });
          if (all_ran) std::cerr << "chief: every worker ran a closure" << std::endl;
        }
      }
    } catch (const std::exception& e) {
      std::cerr << "chief: job failed: " << e.what() << std::endl;
      return 3;
    }
    std::cerr << "chief: no failure within 60 s" << std::endl;
    return 4;
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata_ps_helper: multi-process programs of the parameter-server tests"};
  app.require_subcommand(1);
  Config c;
  auto add_common = [&c](CLI::App* sub) {
    sub->add_option("--steps", c.steps);
    sub->add_option("--batch", c.batch);
    sub->add_option("--hidden", c.hidden);
    sub->add_option("--hidden-layers", c.hidden_layers);
    sub->add_option("--lr", c.lr);
    sub->add_option("--optimizer", c.optimizer)->check(CLI::IsMember({"sgd", "adam"}));
    sub->add_option("--shards", c.shards);
    sub->add_option("--train-examples", c.train_examples);
    sub->add_option("--eval-examples", c.eval_examples);
    sub->add_option("--seed", c.seed);
    sub->add_option("--report", c.report);
    sub->add_option("--heartbeat-timeout", c.heartbeat_timeout);
    sub->add_option("--chief-timeout", c.chief_timeout);
    sub->add_option("--rpc-timeout", c.rpc_timeout);
    sub->add_option("--die-worker", c.die_worker);
    sub->add_option("--die-at", c.die_at);
    sub->add_option("--closures", c.closures);
    sub->add_option("--closure-ms", c.closure_ms);
    sub->add_flag("--expect-rejoin", c.expect_rejoin);
  };
  auto* train = app.add_subcommand("train", "train the MLP under ParameterServerStrategy");
  auto* mirrored = app.add_subcommand("mirrored", "train the MLP under MirroredStrategy(2)");
  auto* faults = app.add_subcommand("faults", "worker failure and rejoin");
  auto* ps_fault = app.add_subcommand("ps-fault", "run until a parameter server fails");
  for (auto* sub : {train, mirrored, faults, ps_fault}) add_common(sub);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) return run_train(c);
    if (*mirrored) return run_mirrored(c);
    if (*faults) return run_faults(c);
    if (*ps_fault) return run_ps_fault(c);
  } catch (const std::exception& e) {
    std::cerr << "strata_ps_helper: " << e.what() << std::endl;
    return 1;
  }
  return 2;
}
