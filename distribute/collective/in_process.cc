#include <strata/distribute/collective/in_process.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include <strata/autograd/tape.h>
#include <strata/core/dispatch.h>
#include <strata/core/ops.h>
#include <strata/core/poll.h>
#include <strata/kernels/cpu/gemm.h>

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

void acquire_slot() {
  std::unique_lock<std::mutex> lock(g_slot_mutex);
  if (g_slots_free < 0) g_slots_free = ComputeSlot::capacity();
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

int ComputeSlot::capacity() { return int(std::max(1u, std::thread::hardware_concurrency())); }
ComputeSlot::ComputeSlot() { acquire_slot(); }
ComputeSlot::~ComputeSlot() { release_slot(); }
ComputeSlot::Yield::Yield() : held_(t_slots_held > 0) {
  if (held_) release_slot();
}
ComputeSlot::Yield::~Yield() {
  if (held_) acquire_slot();
}

// ---- the fold every reduction uses ----

namespace {

Tensor combine(const Tensor& a, const Tensor& b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return add(a, b);
    case ReduceOp::Max: return maximum(a, b);
    case ReduceOp::Min: return minimum(a, b);
  }
  return Tensor();
}

}  // namespace

Tensor fold_reduce(const std::vector<Tensor>& values, ReduceOp op, Device device) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(!values.empty(), "reduce: no values to reduce");
  const Tensor& first = values[0];
  STRATA_CHECK(first.defined(), "reduce: undefined value from replica 0");
  STRATA_CHECK(first.dtype() != kBool || op == ReduceOp::Max || op == ReduceOp::Min, "reduce(",
               reduce_op_name(op), "): bool values can only be reduced with max or min");
  for (size_t r = 1; r < values.size(); ++r) {
    STRATA_CHECK(values[r].defined() && values[r].shape() == first.shape() && values[r].dtype() == first.dtype(),
                 "reduce(", reduce_op_name(op), "): replica ", r, " has ",
                 values[r].defined() ? std::string(dtype_name(values[r].dtype())) + shape_str(values[r].shape())
                                     : std::string("an undefined value"),
                 " but replica 0 has ", dtype_name(first.dtype()), shape_str(first.shape()),
                 " (every replica must reduce the same shape and dtype)");
  }
  // The accumulator lives on `device`. When the first value is already there, the first
  // combine makes it (ops place results on their first input's device): no copy of the
  // first value, which used to be a third of the fold's memory traffic.
  Tensor acc;
  if (values.size() == 1 || !(first.device() == device)) {
    acc = Tensor::empty(first.shape(), first.dtype(), device);
    acc.copy_(first);
  }
  for (size_t r = 1; r < values.size(); ++r) {
    // Values on another GPU are copied next to the accumulator first (ops take inputs
    // from one device's memory; all cpu:N share host memory).
    const Tensor& lhs = acc.defined() ? acc : first;
    const Tensor v = same_memory(values[r].device(), lhs.device()) ? values[r] : values[r].to(lhs.device());
    acc = combine(lhs, v, op);
  }
  if (op == ReduceOp::Mean && values.size() > 1) {
    const double n = double(values.size());
    acc = is_floating(acc.dtype()) ? acc / n : cast(cast(acc, kFloat64) / n, acc.dtype());
  }
  return acc;
}

// ---- group ----

InProcessGroup::InProcessGroup(int size, double timeout_seconds, InProcessAlgorithm algorithm)
    : size_(size), timeout_seconds_(timeout_seconds), algorithm_(algorithm) {
  STRATA_CHECK(size >= 1, "InProcessGroup: size must be >= 1, got ", size);
  STRATA_CHECK(timeout_seconds > 0, "InProcessGroup: timeout_seconds must be positive, got ", timeout_seconds);
  inputs.resize(size_t(size));
  input_lists.resize(size_t(size));
  outputs.resize(size_t(size));
  objects.resize(size_t(size));
  arrived_.assign(size_t(size), false);
  finished_.assign(size_t(size), false);
  labels_.resize(size_t(size));
}

void InProcessGroup::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_) failed_ = reason;
  }
  cv_.notify_all();
}

