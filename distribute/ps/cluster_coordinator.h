// ClusterCoordinator: schedules functions on the workers of a ParameterServerStrategy job
// (tf.distribute.coordinator.ClusterCoordinator). See parameter_server_strategy.h for a
// whole program.
//
// Every task runs the same program, so functions are registered by name in every
// process (register_function) and the chief schedules them by name. On the chief:
//   schedule(name, args) -> RemoteValue   queues a closure; any idle worker runs it
//   join()                                waits until every scheduled closure finished
//   done()                                whether they have, without waiting
//   RemoteValue::fetch()                  waits for one closure's result
// On a worker, serve() runs the chief's closures one at a time until the chief shuts the
// job down. Each closure runs inside the strategy's scope and a StepScope that is
// committed when the function returns (its variable updates reach the parameter servers
// atomically, ps_variable.h); a function that throws commits nothing.
//
// Datasets: create_per_worker_dataset(fn) is called in every process in the same order;
// each worker calls fn with its InputContext (input pipeline = worker index, one per
// worker) the first time a closure uses an iterator of it, and keeps the iterator for
// later closures. make_iterator() on the chief gives a handle to pass to schedule().
//
// Failures, as TensorFlow defines them:
//  - a closure whose function throws: join(), done() or the next schedule() rethrows the
//    error once (naming the function and the worker), closures still queued are cancelled
//    (their fetch() throws), and the coordinator can be used again;
//  - a worker that stops answering heartbeats for heartbeat_timeout_seconds (or comes
//    back as a new process) has its in-flight closure put back at the front of the queue
//    for another worker (closures therefore run at least once, not exactly once); the
//    coordinator keeps pinging it and gives it closures again when it is back;
//  - a parameter server that stops answering, or comes back empty, fails the job: every
//    pending closure is cancelled and join()/done()/schedule()/fetch() throw an error
//    naming the task, from then on (restart the job; the chief resumes from its latest
//    checkpoint);
//  - closures pending while no worker has been reachable for worker_wait_timeout_seconds
//    fail the job the same way, so nothing waits forever;
//  - the chief failing ends the job: servers stop after ServerOptions::chief_timeout_seconds.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <strata/core/tensor.h>
#include <strata/data/dataset.h>
#include <strata/data/input_context.h>
#include <strata/distribute/ps/parameter_server_strategy.h>
#include <strata/distribute/ps/server_options.h>

namespace strata::distribute {

namespace ps {
class RpcClient;
class RpcServer;
struct RpcMessage;
}  // namespace ps

class ClusterCoordinator;

struct ClusterCoordinatorOptions {
  // The chief pings every worker and parameter server this often (also its own heartbeat
  // for the servers' ServerOptions::chief_timeout_seconds).
  double heartbeat_interval_seconds = 0.25;
  // A worker or parameter server silent this long has failed.
  double heartbeat_timeout_seconds = 3.0;
  // One run of one closure on a worker; past it the closure fails.
  double closure_timeout_seconds = 600.0;
  // With closures pending and no worker reachable this long, the job fails.
  double worker_wait_timeout_seconds = 300.0;
  // Sending a request to a connected worker.
  double rpc_timeout_seconds = 30.0;
  // serve() on a worker: how long to wait for the chief.
  ServerOptions server;
};

// A handle on the per-worker iterators of one per-worker dataset.
struct PerWorkerIterator {
  int dataset = -1;
  int iterator = -1;
};

class PerWorkerDataset {
 public:
  // A new iterator on every worker (each starts at the beginning of its worker's dataset).
  PerWorkerIterator make_iterator() const;
  int id() const { return id_; }

 private:
  friend class ClusterCoordinator;
  PerWorkerDataset(ClusterCoordinator* coordinator, int id) : coordinator_(coordinator), id_(id) {}
  ClusterCoordinator* coordinator_;
  int id_;
};

using ClosureArg = std::variant<Tensor, PerWorkerIterator>;

// What a scheduled function receives on the worker.
class ClosureArgs {
 public:
  size_t size() const { return args_.size(); }
  // Argument i, which must be a tensor.
  const Tensor& tensor(size_t i) const;
  // Argument i, which must be a per-worker iterator: this worker's iterator.
  data::Iterator& iterator(size_t i) const;
  // The next element of iterator argument i; throws strata::Error when it is exhausted
  // (the closure then fails, as TensorFlow's OutOfRangeError does).
  data::Batch next(size_t i) const;
  // The index of the worker running the closure.
  int worker_index() const { return worker_; }
  const std::string& function() const { return function_; }

