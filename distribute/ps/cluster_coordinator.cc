#include <strata/distribute/ps/cluster_coordinator.h>

#include <algorithm>
#include <iostream>
#include <random>
#include <sstream>

#include <strata/distribute/ps/protocol.h>
#include <strata/distribute/ps/rpc.h>
#include <strata/distribute/ps/task_label.h>

namespace strata::distribute {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using ps::RpcMessage;

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void log(const std::string& line) { std::cerr << "strata: ClusterCoordinator: " + line + "\n" << std::flush; }

std::string fmt_seconds(double s) {
  std::ostringstream os;
  os.precision(3);
  os << s << " s";
  return os.str();
}

}  // namespace

// ---------------------------------------------------------------------------- values

struct RemoteValue::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  Status status = Status::Pending;
  std::vector<Tensor> result;
  std::string error;
  int worker = -1;
};

std::vector<Tensor> RemoteValue::fetch() const {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->status != Status::Pending; });
  if (state_->status == Status::Ready) return state_->result;
  fail("RemoteValue::fetch: ", state_->status == Status::Cancelled ? "the closure was cancelled: " : "",
       state_->error);
}

RemoteValue::Status RemoteValue::status() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->status;
}

int RemoteValue::worker() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->worker;
}

PerWorkerIterator PerWorkerDataset::make_iterator() const {
  return PerWorkerIterator{id_, coordinator_->next_iterator_.fetch_add(1)};
}

const Tensor& ClosureArgs::tensor(size_t i) const {
  STRATA_CHECK(i < args_.size(), "ClosureArgs::tensor: argument ", i, " out of range for ", args_.size(),
               " arguments of '", function_, "'");
  STRATA_CHECK(args_[i].tensor.defined(), "ClosureArgs::tensor: argument ", i, " of '", function_,
               "' is a per-worker iterator, not a tensor");
  return args_[i].tensor;
}

data::Iterator& ClosureArgs::iterator(size_t i) const {
  STRATA_CHECK(i < args_.size(), "ClosureArgs::iterator: argument ", i, " out of range for ", args_.size(),
               " arguments of '", function_, "'");
  STRATA_CHECK(args_[i].iterator != nullptr, "ClosureArgs::iterator: argument ", i, " of '", function_,
               "' is a tensor, not a per-worker iterator");
  return *args_[i].iterator;
}

data::Batch ClosureArgs::next(size_t i) const {
  std::optional<data::Batch> b = iterator(i).next();
  STRATA_CHECK(b.has_value(), "ClosureArgs::next: the per-worker iterator (argument ", i, " of '", function_,
               "', dataset ", args_[i].dataset, ") is exhausted on worker ", worker_,
               " (end of sequence; repeat() the dataset to train longer)");
  return std::move(*b);
}

// ---------------------------------------------------------------------------- coordinator

struct ClusterCoordinator::Closure {
  uint64_t id = 0;
  std::string function;
  RpcMessage request;
  std::shared_ptr<RemoteValue::State> value;
  int attempts = 0;
  // Set when put back after a worker failure: that worker's last sign of life.
  std::optional<Clock::time_point> failed_worker_last_alive;
};

struct ClusterCoordinator::WorkerRunner {
  int index = 0;
  std::string label;
  std::unique_ptr<ps::RpcClient> client;
  std::thread thread;
  bool alive = false;
  bool failed_before = false;
  uint64_t incarnation = 0;
};

