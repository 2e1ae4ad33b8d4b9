// The in-process collective backend: replica threads of one process reducing through
// shared memory. One InProcessGroup is shared by the group; each replica thread holds an
// InProcessCommunicator with its rank.
//
// Every collective is a few phases separated by group-wide barriers: each rank publishes
// its input, then computes its share of the result (the whole reduction on rank 0 for
// ReductionToOneDevice; one slice per rank for HierarchicalCopyAllReduce, a reduce-scatter
// followed by an all-gather), then copies out what it needs. Both algorithms add the
// ranks' values in rank order (((x0 + x1) + x2) ...), so they give bitwise equal results.
//
// Failure handling, so that nothing ever hangs:
//  - every barrier compares the ranks' call signatures ("all_reduce(sum, float32[1024])"):
//    ranks that issue collectives in different orders get an error naming both calls;
//  - a rank missing past `timeout_seconds` fails the collective with an error naming the
//    replicas that did not arrive;
//  - abort(reason) (a replica failed) releases every waiter with that reason;
//  - finish(rank) (a replica's step function returned) fails any collective still
//    waiting for that rank, since it will never arrive.
// After a failure the group stays failed until begin_round().
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <strata/distribute/collective/communicator.h>

namespace strata::distribute {

// How the in-process all-reduce moves data (the cross-device ops of MirroredStrategy).
enum class InProcessAlgorithm {
  ReduceToFirst,           // rank 0 reduces everything, every rank copies the result
  ReduceScatterAllGather,  // rank r reduces slice r, every rank gathers all slices
};

class InProcessGroup {
 public:
  InProcessGroup(int size, double timeout_seconds,
                 InProcessAlgorithm algorithm = InProcessAlgorithm::ReduceToFirst);

  int size() const { return size_; }
  InProcessAlgorithm algorithm() const { return algorithm_; }
  double timeout_seconds() const { return timeout_seconds_; }

  // Fails every current and future collective with `reason` until begin_round().
  void abort(const std::string& reason);
  // Starts a new round (one Strategy::run): clears a previous failure and the finished
  // marks. Only call while no rank is inside a collective.
  void begin_round();
  // Marks `rank` as done for this round: collectives waiting for it fail at once.
  void finish(int rank);

  // A group-wide barrier. Every rank must pass the same `label`; the first arrival of a
  // different label fails the group. Throws strata::Error on mismatch, timeout, abort or
  // a finished rank. While waiting the caller gives up its compute slot.
  void sync(int rank, const std::string& label);
  // Writes `input` into the rank's exchange slot for a new collective (before its first
  // sync); other slots of the rank (input_lists) may be written after it. Throws if the
  // group has failed: the ranks of a failed group leave their collectives without waiting
  // for each other, so a peer may still be reading this rank's slots of the collective it
  // left, and none writes them again before the next round (begin_round).
  void publish(int rank, const std::string& label, const Tensor& input);

  // Runs `phase` (this rank's part of a collective); an exception aborts the group (so
  // the other ranks are released) and is rethrown.
  void run_phase(const std::string& label, const std::function<void()>& phase);

  // Per-rank exchange slots. Rank r writes only index r, and only between the barriers
  // where the collective's protocol says so; others read them after the next barrier.
  std::vector<Tensor> inputs;
  std::vector<std::vector<Tensor>> input_lists;  // all_reduce_parts: each rank's parts
  std::vector<Tensor> outputs;
  std::vector<std::shared_ptr<void>> objects;

 private:
  [[noreturn]] void fail_locked(const std::string& message);
  std::string missing_locked() const;

