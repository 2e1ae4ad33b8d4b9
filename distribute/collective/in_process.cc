#include "distribute/collective/in_process.h"

#include <chrono>
#include <sstream>
#include <thread>

#include "autograd/tape.h"
#include "core/ops.h"

namespace strata::distribute {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

// ---- compute slots ----

namespace {
std::mutex g_slot_mutex;
std::condition_variable g_slot_cv;
int g_slots_free = -1;
thread_local int t_slots_held = 0;

int total_slots() { return std::max(1u, std::thread::hardware_concurrency()); }

void acquire_slot() {
  std::unique_lock<std::mutex> lock(g_slot_mutex);
  if (g_slots_free < 0) g_slots_free = total_slots();
  g_slot_cv.wait(lock, [] { return g_slots_free > 0; });
  --g_slots_free;
  ++t_slots_held;
}

void release_slot() {
  {
    std::lock_guard<std::mutex> lock(g_slot_mutex);
    ++g_slots_free;
    --t_slots_held;
  }
  g_slot_cv.notify_one();
}
}  // namespace

ComputeSlot::ComputeSlot() { acquire_slot(); }
ComputeSlot::~ComputeSlot() { release_slot(); }
ComputeSlot::Yield::Yield() : held_(t_slots_held > 0) {
  if (held_) release_slot();
}
ComputeSlot::Yield::~Yield() {
  if (held_) acquire_slot();
}

// ---- group ----

InProcessGroup::InProcessGroup(int size, double timeout_seconds)
    : size_(size), timeout_seconds_(timeout_seconds),
      signatures_(static_cast<size_t>(size)), present_(static_cast<size_t>(size), false) {
  STRATA_CHECK(size >= 1, "InProcessGroup: size must be >= 1, got ", size);
  slots.resize(static_cast<size_t>(size));
  objects.resize(static_cast<size_t>(size));
}

void InProcessGroup::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) aborted_ = reason;
  }
  cv_.notify_all();
}

void InProcessGroup::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_.reset();
  phase_ = Phase::Collecting;
  arrived_ = withdrawn_ = 0;
  std::fill(present_.begin(), present_.end(), false);
  for (auto& s : slots) s = Tensor();
  for (auto& o : objects) o.reset();
  result = Tensor();
}

void InProcessGroup::fail_locked(const std::string& message) {
  if (!aborted_) aborted_ = message;
  cv_.notify_all();
  throw Error(message);
}

void InProcessGroup::wait_locked(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready,
                                 const char* phase, int rank) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(timeout_seconds_);
  while (!ready()) {
    if (aborted_) throw Error("collective aborted: " + *aborted_);
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready() && !aborted_) {
      std::ostringstream os;
      os << "collective timed out after " << timeout_seconds_ << " s in " << phase << " on replica "
         << rank << ": waiting for replica(s)";
      for (int r = 0; r < size_; ++r) {
        if (!present_[size_t(r)]) os << ' ' << r;
      }
      fail_locked(os.str());
    }
  }
  if (aborted_) throw Error("collective aborted: " + *aborted_);
}

void InProcessGroup::collective(int rank, const std::string& signature,
                                const std::function<void()>& deposit,
                                const std::function<void()>& combine,
                                const std::function<void()>& withdraw) {
  if (size_ == 1) {
    deposit();
    combine();
    withdraw();
    return;
  }
  // Waiting is not computing: give the core to another replica for the whole rendezvous
  // (declared before the lock, so the slot is re-taken only after the lock is released).
  ComputeSlot::Yield yield;
  std::unique_lock<std::mutex> lock(mutex_);
  // Wait until the previous collective's results have been withdrawn by everyone.
  wait_locked(lock, [&] { return phase_ == Phase::Collecting; }, signature.c_str(), rank);
  signatures_[size_t(rank)] = signature;
  present_[size_t(rank)] = true;
  deposit();
  const uint64_t my_generation = generation_;
  if (++arrived_ == size_) {
    for (int r = 0; r < size_; ++r) {
      if (signatures_[size_t(r)] != signatures_[0]) {
        fail_locked("collectives called in different orders: replica 0 called " + signatures_[0] +
                    " while replica " + std::to_string(r) + " called " + signatures_[size_t(r)]);
      }
    }
    try {
      combine();
    } catch (const std::exception& e) {
      fail_locked(std::string("collective ") + signature + " failed: " + e.what());
    }
    phase_ = Phase::Withdrawing;
    ++generation_;
    cv_.notify_all();
  } else {
    wait_locked(lock, [&] { return generation_ != my_generation; }, signature.c_str(), rank);
  }
  lock.unlock();
  withdraw();
  lock.lock();
  if (++withdrawn_ == size_) {
    arrived_ = withdrawn_ = 0;
    std::fill(present_.begin(), present_.end(), false);
    for (auto& s : slots) s = Tensor();
    result = Tensor();
    phase_ = Phase::Collecting;
    cv_.notify_all();
  }
}

