#include <strata/core/thread_pool.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <strata/core/poll.h>

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

// How long a worker polls for the next job after finishing one, and how long the caller
// polls for the workers' chunks before sleeping. Waking a sleeping thread costs ~25-50 us
// on these machines (PLATFORM.md), as much as a whole 128^3 GEMM, so ops issued back to
// back (a layer's forward and gradient GEMMs) must find the worker awake. The polls are
// bounded and yield the core on every turn: a spinning worker must not steal a core from
// replica threads or from a second training process on the same machine.
constexpr auto kWorkerPoll = std::chrono::microseconds(50);
constexpr auto kCallerPoll = std::chrono::microseconds(100);

thread_local bool t_in_chunk = false;  // inside a pool chunk: nested work runs inline

// A fixed set of workers. A parallel_for posts one Job (a range split into `parts`
// chunks); workers and the caller claim chunks with the job's atomic counter, so the
// caller takes every chunk no worker has claimed yet and never waits for a worker that is
// still waking up. Each job is its own object, so a worker that wakes late can never take
// a chunk of a newer job with an old index.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int parts = 0;
  std::atomic<int> next{0};
  std::atomic<int> pending{0};  // chunks not finished yet
  std::exception_ptr error;     // guarded by Pool::mutex_
};

class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop(); }

  int size() const { return size_.load(std::memory_order_relaxed); }

  void resize(int threads) {
    std::lock_guard<std::mutex> run(run_mutex_);
    stop();
    stopping_ = false;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
    size_.store(int(workers_.size()) + 1, std::memory_order_relaxed);
  }

  void run(int64_t n, int parts, const std::function<void(int64_t, int64_t)>& fn) {
    // One job at a time; concurrent callers (replica threads) run inline instead of waiting.
    std::unique_lock<std::mutex> run(run_mutex_, std::try_to_lock);
    if (!run.owns_lock()) {
      fn(0, n);
      return;
    }
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    job->parts = parts;
    job->pending.store(parts, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    // Wake only as many sleeping workers as there are parts for besides the caller's own: a
    // 2-part GEMM on a 16-thread pool must not pull 15 workers out of sleep (each a futex
    // wake-up and a core taken from whatever else runs). Polling workers need no signal;
    // a notify without waiters is cheap (glibc returns at once).
    const int helpers = std::min(parts - 1, int(workers_.size()));
    if (helpers >= int(workers_.size())) {
      wake_.notify_all();
    } else {
      for (int i = 0; i < helpers; ++i) wake_.notify_one();
    }
    work(*job);
    wait_done(*job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_.reset();
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void work(Job& job) {
    t_in_chunk = true;
    for (;;) {
      const int part = job.next.fetch_add(1, std::memory_order_relaxed);
      if (part >= job.parts) break;
      const int64_t begin = job.n * part / job.parts, end = job.n * (part + 1) / job.parts;
      try {
        (*job.fn)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!job.error) job.error = std::current_exception();
      }
      if (job.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // Under the mutex, so a caller between its check and its wait cannot miss it.
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_all();
      }
    }
    t_in_chunk = false;
  }

  // The caller polls for the last chunks (normally a worker's, finishing at about the
  // same time as the caller's), then sleeps.
  void wait_done(Job& job) {
    const auto done = [&] { return job.pending.load(std::memory_order_acquire) == 0; };
    if (poll_for(done, kCallerPoll)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, done);
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      poll_for([&] { return generation_.load(std::memory_order_acquire) != seen; }, kWorkerPoll);
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] {
          return stopping_ || (generation_.load(std::memory_order_relaxed) != seen && job_ != nullptr);
        });
        if (stopping_) return;
        seen = generation_.load(std::memory_order_relaxed);
        job = job_;
      }
      work(*job);
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    size_.store(1, std::memory_order_relaxed);
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::atomic<int> size_{1};
  std::shared_ptr<Job> job_;                // guarded by mutex_
  std::atomic<uint64_t> generation_{0};     // written under mutex_, polled without it
  bool stopping_ = false;                   // guarded by mutex_
};

int default_threads() {
  if (const char* env = std::getenv("STRATA_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
  static Pool* p = new Pool(default_threads());  // leaked: workers may outlive static dtors
  return *p;
}

thread_local int t_limit = 0;

}  // namespace

int num_threads() { return pool().size(); }
void set_num_threads(int n) { pool().resize(std::max(1, n)); }
void set_thread_parallelism_limit(int max_threads) { t_limit = max_threads; }
int thread_parallelism_limit() { return t_limit; }

int available_threads() {
  if (t_in_chunk) return 1;
  const int threads = num_threads();
  return t_limit > 0 ? std::min(threads, t_limit) : threads;
}

void parallel_for(int64_t n, double cost_per_item,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = available_threads();
  // ~0.5 ms of work per extra thread repays its wake-up (PLATFORM.md).
  constexpr double kMinWorkPerThreadNs = 250000.0;
  const double total = double(n) * cost_per_item;
  int parts = int(std::min<double>(threads, total / kMinWorkPerThreadNs));
  parts = int(std::min<int64_t>(parts, n));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  pool().run(n, parts, fn);
}

void parallel_for_parts(int64_t n, int parts, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  parts = int(std::min<int64_t>({int64_t(parts), n, int64_t(available_threads())}));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  pool().run(n, parts, fn);
}

}  // namespace strata