ClusterCoordinator::ClusterCoordinator(ParameterServerStrategy& strategy, ClusterCoordinatorOptions options)
    : strategy_(strategy), options_(options) {
  STRATA_CHECK(options_.heartbeat_interval_seconds > 0 && options_.heartbeat_timeout_seconds > 0 &&
                   options_.closure_timeout_seconds > 0 && options_.worker_wait_timeout_seconds > 0 &&
                   options_.rpc_timeout_seconds > 0,
               "ClusterCoordinator: every timeout and interval in ClusterCoordinatorOptions must be positive");
  STRATA_CHECK(options_.heartbeat_timeout_seconds > options_.heartbeat_interval_seconds,
               "ClusterCoordinator: heartbeat_timeout_seconds (", options_.heartbeat_timeout_seconds,
               ") must exceed heartbeat_interval_seconds (", options_.heartbeat_interval_seconds, ")");
  if (!is_chief()) return;
  const ClusterSpec& spec = strategy_.cluster_resolver().cluster_spec();
  const int workers = spec.num_tasks("worker");
  stats_.completed_per_worker.assign(size_t(workers), 0);
  last_worker_alive_ = Clock::now();
  for (int i = 0; i < spec.num_tasks("ps"); ++i)
    ps_clients_.push_back(std::make_unique<ps::RpcClient>(spec.task_address("ps", i), ps::task_label(spec, "ps", i)));
  for (int w = 0; w < workers; ++w) {
    auto r = std::make_unique<WorkerRunner>();
    r->index = w;
    r->label = ps::task_label(spec, "worker", w);
    r->client = std::make_unique<ps::RpcClient>(spec.task_address("worker", w), r->label);
    runners_.push_back(std::move(r));
  }
  for (int w = 0; w < workers; ++w) runners_[size_t(w)]->thread = std::thread([this, w] { runner_loop(w); });
  monitor_ = std::thread([this] { monitor_loop(); });
}

ClusterCoordinator::~ClusterCoordinator() {
  try {
    shutdown();
  } catch (...) {
    // Best effort: a destructor must not throw.
  }
}

void ClusterCoordinator::require_chief(const char* method) const {
  STRATA_CHECK(is_chief(), "ClusterCoordinator::", method, ": only the chief schedules closures; this task is ",
               strategy_.cluster_resolver().task_type(), " ", strategy_.cluster_resolver().task_id(),
               " (workers call serve())");
}

void ClusterCoordinator::register_function(const std::string& name, RemoteFunction fn) {
  STRATA_CHECK(!name.empty() && fn, "ClusterCoordinator::register_function: a name and a function are required");
  std::lock_guard<std::mutex> lock(registry_mu_);
  STRATA_CHECK(functions_.emplace(name, std::move(fn)).second, "ClusterCoordinator::register_function: '", name,
               "' is already registered");
}

PerWorkerDataset ClusterCoordinator::create_per_worker_dataset(
    std::function<data::Dataset(const data::InputContext&)> dataset_fn) {
  STRATA_CHECK(dataset_fn != nullptr, "ClusterCoordinator::create_per_worker_dataset: empty dataset function");
  std::lock_guard<std::mutex> lock(registry_mu_);
  datasets_.push_back(std::move(dataset_fn));
  return PerWorkerDataset(this, int(datasets_.size()) - 1);
}

