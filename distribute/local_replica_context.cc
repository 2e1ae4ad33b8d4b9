#include "distribute/local_replica_context.h"

#include <map>

#include "autograd/tape.h"
#include "core/ops.h"
#include "distribute/strategy.h"

namespace strata::distribute {

namespace {
thread_local ReplicaContext* t_context = nullptr;
}

namespace detail {
void set_replica_context(ReplicaContext* ctx) { t_context = ctx; }
ReplicaContext* current_replica_context() { return t_context; }
}  // namespace detail

namespace {
// The default strategy's replica context: one replica, collectives are identities.
class DefaultReplicaContext final : public ReplicaContext {
 public:
  Strategy& strategy() const override { return DefaultStrategy::instance(); }
  int replica_id_in_sync_group() const override { return 0; }
  int num_replicas_in_sync() const override { return 1; }
  Device device() const override { return Device(); }
  std::vector<Tensor> all_reduce(ReduceOp, const std::vector<Tensor>& values) override { return values; }
  Tensor all_gather(const Tensor& value, int64_t) override { return value; }
  Tensor merge_call(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const Tensor& value) override {
    return fn({value});
  }
  void run_once(const std::function<void()>& fn) override { fn(); }
  void barrier() override {}
};
}  // namespace

ReplicaContext* get_replica_context() {
  if (t_context) return t_context;
  if (has_strategy()) return nullptr;  // inside a strategy's scope, outside run()
  static DefaultReplicaContext default_context;
  return &default_context;
}

bool in_cross_replica_context() { return t_context == nullptr && has_strategy(); }

LocalReplicaContext::LocalReplicaContext(Strategy& strategy, int replica, Device device,
                                         std::shared_ptr<InProcessGroup> group)
    : strategy_(strategy), replica_(replica), device_(device), comm_(std::move(group), replica) {}

int LocalReplicaContext::num_replicas_in_sync() const { return strategy_.num_replicas_in_sync(); }

std::vector<Tensor> LocalReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values) {
  autograd::StopRecording no_tape;
  std::vector<Tensor> out(values.size());
  if (comm_.size() == 1) {
    for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
    return out;
  }
  // Pack tensors of one dtype into flat buckets of at most bytes_per_pack (0: one bucket),
  // reduce each bucket with one collective, and unpack.
  const int64_t pack_bytes = strategy_.communication_options().bytes_per_pack;
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
      } while (end < indices.size() && (pack_bytes <= 0 || bytes + int64_t(values[indices[end]].nbytes()) <= pack_bytes));
      std::vector<Tensor> flat;
      for (size_t k = begin; k < end; ++k) flat.push_back(reshape(values[indices[k]], {-1}));
      Tensor buffer = flat.size() == 1 ? flat[0].clone() : concat(flat, 0);
      comm_.all_reduce(buffer, op);
      int64_t offset = 0;
      for (size_t k = begin; k < end; ++k) {
        const Tensor& v = values[indices[k]];
        out[indices[k]] = reshape(buffer.slice(0, offset, offset + v.numel()), v.shape());
        offset += v.numel();
      }
      begin = end;
    }
  }
  return out;
}

Tensor LocalReplicaContext::all_gather(const Tensor& value, int64_t axis) {
  autograd::StopRecording no_tape;
  if (comm_.size() == 1) return value;
  // Extents along axis may differ between replicas, so gather through the rendezvous.
  InProcessGroup& g = comm_.group();
  Tensor result;
  g.collective(replica_, "all_gather(" + std::string(dtype_name(value.dtype())) + ")",
               [&] { g.slots[size_t(replica_)] = value; },
               [&] { g.result = concat(g.slots, axis); },
               [&] { result = g.result; });
  return result;
}

Tensor LocalReplicaContext::merge_call(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                       const Tensor& value) {
  if (comm_.size() == 1) {
    ReplicaContext* saved = t_context;
    t_context = nullptr;
    Tensor r = fn({value});
    t_context = saved;
    return r;
  }
  InProcessGroup& g = comm_.group();
  Tensor result;
  g.collective(replica_, "merge_call()", [&] { g.slots[size_t(replica_)] = value; },
               [&] {
                 ReplicaContext* saved = t_context;
                 t_context = nullptr;  // fn runs in cross-replica context
                 try {
                   g.result = fn(g.slots);
                 } catch (...) {
                   t_context = saved;
                   throw;
                 }
                 t_context = saved;
               },
               [&] { result = g.result; });
  return result;
}

void LocalReplicaContext::run_once(const std::function<void()>& fn) {
  run_once_shared([&]() -> std::shared_ptr<void> {
    ReplicaContext* saved = t_context;
    t_context = nullptr;
    try {
      fn();
    } catch (...) {
      t_context = saved;
      throw;
    }
    t_context = saved;
    return nullptr;
  });
}

std::shared_ptr<void> LocalReplicaContext::run_once_shared(const std::function<std::shared_ptr<void>()>& fn) {
  return comm_.run_once(fn);
}

}  // namespace strata::distribute
