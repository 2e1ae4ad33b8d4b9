// The in-process collective backend: replica threads of one process reducing through
// shared memory. One InProcessGroup is shared by the group; each replica thread holds an
// InProcessCommunicator with its rank.
//
// Every collective is a two-phase rendezvous: each rank deposits its input and the last
// to arrive combines them once; then every rank withdraws its result, and the group opens
// for the next collective only after all have withdrawn. Ranks that call different
// collectives (or different sizes) in the same position get an error naming both calls;
// a rank missing past the timeout, or a failed replica (abort()), releases every waiter
// with a strata::Error — never a hang.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distribute/collective/communicator.h"

namespace strata::distribute {

class InProcessGroup {
 public:
  InProcessGroup(int size, double timeout_seconds);

  int size() const { return size_; }
  // Fails every current and future collective with `reason` until reset().
  void abort(const std::string& reason);
  // Clears an abort once no rank is inside a collective (between Strategy::run calls).
  void reset();

  // The rendezvous. `signature` describes the call ("all_reduce(sum, float32[1024])");
  // `deposit` runs under the group lock on arrival, `combine` once on the last arrival,
  // `withdraw` after combine (outside the lock, concurrently across ranks).
  void collective(int rank, const std::string& signature, const std::function<void()>& deposit,
                  const std::function<void()>& combine, const std::function<void()>& withdraw);

  // Scratch shared by the ranks of the current collective (guarded by the rendezvous).
  std::vector<Tensor> slots;
  Tensor result;
  std::vector<std::shared_ptr<void>> objects;

 private:
  [[noreturn]] void fail_locked(const std::string& message);
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready,
                   const char* phase, int rank);

  const int size_;
  const double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable cv_;
  enum class Phase { Collecting, Withdrawing } phase_ = Phase::Collecting;
  int arrived_ = 0;
  int withdrawn_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::string> signatures_;
  std::vector<bool> present_;
  std::optional<std::string> aborted_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string backend() const override { return "in-process"; }
  void all_reduce(const Tensor& buffer, ReduceOp op) override;
  void broadcast(const Tensor& buffer, int root) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  void barrier() override;

  // Runs fn on one rank while the others wait; every rank returns fn's result.
  std::shared_ptr<void> run_once(const std::function<std::shared_ptr<void>()>& fn);
  InProcessGroup& group() const { return *group_; }

 private:
  std::shared_ptr<InProcessGroup> group_;
  int rank_;
};

// Holds one of the machine's compute slots (one per core) while a replica computes, and
// gives it up while the replica waits in a collective, so N replica threads never keep
// more than `cores` threads busy (PLATFORM.md's threading trap).
class ComputeSlot {
 public:
  ComputeSlot();   // blocks until a slot is free
  ~ComputeSlot();  // releases it
  ComputeSlot(const ComputeSlot&) = delete;
  ComputeSlot& operator=(const ComputeSlot&) = delete;
  // Gives this thread's slot up for the guard's lifetime (no-op when it holds none).
  class Yield {
   public:
    Yield();
    ~Yield();
   private:
    bool held_;
  };
};

}  // namespace strata::distribute