  const int size_;
  const double timeout_seconds_;
  const InProcessAlgorithm algorithm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_count_ = 0;
  // Written under mutex_; read without it by a rank polling for the others (sync()).
  std::atomic<uint64_t> generation_{0};
  std::vector<bool> arrived_;
  std::vector<bool> finished_;
  std::vector<std::string> labels_;
  std::optional<std::string> failed_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank);

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string backend() const override { return "in-process"; }
  // buffer must be contiguous (it is reduced in place).
  void all_reduce(const Tensor& buffer, ReduceOp op) override;
  // all_reduce whose ranks are matched by `what` (a caller's description, e.g. a gradient
  // bucket's variables) rather than by the buffer's dtype and shape alone.
  void all_reduce(const Tensor& buffer, ReduceOp op, const std::string& what);
  // The all-reduce of a bucket that was never packed: leaves in every rank's `output` (flat,
  // contiguous, as many elements as its `parts` together; its contents on entry do not
  // matter) the reduction over the ranks of the concatenation of their flattened `parts`.
  // Each rank folds its slice of the bucket straight from every rank's parts into every
  // rank's output, so the parts are read once and never copied into a buffer first. The
  // sums are bitwise those of packing and all_reduce. Ranks are matched by `what`.
  void all_reduce_parts(const std::vector<Tensor>& parts, const Tensor& output, ReduceOp op,
                        const std::string& what);
  // all_reduce_parts for ranks whose devices share memory (logical CPU devices): only
  // rank 0's `output` is written (each rank folds its slice into it) and every rank gets
  // that tensor back, so no rank copies the sums into a buffer of its own. The result is
  // shared: read it, never write it.
  Tensor all_reduce_parts_shared(const std::vector<Tensor>& parts, const Tensor& output, ReduceOp op,
                                 const std::string& what);
  // The sum over the ranks of their products transpose(a_r) @ b_r (a_r [k_r, m], b_r
  // [k_r, n], contiguous float32 or float64 on logical CPU devices: the weight gradients of
  // a matmul), computed once: each rank computes a block of rows of the sum, straight
  // from every rank's factors, into rank 0's `output` (flat, m n elements), which every
  // rank gets back (shared: read it, never write it). Row i is rank 0's product plus rank
  // 1's, and so on, each product by the kernel matmul would choose for it, so the sums
  // are bitwise those of each rank's matmul folded by all_reduce_parts_shared, without
  // those products ever being written: half the output traffic and no fold pass. Ranks
  // are matched by `what`.
  Tensor sum_products_shared(const Tensor& a, const Tensor& b, const Tensor& output, const std::string& what);
  void broadcast(const Tensor& buffer, int root) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  void barrier() override;

  // Concatenates every rank's value along `axis` (extents along axis may differ); each
  // rank gets its own copy.
  Tensor all_gather_concat(const Tensor& value, int64_t axis);
  // Runs fn on rank 0 with every rank's value while the others wait; every rank returns
  // fn's result. `what` names the call in mismatch messages.
  Tensor merge(const std::string& what, const Tensor& value,
               const std::function<Tensor(const std::vector<Tensor>&)>& fn);
  // Runs fn on rank 0 while the others wait; every rank returns fn's result.
  std::shared_ptr<void> run_once(const std::string& what, const std::function<std::shared_ptr<void>()>& fn);

  InProcessGroup& group() const { return *group_; }

 private:
  Tensor reduce_parts(const std::vector<Tensor>& parts, const Tensor& output, ReduceOp op, const std::string& what,
                      bool shared);
  std::shared_ptr<InProcessGroup> group_;
  int rank_;
};

// Reduces `values` elementwise in order (((v0 op v1) op v2) ...) into a new tensor on
// `device`; Mean divides the sum by values.size() (integers: truncating). Every
// cross-device reduction in strata goes through this fold, which is why all the
// algorithms agree bitwise.
Tensor fold_reduce(const std::vector<Tensor>& values, ReduceOp op, Device device);

// Holds one of the machine's compute slots (one per core) while a replica computes, and
// gives it up while the replica waits in a collective, so N replica threads never keep
// more than `cores` threads busy (PLATFORM.md's threading trap).
class ComputeSlot {
 public:
  ComputeSlot();   // blocks until a slot is free
  ~ComputeSlot();  // releases it
  ComputeSlot(const ComputeSlot&) = delete;
  ComputeSlot& operator=(const ComputeSlot&) = delete;
  // The number of slots (the machine's cores).
  static int capacity();
  // Gives this thread's slot up for the guard's lifetime (no-op when it holds none).
  class Yield {
   public:
    Yield();
    ~Yield();
    Yield(const Yield&) = delete;
    Yield& operator=(const Yield&) = delete;

   private:
    bool held_;
  };
};

}  // namespace strata::distribute
