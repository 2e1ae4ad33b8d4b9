#include <strata/core/thread_pool.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

namespace {

// A fixed set of sleeping workers. A parallel_for posts one Job (a range split into
// `parts` chunks); workers and the caller claim chunks with the job's atomic counter, and
// the caller waits until every chunk is done. Each job is its own object, so a worker that
// wakes late can never take a chunk of a newer job with an old index. Workers never spin
// (PLATFORM.md: spinning threads steal the cores from replica threads).
struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int parts = 0;
  std::atomic<int> next{0};
  int pending = 0;  // guarded by Pool::mutex_
  std::exception_ptr error;
};

class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop(); }

  int size() const { return int(workers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard<std::mutex> run(run_mutex_);
    stop();
    stopping_ = false;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
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
    job->pending = parts;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      ++generation_;
    }
    wake_.notify_all();
    work(*job);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return job->pending == 0; });
    job_.reset();
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void work(Job& job) {
    for (;;) {
      const int part = job.next.fetch_add(1);
      if (part >= job.parts) return;
      const int64_t begin = job.n * part / job.parts, end = job.n * (part + 1) / job.parts;
      std::exception_ptr error;
      try {
        (*job.fn)(begin, end);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !job.error) job.error = error;
      if (--job.pending == 0) done_.notify_all();
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && job_ != nullptr); });
        if (stopping_) return;
        seen = generation_;
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
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
  bool stopping_ = false;
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

void parallel_for(int64_t n, double cost_per_item,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = num_threads();
  if (t_limit > 0) threads = std::min(threads, t_limit);
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

}  // namespace strata
