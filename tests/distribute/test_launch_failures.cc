// strata-launch: which failure it names (the first, not its echoes: workers that print a
// "strata-peer-failure:" line blame a peer), killing a stalled worker that others report,
// and --max-restarts (fresh rendezvous per launch, STRATA_RESTART_COUNT, giving up after N
// restarts naming the failing worker). Shell one-liners stand in for workers, so each
// case takes about a second.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"

namespace launch_failures_test {

// strata-launch --workers 2 FLAGS -- /bin/sh -c SCRIPT (worker i runs the branch for
// "$TF_CONFIG" matching index i).
strata::testing::ProcessResult launch_sh(const std::vector<std::string>& flags, const std::string& worker0,
                                         const std::string& worker1) {
  std::vector<std::string> argv{STRATA_LAUNCH_BIN, "--workers", "2", "--timeout", "30", "--grace", "1"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--", "/bin/sh", "-c",
                           "case \"$TF_CONFIG\" in *'\"index\":0'*) " + worker0 + ";; *) " + worker1 + ";; esac"});
  return strata::testing::run_process(argv, {}, 60.0);
}

}  // namespace launch_failures_test

namespace lft = launch_failures_test;

TEST_CASE("strata-launch names the worker that failed first, not the one that reported it", "[launch]") {
  // Worker 0 exits first, saying worker 1 is gone; worker 1 exits later with its own error.
  auto r = lft::launch_sh({}, "echo 'strata-peer-failure: worker 1 gone' >&2; exit 75", "sleep 0.5; exit 3");
  INFO(r.output);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("strata-launch: job failed: worker 1 exited with status 3") != std::string::npos);
  CHECK(r.output.find("job failed: worker 0") == std::string::npos);
  // The echo is reported as such.
  CHECK(r.output.find("strata-launch: worker 0 stopped because worker 1 left the job (exited with status 75)") !=
        std::string::npos);
}

TEST_CASE("strata-launch kills a stopped worker that another reports as stalled", "[launch]") {
  // Worker 1 stops itself (it would never exit); worker 0 reports it and exits 75.
  auto r = lft::launch_sh({}, "sleep 0.3; echo 'strata-peer-failure: worker 1 stalled' >&2; exit 75", "kill -STOP $$");
  INFO(r.output);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 128 + 9);
  CHECK(r.seconds < 10.0);
  CHECK(r.output.find("strata-launch: job failed: worker 1 made no progress (its process stopped running) "
                      "(reported by worker 0); strata-launch killed it") != std::string::npos);
}

TEST_CASE("strata-launch --max-restarts relaunches the whole job with a fresh rendezvous", "[launch]") {
  // Launch 0: worker 1 fails (worker 0 would run on: it is stopped). Launch 1: both succeed.
  auto r = lft::launch_sh({"--max-restarts", "3"}, "[ \"$STRATA_RESTART_COUNT\" = 0 ] && exec sleep 30; exit 0",
                          "echo \"launch $STRATA_RESTART_COUNT job $STRATA_JOB_ID $TF_CONFIG\"; "
                          "[ \"$STRATA_RESTART_COUNT\" = 0 ] && exit 4; exit 0");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("strata-launch: worker 1 exited with status 4; stopping 1 other worker(s)") != std::string::npos);
  CHECK(r.output.find("strata-launch: restart 1 of 3 after: worker 1 exited with status 4; relaunching 2 worker(s) "
                      "with a fresh rendezvous") != std::string::npos);
  CHECK(r.output.find("strata-launch: job succeeded after 1 restart(s)") != std::string::npos);
  // Each launch got its own store port; the job id stayed.
  const auto lines = strata::testing::lines_with(r.output, "[worker 1] launch ");
  REQUIRE(lines.size() == 2);
  std::set<std::string> job_ids, stores;
  for (const std::string& line : lines) {
    std::istringstream in(line.substr(line.find("launch ")));
    std::string word, count, job, id;
    in >> word >> count >> job >> id;
    job_ids.insert(id);
    std::string json;
    std::getline(in, json);
    stores.insert(nlohmann::json::parse(json)["cluster"]["worker"][0].get<std::string>());
  }
  CHECK(job_ids.size() == 1);
  CHECK(stores.size() == 2);
  CHECK(lines[0].find("[worker 1] launch 0 ") == 0);
  CHECK(lines[1].find("[worker 1] launch 1 ") == 0);
}

TEST_CASE("strata-launch --max-restarts gives up after N restarts, naming the failing worker", "[launch]") {
  auto r = lft::launch_sh({"--max-restarts", "2"}, "exec sleep 30", "exit 3");
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("restart 1 of 2 after: worker 1 exited with status 3") != std::string::npos);
  CHECK(r.output.find("restart 2 of 2 after: worker 1 exited with status 3") != std::string::npos);
  CHECK(r.output.find("restart 3 of") == std::string::npos);
  CHECK(r.output.find("strata-launch: job failed after 2 restart(s): worker 1 exited with status 3") !=
        std::string::npos);
  // A timeout is not restarted.
  auto t = strata::testing::run_process({STRATA_LAUNCH_BIN, "--workers", "1", "--timeout", "1", "--grace", "1",
                                         "--max-restarts", "5", "--", "/bin/sleep", "30"},
                                        {}, 60.0);
  INFO(t.output);
  CHECK(t.exit_code == 124);
  CHECK(t.output.find("restart") == std::string::npos);
}
