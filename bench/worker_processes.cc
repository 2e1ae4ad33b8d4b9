#include "bench/worker_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <strata/core/error.h>

namespace strata::bench {

namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped";
}

}  // namespace

std::string WorkerProcesses::self_executable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  STRATA_CHECK(n > 0, "strata-bench: cannot find its own executable through /proc/self/exe");
  return std::string(path, size_t(n));
}

WorkerProcesses::WorkerProcesses(const std::vector<std::vector<std::string>>& argvs) {
  const pid_t parent = ::getpid();
  for (size_t i = 0; i < argvs.size(); ++i) {
    STRATA_CHECK(!argvs[i].empty(), "strata-bench: worker ", i, " has no program to run");
    char path[] = "/tmp/strata_bench_worker_XXXXXX";
    const int fd = ::mkstemp(path);
    STRATA_CHECK(fd >= 0, "strata-bench: cannot create a temporary file for worker ", i, "'s output");
    // Everything the child needs is built before fork: between fork and exec it makes only
    // async-signal-safe calls (this process has other threads: the store server, the pool).
    std::vector<char*> args;
    for (const auto& a : argvs[i]) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fd);
      ::unlink(path);
      kill_all();
      fail("strata-bench: fork failed while starting worker ", i);
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fd);
    workers_.push_back({pid, true, path});
  }
}

WorkerProcesses::~WorkerProcesses() {
  kill_all();
  for (const auto& w : workers_) ::unlink(w.log_path.c_str());
}

void WorkerProcesses::kill_all() {
  for (auto& w : workers_) {
    if (!w.running) continue;
    ::kill(w.pid, SIGKILL);
    ::waitpid(w.pid, nullptr, 0);
    w.running = false;
  }
}

std::string WorkerProcesses::output_tail(const Worker& w) const {
  std::ifstream in(w.log_path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  constexpr size_t kMax = 2000;
  if (s.size() > kMax) s = "..." + s.substr(s.size() - kMax);
  return s.empty() ? "(no output)" : s;
}

void WorkerProcesses::wait(double timeout_seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
  for (;;) {
    bool any_running = false;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (!w.running) continue;
      int status = 0;
      const pid_t p = ::waitpid(w.pid, &status, WNOHANG);
      if (p == 0) {
        any_running = true;
        continue;
      }
      w.running = false;
      if (p == w.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      kill_all();
      fail("strata-bench: worker ", i, " of ", workers_.size(), " ",
           p == w.pid ? describe_status(status) : std::string("could not be waited for"),
           "; the other workers were stopped. Its output:\n", output_tail(w));
    }
    if (!any_running) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string running;
      for (size_t i = 0; i < workers_.size(); ++i)
        if (workers_[i].running) running += (running.empty() ? "" : ", ") + std::to_string(i);
      const std::string tail = output_tail(workers_[0]);
      kill_all();
      fail("strata-bench: worker(s) ", running, " of ", workers_.size(), " still running after ", timeout_seconds,
           " s; all were stopped. Worker 0's output:\n", tail);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace strata::bench
