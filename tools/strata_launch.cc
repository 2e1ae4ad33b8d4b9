// strata-launch: runs N local worker processes of a multi-worker job.
//
//   strata-launch --workers N [--ps P] [--replicas-per-worker R] [--timeout S] -- PROGRAM ARGS...
//
// Each worker gets TF_CONFIG = {"cluster": {"worker": ["127.0.0.1:p0", ...]},
// "task": {"type": "worker", "index": i}} on free loopback ports (worker 0 hosts the
// rendezvous store on p0), plus STRATA_REPLICAS_PER_WORKER=R when given. Every line a
// worker prints is prefixed with "[worker i] ". When a worker fails the others are
// stopped (SIGTERM to their process groups, SIGKILL after --grace seconds) and
// strata-launch exits with the failed worker's status, naming it. Exit status: 0 when
// every worker exits 0; the first failure's exit code (or 128 + signal); 124 on --timeout;
// 128 + signal when strata-launch itself is interrupted.
//
// With --ps P (a ParameterServerStrategy job) the cluster also has a "chief" (the
// coordinator) and P "ps" tasks: TF_CONFIG = {"cluster": {"chief": [...], "worker":
// [...], "ps": [...]}, "task": {...}}, output prefixed "[chief] ", "[worker i] ",
// "[ps i] ". The job is the chief's: a worker or parameter server that fails is reported
// but stops nothing (the chief reschedules a worker's closures, and fails the job itself
// when a parameter server is lost); when the chief exits the others are given --grace
// seconds to finish (the coordinator tells them to) and are then stopped, and
// strata-launch exits with the chief's status.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <strata/distribute/collective/tcp_store.h>

namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += size_t(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // our own output is gone (closed pipe): keep supervising regardless
    }
  }
}

void say(const std::string& message) { write_all(STDERR_FILENO, "strata-launch: " + message + "\n"); }

