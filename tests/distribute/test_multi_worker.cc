// MultiWorkerMirroredStrategy: collectives across 2 and 4 worker processes (1 or 2 local
// replicas each), training equivalent to Mirrored(2) in one process, auto-sharding that
// covers the data exactly once per epoch, a worker killed mid-training, and strata-train
// --strategy multi_worker under strata-launch (chief-only files, resuming a relaunch).
// Workers run on 127.0.0.1; every wait is bounded (strata-launch --timeout, and the child
// processes are killed at the test's deadline).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include <strata/core/ops.h>
#include <strata/distribute/collective/gloo_communicator.h>
#include <strata/distribute/collective/tcp_store.h>
#include <strata/distribute/distributed_file_utils.h>
#include <strata/distribute/multi_worker_mirrored_strategy.h>
#include "mwms_model.h"
#include "tests/temp_dir.h"

using namespace strata;
using namespace strata::distribute;
namespace fs = std::filesystem;

namespace {

bool skip_without_gloo() {
  if (gloo_available()) return false;
  WARN("skipped: strata was built without Gloo");
  return true;
}

strata::testing::ProcessResult launch(int workers, int replicas, const std::vector<std::string>& program, double timeout) {
  std::vector<std::string> argv{STRATA_LAUNCH_BIN, "--workers", std::to_string(workers), "--timeout",
                                std::to_string(int(timeout))};
  if (replicas > 0) argv.insert(argv.end(), {"--replicas-per-worker", std::to_string(replicas)});
  argv.push_back("--");
  argv.insert(argv.end(), program.begin(), program.end());
  return strata::testing::run_process(argv, {}, timeout + 30.0);
}

using strata::testing::lines_with;

using strata::testing::TempDir;

std::vector<double> read_numbers(const fs::path& file) {
  std::ifstream in(file);
  std::vector<double> out;
  for (double x; in >> x;) out.push_back(x);
  return out;
}

// Parses the helper's "worker W step S replica R: id id ..." lines.
struct Shards {
  std::map<int, int> steps;                         // worker -> steps
  std::map<int, std::vector<int64_t>> ids;          // worker -> ids in order
  std::map<int, std::vector<int64_t>> step_ids;     // step -> ids of every worker, worker order
  std::map<std::pair<int, int>, std::vector<int64_t>> replica_ids;  // (worker, replica) -> ids
};

Shards parse_shards(const std::string& output, int workers) {
  Shards s;
  for (int w = 0; w < workers; ++w) {
    const std::string prefix = "[worker " + std::to_string(w) + "] worker " + std::to_string(w) + " ";
    for (const std::string& line : lines_with(output, prefix)) {
      std::istringstream in(line.substr(line.find(prefix) + prefix.size()));
      std::string word;
      in >> word;
      if (word == "steps") {
        in >> s.steps[w];
        continue;
      }
      int step = 0, replica = 0;
      std::string r, colon;
      in >> step >> r >> replica >> colon;
      for (int64_t id; in >> id;) {
        s.ids[w].push_back(id);
        s.step_ids[step].push_back(id);
        s.replica_ids[{w, replica}].push_back(id);
      }
    }
  }
  return s;
}

// `files` files of 8 int64 records (file f holds ids 8f..8f+7) in `dir`, comma-separated.
std::string write_record_files(const fs::path& dir, int files = 4) {
  std::string list;
  for (int f = 0; f < files; ++f) {
    const fs::path p = dir / ("part" + std::to_string(f) + ".bin");
    std::ofstream out(p, std::ios::binary);
    for (int64_t k = 0; k < 8; ++k) {
      const int64_t id = f * 8 + k;
      out.write(reinterpret_cast<const char*>(&id), sizeof id);
    }
    list += (list.empty() ? "" : ",") + p.string();
  }
  return list;
}

// Whether the workers' ids together are 0..n-1, each once.
bool covers_once(const Shards& s, int64_t n) {
  std::multiset<int64_t> all, want;
  for (const auto& [w, ids] : s.ids) all.insert(ids.begin(), ids.end());
  for (int64_t i = 0; i < n; ++i) want.insert(i);
  return all == want;
}

}  // namespace

