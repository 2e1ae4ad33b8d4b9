// strata_mwms_helper: a worker program for the MultiWorkerMirroredStrategy tests, started
// through strata-launch or directly with TF_CONFIG set. Subcommands:
//   collectives             all_reduce / all_gather / barrier in replica context, reduce /
//                           gather across replicas, and the broadcast of initial variable
//                           values, checked against the closed-form results
//   reduce_to               StrategyExtended::reduce_to / batch_reduce_to / reduce_to onto a
//                           variable, Sum and Mean over every replica of the job; then
//                           worker 0 alone asks a sync-on-read variable for its shape,
//                           dtype and device, which must start no collective
//   train --out PREFIX      trains tests/distribute/mwms_model.h's MLP and writes this
//                           worker's final weights to PREFIX.<worker>; --die-worker W
//                           --die-at-step K makes worker W kill itself (SIGKILL) after step
//                           K (--stall-worker W: sleeps instead, heartbeating; --stop-worker W:
//                           stops itself with SIGSTOP, so its heartbeat stops too;
//                           --stall-timeout S: the stall bound); the survivors print the
//                           error they got (and the peer a PeerFailure blames) and exit 1;
//                           --uneven-input trains over distribute_datasets_from_function
//                           pipelines of unequal length (mwms_train_uneven);
//                           --sync-batch-norm adds a synchronized BatchNormalization
//   shard --policy P        prints which example ids each local replica gets at each step
//                           of one epoch of range(--examples) (or of --files, int64
//                           records) batched by --global-batch (--shuffle-buffer N
//                           shuffles first, --repeat N reads N epochs); --stop-after K
//                           --checkpoint PREFIX saves the input position (a Checkpoint,
//                           the chief's at PREFIX) after step K and stops; --restore
//                           PREFIX resumes from one, numbering steps on from its step;
//                           --from-function reads through distribute_datasets_from_function
//                           instead (each worker's pipeline shard()ed by its InputContext;
//                           --per-replica: each replica's, InputReplicationMode::PerReplica);
//                           --gather-each-step gathers every step's ids over the job
//                           ("worker W job step S: ids"); --fail-worker W --fail-at I:
//                           worker W's input throws at the element with id I
// Exit status 0 means the checks passed.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include <strata/core/ops.h>
#include <strata/data/binary_records.h>
#include <strata/distribute/collective/peer_failure.h>
#include <strata/distribute/multi_worker_mirrored_strategy.h>
#include <strata/train/checkpoint.h>
#include <strata/train/trainer.h>
#include "tests/distribute/mwms_model.h"

using namespace strata;
using namespace strata::distribute;