 private:
  friend class ClusterCoordinator;
  struct Arg {
    Tensor tensor;
    data::Iterator* iterator = nullptr;
    int dataset = -1, handle = -1;
  };
  std::vector<Arg> args_;
  int worker_ = 0;
  std::string function_;
};

using RemoteFunction = std::function<std::vector<Tensor>(ClosureArgs& args)>;

// The future result of a scheduled closure (tf's RemoteValue).
class RemoteValue {
 public:
  enum class Status { Pending, Ready, Failed, Cancelled };

  // Waits for the closure and returns its result; throws strata::Error when it failed or
  // was cancelled. The wait ends when the closure ends: the coordinator bounds that by its
  // closure, heartbeat and worker-wait timeouts.
  std::vector<Tensor> fetch() const;
  Status status() const;
  // The worker that produced the value (-1 until it is ready).
  int worker() const;

  struct State;
  explicit RemoteValue(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

class ClusterCoordinator {
 public:
  explicit ClusterCoordinator(ParameterServerStrategy& strategy, ClusterCoordinatorOptions options = {});
  // On the chief: shutdown().
  ~ClusterCoordinator();
  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  ParameterServerStrategy& strategy() const { return strategy_; }
  bool is_chief() const { return strategy_.is_chief(); }

  // Every process: registers a schedulable function (before serve()/schedule()).
  void register_function(const std::string& name, RemoteFunction fn);
  // Every process, in the same order.
  PerWorkerDataset create_per_worker_dataset(std::function<data::Dataset(const data::InputContext&)> dataset_fn);

  // ---- chief ----
  RemoteValue schedule(const std::string& function, std::vector<ClosureArg> args = {});
  void join();
  bool done();
  // Ends the job (idempotent): stops scheduling, cancels what is still queued, and tells
  // every worker and parameter server to stop. Variables are unreadable afterwards.
  void shutdown();

  struct Stats {
    int64_t closures_completed = 0;
    int64_t closures_failed = 0;
    int64_t closures_rescheduled = 0;
    int64_t worker_failures = 0;
    int64_t worker_rejoins = 0;
    std::vector<int64_t> completed_per_worker;
    // For each rescheduled closure: seconds from its worker's last sign of life to the
    // closure being sent to another worker (detection + requeue + dispatch).
    std::vector<double> reschedule_seconds;
  };
  Stats stats() const;

  // ---- worker ----
  // Runs closures for the chief until it shuts the job down (returns) or is lost (throws).
  void serve();

 private:
  friend class PerWorkerDataset;
  struct Closure;
  struct WorkerRunner;

  void runner_loop(int worker);
  void monitor_loop();
  bool run_on(int worker, const std::shared_ptr<Closure>& closure);
  void resolve(const std::shared_ptr<Closure>& closure, RemoteValue::Status status, std::vector<Tensor> result,
               const std::string& error, int worker);
  void fail_closure(const std::shared_ptr<Closure>& closure, const std::string& message, int worker);
  void set_fatal(const std::string& message);
  // A lost parameter server fails the job, and the strategy's own calls to it (the chief
  // reading variables for a checkpoint or the global step) stop waiting: without that they
  // would wait the whole RPC timeout (30 s by default) before the job could fail.
  // `ps` out of range (a worker that could not say which server) only fails the job.
  void fail_parameter_server(int ps, const std::string& message);
  void cancel_queued(const std::string& why);
  void throw_if_failed();
  void requeue(const std::shared_ptr<Closure>& closure, std::chrono::steady_clock::time_point last_alive);
  void require_chief(const char* method) const;
  ps::RpcMessage execute(const ps::RpcMessage& request);

  ParameterServerStrategy& strategy_;
  ClusterCoordinatorOptions options_;

  // Registrations (every process).
  mutable std::mutex registry_mu_;
  std::map<std::string, RemoteFunction> functions_;
  std::vector<std::function<data::Dataset(const data::InputContext&)>> datasets_;
  std::atomic<int> next_iterator_{0};

  // Chief state.
  mutable std::mutex mu_;
  std::condition_variable queue_cv_, done_cv_;
  std::deque<std::shared_ptr<Closure>> queue_;
  int64_t unfinished_ = 0;
  uint64_t next_closure_ = 0;
  std::string error_;  // the first closure error not yet reported
  std::string fatal_;  // the job failed
  bool stopping_ = false;
  bool shut_down_ = false;
  std::chrono::steady_clock::time_point last_worker_alive_;
  Stats stats_;
  std::vector<std::unique_ptr<WorkerRunner>> runners_;
  std::thread monitor_;
  std::vector<std::unique_ptr<ps::RpcClient>> ps_clients_;

  // Worker state (serve()).
  std::map<int, data::Iterator> iterators_;  // by iterator handle; executor thread only
  std::map<int, int> iterator_dataset_;
};

}  // namespace strata::distribute
