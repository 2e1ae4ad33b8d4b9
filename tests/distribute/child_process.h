// ChildProcess: starts a program with extra environment variables, its stdout and stderr
// captured in a temporary file, and waits for it with a deadline (killing its process
// group when the deadline passes). For tests that need real worker processes.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_paths.h"  // STRATA_LAUNCH_BIN and the other program paths

namespace strata::testing {

struct ProcessResult {
  int exit_code = -1;  // when the process exited normally
  int signal = 0;      // when a signal ended it
  bool timed_out = false;
  double seconds = 0.0;
  std::string output;  // stdout and stderr, interleaved
};

class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {}) {
    char path[] = "/tmp/strata_child_XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    log_path_ = path;
    // Everything the child needs is built before fork: between fork and exec it only
    // makes async-signal-safe calls (the test process may have other threads).
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      const std::string entry(*e);
      if (!env.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    start_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
    ::close(fd);
  }
  ~ChildProcess() {
    if (pid_ > 0 && !done_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove(log_path_, ec);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits until `timeout_seconds` after the process started (not after this call), then
  // kills the process group.
  ProcessResult wait(double timeout_seconds) {
    ProcessResult r;
    const auto deadline = start_ + std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
    int status = 0;
    for (;;) {
      const pid_t p = ::waitpid(pid_, &status, WNOHANG);
      if (p == pid_) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        r.timed_out = true;
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    done_ = true;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.output = output();
    return r;
  }

  // What the process has printed so far (it may still be running).
  std::string output() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  std::string log_path_;
  std::chrono::steady_clock::time_point start_;
};

// Runs a program to completion (or the deadline).
inline ProcessResult run_process(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env, double timeout_seconds) {
  ChildProcess child(argv, env);
  return child.wait(timeout_seconds);
}

// The lines of a process's output that contain `needle`, in order.
inline std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

}  // namespace strata::testing
