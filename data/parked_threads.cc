#include <strata/data/parked_threads.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <unistd.h>

#include <strata/core/poll.h>

namespace strata::data::detail {

namespace {

using Clock = std::chrono::steady_clock;

// How long a thread polls for a new task after finishing one (see the header), and how
// long it then sleeps before exiting.
constexpr auto kParkPoll = std::chrono::microseconds(100);
constexpr auto kParkIdle = std::chrono::seconds(10);

class ParkedThreads {
 public:
  explicit ParkedThreads(pid_t owner) : owner_(owner) {}
  pid_t owner() const { return owner_; }

  void run(std::function<void()> task) {
    bool claimed = false, wake = false;
    {
      std::lock_guard lk(mu_);
      if (idle_ > 0) {
        claimed = true;
        --idle_;  // claimed: exactly one idle thread will take this task
        tasks_.push_back(std::move(task));
        queued_.store(tasks_.size(), std::memory_order_release);
        wake = sleeping_ > 0;
      }
    }
    if (!claimed) {
      // No idle thread: a new one runs the task, then parks. Detached: after its task it
      // touches nothing but this object, which is never destroyed.
      std::thread([this, t = std::move(task)]() mutable { loop(std::move(t)); }).detach();
      return;
    }
    if (wake) has_task_.notify_one();
  }

 private:
  void loop(std::function<void()> task) {
    for (;;) {
      task();
      task = nullptr;  // release what the task captured before parking
      std::unique_lock lk(mu_);
      ++idle_;
      if (tasks_.empty()) {
        lk.unlock();
        poll_for([&] { return queued_.load(std::memory_order_acquire) != 0; }, kParkPoll);
        lk.lock();
        ++sleeping_;
        const bool got = has_task_.wait_for(lk, kParkIdle, [&] { return !tasks_.empty(); });
        --sleeping_;
        if (!got) {
          // No task was posted while idle_ counted this thread (run() pushes a task with
          // each claim), so leaving cannot strand one.
          --idle_;
          return;
        }
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
      queued_.store(tasks_.size(), std::memory_order_release);
    }
  }

  const pid_t owner_;  // the process whose threads these are
  std::mutex mu_;
  std::condition_variable has_task_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  std::atomic<size_t> queued_{0};            // tasks_.size(), written under mu_, polled without it
  int idle_ = 0;                             // parked threads not claimed by a task; mu_
  int sleeping_ = 0;                         // parked threads waiting on has_task_; mu_
};

// One set per process. A child forked (without exec) after a thread was parked has none of
// its parent's threads but a copy of their bookkeeping, which would hand its tasks to
// threads that do not exist: it starts a set of its own instead, and the copy is
// abandoned untouched (its mutex may have been held at the fork). Sets are leaked: parked
// threads may outlive static destructors.
ParkedThreads& parked_threads() {
  static std::atomic<ParkedThreads*> current{nullptr};
  const pid_t pid = ::getpid();
  ParkedThreads* p = current.load(std::memory_order_acquire);
  while (p == nullptr || p->owner() != pid) {
    auto* fresh = new ParkedThreads(pid);
    if (current.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread installed a set first: p is now that one
  }
  return *p;
}

}  // namespace

void run_on_parked_thread(std::function<void()> task) { parked_threads().run(std::move(task)); }

}  // namespace strata::data::detail
