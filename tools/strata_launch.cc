// strata-launch: runs N local worker processes of a multi-worker job.
//
//   strata-launch --workers N [--ps P] [--replicas-per-worker R] [--timeout S]
//                 [--max-restarts K] -- PROGRAM ARGS...
//
// Each worker gets TF_CONFIG = {"cluster": {"worker": ["127.0.0.1:p0", ...]},
// "task": {"type": "worker", "index": i}} on free loopback ports (worker 0 hosts the
// rendezvous store on p0), plus STRATA_REPLICAS_PER_WORKER=R when given. Every line a
// worker prints is prefixed with "[worker i] ". When a worker fails the others are
// stopped (SIGTERM, and SIGCONT for a stopped one, to their process groups; SIGKILL after
// --grace seconds) and strata-launch exits with the failed worker's status, naming it.
// Exit status: 0 when every worker exits 0; the first failure's exit code (or 128 +
// signal); 124 on --timeout; 128 + signal when strata-launch itself is interrupted.
//
// The failure named is the one that came first, not its echoes: when one worker fails,
// the others fail too, and a worker whose collective failed because of a peer prints the
// line "strata-peer-failure: worker J CAUSE" (distribute/collective/peer_failure.h;
// strata-train does) and exits with status 75. Such a worker is not blamed: worker J is.
// When worker J is still running — it stalled (a stopped process never exits by itself)
// or lags — strata-launch kills it (SIGKILL) and reports it, with exit status 137.
//
// --max-restarts K (torchrun's): when the job fails (not on --timeout or an interrupt),
// every task is stopped and the whole job is relaunched with a fresh rendezvous (new
// ports, so a new store), up to K times; each restart is announced on stderr. Workers get
// STRATA_RESTART_COUNT (0 on the first launch) and STRATA_JOB_ID (the same across
// restarts); strata-train resumes from the latest checkpoint in its --model-dir, so a
// relaunched job continues where it was checkpointed. After K restarts the last failure
// is reported as above.
//
// Every worker also gets STRATA_JOB_SECRET: a random secret made for this job, with which
// the workers' store and parameter-server connections authenticate (docs/SECURITY.md).
//
// With --ps P (a ParameterServerStrategy job) the cluster also has a "chief" (the
// coordinator) and P "ps" tasks: TF_CONFIG = {"cluster": {"chief": [...], "worker":
// [...], "ps": [...]}, "task": {...}}, output prefixed "[chief] ", "[worker i] ",
// "[ps i] ". The job is the chief's: a worker or parameter server that fails is reported
// but stops nothing (the chief reschedules a worker's closures, and fails the job itself
// when a parameter server is lost); when the chief exits the others are given --grace
// seconds to finish (the coordinator tells them to) and are then stopped, and
// strata-launch exits with the chief's status. With --max-restarts, a failed chief
// restarts the whole job.
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
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <strata/distribute/collective/peer_failure.h>
#include <strata/distribute/collective/tcp_store.h>
#include <strata/distribute/job_secret.h>

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

