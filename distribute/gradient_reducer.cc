#include <strata/distribute/gradient_reducer.h>

#include <optional>

#include <strata/autograd/tape.h>
#include <strata/core/stream.h>
#include <strata/core/ops.h>
#include <strata/distribute/collective/in_process.h>

namespace strata::distribute {

namespace {

Tensor unpack(const Tensor& buffer, int64_t offset, const Tensor& like) {
  return reshape(buffer.slice(0, offset, offset + like.numel()), like.shape());
}

}  // namespace

namespace {
GradientReducer::Options checked(GradientReducer::Options options) {
  STRATA_CHECK(options.bytes_per_pack >= 0, "GradientReducer: bytes_per_pack must be >= 0, got ",
               options.bytes_per_pack);
  return options;
}
}  // namespace

GradientReducer::GradientReducer(Transport transport, Options options)
    : transport_(std::move(transport)), options_(checked(options)) {
  if (options_.asynchronous) thread_ = std::make_unique<CommThread>();
}

GradientReducer::GradientReducer(StreamTransport transport, Options options)
    : stream_transport_(std::move(transport)), options_(checked(options)) {
  STRATA_CHECK(bool(stream_transport_.launch), "GradientReducer: the stream transport has no launch function");
}

GradientReducer::~GradientReducer() = default;  // the thread finishes its (bounded) queue

int64_t GradientReducer::capacity() const {
  if (options_.bytes_per_pack > 0) return options_.bytes_per_pack;
  return launched_.empty() ? kFirstBucketBytes : kBucketBytes;
}

void GradientReducer::gradient_ready(const autograd::Variable& variable, const Tensor& gradient) {
  if (!gradient.defined() || gradient.numel() == 0) return;
  const int64_t bytes = int64_t(gradient.nbytes());
  auto it = open_.find(gradient.dtype());
  if (it != open_.end() && it->second.bytes + bytes > capacity()) {
    launch(gradient.dtype());
    it = open_.end();
  }
  if (it == open_.end()) it = open_.emplace(gradient.dtype(), Bucket{}).first;
  Bucket& b = it->second;
  b.dtype = gradient.dtype();
  b.gradients.push_back(gradient);
  b.names.push_back(variable.name());
  b.bytes += bytes;
  if (b.bytes >= capacity()) launch(gradient.dtype());
}

void GradientReducer::backward_done() {
  // In dtype order (the map's), the same on every replica.
  while (!open_.empty()) launch(open_.begin()->first);
  // GradientTape::gradient returns the sums: they must be there when it does.
  if (options_.aggregate) wait_all();
}

void GradientReducer::launch(DType dtype) {
  auto it = open_.find(dtype);
  if (it == open_.end()) return;
  Bucket bucket = std::move(it->second);
  open_.erase(it);
  autograd::StopRecording no_tape;  // reducing is not part of any model
  const size_t index = launched_.size();
  int64_t offset = 0;
  for (const Tensor& g : bucket.gradients) {
    slots_[g.id()] = {index, offset};
    offset += g.numel();
  }
  // The transport fills the buffer: no packing here, on the thread running backward
  // (a stream transport excepted: its packing kernels are only enqueued, below).
  bucket.buffer = Tensor::empty({offset}, dtype, bucket.gradients[0].device());
  bucket.sums = std::make_shared<Tensor>(bucket.buffer);
  std::string what = "gradient bucket " + std::to_string(index) + " (" + dtype_name(dtype) + "[" +
                     std::to_string(offset) + "]:";
  for (size_t k = 0; k < bucket.names.size(); ++k) what += (k ? ", " : " ") + bucket.names[k];
  what += ")";
  if (stream_transport_.launch) {
    // On this thread: the packing kernels go on the current stream, the collective (on the
    // communication stream) is ordered after them by the transport, and runs while
    // backward goes on.
    try {
      pack_into(bucket.gradients, bucket.buffer);
      bucket.work = stream_transport_.launch(bucket.buffer, what);
      STRATA_CHECK(bucket.work != nullptr, "GradientReducer: the stream transport returned no work for ", what);
    } catch (...) {
      bucket.work = CommWork::completed(what, std::current_exception());
    }
  } else {
    auto gradients = bucket.gradients;
    auto sums = bucket.sums;
    submit(std::move(bucket), what,
           [transport = &transport_, gradients = std::move(gradients), sums, what] { (*transport)(gradients, *sums, what); });
    return;
  }
  launched_.push_back(std::move(bucket));
}

void GradientReducer::submit(Bucket bucket, const std::string& what, std::function<void()> run) {
  if (thread_) {
    bucket.work = thread_->submit(what, [run = std::move(run)] {
      autograd::StopRecording no_tape;
      run();
    });
  } else {
    std::exception_ptr error;
    try {
      run();
    } catch (...) {
      error = std::current_exception();
    }
    bucket.work = CommWork::completed(what, error);
  }
  launched_.push_back(std::move(bucket));
}

bool GradientReducer::accepts_product(DType dtype, const Device& device) const {
  return options_.aggregate && bool(product_transport_) && thread_ != nullptr &&
         (dtype == kFloat32 || dtype == kFloat64) && device.is_cpu();
}

// A bucket of its own, launched at once: every replica reaches this point of its backward
// pass in the same order (the same program), so launch order stays the same everywhere.
// The tape gets a placeholder of the gradient's shape (a broadcast zero, no memory) that
// final_gradient exchanges for the sums.
Tensor GradientReducer::product_ready(const autograd::Variable& variable, const Tensor& a, const Tensor& b) {
  const DType dtype = a.dtype();
  STRATA_CHECK(accepts_product(dtype, a.device()), "GradientReducer: a ", dtype_name(dtype), " product on ",
               a.device(), " it does not accept (internal error)");
  autograd::StopRecording no_tape;
  const int64_t m = a.dim(1), n = b.dim(1);
  Tensor placeholder = broadcast_to(Tensor::scalar(0.0, dtype, a.device()), {m, n});
  Bucket bucket;
  bucket.dtype = dtype;
  bucket.names.push_back(variable.name());
  bucket.bytes = m * n * int64_t(dtype_size(dtype));
  bucket.product = true;
  const size_t index = launched_.size();
  slots_[placeholder.id()] = {index, 0};
  bucket.buffer = Tensor::empty({m * n}, dtype, a.device());
  bucket.sums = std::make_shared<Tensor>(bucket.buffer);
  const std::string what = "gradient bucket " + std::to_string(index) + " (" + dtype_name(dtype) + "[" +
                           std::to_string(m) + "x" + std::to_string(n) + "] as a product: " + variable.name() + ")";
  const Tensor fa = a.contiguous(), fb = b.contiguous();
  auto sums = bucket.sums;
  submit(std::move(bucket), what, [transport = &product_transport_, fa, fb, sums, what] { (*transport)(fa, fb, *sums, what); });
  return placeholder;
}

Tensor GradientReducer::final_gradient(const Tensor& reported) {
  if (!options_.aggregate || !reported.defined()) return reported;
  auto it = slots_.find(reported.id());
  if (it == slots_.end()) return reported;
  wait_all();  // done by backward_done already; a no-op then
  Bucket& bucket = launched_[it->second.first];
  bucket.taken = true;
  return unpack(*bucket.sums, it->second.second, reported);
}

void GradientReducer::wait(Bucket& bucket) { bucket.work->wait(options_.wait_timeout_seconds); }

void GradientReducer::wait_all() {
  if (waited_ == launched_.size()) return;
  // Waiting, the replica gives its core up: with more replicas than cores, the replicas
  // still in backward need it to produce the gradients these buckets wait for. Stream
  // works were complete (enqueued) at launch: nothing to wait for on the host.
  std::optional<ComputeSlot::Yield> yield;
  if (!stream_transport_.launch) yield.emplace();
  // In launch order: each wait then covers one collective's time.
  while (waited_ < launched_.size()) {
    Bucket& bucket = launched_[waited_];
    wait(bucket);
    // Work this thread enqueues from now on (the optimizer's) reads the sums after the
    // collective wrote them; a no-op for host transports, whose sums are in memory.
    bucket.work->order_consumer(current_stream(bucket.buffer.device()));
    ++waited_;
  }
}

std::vector<Tensor> GradientReducer::take(const std::vector<Tensor>& gradients) {
  std::vector<Tensor> out(gradients.size());
  bool any = false;
  for (const Tensor& g : gradients) any = any || (g.defined() && slots_.contains(g.id()));
  if (!any) return out;
  wait_all();
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (!gradients[i].defined()) continue;
    auto it = slots_.find(gradients[i].id());
    if (it == slots_.end()) continue;
    Bucket& bucket = launched_[it->second.first];
    bucket.taken = true;
    out[i] = unpack(*bucket.sums, it->second.second, gradients[i]);
  }
  return out;
}

