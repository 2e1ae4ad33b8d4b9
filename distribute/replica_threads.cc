#include <strata/distribute/replica_threads.h>

namespace strata::distribute {

ReplicaThreads::ReplicaThreads(int n, Setup setup) : setup_(std::move(setup)) {
  threads_.reserve(size_t(n));
  for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
}

ReplicaThreads::~ReplicaThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaThreads::run(const std::function<void(int)>& body) {
  std::unique_lock<std::mutex> lock(mutex_);
  body_ = &body;
  pending_ = int(threads_.size());
  ++generation_;
  start_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  body_ = nullptr;
}

void ReplicaThreads::loop(int r) {
  std::shared_ptr<void> state = setup_ ? setup_(r) : nullptr;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* body;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) break;
      seen = generation_;
      body = body_;
    }
    (*body)(r);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--pending_ == 0) done_.notify_all();
  }
  state.reset();  // closes the thread's scopes on this thread
}

}  // namespace strata::distribute