void InProcessGroup::begin_round() {
  std::lock_guard<std::mutex> lock(mutex_);
  failed_.reset();
  arrived_count_ = 0;
  ++generation_;
  std::fill(arrived_.begin(), arrived_.end(), false);
  std::fill(finished_.begin(), finished_.end(), false);
  for (auto& t : inputs) t = Tensor();
  for (auto& l : input_lists) l.clear();
  for (auto& t : outputs) t = Tensor();
  for (auto& o : objects) o.reset();
}

void InProcessGroup::finish(int rank) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_[size_t(rank)] = true;
  }
  cv_.notify_all();
}

void InProcessGroup::fail_locked(const std::string& message) {
  if (!failed_) failed_ = message;
  cv_.notify_all();
  throw Error(message);
}

std::string InProcessGroup::missing_locked() const {
  std::string out;
  for (int r = 0; r < size_; ++r) {
    if (!arrived_[size_t(r)]) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

namespace {
// How long a rank polls for the others before sleeping: about a futex sleep and wake-up.
constexpr auto kRendezvousPoll = std::chrono::microseconds(50);
}  // namespace

void InProcessGroup::sync(int rank, const std::string& label) {
  if (size_ == 1) return;
  // Declared before the lock: the slot is given up while waiting and taken back only
  // after the group lock is released.
  std::optional<ComputeSlot::Yield> yield;
  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_) throw Error("collective " + label + " on replica " + std::to_string(rank) + " aborted: " + *failed_);
  labels_[size_t(rank)] = label;
  arrived_[size_t(rank)] = true;
  if (++arrived_count_ == size_) {
    for (int r = 1; r < size_; ++r) {
      if (labels_[size_t(r)] != labels_[0]) {
        fail_locked("collectives issued in different orders: replica 0 called " + labels_[0] + " while replica " +
                    std::to_string(r) + " called " + labels_[size_t(r)] +
                    " (every replica must issue the same collectives in the same order)");
      }
    }
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++generation_;
    cv_.notify_all();
    return;
  }
  // A rank already waiting with a different label is a mismatch we can report now.
  for (int r = 0; r < size_; ++r) {
    if (r != rank && arrived_[size_t(r)] && labels_[size_t(r)] != label) {
      fail_locked("collectives issued in different orders: replica " + std::to_string(r) + " called " +
                  labels_[size_t(r)] + " while replica " + std::to_string(rank) + " called " + label +
                  " (every replica must issue the same collectives in the same order)");
    }
  }
  yield.emplace();
  const uint64_t my_generation = generation_;
  // The others usually arrive within microseconds (replicas run the same step): poll
  // before sleeping, which would add a futex wake-up to every collective.
  lock.unlock();
  const bool passed =
      poll_for([&] { return generation_.load(std::memory_order_acquire) != my_generation; }, kRendezvousPoll);
  lock.lock();
  if (passed) return;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_seconds_));
  for (;;) {
    if (generation_ != my_generation) return;
    if (failed_) throw Error("collective " + label + " on replica " + std::to_string(rank) + " aborted: " + *failed_);
    for (int r = 0; r < size_; ++r) {
      if (!arrived_[size_t(r)] && finished_[size_t(r)]) {
        fail_locked("collective " + label + " on replica " + std::to_string(rank) + " can never complete: replica " +
                    std::to_string(r) +
                    " returned from its step function without calling it (every replica must issue the "
                    "same collectives in the same order)");
      }
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == my_generation && !failed_) {
      std::ostringstream os;
      os << "collective " << label << " timed out after " << timeout_seconds_ << " s on replica " << rank
         << ": replica(s) " << missing_locked() << " did not arrive";
      fail_locked(os.str());
    }
  }
}

void InProcessGroup::publish(int rank, const std::string& label, const Tensor& input) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) throw Error("collective " + label + " on replica " + std::to_string(rank) + " aborted: " + *failed_);
  }
  inputs[size_t(rank)] = input;
}

void InProcessGroup::run_phase(const std::string& label, const std::function<void()>& phase) {
  try {
    phase();
  } catch (const std::exception& e) {
    abort("collective " + label + " failed: " + e.what());
    throw;
  }
}

// ---- communicator ----