namespace {

#define CHECK_OR_THROW(cond, ...)                                                                      \
  do {                                                                                                \
    if (!(cond)) fail("check failed at line ", __LINE__, ": " #cond " ", ##__VA_ARGS__);              \
  } while (0)

std::string values_str(const Tensor& t) {
  std::ostringstream os;
  for (double v : t.to_vector<double>()) os << v << ' ';
  return os.str();
}

int run_collectives(double timeout) {
  CommunicationOptions o;
  o.timeout_seconds = timeout;
  o.bytes_per_pack = 16;  // several buckets per all_reduce call
  MultiWorkerMirroredStrategy s(ClusterResolver::from_environment(), o);
  const int n = s.num_replicas_in_sync(), local = s.num_local_replicas(), w = s.worker_index();
  CHECK_OR_THROW(n == s.num_workers() * local);
  const double sum_ids = n * (n + 1) / 2.0;  // of (id + 1) over every replica
  s.run([&] {
    ReplicaContext* ctx = get_replica_context();
    const int id = ctx->replica_id_in_sync_group();
    CHECK_OR_THROW(id >= w * local && id < (w + 1) * local, "id ", id);
    CHECK_OR_THROW(ctx->num_replicas_in_sync() == n);
    // Several tensors of two dtypes, packed into several buckets.
    Tensor a = full({3}, id + 1.0), b = full({2, 2}, 2.0 * (id + 1)), c = full({5}, double(id + 1), kInt64);
    auto sums = ctx->all_reduce(ReduceOp::Sum, {a, b, c});
    CHECK_OR_THROW(values_str(sums[0]) == values_str(full({3}, sum_ids)), values_str(sums[0]));
    CHECK_OR_THROW(values_str(sums[1]) == values_str(full({2, 2}, 2 * sum_ids)), values_str(sums[1]));
    CHECK_OR_THROW(values_str(sums[2]) == values_str(full({5}, sum_ids, kInt64)), values_str(sums[2]));
    Tensor mean = ctx->all_reduce(ReduceOp::Mean, full({4}, id + 1.0));
    CHECK_OR_THROW(values_str(mean) == values_str(full({4}, sum_ids / n)), values_str(mean));
    Tensor mx = ctx->all_reduce(ReduceOp::Max, full({2}, id + 1.0));
    CHECK_OR_THROW(mx.to_vector<double>()[0] == n);
    // Uneven all_gather: replica id contributes id % 2 + 1 rows of value id.
    Tensor g = ctx->all_gather(full({id % 2 + 1, 2}, double(id)), 0);
    std::vector<double> want;
    for (int r = 0; r < n; ++r)
      for (int k = 0; k < (r % 2 + 1) * 2; ++k) want.push_back(r);
    CHECK_OR_THROW(g.to_vector<double>() == want, values_str(g));
    ctx->barrier();
  });
  // Cross-replica: reduce and gather of per-replica values.
  auto per_replica = s.experimental_distribute_values_from_function(
      [](const ValueContext& v) { return full({v.replica_id_in_sync_group + 1, 2}, double(v.replica_id_in_sync_group)); });
  Tensor total = s.reduce(ReduceOp::Sum, per_replica, 0);
  double sum_rows = 0, rows = 0;
  for (int r = 0; r < n; ++r) sum_rows += double(r) * (r + 1), rows += r + 1;
  CHECK_OR_THROW(values_str(total) == values_str(full({2}, sum_rows)), values_str(total));
  Tensor mean = s.reduce(ReduceOp::Mean, per_replica, 0);
  CHECK_OR_THROW(std::abs(mean.to_vector<double>()[0] - sum_rows / rows) < 1e-6, values_str(mean));
  Tensor gathered = s.gather(per_replica, 0);
  CHECK_OR_THROW(gathered.dim(0) == int64_t(rows), shape_str(gathered.shape()));
  auto scalars = s.experimental_distribute_values_from_function(
      [](const ValueContext& v) { return full({}, v.replica_id_in_sync_group + 1.0); });
  CHECK_OR_THROW(s.reduce(ReduceOp::Sum, scalars).item<double>() == sum_ids);
  CHECK_OR_THROW(s.reduce(ReduceOp::Mean, scalars).item<double>() == sum_ids / n);
  CHECK_OR_THROW(s.reduce(ReduceOp::Min, scalars).item<double>() == 1.0);
  // Initial values come from worker 0, whatever each worker passed.
  Variable v;
  {
    auto scope = s.scope();
    v = Variable(full({4}, w + 1.0), {.name = "broadcast"});
  }
  for (const Tensor& component : s.experimental_local_results(v)) {
    CHECK_OR_THROW(values_str(component) == values_str(full({4}, 1.0)), values_str(component));
  }
  // Sync-on-read variables aggregate over every replica of every worker when read in
  // cross-replica context (a collective), and an assigned total is split over all of them.
  Variable total_var, mean_var, first_var, count_var;
  {
    auto scope = s.scope();
    auto on_read = [](const char* name, autograd::VariableAggregation aggregation) {
      return autograd::VariableOptions{.name = name, .trainable = false,
                                       .synchronization = autograd::VariableSynchronization::OnRead,
                                       .aggregation = aggregation};
    };
    total_var = Variable(full({2}, 0.0), on_read("total", autograd::VariableAggregation::Sum));
    mean_var = Variable(full({2}, 0.0), on_read("mean", autograd::VariableAggregation::Mean));
    first_var = Variable(full({2}, 0.0), on_read("first", autograd::VariableAggregation::OnlyFirstReplica));
    count_var = Variable(full({}, 0.0, kInt64), on_read("count", autograd::VariableAggregation::Sum));
  }
  s.run([&] {
    const double id = get_replica_context()->replica_id_in_sync_group();
    total_var.assign_add(full({2}, id + 1.0));
    mean_var.assign(full({2}, id + 1.0));
    first_var.assign(full({2}, id + 10.0));
    count_var.assign_add(full({}, 1.0, kInt64));
  });
  CHECK_OR_THROW(values_str(total_var.value()) == values_str(full({2}, sum_ids)), values_str(total_var.value()));
  CHECK_OR_THROW(std::abs(mean_var.value().to_vector<double>()[0] - sum_ids / n) < 1e-6, values_str(mean_var.value()));
  CHECK_OR_THROW(values_str(first_var.value()) == values_str(full({2}, 10.0)), values_str(first_var.value()));
  CHECK_OR_THROW(count_var.value().item<int64_t>() == n, values_str(count_var.value()));
  // Restoring a total (every worker assigns the same value) keeps the job-wide sum.
  count_var.assign(full({}, double(2 * n + 1), kInt64));
  total_var.assign(full({2}, 6.0));
  CHECK_OR_THROW(count_var.value().item<int64_t>() == 2 * n + 1, values_str(count_var.value()));
  CHECK_OR_THROW(std::abs(total_var.value().to_vector<double>()[1] - 6.0) < 1e-5, values_str(total_var.value()));
  std::cout << "worker " << w << ": mwms collectives ok (" << n << " replicas)" << std::endl;
  return 0;
}

int run_reduce_to(double timeout) {
  MultiWorkerMirroredStrategy s(ClusterResolver::from_environment(), {.timeout_seconds = timeout});
  const int n = s.num_replicas_in_sync(), w = s.worker_index();
  const double sum_ids = n * (n + 1) / 2.0;  // of (id + 1) over every replica of the job
  auto floats = s.experimental_distribute_values_from_function(
      [](const ValueContext& v) { return full({2}, v.replica_id_in_sync_group + 1.0); });
  auto ints = s.experimental_distribute_values_from_function(
      [](const ValueContext& v) { return full({3}, v.replica_id_in_sync_group + 1.0, kInt64); });
  const Device dest = s.reduce_device();
  StrategyExtended& ext = s.extended();
  Tensor sum = ext.reduce_to(ReduceOp::Sum, floats, dest);
  CHECK_OR_THROW(values_str(sum) == values_str(full({2}, sum_ids)), values_str(sum));
  Tensor mean = ext.reduce_to(ReduceOp::Mean, floats, dest);
  CHECK_OR_THROW(values_str(mean) == values_str(full({2}, sum_ids / n)), values_str(mean));
  Tensor mx = ext.reduce_to(ReduceOp::Max, floats, dest);
  CHECK_OR_THROW(values_str(mx) == values_str(full({2}, double(n))), values_str(mx));
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
    const auto batch = ext.batch_reduce_to(op, {floats, ints}, dest);
    CHECK_OR_THROW(batch.size() == 2);
    const double want = op == ReduceOp::Sum ? sum_ids : sum_ids / n;
    CHECK_OR_THROW(values_str(batch[0]) == values_str(full({2}, want)), reduce_op_name(op), values_str(batch[0]));
    // The dtype is kept: a Mean of integers truncates.
    CHECK_OR_THROW(batch[1].dtype() == kInt64);
    CHECK_OR_THROW(values_str(batch[1]) == values_str(full({3}, std::floor(want), kInt64)), reduce_op_name(op),
                   values_str(batch[1]));
  }
  Variable var, total_var;
  {
    auto scope = s.scope();
    var = Variable(full({2}, 0.0), {.name = "destination"});
    total_var = Variable(full({2}, 0.0), {.name = "total", .trainable = false,
                                          .synchronization = autograd::VariableSynchronization::OnRead,
                                          .aggregation = autograd::VariableAggregation::Sum});
  }
  const Mirrored<Tensor> onto = ext.reduce_to(ReduceOp::Mean, floats, var);
  const std::vector<Tensor> components = s.experimental_local_results(var);
  CHECK_OR_THROW(onto.size() == components.size());
  for (size_t i = 0; i < onto.size(); ++i) {
    CHECK_OR_THROW(onto[i].device() == components[i].device());
    CHECK_OR_THROW(values_str(onto[i]) == values_str(full({2}, sum_ids / n)), values_str(onto[i]));
  }
  s.run([&] { total_var.assign_add(full({2}, 1.0)); });
  // Worker 0 alone: were these reads of the aggregate (a collective), worker 0 would wait
  // for the others, which go on to the read below: the collectives would pair up wrongly
  // or time out.
  if (w == 0) {
    for (int k = 0; k < 3; ++k) {
      CHECK_OR_THROW(total_var.shape() == Shape{2});
      CHECK_OR_THROW(total_var.dtype() == kFloat32);
      CHECK_OR_THROW(total_var.device() == s.devices()[0]);
    }
  }
  Tensor total = total_var.value();  // every worker: the aggregate
  CHECK_OR_THROW(values_str(total) == values_str(full({2}, double(n))), values_str(total));
  CHECK_OR_THROW(s.reduce(ReduceOp::Sum, floats).to_vector<double>()[0] == sum_ids);
  std::cout << "worker " << w << ": mwms reduce_to ok (" << n << " replicas)" << std::endl;
  return 0;
}

int run_train(const std::string& out, int epochs, bool seed_per_worker, int die_worker, int die_at_step,
              int stall_worker, int stop_worker, double timeout, double stall_timeout, bool no_overlap,
              int64_t bytes_per_pack, bool sync_batch_norm, bool uneven_input) {
  CommunicationOptions o;
  o.timeout_seconds = timeout;
  o.stall_timeout_seconds = stall_timeout;
  o.overlap_gradient_reduction = !no_overlap;
  o.bytes_per_pack = bytes_per_pack;
  MultiWorkerMirroredStrategy s(ClusterResolver::from_environment(), o);
  const int w = s.worker_index();
  const auto t0 = std::chrono::steady_clock::now();
  int last_step = 0;
  const auto on_step = [&](int step) {
    last_step = step;
    if (w == die_worker && step == die_at_step) {
      std::cout << "worker " << w << ": killing itself after step " << step << std::endl;
      ::raise(SIGKILL);
    }
    if (w == stall_worker && step == die_at_step) {
      // Alive (its store connection open) but never reaching the next collective.
      std::cout << "worker " << w << ": stalling after step " << step << std::endl;
      std::this_thread::sleep_for(std::chrono::seconds(30));
      std::_Exit(0);
    }
    if (w == stop_worker && step == die_at_step) {
      // Every thread stops, the heartbeat thread too; its connections stay open.
      std::cout << "worker " << w << ": stopping itself (SIGSTOP) after step " << step << std::endl;
      ::raise(SIGSTOP);
    }
  };
  try {
    // --uneven-input: each worker reads its own pipeline, worker 1's a batch shorter.
    const auto weights =
        uneven_input ? testing::mwms_train_uneven(s, InputReplicationMode::PerWorker, epochs)
                     : testing::mwms_train(s, epochs, seed_per_worker ? 100 + uint64_t(w) * 7 : 1, on_step,
                                           sync_batch_norm);
    std::ofstream f(out + "." + std::to_string(w));
    f.precision(9);
    for (const Tensor& t : weights)
      for (double x : t.to_vector<double>()) f << x << '\n';
    std::cout << "worker " << w << ": trained " << last_step << " steps" << std::endl;
    return f.good() ? 0 : 1;
  } catch (const PeerFailure& e) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "worker " << w << ": failed after step " << last_step << " (" << took << " s): " << e.what()
              << std::endl;
    std::cout << "worker " << w << ": blames " << e.member() << " " << e.rank() << " ("
              << peer_failure_cause_name(e.cause()) << ")" << std::endl;
    return 1;
  } catch (const std::exception& e) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "worker " << w << ": failed after step " << last_step << " (" << took << " s): " << e.what()
              << std::endl;
    return 1;
  }
}