RemoteValue ClusterCoordinator::schedule(const std::string& function, std::vector<ClosureArg> args) {
  require_chief("schedule");
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    STRATA_CHECK(functions_.count(function), "ClusterCoordinator::schedule: no function named '", function,
                 "' is registered (register_function it in every process, chief included)");
    for (const auto& a : args) {
      if (const auto* it = std::get_if<PerWorkerIterator>(&a)) {
        STRATA_CHECK(it->dataset >= 0 && it->dataset < int(datasets_.size()) && it->iterator >= 0,
                     "ClusterCoordinator::schedule: argument is not an iterator of a per-worker dataset of this "
                     "coordinator");
      }
    }
  }
  auto closure = std::make_shared<Closure>();
  closure->function = function;
  closure->value = std::make_shared<RemoteValue::State>();
  json arg_list = json::array();
  for (size_t i = 0; i < args.size(); ++i) {
    if (const auto* t = std::get_if<Tensor>(&args[i])) {
      STRATA_CHECK(t->defined(), "ClusterCoordinator::schedule: argument ", i, " of '", function,
                   "' is an undefined tensor");
      arg_list.push_back({{"t", closure->request.tensors.size()}});
      closure->request.tensors.push_back(*t);
    } else {
      const auto& it = std::get<PerWorkerIterator>(args[i]);
      arg_list.push_back({{"d", it.dataset}, {"i", it.iterator}});
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  throw_if_failed();
  STRATA_CHECK(!stopping_, "ClusterCoordinator::schedule: the coordinator was shut down");
  closure->id = next_closure_++;
  closure->request.header = {{ps::kFrom, ps::kFromChief}, {"function", function}, {"closure", closure->id},
                             {"args", arg_list}};
  queue_.push_back(closure);
  ++unfinished_;
  queue_cv_.notify_one();
  return RemoteValue(closure->value);
}

// Called with mu_ held: the job's failure is permanent; a closure error is reported once.
void ClusterCoordinator::throw_if_failed() {
  if (!fatal_.empty()) fail(fatal_);
  if (!error_.empty()) {
    const std::string e = std::move(error_);
    error_.clear();
    fail(e);
  }
}

void ClusterCoordinator::join() {
  require_chief("join");
  std::unique_lock<std::mutex> lock(mu_);
  // Bounded: every closure ends by completing, failing (closure timeout) or being
  // cancelled (a failed job, including no reachable worker for worker_wait_timeout).
  done_cv_.wait(lock, [&] { return unfinished_ == 0 || !fatal_.empty(); });
  throw_if_failed();
}

bool ClusterCoordinator::done() {
  require_chief("done");
  std::lock_guard<std::mutex> lock(mu_);
  throw_if_failed();
  return unfinished_ == 0;
}

ClusterCoordinator::Stats ClusterCoordinator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ClusterCoordinator::resolve(const std::shared_ptr<Closure>& closure, RemoteValue::Status status,
                                 std::vector<Tensor> result, const std::string& error, int worker) {
  {
    std::lock_guard<std::mutex> lock(closure->value->mu);
    closure->value->status = status;
    closure->value->result = std::move(result);
    closure->value->error = error;
    closure->value->worker = worker;
    closure->value->cv.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  --unfinished_;
  if (status == RemoteValue::Status::Ready) {
    ++stats_.closures_completed;
    ++stats_.completed_per_worker[size_t(worker)];
  } else if (status == RemoteValue::Status::Failed) {
    ++stats_.closures_failed;
  }
  done_cv_.notify_all();
}

void ClusterCoordinator::cancel_queued(const std::string& why) {
  std::deque<std::shared_ptr<Closure>> drained;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drained.swap(queue_);
  }
  for (const auto& c : drained) resolve(c, RemoteValue::Status::Cancelled, {}, why, -1);
}

void ClusterCoordinator::fail_closure(const std::shared_ptr<Closure>& closure, const std::string& message,
                                      int worker) {
  // The error and the cancellation of what is queued happen together, and before the
  // failed closure is resolved: join() (which waits for it) then reports the error, and a
  // closure scheduled after that is never cancelled by this failure.
  std::deque<std::shared_ptr<Closure>> drained;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = message;
    drained.swap(queue_);
  }
  for (const auto& c : drained)
    resolve(c, RemoteValue::Status::Cancelled, {}, "cancelled after an earlier closure failed: " + message, -1);
  resolve(closure, RemoteValue::Status::Failed, {}, message, worker);
}

void ClusterCoordinator::set_fatal(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_.empty()) return;
    fatal_ = message;
    queue_cv_.notify_all();
    done_cv_.notify_all();
  }
  log("the job failed: " + message);
  cancel_queued(message);
}