namespace {
std::string describe(const char* what, const Tensor& t, const std::string& extra = "") {
  std::ostringstream os;
  os << what << '(' << extra << (extra.empty() ? "" : ", ") << dtype_name(t.dtype()) << shape_str(t.shape()) << ')';
  return os.str();
}

// [begin, end) of slice `part` when n elements are cut into `parts` nearly equal slices.
std::pair<int64_t, int64_t> slice_range(int64_t n, int parts, int part) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = part * base + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

Tensor flat(const Tensor& t) { return reshape(t, {t.numel()}); }

// Leaves the reduction of `in` (one slice of every rank's values, rank order) in every
// `out` (the same slice of every rank's result; `out` may be `in`). On the host, sums,
// maxima and minima fold in place into out[0], by the very kernels fold_reduce runs and in
// its order (so bitwise the same), and are then copied into the other outputs: no
// temporary, and no pass over the slice beyond those.
void fold_into_every(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ReduceOp op) {
  const Tensor& acc = out[0];
  if (in.size() == 1) {  // one rank: the reduction of a value is the value
    out[0].copy_(in[0]);
    return;
  }
  bool direct = op != ReduceOp::Mean && acc.dtype() != kBool;
  for (const Tensor& t : in) direct = direct && t.device().is_cpu() && t.dtype() == acc.dtype() && t.shape() == acc.shape();
  for (const Tensor& t : out) direct = direct && t.device().is_cpu();
  if (!direct) {
    const Tensor folded = fold_reduce(in, op, acc.device());
    for (const Tensor& o : out) o.copy_(folded);
    return;
  }
  const OpId kernel = op == ReduceOp::Sum ? OpId::Add : op == ReduceOp::Max ? OpId::Maximum : OpId::Minimum;
  for (size_t r = 1; r < in.size(); ++r) {
    const Tensor args[2] = {r == 1 ? in[0] : acc, in[r]};
    const Tensor result[1] = {acc};
    run_kernel(kernel, OpAttrs{}, args, result);
  }
  for (size_t r = 1; r < out.size(); ++r) out[r].copy_(acc);
}
}  // namespace

InProcessCommunicator::InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  STRATA_CHECK(group_ != nullptr, "InProcessCommunicator: null group");
  STRATA_CHECK(rank >= 0 && rank < group_->size(), "InProcessCommunicator: rank ", rank, " out of range for ",
               group_->size(), " ranks");
}

void InProcessCommunicator::all_reduce(const Tensor& buffer, ReduceOp op) {
  STRATA_CHECK(buffer.defined() && buffer.is_contiguous(), "all_reduce: the buffer must be a defined, contiguous tensor");
  if (group_->size() == 1) return;  // every reduction over one rank is the identity
  all_reduce(buffer, op, describe("all_reduce", buffer, reduce_op_name(op)));
}

void InProcessCommunicator::all_reduce(const Tensor& buffer, ReduceOp op, const std::string& label) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(buffer.defined() && buffer.is_contiguous(), label, ": the buffer must be a defined, contiguous tensor");
  InProcessGroup& g = *group_;
  const int n = g.size();
  if (n == 1) return;  // every reduction over one rank is the identity
  g.publish(rank_, label, buffer);
  g.sync(rank_, label);
  const int64_t numel = buffer.numel();
  if (g.algorithm() == InProcessAlgorithm::ReduceToFirst) {
    // ReductionToOneDevice: the first device reduces, then every device copies.
    if (rank_ == 0) {
      g.run_phase(label, [&] { g.outputs[0] = fold_reduce(g.inputs, op, buffer.device()); });
    }
    g.sync(rank_, label + "/reduced");
    buffer.copy_(g.outputs[0]);
  } else {
    // HierarchicalCopyAllReduce: rank r folds slice r of every buffer and writes the
    // result straight into slice r of every buffer (a reduce-scatter and an all-gather in
    // one pass; the slices are disjoint, so the ranks never touch the same memory). The
    // second barrier keeps every buffer alive and unread until all slices are written.
    g.run_phase(label, [&] {
      auto [begin, end] = slice_range(numel, n, rank_);
      if (end == begin) return;
      std::vector<Tensor> parts;
      parts.reserve(size_t(n));
      for (const Tensor& in : g.inputs) parts.push_back(flat(in).slice(0, begin, end));
      fold_into_every(parts, parts, op);
    });
    g.sync(rank_, label + "/reduced");
  }
}