TEST_CASE("MultiWorkerMirrored: without a cluster it is one worker of local replicas", "[mwms]") {
  MultiWorkerMirroredStrategy s(ClusterResolver::local(), {}, MirroredStrategy::cpu_devices(2));
  CHECK(s.name() == "multi_worker");
  CHECK(s.num_workers() == 1);
  CHECK(s.worker_index() == 0);
  CHECK(s.is_chief());
  CHECK(s.num_replicas_in_sync() == 2);
  CHECK(s.worker_communicator() == nullptr);
  auto sums = s.run([] { return get_replica_context()->all_reduce(ReduceOp::Sum, full({2}, 3.0)); });
  CHECK(s.reduce(ReduceOp::Mean, sums).to_vector<double>() == std::vector<double>{6.0, 6.0});
  // The chief writes to the real directories.
  CHECK(write_dirpath("/x/ckpt", s) == fs::path("/x/ckpt"));
}

TEST_CASE("MultiWorkerMirrored: a parameter-server task or a missing GPU is refused", "[mwms]") {
  auto ps = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "ps", "index": 0}})");
  CHECK_THROWS_WITH(MultiWorkerMirroredStrategy(ps), Catch::Contains("ps"));
  // GPU replicas are allowed (docs/GPU.md) where the GPU exists; here none is visible.
  if (MirroredStrategy::visible_gpus() == 0) {
    CHECK_THROWS_WITH(MultiWorkerMirroredStrategy(ClusterResolver::local(), {}, {Device::parse("cuda:0")}),
                      Catch::Contains("cuda:0 is not available"));
    CommunicationOptions nccl;
    nccl.implementation = CommunicationImplementation::Nccl;
    CHECK_THROWS_WITH(MultiWorkerMirroredStrategy(ClusterResolver::local(), nccl),
                      Catch::Contains("communication 'nccl' needs GPU replicas"));
  }
}

TEST_CASE("MultiWorkerMirrored: collectives across 2 and 4 worker processes", "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  for (auto [workers, replicas] : {std::pair{2, 0}, std::pair{4, 0}, std::pair{2, 2}}) {
    INFO(workers << " workers x " << std::max(replicas, 1) << " replicas");
    auto r = launch(workers, replicas, {STRATA_MWMS_HELPER, "collectives", "--timeout", "60"}, 120);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    const int n = workers * std::max(replicas, 1);
    for (int w = 0; w < workers; ++w) {
      CHECK(lines_with(r.output, "[worker " + std::to_string(w) + "] worker " + std::to_string(w) +
                                     ": mwms collectives ok (" + std::to_string(n) + " replicas)")
                .size() == 1);
    }
  }
}

TEST_CASE("MultiWorkerMirrored: extended().reduce_to and batch_reduce_to reduce across workers",
          "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  for (auto [workers, replicas] : {std::pair{2, 0}, std::pair{2, 2}}) {
    INFO(workers << " workers x " << std::max(replicas, 1) << " replicas");
    // A wrong pairing of collectives times out within --timeout (the helper's waits).
    auto r = launch(workers, replicas, {STRATA_MWMS_HELPER, "reduce_to", "--timeout", "30"}, 90);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    const int n = workers * std::max(replicas, 1);
    for (int w = 0; w < workers; ++w) {
      CHECK(lines_with(r.output, "[worker " + std::to_string(w) + "] worker " + std::to_string(w) +
                                     ": mwms reduce_to ok (" + std::to_string(n) + " replicas)")
                .size() == 1);
    }
  }
}