// One output stream of one worker: bytes are forwarded line by line with a prefix, and
// each complete line is shown to `on_line` (which looks for peer-failure markers).
struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string pending;
  std::function<void(const std::string&)> on_line;

  void emit(const std::string& prefix, bool flush_partial) {
    std::string out;
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      const std::string line = pending.substr(start, nl - start);
      if (on_line) on_line(line);
      out += prefix + line + "\n";
    }
    pending.erase(0, start);
    if (flush_partial && !pending.empty()) {
      if (on_line) on_line(pending);
      out += prefix + pending + "\n";
      pending.clear();
    }
    if (!out.empty()) write_all(target, out);
  }
  // Reads what is available; returns false at end of stream.
  bool pump(const std::string& prefix) {
    if (fd < 0) return false;
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
  // The peer this worker said it failed because of (its "strata-peer-failure:" line).
  std::optional<strata::distribute::PeerFailureMarker> blamed;
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

const char* cause_words(const std::string& cause) {
  if (cause == "stalled") return "made no progress (its process stopped running)";
  if (cause == "behind") return "did not reach a collective in time";
  return "left the job";
}

struct LaunchOptions {
  std::vector<std::string> command;
  std::string host;
  int replicas = 0;
  double grace = 5.0;
  double timeout = 0.0;  // over every attempt together; 0: none
  bool ps_mode = false;
  std::string job_id;
};

// Forks one worker in its own process group, its stdout/stderr on pipes.
void spawn(Worker& w, const LaunchOptions& o, const std::string& tf_config, int attempt) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  // Built before fork: the child only calls async-signal-safe functions and setenv
  // (strata-launch is single-threaded).
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string restart_count = std::to_string(attempt);
  const std::string replicas = std::to_string(o.replicas);
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
    if (o.replicas > 0) ::setenv("STRATA_REPLICAS_PER_WORKER", replicas.c_str(), 1);
    ::setenv("STRATA_RESTART_COUNT", restart_count.c_str(), 1);
    ::setenv("STRATA_JOB_ID", o.job_id.c_str(), 1);
    ::execvp(argv[0], argv.data());
    const std::string msg = "strata-launch: cannot execute '" + o.command[0] + "': " + std::strerror(errno) + "\n";
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
  w.status = 0;
  w.blamed.reset();
  Worker* self = &w;
  auto look_for_marker = [self](const std::string& line) {
    strata::distribute::PeerFailureMarker m;
    if (!self->blamed && strata::distribute::parse_peer_failure_marker(line, m)) self->blamed = m;
  };
  w.out = Stream{out_pipe[0], STDOUT_FILENO, {}, look_for_marker};
  w.err = Stream{err_pipe[0], STDERR_FILENO, {}, look_for_marker};
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

// How one launch of the job ended.
struct Outcome {
  int exit_code = 0;
  std::string failure;       // the first failure, named
  bool restartable = false;  // a task failed (not a timeout or an interrupt)
};

// Launches every task once (fresh ports: a fresh rendezvous) and supervises them until
// all have exited.
Outcome run_attempt(std::vector<Worker>& workers, const LaunchOptions& o, int attempt, Clock::time_point start) {
  Outcome result;
  try {
    const auto ports = pick_ports(int(workers.size()), o.host);
    nlohmann::json cluster = nlohmann::json::object();
    for (size_t i = 0; i < workers.size(); ++i)
      cluster[workers[i].type].push_back(o.host + ":" + std::to_string(ports[i]));
    for (auto& w : workers) {
      nlohmann::json tf_config = {{"cluster", cluster}, {"task", {{"type", w.type}, {"index", w.index}}}};
      spawn(w, o, tf_config.dump(), attempt);
    }
  } catch (const std::exception& e) {
    say(std::string("cannot start the workers: ") + e.what());
    for (auto& w : workers)
      if (w.running) ::kill(-w.pid, SIGKILL);
    for (auto& w : workers)
      if (w.running) ::waitpid(w.pid, nullptr, 0);
    return {1, std::string("cannot start the workers: ") + e.what(), false};
  }

  std::optional<Clock::time_point> kill_at;      // SIGKILL whoever is left at this time
  std::optional<Clock::time_point> drain_until;  // stop reading grandchildren's output
  std::optional<Clock::time_point> term_at;      // --ps: the chief is done; stop the rest then
  bool stopping = false;
  auto running = [&] {
    int n = 0;
    for (auto& w : workers) n += w.running ? 1 : 0;
    return n;
  };
  auto stop_all = [&] {
    for (auto& w : workers) {
      if (!w.running) continue;
      ::kill(-w.pid, SIGTERM);
      ::kill(-w.pid, SIGCONT);  // a stopped process acts on SIGTERM only once continued
    }
  };
  auto begin_stop = [&](const std::string& why, int code, bool restartable) {
    if (stopping) return;
    stopping = true;
    result = {code, why, restartable};
    const int others = running();
    if (others > 0)
      say(why + "; stopping " + std::to_string(others) + (o.ps_mode ? " other task(s)" : " other worker(s)"));
    stop_all();
    kill_at = Clock::now() + std::chrono::milliseconds(int64_t(o.grace * 1000));
  };
  auto find_task = [&](const std::string& type, int index) -> Worker* {
    for (auto& w : workers)
      if (w.type == type && w.index == index) return &w;
    return nullptr;
  };
  // A peer reported gone but not reaped yet: it is leaving; wait for its status.
  struct Awaited {
    Worker* peer;
    Worker* reporter;
    Clock::time_point deadline;
  };
  std::optional<Awaited> awaited;
  // A failed task: its own failure, or the echo of a peer's (its marker names the peer).
  auto classify = [&](Worker& w) {
    Worker* peer = w.blamed ? find_task(w.blamed->member, w.blamed->rank) : nullptr;
    if (!peer || peer == &w) {
      begin_stop(w.name() + " " + describe_status(w.status), exit_code_of(w.status), true);
      return;
    }
    say(w.name() + " stopped because " + peer->name() + " " + cause_words(w.blamed->cause) + " (" +
        describe_status(w.status) + ")");
    if (stopping) return;
    if (!peer->running) {
      const bool peer_ok = WIFEXITED(peer->status) && WEXITSTATUS(peer->status) == 0;
      begin_stop(peer->name() + " " + describe_status(peer->status) + " (reported by " + w.name() + ")",
                 peer_ok ? exit_code_of(w.status) : exit_code_of(peer->status), true);
      return;
    }
    if (w.blamed->cause == "gone") {
      // Its connections closed: it is exiting. Its own status will name the failure.
      if (!awaited) awaited = Awaited{peer, &w, Clock::now() + std::chrono::milliseconds(int64_t(o.grace * 1000))};
      return;
    }
    // Stalled or lagging: it will never exit by itself. SIGKILL works on a stopped process.
    ::kill(-peer->pid, SIGKILL);
    begin_stop(peer->name() + " " + cause_words(w.blamed->cause) + " (reported by " + w.name() +
                   "); strata-launch killed it",
               128 + SIGKILL, true);
  };

  for (;;) {
    // Reap every task that exited, then judge them: when a failure and its echo end in
    // the same round, the echo's marker still points at the right task.
    std::vector<Worker*> exited;
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (auto& w : workers) {
        if (w.pid != pid || !w.running) continue;
        w.running = false;
        w.status = status;
        w.out.pump(w.prefix());  // its last lines, marker included
        w.err.pump(w.prefix());
        exited.push_back(&w);
      }
    }
    for (Worker* wp : exited) {
      Worker& w = *wp;
      const bool ok = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0;
      if (o.ps_mode && w.type == "chief") {
        // The job is the chief's: its status is the job's.
        if (!ok && !stopping) begin_stop("chief " + describe_status(w.status), exit_code_of(w.status), true);
        if (ok && !stopping) term_at = Clock::now() + std::chrono::milliseconds(int64_t(o.grace * 1000));
      } else if (o.ps_mode) {
        if (!ok && !stopping)
          say(w.name() + " " + describe_status(w.status) +
              (w.type == "worker" ? " (the chief runs its closures on the other workers)"
                                  : " (the chief fails the job)"));
      } else if (!ok) {
        classify(w);
      }
    }
    const auto now = Clock::now();
    if (awaited && !stopping) {
      Worker& peer = *awaited->peer;
      if (!peer.running) {  // it exited with status 0 (a failure would have stopped the job)
        begin_stop(peer.name() + " " + describe_status(peer.status) + " (reported by " + awaited->reporter->name() +
                       ")",
                   exit_code_of(awaited->reporter->status), true);
      } else if (now >= awaited->deadline) {
        ::kill(-peer.pid, SIGKILL);
        begin_stop(peer.name() + " left the job (reported by " + awaited->reporter->name() +
                       ") but did not exit; strata-launch killed it",
                   128 + SIGKILL, true);
      }
    }
    if (!stopping && o.timeout > 0 && now - start >= std::chrono::milliseconds(int64_t(o.timeout * 1000)))
      begin_stop("timed out after " + (std::ostringstream() << o.timeout).str() + " s", 124, false);
    if (term_at && now >= *term_at && !stopping) {
      // The chief finished; servers that did not stop on their own are stopped (status 0).
      const int others = running();
      if (others > 0) say("the chief finished; stopping " + std::to_string(others) + " remaining task(s)");
      stopping = true;
      stop_all();
      kill_at = now + std::chrono::milliseconds(int64_t(o.grace * 1000));
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
    std::vector<std::pair<Worker*, Stream*>> streams{{nullptr, nullptr}};
    for (auto& w : workers) {
      for (Stream* s : {&w.out, &w.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back({&w, s});
      }
    }
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      unsigned char sig = 0;
      while (::read(g_signal_pipe[0], &sig, 1) == 1) {
        if (sig != SIGCHLD) begin_stop(std::string("interrupted by ") + ::strsignal(sig), 128 + sig, false);
      }
    }
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) streams[i].second->pump(streams[i].first->prefix());
  }
  for (auto& w : workers) {
    for (Stream* s : {&w.out, &w.err}) {
      s->close();
      s->emit(w.prefix(), true);
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-launch: runs N local worker processes of a multi-worker job with TF_CONFIG set"};
  int num_workers = 0;
  int num_ps = 0;
  int max_restarts = 0;
  LaunchOptions o;
  o.host = "127.0.0.1";
  app.add_option("-n,--workers", num_workers, "number of worker processes")->required()->check(CLI::Range(1, 4096));
  app.add_option("--ps", num_ps,
                 "also start this many parameter servers and a chief (a ParameterServerStrategy job)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--replicas-per-worker", o.replicas, "sets STRATA_REPLICAS_PER_WORKER in each worker")
      ->check(CLI::PositiveNumber);
  app.add_option("--timeout", o.timeout,
                 "stop every worker and fail after this many seconds, restarts included (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", o.grace, "seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-restarts", max_restarts,
                 "when the job fails, stop every task and relaunch them all with a fresh rendezvous, up to this "
                 "many times (workers resume from their latest checkpoint; STRATA_RESTART_COUNT counts)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--host", o.host, "address the workers listen on in TF_CONFIG")->capture_default_str();
  app.add_option("command", o.command, "PROGRAM ARGS... (after --)")->required();
  app.footer(
      "Failures: the task that failed first is named. A worker whose collective failed because of another "
      "prints 'strata-peer-failure: worker J CAUSE' and exits 75 (strata-train does): worker J is named instead, "
      "and killed if it still runs (stalled or lagging). --max-restarts K relaunches every task with a fresh "
      "rendezvous when the job fails (not on --timeout), up to K times; workers get STRATA_RESTART_COUNT and "
      "STRATA_JOB_ID (the same across restarts) and resume from their latest checkpoint.");
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

  o.ps_mode = num_ps > 0;
  // One id for the whole job, restarts included (strata-train names its default model
  // directory after it).
  o.job_id = std::to_string(::getpid()) + "-" +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  // Tasks: the workers, then (--ps) the parameter servers and the chief.
  std::vector<Worker> workers(static_cast<size_t>(num_workers + (o.ps_mode ? num_ps + 1 : 0)));
  for (int i = 0; i < num_workers; ++i) workers[size_t(i)].index = i;
  if (o.ps_mode) {
    for (int i = 0; i < num_ps; ++i) {
      workers[size_t(num_workers + i)].type = "ps";
      workers[size_t(num_workers + i)].index = i;
    }
    workers.back().type = "chief";
  }
  try {
    // A fresh random secret per job (libsodium's CSPRNG), handed to the workers through the
    // environment they inherit, never the command line (visible to every local user in
    // ps); it authenticates their store and parameter-server connections (docs/SECURITY.md).
    const auto secret = strata::distribute::JobSecret::generate();
    ::setenv(strata::distribute::kJobSecretEnv, secret.text().c_str(), 1);
    ::unsetenv(strata::distribute::kJobSecretFileEnv);
  } catch (const std::exception& e) {
    say(std::string("cannot start the workers: ") + e.what());
    return 1;
  }

  const auto start = Clock::now();
  for (int attempt = 0;; ++attempt) {
    const Outcome outcome = run_attempt(workers, o, attempt, start);
    if (outcome.exit_code == 0) {
      if (attempt > 0) say("job succeeded after " + std::to_string(attempt) + " restart(s)");
      return 0;
    }
    if (!outcome.restartable || attempt >= max_restarts) {
      say("job failed" + (attempt > 0 ? " after " + std::to_string(attempt) + " restart(s)" : std::string()) + ": " +
          outcome.failure);
      return outcome.exit_code;
    }
    say("restart " + std::to_string(attempt + 1) + " of " + std::to_string(max_restarts) + " after: " +
        outcome.failure + "; relaunching " + std::to_string(workers.size()) +
        (o.ps_mode ? " task(s)" : " worker(s)") + " with a fresh rendezvous");
  }
}