void ClusterCoordinator::requeue(const std::shared_ptr<Closure>& closure, Clock::time_point last_alive) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_.empty() && !stopping_) {
      closure->failed_worker_last_alive = last_alive;
      ++closure->attempts;
      ++stats_.closures_rescheduled;
      queue_.push_front(closure);
      queue_cv_.notify_one();
      return;
    }
    why = fatal_.empty() ? "the coordinator was shut down" : fatal_;
  }
  resolve(closure, RemoteValue::Status::Cancelled, {}, why, -1);
}

void ClusterCoordinator::runner_loop(int w) {
  WorkerRunner& r = *runners_[size_t(w)];
  const json ping_header = {{ps::kFrom, ps::kFromChief}};
  auto mark_failed = [&](const std::string& why) {
    r.alive = false;
    r.failed_before = true;
    r.client->reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.worker_failures;
    }
    log("worker " + r.label + " failed: " + why);
  };
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (!r.alive) {
      try {
        RpcMessage pong = r.client->call(ps::kPing, RpcMessage{ping_header, {}}, options_.heartbeat_timeout_seconds);
        r.incarnation = pong.header.at("incarnation").get<uint64_t>();
        r.alive = true;
        std::lock_guard<std::mutex> lock(mu_);
        last_worker_alive_ = Clock::now();
        if (r.failed_before) {
          ++stats_.worker_rejoins;
          log("worker " + r.label + " is back; it gets closures again");
        }
      } catch (const std::exception&) {
        std::unique_lock<std::mutex> lock(mu_);
        queue_cv_.wait_for(lock, std::chrono::duration<double>(options_.heartbeat_interval_seconds),
                           [&] { return stopping_; });
        continue;
      }
    }
    std::shared_ptr<Closure> closure;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queue_cv_.wait_for(lock, std::chrono::duration<double>(options_.heartbeat_interval_seconds),
                         [&] { return stopping_ || (!queue_.empty() && fatal_.empty()); });
      if (stopping_) return;
      if (!queue_.empty() && fatal_.empty()) {
        closure = queue_.front();
        queue_.pop_front();
      }
    }
    if (closure) {
      run_on(w, closure);
      continue;
    }
    // Idle: a heartbeat both ways (the worker learns the chief is alive).
    try {
      RpcMessage pong = r.client->call(ps::kPing, RpcMessage{ping_header, {}}, options_.heartbeat_timeout_seconds);
      const auto incarnation = pong.header.at("incarnation").get<uint64_t>();
      if (incarnation != r.incarnation) {
        log("worker " + r.label + " restarted while idle");
        r.incarnation = incarnation;
      }
      std::lock_guard<std::mutex> lock(mu_);
      last_worker_alive_ = Clock::now();
    } catch (const std::exception& e) {
      mark_failed(std::string("no reply to a heartbeat: ") + e.what());
    }
  }
}