// ---- communicator ----

namespace {
std::string describe(const char* what, const Tensor& t, const std::string& extra = "") {
  std::ostringstream os;
  os << what << '(' << extra << (extra.empty() ? "" : ", ") << t.dtype() << shape_str(t.shape()) << ')';
  return os.str();
}

Tensor combine_all(const std::vector<Tensor>& xs, ReduceOp op) {
  Tensor acc = xs[0].contiguous();
  for (size_t i = 1; i < xs.size(); ++i) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean: acc = add(acc, xs[i]); break;
      case ReduceOp::Max: acc = maximum(acc, xs[i]); break;
      case ReduceOp::Min: acc = minimum(acc, xs[i]); break;
    }
  }
  if (op == ReduceOp::Mean) acc = is_floating(acc.dtype()) ? acc / double(xs.size()) : acc;
  return acc;
}
}  // namespace

void InProcessCommunicator::all_reduce(const Tensor& buffer, ReduceOp op) {
  autograd::StopRecording no_tape;
  InProcessGroup& g = *group_;
  g.collective(rank_, describe("all_reduce", buffer, reduce_op_name(op)),
               [&] { g.slots[size_t(rank_)] = buffer; },
               [&] { g.result = combine_all(g.slots, op); },
               [&] { buffer.copy_(g.result); });
}

void InProcessCommunicator::broadcast(const Tensor& buffer, int root) {
  STRATA_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " out of range for ", size(), " ranks");
  InProcessGroup& g = *group_;
  g.collective(rank_, describe("broadcast", buffer, "root " + std::to_string(root)),
               [&] { g.slots[size_t(rank_)] = buffer; },
               [&] { g.result = g.slots[size_t(root)].clone(); },
               [&] {
                 if (rank_ != root) buffer.copy_(g.result);
               });
}

void InProcessCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(output.ndim() >= 1 && output.dim(0) == input.dim(0) * size(), "all_gather: output shape ",
               shape_str(output.shape()), " must have ", size(), "x the rows of input ", shape_str(input.shape()));
  InProcessGroup& g = *group_;
  g.collective(rank_, describe("all_gather", input), [&] { g.slots[size_t(rank_)] = input; },
               [&] { g.result = concat(g.slots, 0); }, [&] { output.copy_(g.result); });
}

void InProcessCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(input.ndim() >= 1 && input.dim(0) == output.dim(0) * size(), "reduce_scatter: input shape ",
               shape_str(input.shape()), " must have ", size(), "x the rows of output ", shape_str(output.shape()));
  InProcessGroup& g = *group_;
  const int64_t rows = output.dim(0);
  g.collective(rank_, describe("reduce_scatter", input, reduce_op_name(op)),
               [&] { g.slots[size_t(rank_)] = input; },
               [&] { g.result = combine_all(g.slots, op); },
               [&] { output.copy_(g.result.slice(0, rank_ * rows, (rank_ + 1) * rows)); });
}

void InProcessCommunicator::barrier() {
  group_->collective(rank_, "barrier()", [] {}, [] {}, [] {});
}

std::shared_ptr<void> InProcessCommunicator::run_once(const std::function<std::shared_ptr<void>()>& fn) {
  InProcessGroup& g = *group_;
  std::shared_ptr<void> out;
  g.collective(rank_, "merge_call()", [] {},
               [&] {
                 auto r = fn();
                 for (auto& o : g.objects) o = r;
               },
               [&] { out = g.objects[size_t(rank_)]; });
  return out;
}

}  // namespace strata::distribute
