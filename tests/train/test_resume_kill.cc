// A training process killed with SIGKILL in the middle of saving a checkpoint resumes
// from the previous complete checkpoint, and exactly: the parent forks a child (this test
// executable, running the hidden child case below) that trains and saves a checkpoint
// after every step, kills it at a random moment while a save is in progress (a checkpoint
// temporary file exists), then restores in-process and checks that it got the newest
// committed checkpoint — the previous one when the kill tore a checkpoint's files — and
// that its contents equal an uninterrupted run's at that step, bit for bit. The next
// round's child resumes from there. The last child trains to the end undisturbed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>

#include "tests/distribute/child_process.h"
#include "tests/train/controller_test_util.h"
#include <strata/train/checkpoint_file.h>

using namespace strata;
using namespace strata::testing::orbit;

namespace {

constexpr const char* kDirEnv = "STRATA_KILL_TEST_DIR";
constexpr const char* kTargetEnv = "STRATA_KILL_TEST_TARGET";
constexpr const char* kChildCase = "Resume kill test: child process";

// Bigger layers than the default job so that a save takes long enough to be hit.
JobOptions kill_job_options() {
  JobOptions o;
  o.features = 64;
  o.hidden = 1024;  // ~5 MB per checkpoint: a save lasts milliseconds even on an idle machine
  o.global_batch = 16;
  o.checkpoint_interval = 1;
  o.max_to_keep = 3;
  return o;
}

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  REQUIRE_FALSE(ec);
  return p.string();
}

std::set<std::string> temp_files(const fs::path& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp-") != std::string::npos) out.insert(name);
  }
  return out;
}

// The step in a checkpoint file name (".ckpt-12.safetensors.tmp-..." -> 12), or -1.
int64_t step_in_name(const std::string& name) {
  const size_t p = name.find("ckpt-");
  if (p == std::string::npos) return -1;
  size_t e = p + 5;
  while (e < name.size() && std::isdigit(static_cast<unsigned char>(name[e]))) ++e;
  return e > p + 5 ? std::stoll(name.substr(p + 5, e - p - 5)) : -1;
}

int64_t latest_committed_step(const fs::path& dir) {
  int64_t best = -1;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && name.ends_with(".manifest.json")) best = std::max(best, step_in_name(name));
  }
  return best;
}

}  // namespace

// Run by the parent below (hidden: not part of a normal run).
TEST_CASE("Resume kill test: child process", "[.]") {
  const char* dir = std::getenv(kDirEnv);
  const char* target = std::getenv(kTargetEnv);
  REQUIRE(dir != nullptr);
  REQUIRE(target != nullptr);
  Job job("default", 0, dir, kill_job_options());
  train::Controller c(job.controller_options(/*steps_per_loop=*/1));  // resumes from the latest
  c.train(std::stoll(target));
}

TEST_CASE("Resume: a run killed with SIGKILL while saving resumes from the previous complete checkpoint") {
  TempDir dir("kill");
  const fs::path ckpt = dir.path / "ckpt";
  fs::create_directories(ckpt);
  const std::string exe = self_exe();
  std::mt19937 rng(std::random_device{}());
  // Kill a random moment (up to max_delay_us) after a save starts. A save of this small
  // model can finish within that window on a fast or idle machine, so every round that
  // tore nothing halves the window: the rounds go on landing inside saves whatever the
  // save takes, and the kills still sample different points of it.
  int max_delay_us = 1500;
  constexpr int64_t kTarget = 400;

  struct Round {
    int64_t restored_step;
    uint64_t digest;
  };
  std::vector<Round> rounds;
  int torn = 0;
  for (int round = 0; round < 12 && torn < 3; ++round) {
    const std::set<std::string> stale = temp_files(ckpt);
    const int64_t before = latest_committed_step(ckpt);
    testing::ChildProcess child({exe, kChildCase}, {{kDirEnv, ckpt.string()}, {kTargetEnv, std::to_string(kTarget)}});
    // Wait until the child has saved at least two checkpoints of its own, then until a
    // save is in progress (a new temporary file), then a random moment more, and kill.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool killed = false;
    std::string in_progress;
    while (std::chrono::steady_clock::now() < deadline) {
      if (latest_committed_step(ckpt) >= before + 2) {
        // A temporary of a checkpoint's own files (".ckpt-N...tmp-"), not of the
        // "checkpoint" index written just after a commit: only those tear a checkpoint.
        for (const auto& name : temp_files(ckpt)) {
          if (!stale.count(name) && step_in_name(name) >= 0) in_progress = name;
        }
        if (!in_progress.empty()) {
          std::this_thread::sleep_for(
              std::chrono::microseconds(std::uniform_int_distribution<int>(0, max_delay_us)(rng)));
          ::kill(child.pid(), SIGKILL);
          killed = true;
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const testing::ProcessResult r = child.wait(60);
    INFO("round " << round << ", child output:\n" << r.output);
    REQUIRE(killed);
    REQUIRE(r.signal == SIGKILL);

    // Torn: a checkpoint's temporary file outlived the process.
    int64_t torn_step = -1;
    for (const auto& name : temp_files(ckpt)) {
      if (!stale.count(name) && step_in_name(name) >= 0) torn_step = std::max(torn_step, step_in_name(name));
    }
    const int64_t committed = latest_committed_step(ckpt);
    REQUIRE(committed >= before + 2);
    if (torn_step >= 0 && !train::checkpoint_exists(ckpt / ("ckpt-" + std::to_string(torn_step)))) {
      ++torn;
      // The save of torn_step never committed: the latest is the one before it.
      REQUIRE(committed == torn_step - 1);
    } else {
      max_delay_us /= 2;
    }

    // Resume here, in the parent: the newest committed checkpoint, loadable and complete.
    JobOptions other = kill_job_options();
    other.init_seed = 99;
    Job resumed("default", 0, ckpt, other);
    train::Controller c(resumed.controller_options(1));
    REQUIRE(c.global_step() == committed);
    REQUIRE(c.last_checkpoint() == (ckpt / ("ckpt-" + std::to_string(committed))).string());
    rounds.push_back({committed, digest(snapshot(resumed.checkpoint))});
  }
  INFO(torn << " of " << rounds.size() << " kills tore a checkpoint");
  REQUIRE(torn >= 1);

  // A last child finishes the run undisturbed from where the kills left it.
  testing::ProcessResult last =
      testing::run_process({exe, kChildCase}, {{kDirEnv, ckpt.string()}, {kTargetEnv, std::to_string(kTarget)}}, 300);
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  REQUIRE(latest_committed_step(ckpt) == kTarget);

  // The restored states equal an uninterrupted run's at the same steps, bitwise.
  Job reference("default", 0, {}, kill_job_options());
  train::Controller rc(reference.controller_options(1));
  for (const Round& round : rounds) {
    rc.train(round.restored_step, /*checkpoint_at_completion=*/false);
    INFO("step " << round.restored_step);
    REQUIRE(digest(snapshot(reference.checkpoint)) == round.digest);
  }
  rc.train(kTarget, false);
  JobOptions other = kill_job_options();
  other.init_seed = 5;
  Job final_state("default", 0, ckpt, other);
  train::Controller fc(final_state.controller_options(1));
  REQUIRE(fc.global_step() == kTarget);
  REQUIRE(first_difference(snapshot(final_state.checkpoint), snapshot(reference.checkpoint)) == "");
}