struct ShardOptions {
  std::string policy = "auto", files, checkpoint, restore;
  int64_t examples = 40, global_batch = 8, shuffle_buffer = 0, repeat = 1, stop_after = -1;
  bool from_function = false, per_replica = false, gather_each_step = false;
  int fail_worker = -1;  // this worker's input throws at its element fail_at
  int64_t fail_at = 0;
};

int run_shard(const ShardOptions& o) {
  MultiWorkerMirroredStrategy s(ClusterResolver::from_environment(), {.timeout_seconds = 60});
  data::Dataset ds = data::Dataset::range(o.examples);
  if (!o.files.empty()) {
    std::vector<std::string> list;
    std::stringstream ss(o.files);
    for (std::string item; std::getline(ss, item, ',');) list.push_back(item);
    data::BinaryRecordSpec spec;
    spec.fields = {{data::RecordType::Int64, {}, kInt64}};
    ds = data::binary_records(list, spec);
  }
  if (o.fail_worker == s.worker_index()) {
    ds = ds.map([at = o.fail_at](const data::Element& e) {
      if (e[0].item<int64_t>() == at) throw Error("the input broke at element " + std::to_string(at));
      return e;
    });
  }
  auto prepare = [&](data::Dataset d, int64_t batch) {
    if (o.shuffle_buffer > 0) d = d.shuffle(o.shuffle_buffer, /*seed=*/3);
    return d.batch(batch).repeat(o.repeat);
  };
  InputOptions options;
  options.auto_shard_policy = data::auto_shard_policy_from_name(o.policy);
  if (o.per_replica) options.experimental_replication_mode = InputReplicationMode::PerReplica;
  auto dist = o.from_function ? s.distribute_datasets_from_function(
                                    [&](const data::InputContext& ctx) {
                                      return prepare(ds.shard(ctx.num_input_pipelines(), ctx.input_pipeline_id()),
                                                     ctx.get_per_replica_batch_size(o.global_batch));
                                    },
                                    options)
                              : s.experimental_distribute_dataset(prepare(ds, o.global_batch), options);
  auto it = dist.make_iterator();
  train::Checkpoint checkpoint{{"input", train::distributed_input_state([&]() -> DistributedIterator& { return it; })}};
  int64_t step = 0;
  if (!o.restore.empty()) step = checkpoint.restore(o.restore).step.value_or(0);
  const auto next = [&] {
    try {
      return it.next();
    } catch (const std::exception& e) {
      if (o.fail_worker != s.worker_index()) throw;
      // The worker whose input broke reports it and stays a while, so that strata-launch
      // does not stop the others before they have reported what they saw.
      std::cout << "error: " << e.what() << std::endl;
      std::this_thread::sleep_for(std::chrono::seconds(5));
      std::_Exit(1);
    }
  };
  while (auto batch = next()) {
    for (size_t r = 0; r < batch->size(); ++r) {
      std::cout << "worker " << s.worker_index() << " step " << step << " replica " << r << ":";
      for (int64_t id : (*batch)[r][0].to_vector<int64_t>()) std::cout << ' ' << id;
      std::cout << '\n';
    }
    if (o.gather_each_step) {
      // A collective over every replica of the job, as a training step's are.
      const Tensor job = s.gather(s.run([](const data::Batch& b) { return b[0]; }, *batch), 0);
      std::cout << "worker " << s.worker_index() << " job step " << step << ":";
      for (int64_t id : job.to_vector<int64_t>()) std::cout << ' ' << id;
      std::cout << '\n';
    }
    ++step;
    if (step == o.stop_after) {
      // Every worker saves (the save gathers every worker's position), the chief at PREFIX.
      const int w = s.worker_index();
      checkpoint.save(w == 0 ? o.checkpoint : o.checkpoint + ".worker" + std::to_string(w), step);
      break;
    }
  }
  std::cout << "worker " << s.worker_index() << " steps " << step << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata_mwms_helper: a worker of the MultiWorkerMirroredStrategy tests"};
  app.require_subcommand(1);
  double timeout = 60, stall_timeout = 60;
  std::string out;
  int epochs = 2, die_worker = -1, die_at_step = -1, stall_worker = -1, stop_worker = -1;
  bool seed_per_worker = false, no_overlap = false, sync_batch_norm = false, uneven_input = false;
  int64_t bytes_per_pack = 0;
  ShardOptions so;
  auto* coll = app.add_subcommand("collectives", "check every collective");
  coll->add_option("--timeout", timeout);
  auto* reduce_to = app.add_subcommand("reduce_to", "check StrategyExtended::reduce_to across workers");
  reduce_to->add_option("--timeout", timeout);
  auto* train = app.add_subcommand("train", "train the test MLP");
  train->add_option("--out", out)->required();
  train->add_option("--epochs", epochs);
  train->add_flag("--seed-per-worker", seed_per_worker);
  train->add_option("--die-worker", die_worker);
  train->add_option("--die-at-step", die_at_step);
  train->add_option("--stall-worker", stall_worker);
  train->add_option("--stop-worker", stop_worker);
  train->add_option("--timeout", timeout);
  train->add_option("--stall-timeout", stall_timeout);
  // Gradients reduced after backward, in apply_gradients (the equivalence test's baseline).
  train->add_flag("--no-overlap", no_overlap);
  train->add_flag("--sync-batch-norm", sync_batch_norm);
  train->add_flag("--uneven-input", uneven_input);
  train->add_option("--bytes-per-pack", bytes_per_pack);
  auto* shard = app.add_subcommand("shard", "print each replica's example ids");
  shard->add_option("--policy", so.policy);
  shard->add_option("--examples", so.examples);
  shard->add_option("--global-batch", so.global_batch);
  shard->add_option("--files", so.files);
  shard->add_option("--shuffle-buffer", so.shuffle_buffer);
  shard->add_option("--repeat", so.repeat);
  shard->add_option("--stop-after", so.stop_after);
  shard->add_option("--checkpoint", so.checkpoint);
  shard->add_option("--restore", so.restore);
  shard->add_flag("--from-function", so.from_function);
  shard->add_flag("--per-replica", so.per_replica);
  shard->add_flag("--gather-each-step", so.gather_each_step);
  shard->add_option("--fail-worker", so.fail_worker);
  shard->add_option("--fail-at", so.fail_at);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*coll) return run_collectives(timeout);
    if (*reduce_to) return run_reduce_to(timeout);
    if (*train) return run_train(out, epochs, seed_per_worker, die_worker, die_at_step, stall_worker, stop_worker,
                                   timeout, stall_timeout, no_overlap, bytes_per_pack, sync_batch_norm,
                                   uneven_input);
    return run_shard(so);
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << std::endl;
    return 1;
  }
}