void GradientReducer::end_step(bool failed) {
  open_.clear();  // never launched: nothing in flight
  std::exception_ptr first;
  ComputeSlot::Yield yield;
  for (; waited_ < launched_.size(); ++waited_) {
    try {
      wait(launched_[waited_]);
    } catch (...) {
      if (!first && launched_[waited_].taken) first = std::current_exception();
    }
  }
  if (stream_transport_.launch) {
    // Enqueued is not finished: the step ends once the GPU finished its buckets (bounded
    // by the communicator's watchdog; after a failure the abort releases them).
    for (Bucket& bucket : launched_) {
      try {
        bucket.work->synchronize(options_.wait_timeout_seconds);
      } catch (...) {
        if (!first && bucket.taken) first = std::current_exception();
      }
    }
  }
  launched_.clear();
  slots_.clear();
  waited_ = 0;
  if (first && !failed) std::rethrow_exception(first);
}

void GradientReducer::pack_into(const std::vector<Tensor>& gradients, const Tensor& bucket) {
  autograd::StopRecording no_tape;
  const Tensor flat = reshape(bucket, {bucket.numel()});
  int64_t offset = 0;
  for (const Tensor& g : gradients) {
    flat.slice(0, offset, offset + g.numel()).copy_(reshape(g, {g.numel()}));
    offset += g.numel();
  }
  STRATA_CHECK(offset == bucket.numel(), "GradientReducer::pack_into: ", offset, " gradient elements for a bucket of ",
               bucket.numel());
}

