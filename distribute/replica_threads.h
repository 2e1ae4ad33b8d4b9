// ReplicaThreads: one long-lived thread per local replica. run(body) hands body(r) to
// thread r, waits for all of them, and returns; threads sleep between runs.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::distribute {

class ReplicaThreads {
 public:
  // setup(r) runs once on thread r when it starts (thread-local state).
  ReplicaThreads(int n, std::function<void(int)> setup);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  // Runs body(r) on every thread; body must not throw (callers catch inside it).
  void run(const std::function<void(int)>& body);

 private:
  void loop(int r);

  std::function<void(int)> setup_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* body_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::distribute
