#include <strata/distribute/collective/comm_thread.h>

namespace strata::distribute {

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<CommWork> CommThread::submit(std::string what, std::function<void()> fn) {
  auto work = std::make_shared<CommWork>(std::move(what));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Item{work, std::move(fn)});
  }
  cv_.notify_all();
  return work;
}

void CommThread::loop() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      item.fn();
    } catch (...) {
      error = std::current_exception();
    }
    item.fn = nullptr;  // drop what it captured before waiters resume
    // Moved: once a waiter rethrows the error, this thread holds no reference to it.
    item.work->finish(std::move(error));
  }
}

}  // namespace strata::distribute