void InProcessCommunicator::all_reduce_parts(const std::vector<Tensor>& parts, const Tensor& output, ReduceOp op,
                                             const std::string& what) {
  reduce_parts(parts, output, op, what, false);
}

Tensor InProcessCommunicator::all_reduce_parts_shared(const std::vector<Tensor>& parts, const Tensor& output,
                                                      ReduceOp op, const std::string& what) {
  for (const Tensor& p : parts)
    STRATA_CHECK(!p.defined() || same_memory(p.device(), output.device()), what,
                 ": a shared result needs every part in the output's memory, got a part on ", p.device(),
                 " and the output on ", output.device());
  return reduce_parts(parts, output, op, what, true);
}

Tensor InProcessCommunicator::reduce_parts(const std::vector<Tensor>& parts, const Tensor& output, ReduceOp op,
                                           const std::string& what, bool shared) {
  autograd::StopRecording no_tape;
  int64_t total = 0;
  for (const Tensor& p : parts) {
    STRATA_CHECK(p.defined() && p.dtype() == output.dtype(), what, ": every part must be a defined ",
                 dtype_name(output.dtype()), " tensor, got ",
                 p.defined() ? std::string(dtype_name(p.dtype())) + shape_str(p.shape()) : std::string("undefined"));
    total += p.numel();
  }
  STRATA_CHECK(output.defined() && output.is_contiguous() && output.numel() == total, what,
               ": the output must be a contiguous tensor of ", total, " elements (the parts' total), got ",
               output.defined() ? shape_str(output.shape()) : std::string("undefined"));
  InProcessGroup& g = *group_;
  const int n = g.size();
  g.publish(rank_, what, output);
  g.input_lists[size_t(rank_)] = parts;
  g.sync(rank_, what);
  g.run_phase(what, [&] {
    for (int r = 0; r < n; ++r) {
      const std::vector<Tensor>& theirs = g.input_lists[size_t(r)];
      STRATA_CHECK(theirs.size() == parts.size(), what, ": replica ", r, " has ", theirs.size(),
                   " parts but replica ", rank_, " has ", parts.size());
      for (size_t j = 0; j < parts.size(); ++j) {
        STRATA_CHECK(theirs[j].numel() == parts[j].numel(), what, ": part ", j, " has ", theirs[j].numel(),
                     " elements on replica ", r, " but ", parts[j].numel(), " on replica ", rank_);
      }
    }
    // This rank's slice of the bucket, cut along the parts it spans.
    const auto [begin, end] = slice_range(total, n, rank_);
    int64_t offset = 0;
    std::vector<Tensor> in(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
    for (size_t j = 0; j < parts.size() && offset < end; ++j) {
      const int64_t size = parts[j].numel();
      const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + size);
      if (lo < hi) {
        for (int r = 0; r < n; ++r) {
          in[size_t(r)] = flat(g.input_lists[size_t(r)][j]).slice(0, lo - offset, hi - offset);
          if (r == 0 || !shared) dst[size_t(r)] = flat(g.inputs[size_t(r)]).slice(0, lo, hi);
        }
        fold_into_every(in, shared ? std::vector<Tensor>{dst[0]} : dst, op);
      }
      offset += size;
    }
  });
  // Read before the barrier: after it, rank 0 may start its next collective.
  const Tensor result = shared ? g.inputs[0] : output;
  g.sync(rank_, what + "/reduced");  // the parts are read, and the outputs written, until here
  return result;
}

namespace {

// transpose(a) @ b for the rows [row0, row0 + rows) of the product, into c (ldc n), plus
// c when accumulate: the kernel and operands of matmul(a, b, true, false) on those rows.
template <typename T>
void product_rows(const Tensor& a, const Tensor& b, int64_t row0, int64_t rows, bool accumulate, T* c) {
  const int64_t k = a.dim(0), m = a.dim(1), n = b.dim(1);
  const T* pa = a.data<T>() + row0;
  const T* pb = b.data<T>();
  const T beta = accumulate ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>) {
    cpu_kernels::gemm(cpu_kernels::choose_gemm_kernel(m, n, k), true, false, rows, n, k, pa, m, pb, n, beta, c, n);
  } else {
    cpu_kernels::gemm(true, false, rows, n, k, pa, m, pb, n, beta, c, n);
  }
}

}  // namespace

