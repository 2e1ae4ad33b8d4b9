// CommThread: a communication thread that runs submitted collectives one at a time, in
// submission order, while the submitting (compute) thread goes on — the CPU counterpart
// of a CUDA communication stream. Each submission returns a CommWork to wait on.
//
// Collectives submitted here must be bounded by their transport's own timeout (every
// strata communicator is), so the thread always gets through its queue; the destructor
// waits for the queue to empty, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <strata/distribute/collective/comm_work.h>

namespace strata::distribute {

class CommThread {
 public:
  CommThread();
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues fn; its exception (if any) is rethrown by the work's wait().
  std::shared_ptr<CommWork> submit(std::string what, std::function<void()> fn);

 private:
  void loop();

  struct Item {
    std::shared_ptr<CommWork> work;
    std::function<void()> fn;
  };
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the queue exists
};

}  // namespace strata::distribute