bool ClusterCoordinator::run_on(int w, const std::shared_ptr<Closure>& closure) {
  WorkerRunner& r = *runners_[size_t(w)];
  const json ping_header = {{ps::kFrom, ps::kFromChief}};
  const double interval = options_.heartbeat_interval_seconds;
  auto last_alive = Clock::now();
  auto fail_worker = [&](const std::string& why) {
    r.alive = false;
    r.failed_before = true;
    r.client->reset();  // drops anything still queued for it: never delivered to its successor
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.worker_failures;
    }
    log("worker " + r.label + " failed: " + why + "; closure '" + closure->function + "' #" +
        std::to_string(closure->id) + " goes to another worker");
    requeue(closure, last_alive);
  };

  uint64_t run_id = 0;
  try {
    // A worker that cannot take the closure within the heartbeat timeout has failed (it
    // died between two closures): waiting the whole rpc timeout would hold the closure
    // back that long before another worker gets it.
    run_id = r.client->send(ps::kRun, closure->request,
                            std::min(options_.rpc_timeout_seconds, options_.heartbeat_timeout_seconds));
  } catch (const std::exception& e) {
    fail_worker(std::string("cannot send it a closure: ") + e.what());
    return false;
  }
  const auto dispatched = Clock::now();
  if (closure->failed_worker_last_alive) {
    const double delay = seconds_between(*closure->failed_worker_last_alive, dispatched);
    closure->failed_worker_last_alive.reset();
    std::lock_guard<std::mutex> lock(mu_);
    stats_.reschedule_seconds.push_back(delay);
  }
  const auto deadline = dispatched + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(options_.closure_timeout_seconds));
  auto next_ping = dispatched + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
  for (;;) {
    std::string abandon;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) abandon = "the coordinator was shut down";
      else if (!fatal_.empty()) abandon = fatal_;
    }
    if (!abandon.empty()) {
      resolve(closure, RemoteValue::Status::Cancelled, {}, abandon, -1);
      return true;
    }
    auto now = Clock::now();
    const double wait = std::max(0.001, seconds_between(now, std::min(next_ping, deadline)));
    std::optional<ps::RpcClient::Reply> reply;
    try {
      reply = r.client->receive(wait);
    } catch (const std::exception& e) {
      fail_worker(std::string("malformed reply: ") + e.what());
      return false;
    }
    now = Clock::now();
    if (reply && reply->id == run_id) {
      if (!reply->ok) {
        fail_closure(closure, "closure '" + closure->function + "' failed on worker " + r.label + ": " + reply->error,
                     w);
        return true;
      }
      const json& h = reply->message.header;
      if (h.value("status", std::string()) == "ok") {
        resolve(closure, RemoteValue::Status::Ready, std::move(reply->message.tensors), "", w);
        std::lock_guard<std::mutex> lock(mu_);
        last_worker_alive_ = now;
        return true;
      }
      const std::string message = h.value("message", std::string("unknown error"));
      if (h.value("kind", std::string()) == "ps_unavailable") {
        const int ps_index = h.value("ps", -1);
        const std::string label = ps_index >= 0 && ps_index < strategy_.num_ps()
                                      ? strategy_.client().ps_label(ps_index)
                                      : std::string("a parameter server");
        const std::string msg = "parameter server " + label + " failed (seen by worker " + r.label +
                                " running closure '" + closure->function + "'): " + message;
        fail_parameter_server(ps_index, msg);
        resolve(closure, RemoteValue::Status::Failed, {}, msg, w);
        return true;
      }
      fail_closure(closure, "closure '" + closure->function + "' failed on worker " + r.label + ": " + message, w);
      return true;
    }
    if (reply) {
      // A heartbeat reply (or a late one to an older request): the worker is alive —
      // unless it is a new process, which never got our closure.
      if (reply->ok && reply->message.header.contains("incarnation")) {
        const auto incarnation = reply->message.header.at("incarnation").get<uint64_t>();
        if (incarnation != r.incarnation) {
          r.incarnation = incarnation;
          fail_worker("it restarted while running the closure");
          return false;
        }
        last_alive = now;
        std::lock_guard<std::mutex> lock(mu_);
        last_worker_alive_ = now;
      }
      continue;
    }
    if (seconds_between(last_alive, now) > options_.heartbeat_timeout_seconds) {
      fail_worker("no reply to heartbeats for " + fmt_seconds(seconds_between(last_alive, now)));
      return false;
    }
    if (now >= deadline) {
      const std::string msg = "closure '" + closure->function + "' did not finish on worker " + r.label + " within " +
                              fmt_seconds(options_.closure_timeout_seconds) +
                              " (ClusterCoordinatorOptions::closure_timeout_seconds)";
      r.alive = false;
      r.client->reset();
      fail_closure(closure, msg, w);
      return false;
    }
    if (now >= next_ping) {
      try {
        r.client->send(ps::kPing, RpcMessage{ping_header, {}}, interval);
      } catch (const std::exception&) {
        // Not connected: the heartbeat timeout decides.
      }
      next_ping = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
    }
  }
}

void ClusterCoordinator::fail_parameter_server(int ps, const std::string& message) {
  if (ps >= 0 && ps < strategy_.num_ps()) strategy_.client().mark_failed(ps, message);
  set_fatal(message);
}