// One output stream of one worker: bytes are forwarded line by line with a prefix.
struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string pending;

  void emit(const std::string& prefix, bool flush_partial) {
    std::string out;
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      out += prefix + pending.substr(start, nl - start + 1);
    pending.erase(0, start);
    if (flush_partial && !pending.empty()) {
      out += prefix + pending + "\n";
      pending.clear();
    }
    if (!out.empty()) write_all(target, out);
  }
  // Reads what is available; returns false at end of stream.
  bool pump(const std::string& prefix) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        pending.append(buf, size_t(n));
        emit(prefix, false);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      close();
      emit(prefix, true);
      return false;
    }
  }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Worker {
  std::string type = "worker";  // "worker", or with --ps also "chief" and "ps"
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
  std::string name() const { return type == "chief" ? type : type + " " + std::to_string(index); }
  std::string prefix() const { return "[" + name() + "] "; }
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Forks one worker in its own process group, its stdout/stderr on pipes.
void spawn(Worker& w, const std::vector<std::string>& command, const std::string& tf_config, int replicas) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    // Die with the launcher even if it is SIGKILLed and cannot stop us itself.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) ::signal(sig, SIG_DFL);
    ::setenv("TF_CONFIG", tf_config.c_str(), 1);
    if (replicas > 0) ::setenv("STRATA_REPLICAS_PER_WORKER", std::to_string(replicas).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    const std::string msg = "strata-launch: cannot execute '" + command[0] + "': " + std::strerror(errno) + "\n";
    write_all(STDERR_FILENO, msg);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so a signal sent right away finds the group
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  w.pid = pid;
  w.running = true;
  w.out = Stream{out_pipe[0], STDOUT_FILENO, {}};
  w.err = Stream{err_pipe[0], STDERR_FILENO, {}};
}

std::vector<int> pick_ports(int n, const std::string& host) {
  std::set<int> seen;
  std::vector<int> ports;
  for (int attempts = 0; int(ports.size()) < n; ++attempts) {
    if (attempts > 100 * n) throw std::runtime_error("cannot find " + std::to_string(n) + " free ports on " + host);
    const int p = strata::distribute::find_free_port(host);
    if (seen.insert(p).second) ports.push_back(p);
  }
  return ports;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-launch: runs N local worker processes of a multi-worker job with TF_CONFIG set"};
  int num_workers = 0;
  int num_ps = 0;
  int replicas = 0;
  double timeout = 0.0;
  double grace = 5.0;
  std::string host = "127.0.0.1";
  std::vector<std::string> command;
  app.add_option("-n,--workers", num_workers, "number of worker processes")->required()->check(CLI::Range(1, 4096));
  app.add_option("--ps", num_ps,
                 "also start this many parameter servers and a chief (a ParameterServerStrategy job)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--replicas-per-worker", replicas, "sets STRATA_REPLICAS_PER_WORKER in each worker")
      ->check(CLI::PositiveNumber);
  app.add_option("--timeout", timeout, "stop every worker and fail after this many seconds (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", grace, "seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--host", host, "address the workers listen on in TF_CONFIG")->capture_default_str();
  app.add_option("command", command, "PROGRAM ARGS... (after --)")->required();
  CLI11_PARSE(app, argc, argv);

  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    say(std::string("pipe: ") + std::strerror(errno));
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const bool ps_mode = num_ps > 0;
  // Tasks: the workers, then (--ps) the parameter servers and the chief.
  std::vector<Worker> workers(static_cast<size_t>(num_workers + (ps_mode ? num_ps + 1 : 0)));
  for (int i = 0; i < num_workers; ++i) workers[size_t(i)].index = i;
  if (ps_mode) {
    for (int i = 0; i < num_ps; ++i) {
      workers[size_t(num_workers + i)].type = "ps";
      workers[size_t(num_workers + i)].index = i;
    }
    workers.back().type = "chief";
  }
  try {
    const auto ports = pick_ports(int(workers.size()), host);
    nlohmann::json cluster = nlohmann::json::object();
    for (size_t i = 0; i < workers.size(); ++i)
      cluster[workers[i].type].push_back(host + ":" + std::to_string(ports[i]));
    for (auto& w : workers) {
      nlohmann::json tf_config = {{"cluster", cluster}, {"task", {{"type", w.type}, {"index", w.index}}}};
      spawn(w, command, tf_config.dump(), replicas);
    }
  } catch (const std::exception& e) {
    say(std::string("cannot start the workers: ") + e.what());
    for (auto& w : workers)
      if (w.running) ::kill(-w.pid, SIGKILL);
    return 1;
  }

  const auto start = Clock::now();
  std::optional<Clock::time_point> kill_at;   // SIGKILL whoever is left at this time
  std::optional<Clock::time_point> drain_until;  // stop reading grandchildren's output
  std::optional<Clock::time_point> term_at;      // --ps: the chief is done; stop the rest then
  bool stopping = false;
  int exit_code = 0;
  std::string failure;
  auto running = [&] {
    int n = 0;
    for (auto& w : workers) n += w.running ? 1 : 0;
    return n;
  };
  auto begin_stop = [&](const std::string& why, int code) {
    if (stopping) return;
    stopping = true;
    failure = why;
    exit_code = code;
    const int others = running();
    if (others > 0)
      say(why + "; stopping " + std::to_string(others) + (ps_mode ? " other task(s)" : " other worker(s)"));
    for (auto& w : workers)
      if (w.running) ::kill(-w.pid, SIGTERM);
    kill_at = Clock::now() + std::chrono::milliseconds(int64_t(grace * 1000));
  };

  for (;;) {
    // Reap.
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (auto& w : workers) {
        if (w.pid != pid || !w.running) continue;
        w.running = false;
        w.status = status;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (ps_mode && w.type == "chief") {
          // The job is the chief's: its status is the job's.
          if (!ok && !stopping) begin_stop("chief " + describe_status(status), exit_code_of(status));
          if (ok && !stopping) term_at = Clock::now() + std::chrono::milliseconds(int64_t(grace * 1000));
        } else if (ps_mode) {
          if (!ok && !stopping)
            say(w.name() + " " + describe_status(status) +
                (w.type == "worker" ? " (the chief runs its closures on the other workers)"
                                    : " (the chief fails the job)"));
        } else if (!ok && !stopping) {
          begin_stop("worker " + std::to_string(w.index) + " " + describe_status(status), exit_code_of(status));
        }
      }
    }
    const auto now = Clock::now();
    if (!stopping && timeout > 0 && now - start >= std::chrono::milliseconds(int64_t(timeout * 1000)))
      begin_stop("timed out after " + (std::ostringstream() << timeout).str() + " s", 124);
    if (term_at && now >= *term_at && !stopping) {
      // The chief finished; servers that did not stop on their own are stopped (status 0).
      const int others = running();
      if (others > 0) say("the chief finished; stopping " + std::to_string(others) + " remaining task(s)");
      stopping = true;
      for (auto& w : workers)
        if (w.running) ::kill(-w.pid, SIGTERM);
      kill_at = now + std::chrono::milliseconds(int64_t(grace * 1000));
      term_at.reset();
    }
    if (kill_at && now >= *kill_at) {
      for (auto& w : workers)
        if (w.running) ::kill(-w.pid, SIGKILL);
      kill_at.reset();
    }
    bool open = false;
    for (auto& w : workers) open = open || w.out.fd >= 0 || w.err.fd >= 0;
    if (running() == 0) {
      // Output pipes may be held by the workers' own children: give them a moment.
      if (!drain_until) drain_until = now + std::chrono::seconds(2);
      if (!open || now >= *drain_until) break;
    }

    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    std::vector<Stream*> streams{nullptr};
    for (auto& w : workers) {
      for (Stream* s : {&w.out, &w.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      unsigned char sig = 0;
      while (::read(g_signal_pipe[0], &sig, 1) == 1) {
        if (sig != SIGCHLD) begin_stop(std::string("interrupted by ") + ::strsignal(sig), 128 + sig);
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      for (auto& w : workers)
        if (&w.out == streams[i] || &w.err == streams[i]) streams[i]->pump(w.prefix());
    }
  }
  for (auto& w : workers) {
    for (Stream* s : {&w.out, &w.err}) {
      s->close();
      s->emit(w.prefix(), true);
    }
  }
  if (exit_code != 0) {
    say("job failed: " + failure);
    return exit_code;
  }
  return 0;
}
