// CommWork: the handle of a collective started asynchronously (Communicator's *_async
// operations, a CommThread's submissions). wait() returns once the collective completed,
// rethrowing its failure (a PeerFailure stays one), and never waits unboundedly.
//
// Two kinds of completion. A collective run by the host (in-process, Gloo, a CommThread)
// has its result in memory once wait() returned. A stream-ordered one (NCCL's
// all_reduce_async: a kernel on a communication stream) completes, for wait(), once it is
// enqueued and ordered after the work that produced its buffer; its result then exists
// only for work ordered after it: order_consumer() makes a stream wait for it (an event,
// no host blocking), synchronize() blocks the host until the device finished it, bounded
// by the backend's failure rules (a dead peer raises, naming it). For host works both are
// trivial, so a caller written for streams handles every backend.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include <strata/core/stream.h>

namespace strata::distribute {

class CommWork {
 public:
  explicit CommWork(std::string what) : what_(std::move(what)) {}
  virtual ~CommWork() = default;
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

  // After wait() returned: orders `consumer` (a stream of the buffer's device) after the
  // collective, so that work enqueued on it from now on reads the result; the host does
  // not wait. Nothing to do for a host work (the default).
  virtual void order_consumer(const Stream& consumer) const { (void)consumer; }
  // After wait() returned: blocks until the collective has finished where it runs and
  // raises its failure. A host work has (the default); a stream-ordered one polls its
  // device, bounded by its communicator's timeout (`timeout_seconds` caps the wait too).
  virtual void synchronize(double timeout_seconds) const { wait(timeout_seconds); }

 private:
  const std::string what_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace strata::distribute