namespace {
// Every element of `weights`, flattened in order (what the helper's train writes).
std::vector<double> flat(const std::vector<Tensor>& weights) {
  std::vector<double> out;
  for (const Tensor& t : weights)
    for (double x : t.to_vector<double>()) out.push_back(x);
  return out;
}

// Runs the helper's train on 2 workers (with `replicas` each, 0: one) and checks that both
// workers end with weights equal to each other and, within 1e-5 relative to the largest
// weight, to `want`.
void check_trains_like(const std::vector<double>& want, int replicas, const std::vector<std::string>& flags) {
  TempDir dir;
  const std::string out = (dir.path / "weights").string();
  std::vector<std::string> program{STRATA_MWMS_HELPER, "train", "--out", out, "--epochs", "2"};
  program.insert(program.end(), flags.begin(), flags.end());
  auto r = launch(2, replicas, program, 120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto w0 = read_numbers(out + ".0"), w1 = read_numbers(out + ".1");
  REQUIRE(w0.size() == want.size());
  CHECK(w0 == w1);  // the workers end equal
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(w0[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  INFO("max relative difference to the one-process run: " << diff / scale);
  CHECK(diff / scale <= 1e-5);
}
}  // namespace

TEST_CASE("MultiWorkerMirrored: 2 workers x 1 replica train like Mirrored(2) in one process", "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(2));
  const std::vector<double> want = flat(distribute::testing::mwms_train(mirrored, 2, /*init_seed=*/100, [](int) {}));
  // Each worker seeds its initializers differently: worker 0's values (seed 100) are
  // broadcast, so the job still starts where Mirrored(2) does.
  check_trains_like(want, 0, {"--seed-per-worker"});
  double moved = 0;
  // The weights moved away from the initial values (the comparison is of trained models).
  MirroredStrategy fresh(MirroredStrategy::cpu_devices(2));
  const auto initial = distribute::testing::mwms_train(fresh, 0, 100, [](int) {});
  const auto first_kernel = initial[0].to_vector<double>();
  for (size_t i = 0; i < first_kernel.size(); ++i) moved = std::max(moved, std::abs(first_kernel[i] - want[i]));
  CHECK(moved > 1e-3);
}

TEST_CASE("MultiWorkerMirrored: a synchronized BatchNormalization over 2 workers x 2 replicas trains like Mirrored(4)",
          "[mwms][multiprocess]") {
  // The layer's statistics are all-reduced over the 4 replicas of the 2 workers in
  // forward, and its gradients in backward while the gradient buckets are in flight.
  if (skip_without_gloo()) return;
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(4));
  check_trains_like(flat(distribute::testing::mwms_train(mirrored, 2, 1, [](int) {}, /*sync_batch_norm=*/true)), 2,
                    {"--sync-batch-norm"});
}

TEST_CASE("MultiWorkerMirrored: workers with unequal input train like Mirrored(2) with a pipeline per replica",
          "[mwms][multiprocess]") {
  // The worker whose input ends first steps on with empty batches, as the replica whose
  // pipeline ends first does in one process.
  if (skip_without_gloo()) return;
  MirroredStrategy mirrored(MirroredStrategy::cpu_devices(2));
  check_trains_like(flat(distribute::testing::mwms_train_uneven(mirrored, InputReplicationMode::PerReplica, 2)), 0,
                    {"--uneven-input"});
}

TEST_CASE("MultiWorkerMirrored: auto-sharding covers the data exactly once per epoch", "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  SECTION("data (auto without files): each global batch split over every replica of the job") {
    auto r = launch(2, 2, {STRATA_MWMS_HELPER, "shard", "--policy", "auto", "--examples", "40", "--global-batch", "8"},
                    120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Shards s = parse_shards(r.output, 2);
    CHECK(s.steps[0] == 5);
    CHECK(s.steps[1] == 5);
    CHECK(covers_once(s, 40));
    for (int step = 0; step < 5; ++step) {  // step s of the job consumed global batch s
      std::vector<int64_t> batch;
      for (int64_t i = 0; i < 8; ++i) batch.push_back(step * 8 + i);
      CHECK(s.step_ids[step] == batch);
    }
  }
  SECTION("off: every worker reads everything once") {
    auto r = launch(2, 0, {STRATA_MWMS_HELPER, "shard", "--policy", "off", "--examples", "24", "--global-batch", "8"},
                    120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Shards s = parse_shards(r.output, 2);
    for (int w = 0; w < 2; ++w) {
      std::vector<int64_t> want;
      for (int64_t i = 0; i < 24; ++i) want.push_back(i);
      CHECK(s.ids[w] == want);
      CHECK(s.steps[w] == 6);  // 3 batches of 8, rebatched into 2 parts of 4 per batch
    }
  }
  SECTION("distribute_datasets_from_function per replica: replica r of worker w reads pipeline 2w + r of 4") {
    auto r = launch(2, 2, {STRATA_MWMS_HELPER, "shard", "--from-function", "--per-replica", "--examples", "24",
                           "--global-batch", "8"},
                    120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Shards s = parse_shards(r.output, 2);
    CHECK(covers_once(s, 24));
    for (auto& [where, ids] : s.replica_ids) {
      INFO("worker " << where.first << " replica " << where.second);
      CHECK(ids.size() == 6);
      for (int64_t id : ids) CHECK(id % 4 == 2 * where.first + where.second);  // its shard of the 4 pipelines
    }
    CHECK(s.replica_ids.size() == 4);
    CHECK(s.steps[0] == 3);  // 6 ids per replica in batches of 8 / 4
    CHECK(s.steps[1] == 3);
  }
  SECTION("file shards of unequal length: every worker steps until the last one's input ends") {
    TempDir dir;
    // Worker 0 reads files 0 and 2 (16 ids), worker 1 file 1 (8 ids).
    const std::string files = write_record_files(dir.path, 3);
    auto r = launch(2, 2,
                    {STRATA_MWMS_HELPER, "shard", "--policy", "file", "--files", files, "--global-batch", "8",
                     "--gather-each-step"},
                    120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Shards s = parse_shards(r.output, 2);
    CHECK(covers_once(s, 24));
    CHECK(s.steps[0] == 4);  // 2 batches of 8, each cut into 4 parts, 2 per step
    CHECK(s.steps[1] == 4);  // its 1 batch gave 2 steps; then 2 steps of empty batches
    CHECK(s.ids[1].size() == 8);
    // Each step's collective (a gather over the job) meets on both workers: the last two
    // steps gather worker 0's ids only.
    for (int w = 0; w < 2; ++w) {
      const auto last = lines_with(r.output, "[worker " + std::to_string(w) + "] worker " + std::to_string(w) +
                                                 " job step 3:");
      REQUIRE(last.size() == 1);
      CHECK(last[0].substr(last[0].find(':') + 1) == " 20 21 22 23");
    }
  }
  SECTION("distribute_datasets_from_function: a worker without any input steps with empty batches") {
    // range(1) sharded over 2 workers: worker 1's pipeline is empty from the start, so its
    // empty batch is shaped like worker 0's.
    auto r = launch(2, 1,
                    {STRATA_MWMS_HELPER, "shard", "--from-function", "--examples", "1", "--global-batch", "2",
                     "--gather-each-step"},
                    120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Shards s = parse_shards(r.output, 2);
    CHECK(s.ids[0] == std::vector<int64_t>{0});
    CHECK(s.ids[1].empty());
    CHECK(s.steps[0] == 1);
    CHECK(s.steps[1] == 1);
    // The empty int64 batch joined worker 0's in a gather over the job.
    CHECK(lines_with(r.output, "[worker 1] worker 1 job step 0: 0").size() == 1);
  }
  SECTION("a worker whose input fails makes every worker raise at that step") {
    auto r = launch(2, 1,
                    {STRATA_MWMS_HELPER, "shard", "--policy", "off", "--examples", "12", "--global-batch", "2",
                     "--fail-worker", "1", "--fail-at", "6"},
                    120);
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(lines_with(r.output, "[worker 1] error: the input broke at element 6").size() == 1);
    CHECK(lines_with(r.output, "[worker 0] error: DistributedIterator::next: the input of worker 1 failed at this "
                               "step").size() == 1);
    // Each worker reads all 12 ids, one per step: id 6 was step 6's, where both stopped.
    CHECK(lines_with(r.output, "[worker 0] worker 0 step 5 replica 0: 5").size() == 1);
    CHECK(lines_with(r.output, "[worker 0] worker 0 step 6").empty());
  }
  SECTION("repeated input: no end to agree on, the workers step on") {
    TempDir dir;
    auto r = launch(2, 2,
                    {STRATA_MWMS_HELPER, "shard", "--policy", "off", "--examples", "10", "--global-batch", "4",
                     "--repeat", "-1", "--stop-after", "7", "--checkpoint", (dir.path / "input").string()},
                    120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Shards s = parse_shards(r.output, 2);
    CHECK(s.steps[0] == 7);
    CHECK(s.steps[1] == 7);
  }
  SECTION("file: each worker reads its files, rebatched to its part of the global batch") {
    TempDir dir;
    const std::string files = write_record_files(dir.path);
    auto r = launch(2, 2, {STRATA_MWMS_HELPER, "shard", "--policy", "file", "--files", files, "--global-batch", "8"},
                    120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Shards s = parse_shards(r.output, 2);
    CHECK(covers_once(s, 32));
    for (int64_t id : s.ids[0]) CHECK((id / 8) % 2 == 0);  // worker 0: files 0 and 2
    CHECK(s.steps[0] == 4);  // 16 ids per worker, 2 ids per replica, 2 replicas
    CHECK(s.steps[1] == 4);
  }
}

namespace {
// The helper's "step S replica R: ids" lines of each worker, in order.
std::map<int, std::vector<std::string>> step_lines(const std::string& output, int workers) {
  std::map<int, std::vector<std::string>> out;
  for (int w = 0; w < workers; ++w) {
    const std::string prefix = "[worker " + std::to_string(w) + "] worker " + std::to_string(w) + " step ";
    for (const std::string& line : lines_with(output, prefix)) out[w].push_back(line.substr(line.find(prefix)));
  }
  return out;
}

}  // namespace

TEST_CASE("MultiWorkerMirrored: a checkpoint holds each worker's input position under File and Off sharding "
          "and distribute_datasets_from_function",
          "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  TempDir dir;
  struct Case {
    const char* name;
    int replicas;  // per worker
    std::vector<std::string> input;
    int stop_after;
  };
  SECTION("stopped and resumed, every worker reads on where it stopped") {
    // Shuffled, two epochs, a short batch at the end of each; stopped part-way through a
    // batch each worker cut into parts (1 replica: one part of two per step).
    const std::vector<Case> cases = {
        {"file, 1 replica per worker", 1,
         {"--policy", "file", "--files", write_record_files(dir.path), "--global-batch", "6", "--shuffle-buffer", "5",
          "--repeat", "2"},
         5},
        {"off, 2 replicas per worker", 2,
         {"--policy", "off", "--examples", "20", "--global-batch", "8", "--shuffle-buffer", "7", "--repeat", "2"},
         3},
        {"distribute_datasets_from_function, 2 replicas per worker", 2,
         {"--from-function", "--examples", "30", "--global-batch", "8", "--shuffle-buffer", "4", "--repeat", "2"},
         3},
        {"distribute_datasets_from_function with a pipeline per replica, 2 replicas per worker", 2,
         {"--from-function", "--per-replica", "--examples", "30", "--global-batch", "8", "--shuffle-buffer", "4",
          "--repeat", "2"},
         3},
    };
    for (const Case& c : cases) {
      INFO(c.name);
      std::vector<std::string> shard{STRATA_MWMS_HELPER, "shard"};
      shard.insert(shard.end(), c.input.begin(), c.input.end());
      const std::string prefix = (dir.path / ("input-" + std::to_string(&c - cases.data()))).string();
      auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> argv = shard;
        argv.insert(argv.end(), extra.begin(), extra.end());
        return argv;
      };
      auto straight = launch(2, c.replicas, shard, 120);
      INFO(straight.output);
      REQUIRE(straight.exit_code == 0);
      auto first = launch(2, c.replicas, with({"--stop-after", std::to_string(c.stop_after), "--checkpoint", prefix}), 120);
      INFO(first.output);
      REQUIRE(first.exit_code == 0);
      auto resumed = launch(2, c.replicas, with({"--restore", prefix}), 120);
      INFO(resumed.output);
      REQUIRE(resumed.exit_code == 0);
      const auto all = step_lines(straight.output, 2), before = step_lines(first.output, 2),
                 after = step_lines(resumed.output, 2);
      for (int w = 0; w < 2; ++w) {
        INFO("worker " << w);
        REQUIRE(all.count(w) == 1);
        REQUIRE(before.at(w).size() == size_t(c.stop_after * c.replicas));
        std::vector<std::string> joined = before.at(w);
        joined.insert(joined.end(), after.at(w).begin(), after.at(w).end());
        CHECK(joined == all.at(w));
      }
      // The workers read different input, so their positions differ: both are in the chief's file.
      CHECK(all.at(0) != all.at(1));
    }
  }
  SECTION("resuming with another number of workers is refused, naming both") {
    const std::string prefix = (dir.path / "input").string();
    const std::vector<std::string> shard{STRATA_MWMS_HELPER, "shard",          "--policy", "file", "--files",
                                         write_record_files(dir.path), "--global-batch", "6"};
    std::vector<std::string> save = shard, restore = shard;
    save.insert(save.end(), {"--stop-after", "2", "--checkpoint", prefix});
    restore.insert(restore.end(), {"--restore", prefix});
    auto two = launch(2, 1, save, 120);
    INFO(two.output);
    REQUIRE(two.exit_code == 0);
    auto one = launch(1, 1, restore, 120);
    INFO(one.output);
    CHECK(one.exit_code != 0);
    CHECK(one.output.find("input positions of 2 workers that each read input of their own") != std::string::npos);
  }
}

namespace {
// Two helper workers started directly (strata-launch would stop the survivor itself),
// each with `replicas` local replicas; `how` is "--die-worker", "--stall-worker" (sleeps,
// its heartbeat going on) or "--stop-worker" (SIGSTOP: its heartbeat stops too). The
// collective timeout is `timeout` seconds, the stall timeout `stall_timeout`.
std::pair<strata::testing::ProcessResult, strata::testing::ProcessResult> train_with_fault(
    const std::string& how, int replicas, double timeout = 4, double stall_timeout = 60) {
  const int p0 = find_free_port(), p1 = find_free_port();
  TempDir dir;
  std::vector<std::unique_ptr<strata::testing::ChildProcess>> children;
  const auto secret = JobSecret::generate();  // what a launcher hands its workers
  for (int w = 0; w < 2; ++w) {
    const std::string tf_config = R"({"cluster": {"worker": ["127.0.0.1:)" + std::to_string(p0) +
                                  R"(", "127.0.0.1:)" + std::to_string(p1) + R"("]}, "task": {"type": "worker", "index": )" +
                                  std::to_string(w) + "}}";
    children.push_back(std::make_unique<strata::testing::ChildProcess>(
        std::vector<std::string>{STRATA_MWMS_HELPER, "train", "--out", (dir.path / "w").string(), "--epochs", "1000",
                                 how, "1", "--die-at-step", "3", "--timeout", std::to_string(timeout),
                                 "--stall-timeout", std::to_string(stall_timeout)},
        std::map<std::string, std::string>{{"TF_CONFIG", tf_config},
                                           {"STRATA_REPLICAS_PER_WORKER", std::to_string(replicas)},
                                           {kJobSecretEnv, secret.text()}}));
  }
  auto survivor = children[0]->wait(90);
  // A stalled worker sleeps for 30 s, a stopped one forever: end it (SIGKILL) once the
  // survivor is done.
  auto faulty = children[1]->wait(how == "--die-worker" ? 90.0 : 0.0);
  return {survivor, faulty};
}

// The survivor's "failed after step 3 (S s)" time.
double failure_seconds(const std::string& output) {
  const auto lines = lines_with(output, "failed after step 3 (");
  REQUIRE(lines.size() == 1);
  return std::stod(lines[0].substr(lines[0].find('(') + 1));
}
}  // namespace

TEST_CASE("MultiWorkerMirrored: a worker killed mid-training makes the others fail naming it", "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  for (int replicas : {1, 2}) {
    INFO(replicas << " local replicas");
    auto [survivor, dead] = train_with_fault("--die-worker", replicas);
    INFO(dead.output);
    INFO(survivor.output);
    CHECK(dead.signal == SIGKILL);
    CHECK_FALSE(survivor.timed_out);
    CHECK(survivor.exit_code == 1);  // an error, not a hang: the local replica threads were released
    CHECK(survivor.output.find("worker 1 is gone") != std::string::npos);
    CHECK(survivor.output.find("blames worker 1 (gone)") != std::string::npos);  // a PeerFailure, through run()
    CHECK(failure_seconds(survivor.output) < 4.0 + 3.0);  // within the timeout (+ the store check)
  }
}

TEST_CASE("MultiWorkerMirrored: a slow worker that still heartbeats is waited for until the timeout",
          "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  // Stall timeout 1 s, timeout 4 s: the sleeping worker's heartbeat goes on, so it is
  // slow, not stalled, and named as behind only at the 4 s timeout.
  auto [survivor, stalled] = train_with_fault("--stall-worker", 2, 4, 1);
  INFO(stalled.output);
  INFO(survivor.output);
  CHECK_FALSE(survivor.timed_out);
  CHECK(survivor.exit_code == 1);
  CHECK(survivor.output.find("gloo all_reduce failed on worker 0 of 2") != std::string::npos);
  CHECK(survivor.output.find("worker 1 is alive (heartbeats go on) but did not reach collective #") !=
        std::string::npos);
  CHECK(survivor.output.find("made no progress") == std::string::npos);
  CHECK(survivor.output.find("blames worker 1 (behind)") != std::string::npos);
  const double seconds = failure_seconds(survivor.output);
  CHECK(seconds >= 3.5);
  CHECK(seconds < 4.0 + 3.0);
}

TEST_CASE("MultiWorkerMirrored: a stopped worker (SIGSTOP) is named within the stall timeout",
          "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  // Timeout 60 s, stall timeout 1.5 s: the stopped worker's heartbeat stops, and the
  // survivor names it after 1.5 s plus at most two heartbeat intervals (0.25 s each).
  auto [survivor, stopped] = train_with_fault("--stop-worker", 1, 60, 1.5);
  INFO(stopped.output);
  INFO(survivor.output);
  CHECK(stopped.output.find("worker 1: stopping itself (SIGSTOP) after step 3") != std::string::npos);
  CHECK_FALSE(survivor.timed_out);
  CHECK(survivor.exit_code == 1);
  CHECK(survivor.output.find("worker 1 made no progress for 1.5 s: its heartbeat has not changed for") !=
        std::string::npos);
  CHECK(survivor.output.find("blames worker 1 (stalled)") != std::string::npos);
  const double seconds = failure_seconds(survivor.output);
  CHECK(seconds >= 1.4);
  CHECK(seconds < 1.5 + 3.0);  // far below the 60 s timeout
}

TEST_CASE("strata-train --strategy multi_worker: chief-only files, report, and resuming a relaunch",
          "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  TempDir dir;
  const fs::path model_dir = dir.path / "model", report = dir.path / "report.json";
  auto train = [&](int steps) {
    return launch(2, 0,
                  {STRATA_TRAIN_BIN, "--strategy", "multi_worker", "--model", "mlp", "--steps", std::to_string(steps),
                   "--steps-per-loop", "10", "--global-batch", "32", "--train-examples", "256", "--eval-examples", "64",
                   "--model-dir", model_dir.string(), "--report", report.string()},
                  150);
  };
  auto first = train(20);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  auto j = nlohmann::json::parse(std::ifstream(report));
  CHECK(j["workers"] == 2);
  CHECK(j["replicas"] == 2);
  CHECK(j["strategy"] == "multi_worker");
  CHECK(j["steps"] == 20);
  // Only the chief's directories remain: no worker's temporary directory.
  std::set<std::string> top, checkpoints;
  for (const auto& e : fs::directory_iterator(model_dir)) top.insert(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(model_dir / "checkpoints")) checkpoints.insert(e.path().filename().string());
  CHECK(top == std::set<std::string>{"checkpoints", "summaries"});
  for (const std::string& name : checkpoints) CHECK(name.find("workertemp") == std::string::npos);
  CHECK(checkpoints.count("ckpt-20.manifest.json") + checkpoints.count("checkpoint") >= 1);
  fs::remove(report);
  auto second = train(30);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(lines_with(second.output, "[worker 0]").size() > 0);
  CHECK(lines_with(second.output, "restored checkpoint").size() >= 1);
  CHECK(lines_with(second.output, "[worker 1] strata-train: worker 1 resumed from").size() == 1);
  auto k = nlohmann::json::parse(std::ifstream(report));
  CHECK(k["steps"] == 30);
  top.clear();
  for (const auto& e : fs::directory_iterator(model_dir)) top.insert(e.path().filename().string());
  CHECK(top == std::set<std::string>{"checkpoints", "summaries"});
  for (const auto& e : fs::directory_iterator(model_dir / "checkpoints"))
    CHECK(e.path().filename().string().find("workertemp") == std::string::npos);
}

TEST_CASE("strata-train --strategy multi_worker under mpirun's environment variables", "[mwms][multiprocess]") {
  if (skip_without_gloo()) return;
  TempDir dir;
  const std::string port = std::to_string(find_free_port());
  const fs::path report = dir.path / "report.json";
  std::vector<std::unique_ptr<strata::testing::ChildProcess>> ranks;
  const auto secret = JobSecret::generate();  // mpirun has none: the user provides it (docs/SECURITY.md)
  for (int r = 0; r < 2; ++r) {
    // What Open MPI's mpirun sets for 2 ranks on this host (MASTER_PORT picks the store's port).
    ranks.push_back(std::make_unique<strata::testing::ChildProcess>(
        std::vector<std::string>{STRATA_TRAIN_BIN, "--strategy", "multi_worker", "--steps", "10", "--steps-per-loop", "5",
                                 "--global-batch", "32", "--train-examples", "128", "--eval-examples", "64",
                                 "--model-dir", (dir.path / "model").string(), "--report", report.string(), "--quiet"},
        std::map<std::string, std::string>{{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                                           {"OMPI_COMM_WORLD_SIZE", "2"},
                                           {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                           {"MASTER_PORT", port},
                                           {kJobSecretEnv, secret.text()}}));
  }
  for (auto& rank : ranks) {
    auto result = rank->wait(120);
    INFO(result.output);
    CHECK(result.exit_code == 0);
  }
  auto j = nlohmann::json::parse(std::ifstream(report));
  CHECK(j["workers"] == 2);
  CHECK(j["replicas"] == 2);
  CHECK(j["steps"] == 10);
}