Tensor InProcessCommunicator::sum_products_shared(const Tensor& a, const Tensor& b, const Tensor& output,
                                                  const std::string& what) {
  autograd::StopRecording no_tape;
  auto check_factor = [&](const Tensor& t, const char* name) {
    STRATA_CHECK(t.defined() && t.ndim() == 2 && t.is_contiguous() && t.device().is_cpu() &&
                     (t.dtype() == kFloat32 || t.dtype() == kFloat64) && t.dtype() == output.dtype(),
                 what, ": factor ", name, " must be a contiguous 2-D CPU tensor of the output's dtype (",
                 dtype_name(output.dtype()), "), got ",
                 t.defined() ? std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + " on " + t.device().str()
                             : std::string("undefined"));
  };
  check_factor(a, "a");
  check_factor(b, "b");
  const int64_t m = a.dim(1), n = b.dim(1);
  STRATA_CHECK(a.dim(0) == b.dim(0), what, ": the factors' rows differ: a ", shape_str(a.shape()), ", b ",
               shape_str(b.shape()));
  STRATA_CHECK(output.defined() && output.is_contiguous() && output.device().is_cpu() && output.numel() == m * n,
               what, ": the output must be a contiguous CPU tensor of ", m * n, " elements, got ",
               output.defined() ? shape_str(output.shape()) : std::string("undefined"));
  InProcessGroup& g = *group_;
  const int ranks = g.size();
  g.publish(rank_, what, output);
  g.input_lists[size_t(rank_)] = {a, b};
  g.sync(rank_, what);
  g.run_phase(what, [&] {
    for (int r = 0; r < ranks; ++r) {
      const std::vector<Tensor>& theirs = g.input_lists[size_t(r)];
      STRATA_CHECK(theirs.size() == 2 && theirs[0].dim(1) == m && theirs[1].dim(1) == n &&
                       theirs[0].dtype() == a.dtype(),
                   what, ": replica ", r, "'s factors ", shape_str(theirs[0].shape()), " and ",
                   shape_str(theirs[1].shape()), " do not match replica ", rank_, "'s ", shape_str(a.shape()), " and ",
                   shape_str(b.shape()));
    }
    // Blocks of whole 12-row tiles, so that each block is computed as in the whole product.
    const int64_t tiles = (m + 11) / 12;
    auto [first, last] = slice_range(tiles, ranks, rank_);
    const int64_t row0 = first * 12, rows = std::min(m, last * 12) - row0;
    if (rows <= 0) return;
    const Tensor& sums = g.inputs[0];
    for (int r = 0; r < ranks; ++r) {
      const std::vector<Tensor>& f = g.input_lists[size_t(r)];
      if (f[0].dim(0) == 0 && r > 0) continue;  // an empty batch adds nothing
      if (sums.dtype() == kFloat32) {
        float* c = sums.data<float>() + row0 * n;
        if (f[0].dim(0) == 0) std::fill(c, c + rows * n, 0.0f);
        else product_rows<float>(f[0], f[1], row0, rows, r > 0, c);
      } else {
        double* c = sums.data<double>() + row0 * n;
        if (f[0].dim(0) == 0) std::fill(c, c + rows * n, 0.0);
        else product_rows<double>(f[0], f[1], row0, rows, r > 0, c);
      }
    }
  });
  const Tensor result = g.inputs[0];
  g.sync(rank_, what + "/reduced");  // the factors are read, and the sums written, until here
  return result;
}

void InProcessCommunicator::broadcast(const Tensor& buffer, int root) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " out of range for ", size(), " ranks");
  STRATA_CHECK(buffer.defined(), "broadcast: undefined buffer");
  InProcessGroup& g = *group_;
  if (g.size() == 1) return;
  const std::string label = describe("broadcast", buffer, "root " + std::to_string(root));
  g.publish(rank_, label, buffer);
  g.sync(rank_, label);
  if (rank_ != root) g.run_phase(label, [&] { buffer.copy_(g.inputs[size_t(root)]); });
  g.sync(rank_, label + "/copied");  // the root's buffer is read until everyone copied it
}

void InProcessCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(input.defined() && output.defined() && input.ndim() >= 1 && output.ndim() == input.ndim() &&
                   output.dim(0) == input.dim(0) * size(),
               "all_gather: output shape ", output.defined() ? shape_str(output.shape()) : "undefined", " must have ",
               size(), "x the rows of input ", input.defined() ? shape_str(input.shape()) : "undefined");
  InProcessGroup& g = *group_;
  if (g.size() == 1) {
    output.copy_(input);
    return;
  }
  const std::string label = describe("all_gather", input);
  g.publish(rank_, label, input);
  g.sync(rank_, label);
  g.run_phase(label, [&] {
    const int64_t rows = input.dim(0);
    for (int s = 0; s < g.size(); ++s) output.slice(0, s * rows, (s + 1) * rows).copy_(g.inputs[size_t(s)]);
  });
  g.sync(rank_, label + "/copied");
}

void InProcessCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(input.defined() && output.defined() && input.ndim() >= 1 && output.ndim() == input.ndim() &&
                   input.dim(0) == output.dim(0) * size(),
               "reduce_scatter: input shape ", input.defined() ? shape_str(input.shape()) : "undefined", " must have ",
               size(), "x the rows of output ", output.defined() ? shape_str(output.shape()) : "undefined");
  InProcessGroup& g = *group_;
  if (g.size() == 1) {
    output.copy_(input);
    return;
  }
  const std::string label = describe("reduce_scatter", input, reduce_op_name(op));
  g.publish(rank_, label, input);
  g.sync(rank_, label);
  g.run_phase(label, [&] {
    const int64_t rows = output.dim(0);
    std::vector<Tensor> parts;
    for (const Tensor& in : g.inputs) parts.push_back(in.slice(0, rank_ * rows, (rank_ + 1) * rows));
    output.copy_(fold_reduce(parts, op, output.device()));
  });
  g.sync(rank_, label + "/reduced");  // other ranks read this rank's input until here
}

void InProcessCommunicator::barrier() { group_->sync(rank_, "barrier()"); }

Tensor InProcessCommunicator::all_gather_concat(const Tensor& value, int64_t axis) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(value.defined(), "all_gather: undefined value");
  InProcessGroup& g = *group_;
  if (g.size() == 1) return value.clone();
  const int64_t a = normalize_axis(axis, value.ndim(), "all_gather");
  const std::string label = "all_gather(axis " + std::to_string(a) + ", " + dtype_name(value.dtype()) + ", rank " +
                            std::to_string(value.ndim()) + ")";
  g.publish(rank_, label, value);
  g.sync(rank_, label);
  Tensor out;
  g.run_phase(label, [&] {
    std::vector<Tensor> parts;
    for (const Tensor& in : g.inputs) {
      parts.push_back(same_memory(in.device(), value.device()) ? in : in.to(value.device()));
    }
    out = concat(parts, a);
    if (!(out.device() == value.device())) out = out.to(value.device());
  });
  g.sync(rank_, label + "/copied");
  return out;
}

Tensor InProcessCommunicator::merge(const std::string& what, const Tensor& value,
                                    const std::function<Tensor(const std::vector<Tensor>&)>& fn) {
  InProcessGroup& g = *group_;
  if (g.size() == 1) return fn({value});
  g.publish(rank_, what, value);
  g.sync(rank_, what);
  if (rank_ == 0) g.run_phase(what, [&] { g.outputs[0] = fn(g.inputs); });
  g.sync(rank_, what + "/merged");
  return g.outputs[0];
}

std::shared_ptr<void> InProcessCommunicator::run_once(const std::string& what,
                                                      const std::function<std::shared_ptr<void>()>& fn) {
  InProcessGroup& g = *group_;
  if (g.size() == 1) return fn();
  g.sync(rank_, what);
  if (rank_ == 0) g.run_phase(what, [&] { g.objects[0] = fn(); });
  g.sync(rank_, what + "/done");
  return g.objects[0];
}

}  // namespace strata::distribute