void ClusterCoordinator::monitor_loop() {
  const size_t n = ps_clients_.size();
  const auto start = Clock::now();
  std::vector<std::optional<uint64_t>> incarnation(n);
  std::vector<Clock::time_point> last_ok(n, start);
  const json ping_header = {{ps::kFrom, ps::kFromChief}};
  const double startup = strategy_.options().startup_timeout_seconds;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string& label = strategy_.client().ps_label(int(i));
      try {
        RpcMessage pong = ps_clients_[i]->call(ps::kPing, RpcMessage{ping_header, {}},
                                               options_.heartbeat_timeout_seconds);
        const auto inc = pong.header.at("incarnation").get<uint64_t>();
        if (incarnation[i] && *incarnation[i] != inc) {
          fail_parameter_server(int(i), "parameter server " + label +
                                            " restarted and lost its variables; restart the job (the chief "
                                            "resumes from its latest checkpoint)");
        }
        incarnation[i] = inc;
        last_ok[i] = Clock::now();
      } catch (const std::exception& e) {
        const auto now = Clock::now();
        if (incarnation[i] && seconds_between(last_ok[i], now) >= options_.heartbeat_timeout_seconds) {
          fail_parameter_server(int(i), "parameter server " + label + " failed: no reply to heartbeats for " +
                                            fmt_seconds(seconds_between(last_ok[i], now)) + " (" + e.what() + ")");
        } else if (!incarnation[i] && seconds_between(start, now) > startup) {
          fail_parameter_server(int(i), "parameter server " + label + " never answered within " + fmt_seconds(startup));
        }
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (unfinished_ > 0 && fatal_.empty() &&
        seconds_between(last_worker_alive_, Clock::now()) > options_.worker_wait_timeout_seconds) {
      const std::string msg = "no worker has answered for " +
                              fmt_seconds(seconds_between(last_worker_alive_, Clock::now())) + " with " +
                              std::to_string(unfinished_) +
                              " closure(s) pending (ClusterCoordinatorOptions::worker_wait_timeout_seconds)";
      lock.unlock();
      set_fatal(msg);
      lock.lock();
    }
    queue_cv_.wait_for(lock, std::chrono::duration<double>(options_.heartbeat_interval_seconds),
                       [&] { return stopping_; });
  }
}

void ClusterCoordinator::shutdown() {
  if (!is_chief()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stopping_ = true;
    queue_cv_.notify_all();
    done_cv_.notify_all();
  }
  for (auto& r : runners_)
    if (r->thread.joinable()) r->thread.join();
  if (monitor_.joinable()) monitor_.join();
  cancel_queued("the coordinator was shut down");
  const json header = {{ps::kFrom, ps::kFromChief}};
  // Best effort and short: a task that already died cannot be told.
  for (auto& r : runners_) {
    try {
      r->client->call(ps::kShutdown, RpcMessage{header, {}}, 0.5);
    } catch (const std::exception&) {
    }
  }
  for (auto& c : ps_clients_) {
    try {
      c->call(ps::kShutdown, RpcMessage{header, {}}, 0.5);
    } catch (const std::exception&) {
    }
  }
}

// ---------------------------------------------------------------------------- worker

