// CommWork: the handle of a collective started asynchronously (Communicator's *_async
// operations, a CommThread's submissions). wait() returns once the collective completed,
// rethrowing its failure (a PeerFailure stays one), and never waits unboundedly.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace strata::distribute {

class CommWork {
 public:
  explicit CommWork(std::string what) : what_(std::move(what)) {}
  CommWork(const CommWork&) = delete;
  CommWork& operator=(const CommWork&) = delete;

  // A work that already completed (a synchronous fallback), with `error` if it failed.
  static std::shared_ptr<CommWork> completed(std::string what, std::exception_ptr error = nullptr);

  // Blocks until the collective completes, then rethrows its failure. Past
  // `timeout_seconds` throws strata::Error naming the collective (the work itself keeps
  // running: the transport's own timeout ends it).
  void wait(double timeout_seconds) const;
  bool done() const;
  const std::string& what() const { return what_; }

  // Called once by whoever runs the collective.
  void finish(std::exception_ptr error = nullptr);

 private:
  const std::string what_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace strata::distribute
