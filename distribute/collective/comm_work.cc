#include <strata/distribute/collective/comm_work.h>

#include <chrono>

#include <strata/core/error.h>

namespace strata::distribute {

std::shared_ptr<CommWork> CommWork::completed(std::string what, std::exception_ptr error) {
  auto work = std::make_shared<CommWork>(std::move(what));
  work->finish(error);
  return work;
}

void CommWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool CommWork::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void CommWork::wait(double timeout_seconds) const {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto limit = std::chrono::duration<double>(timeout_seconds);
  if (!cv_.wait_for(lock, limit, [&] { return done_; })) {
    fail(what_, ": did not complete within ", timeout_seconds, " s (waiting for the asynchronous collective)");
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace strata::distribute