RpcMessage ClusterCoordinator::execute(const RpcMessage& request) {
  const std::string function = request.header.at("function").get<std::string>();
  auto error_reply = [](const std::string& kind, const std::string& message, int ps_index = -1) {
    json h = {{"status", "error"}, {"kind", kind}, {"message", message}};
    if (ps_index >= 0) h["ps"] = ps_index;
    return RpcMessage{h, {}};
  };
  try {
    RemoteFunction fn;
    std::function<data::Dataset(const data::InputContext&)> dataset_fn;
    {
      std::lock_guard<std::mutex> lock(registry_mu_);
      auto it = functions_.find(function);
      STRATA_CHECK(it != functions_.end(), "no function named '", function,
                   "' is registered on this worker (every task must register the same functions)");
      fn = it->second;
    }
    const ClusterResolver& resolver = strategy_.cluster_resolver();
    ClosureArgs args;
    args.worker_ = resolver.task_id();
    args.function_ = function;
    for (const auto& a : request.header.at("args")) {
      ClosureArgs::Arg arg;
      if (a.contains("t")) {
        const size_t k = a.at("t").get<size_t>();
        STRATA_CHECK(k < request.tensors.size(), "closure argument refers to tensor ", k, " of ",
                     request.tensors.size());
        arg.tensor = request.tensors[k];
      } else {
        arg.dataset = a.at("d").get<int>();
        arg.handle = a.at("i").get<int>();
        auto it = iterators_.find(arg.handle);
        if (it == iterators_.end()) {
          {
            std::lock_guard<std::mutex> lock(registry_mu_);
            STRATA_CHECK(arg.dataset >= 0 && arg.dataset < int(datasets_.size()), "per-worker dataset ",
                         arg.dataset, " is not registered on this worker (", datasets_.size(),
                         " are): every task must call create_per_worker_dataset in the same order");
            dataset_fn = datasets_[size_t(arg.dataset)];
          }
          const data::InputContext ctx(strategy_.cluster_num_workers(), resolver.task_id(), 1);
          it = iterators_.emplace(arg.handle, dataset_fn(ctx).make_iterator()).first;
        }
        arg.iterator = &it->second;
      }
      args.args_.push_back(std::move(arg));
    }
    auto scope = strategy_.scope();
    StepScope step(strategy_);
    std::vector<Tensor> out = fn(args);
    step.commit();
    RpcMessage reply{json{{"status", "ok"}}, {}};
    for (size_t i = 0; i < out.size(); ++i) {
      STRATA_CHECK(out[i].defined(), "the function returned an undefined tensor at position ", i);
      reply.tensors.push_back(out[i].clone());
    }
    return reply;
  } catch (const ParameterServerUnavailable& e) {
    return error_reply("ps_unavailable", e.what(), e.ps_index());
  } catch (const std::exception& e) {
    return error_reply("function", e.what());
  }
}

void ClusterCoordinator::serve() {
  const ClusterResolver& resolver = strategy_.cluster_resolver();
  STRATA_CHECK(resolver.task_type() == "worker", "ClusterCoordinator::serve: only workers serve closures; this "
               "task is ", resolver.task_type(), " ", resolver.task_id());
  const ClusterSpec& spec = resolver.cluster_spec();
  const std::string label = ps::task_label(spec, "worker", resolver.task_id());
  const auto [host, port] = split_host_port(spec.task_address("worker", resolver.task_id()), "worker address");
  ps::ChiefWatch watch(options_.server, "worker " + label, ps::task_label(spec, "chief", 0));
  const uint64_t incarnation = std::random_device{}() * 0x100000000ull + std::random_device{}();
  auto touch = [&watch](const RpcMessage& request) {
    if (request.header.value(ps::kFrom, std::string()) == ps::kFromChief) watch.touch();
  };
  ps::RpcServer server(host, port, label);
  server.add_method(ps::kPing, [&](const RpcMessage& request) {
    touch(request);
    return RpcMessage{json{{"incarnation", incarnation}}, {}};
  });
  server.add_method(ps::kShutdown, [&](const RpcMessage& request) {
    touch(request);
    watch.shutdown();
    return RpcMessage{};
  });
  server.add_method(
      ps::kRun,
      [&](const RpcMessage& request) {
        touch(request);
        return execute(request);
      },
      /*background=*/true);
  server.start();
  std::cerr << "strata: worker " << label << " serving closures" << std::endl;
  watch.join();  // the server stops (and finishes its current closure) on the way out
}

}  // namespace strata::distribute
