// ReplicaThreads: one long-lived thread per local replica. run(body) hands body(r) to
// thread r, waits for all of them, and returns; threads sleep (never spin) between runs
// and are joined by the destructor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::distribute {

class ReplicaThreads {
 public:
  // setup(r) runs first on thread r; what it returns is destroyed on that thread when the
  // thread ends (so thread-local scopes it opens are closed on the right thread).
  using Setup = std::function<std::shared_ptr<void>(int)>;
  ReplicaThreads(int n, Setup setup);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  int size() const { return int(threads_.size()); }
  // Runs body(r) on every thread and waits for all; body must not throw (callers catch
  // inside it). Not reentrant: one run at a time.
  void run(const std::function<void(int)>& body);

 private:
  void loop(int r);

  Setup setup_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* body_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::distribute
