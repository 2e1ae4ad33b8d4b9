// strata-launch: TF_CONFIG per worker, prefixed output, and stopping the job when one
// worker fails.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"

using strata::testing::lines_with;
using strata::testing::run_process;

TEST_CASE("strata-launch gives each worker TF_CONFIG and prefixes its output", "[launch]") {
  auto r = run_process({STRATA_LAUNCH_BIN, "--workers", "3", "--replicas-per-worker", "2", "--",
                        STRATA_DISTRIBUTE_HELPER, "print-env"},
                       {}, 60.0);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::set<int> ports;
  for (int i = 0; i < 3; ++i) {
    const std::string prefix = "[worker " + std::to_string(i) + "] ";
    auto tf = lines_with(r.output, prefix + "TF_CONFIG=");
    REQUIRE(tf.size() == 1);
    auto json = nlohmann::json::parse(tf[0].substr(tf[0].find('=') + 1));
    CHECK(json["task"]["type"] == "worker");
    CHECK(json["task"]["index"] == i);
    REQUIRE(json["cluster"]["worker"].size() == 3);
    for (const auto& a : json["cluster"]["worker"]) {
      const std::string addr = a.get<std::string>();
      CHECK(addr.rfind("127.0.0.1:", 0) == 0);
      ports.insert(std::stoi(addr.substr(10)));
    }
    CHECK(lines_with(r.output, prefix + "STRATA_REPLICAS_PER_WORKER=2").size() == 1);
    CHECK(lines_with(r.output, prefix + "resolver: tf_config worker " + std::to_string(i) + " (rank " +
                                   std::to_string(i) + " of 3")
              .size() == 1);
    CHECK(lines_with(r.output, prefix + "a line on stderr").size() == 1);
    CHECK(lines_with(r.output, prefix + "a partial line").size() == 1);  // flushed at exit
  }
  CHECK(ports.size() == 3);  // distinct ports, the same list for every worker
}

TEST_CASE("strata-launch hands every worker one fresh job secret, in the environment", "[launch][auth]") {
  auto fingerprints = [](const std::string& output) {
    std::set<std::string> out;
    for (int i = 0; i < 2; ++i) {
      auto lines = lines_with(output, "[worker " + std::to_string(i) + "] STRATA_JOB_SECRET: ");
      REQUIRE(lines.size() == 1);
      CHECK(lines[0].find(": 64 bytes, fingerprint ") != std::string::npos);
      out.insert(lines[0].substr(lines[0].rfind(' ') + 1));
    }
    return out;
  };
  // A secret already in the launcher's environment is not reused: each job makes its own.
  auto first = run_process({STRATA_LAUNCH_BIN, "--workers", "2", "--", STRATA_DISTRIBUTE_HELPER, "print-env"},
                           {{"STRATA_JOB_SECRET", "an-old-secret-of-the-caller"}}, 60.0);
  auto second = run_process({STRATA_LAUNCH_BIN, "--workers", "2", "--", STRATA_DISTRIBUTE_HELPER, "print-env"}, {}, 60.0);
  INFO(first.output << second.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(second.exit_code == 0);
  const auto a = fingerprints(first.output), b = fingerprints(second.output);
  CHECK(a.size() == 1);  // the same secret for every worker of a job
  CHECK(b.size() == 1);
  CHECK(a != b);
}

TEST_CASE("strata-launch stops the others when one worker fails and names it", "[launch]") {
  auto r = run_process({STRATA_LAUNCH_BIN, "--workers", "3", "--grace", "2", "--", STRATA_DISTRIBUTE_HELPER,
                        "fail-one", "--index", "1", "--code", "3"},
                       {}, 60.0);
  INFO(r.output);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 3);
  CHECK(r.seconds < 20.0);  // the others wait 60 s unless stopped
  CHECK(r.output.find("[worker 1] failing on purpose with status 3") != std::string::npos);
  CHECK(r.output.find("strata-launch: worker 1 exited with status 3; stopping 2 other worker(s)") !=
        std::string::npos);
  CHECK(r.output.find("strata-launch: job failed: worker 1 exited with status 3") != std::string::npos);
  CHECK(r.output.find("was never stopped") == std::string::npos);
}

TEST_CASE("strata-launch reports a worker killed by a signal, a timeout, and a missing program", "[launch]") {
  // The timeout stops every worker and exits 124.
  auto t = run_process({STRATA_LAUNCH_BIN, "--workers", "2", "--timeout", "1", "--grace", "1", "--",
                        STRATA_DISTRIBUTE_HELPER, "fail-one", "--index", "9", "--code", "1"},
                       {}, 60.0);
  INFO(t.output);
  CHECK(t.exit_code == 124);
  CHECK(t.seconds < 15.0);
  CHECK(t.output.find("strata-launch: timed out after 1 s; stopping 2 other worker(s)") != std::string::npos);

  auto m = run_process({STRATA_LAUNCH_BIN, "--workers", "2", "--", "/nonexistent/program"}, {}, 60.0);
  INFO(m.output);
  CHECK(m.exit_code == 127);
  CHECK(m.output.find("cannot execute '/nonexistent/program'") != std::string::npos);
  CHECK(m.output.find("job failed: worker") != std::string::npos);

  auto k = run_process({STRATA_LAUNCH_BIN, "--workers", "2", "--", "/bin/sh", "-c",
                        "case \"$TF_CONFIG\" in *'\"index\":0'*) kill -9 $$;; *) sleep 30;; esac"},
                       {}, 60.0);
  INFO(k.output);
  CHECK(k.exit_code == 128 + 9);
  CHECK(k.seconds < 20.0);
  CHECK(k.output.find("worker 0 was killed by signal 9") != std::string::npos);
}

TEST_CASE("strata-launch kills workers that ignore SIGTERM after the grace period", "[launch]") {
  auto r = run_process({STRATA_LAUNCH_BIN, "--workers", "3", "--grace", "1", "--", "/bin/sh", "-c",
                        "case \"$TF_CONFIG\" in *'\"index\":2'*) sleep 0.3; exit 5;; "
                        "*) trap '' TERM; echo ignoring TERM; sleep 30;; esac"},
                       {}, 60.0);
  INFO(r.output);
  CHECK(r.exit_code == 5);
  CHECK(r.seconds > 1.0);   // waited the grace period...
  CHECK(r.seconds < 15.0);  // ...then SIGKILLed the sleepers
  CHECK(r.output.find("strata-launch: worker 2 exited with status 5; stopping 2 other worker(s)") !=
        std::string::npos);
  CHECK(r.output.find("[worker 0] ignoring TERM") != std::string::npos);
}

TEST_CASE("strata-launch rejects bad flags", "[launch]") {
  auto r = run_process({STRATA_LAUNCH_BIN, "--workers", "0", "--", "/bin/true"}, {}, 30.0);
  CHECK(r.exit_code != 0);
  auto no_cmd = run_process({STRATA_LAUNCH_BIN, "--workers", "2"}, {}, 30.0);
  CHECK(no_cmd.exit_code != 0);
  auto ok = run_process({STRATA_LAUNCH_BIN, "-n", "2", "--", "/bin/true"}, {}, 30.0);
  CHECK(ok.exit_code == 0);
}