std::vector<Tensor> GradientReducer::reduce_packed(const std::vector<Tensor>& values, int64_t bytes_per_pack,
                                                   const std::function<void(const Tensor& buffer)>& reduce) {
  std::vector<Tensor> out(values.size());
  std::map<DType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].defined()) by_dtype[values[i].dtype()].push_back(i);
  }
  for (auto& [dtype, indices] : by_dtype) {
    size_t begin = 0;
    while (begin < indices.size()) {
      size_t end = begin;
      int64_t bytes = 0;
      do {
        bytes += int64_t(values[indices[end]].nbytes());
        ++end;
      } while (end < indices.size() &&
               (bytes_per_pack <= 0 || bytes + int64_t(values[indices[end]].nbytes()) <= bytes_per_pack));
      std::vector<Tensor> parts;
      for (size_t k = begin; k < end; ++k) parts.push_back(values[indices[k]]);
      // A fresh buffer even for one part: it is reduced in place and must not alias it.
      const Tensor buffer = Tensor::empty({bytes / int64_t(dtype_size(dtype))}, dtype, parts[0].device());
      pack_into(parts, buffer);
      reduce(buffer);
      int64_t offset = 0;
      for (size_t k = begin; k < end; ++k) {
        out[indices[k]] = unpack(buffer, offset, values[indices[k]]);
        offset += values[indices[k]].numel();
      }
      begin = end;
    }
  }
  return out;
}

}  // namespace strata::distribute
