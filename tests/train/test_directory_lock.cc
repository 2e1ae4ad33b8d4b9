// DirectoryLock: a second job is kept out of a model directory with an error naming the
// holder; a lock file left by a dead process is taken over; an unwritable directory is an
// error before any work starts.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include <strata/train/directory_lock.h>

using namespace strata;
using Catch::Matchers::Contains;

namespace directory_lock_test {

namespace fs = std::filesystem;

fs::path fresh(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("strata_dirlock_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// The pid of a child that has exited and been reaped: a process that no longer exists.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace directory_lock_test

using namespace directory_lock_test;

TEST_CASE("DirectoryLock: a second holder is refused, naming the first, released on destruction") {
  const fs::path dir = fresh("held");
  {
    train::DirectoryLock first(dir / "model", "job-a");  // creates the directory
    REQUIRE(fs::exists(first.path()));
    CHECK_FALSE(first.took_over_stale());
    const auto content = nlohmann::json::parse(std::ifstream(first.path()));
    CHECK(content["pid"] == int64_t(::getpid()));
    CHECK(content["owner"] == "job-a");
    CHECK_THROWS_WITH(train::DirectoryLock(dir / "model", "job-b"),
                      Contains("job-b") && Contains("in use by job-a") &&
                          Contains("pid " + std::to_string(::getpid())) && Contains("host ") &&
                          Contains(".strata.lock"));
  }
  CHECK_FALSE(fs::exists(train::DirectoryLock::lock_path(dir / "model")));
  train::DirectoryLock again(dir / "model", "job-b");  // free again
  CHECK_FALSE(again.took_over_stale());
  fs::remove_all(dir);
}

TEST_CASE("DirectoryLock: a lock file left by a dead process is taken over") {
  const fs::path dir = fresh("stale");
  fs::create_directories(dir);
  const pid_t gone = dead_pid();
  std::ofstream(train::DirectoryLock::lock_path(dir))
      << nlohmann::json{{"owner", "killed-job"}, {"pid", int64_t(gone)}, {"host", "here"}, {"since", "then"}}.dump();
  {
    train::DirectoryLock lock(dir, "job");
    CHECK(lock.took_over_stale());
    const auto content = nlohmann::json::parse(std::ifstream(lock.path()));
    CHECK(content["pid"] == int64_t(::getpid()));
  }
  fs::remove_all(dir);
}

TEST_CASE("DirectoryLock: a directory that cannot be written is an error naming it") {
  const fs::path dir = fresh("unwritable");
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  // Under a regular file: neither root nor anyone else can create it.
  CHECK_THROWS_WITH(train::DirectoryLock(dir / "file" / "model", "job"),
                    Contains("job: cannot create the directory") && Contains("file/model"));
  fs::remove_all(dir);
}
