#include <strata/distribute/local_replica_context.h>

#include <map>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/collective/nccl_communicator.h>
#include <strata/distribute/cross_worker.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

namespace {
thread_local ReplicaContext* t_context = nullptr;
}

namespace detail {
void set_replica_context(ReplicaContext* ctx) { t_context = ctx; }
ReplicaContext* current_replica_context() { return t_context; }
}  // namespace detail

namespace {
// The default strategy's replica context outside any scope: one replica, collectives are
// identities (tf's default replica context).
class DefaultReplicaContext final : public ReplicaContext {
 public:
  Strategy& strategy() const override { return DefaultStrategy::instance(); }
  int replica_id_in_sync_group() const override { return 0; }
  int num_replicas_in_sync() const override { return 1; }
  Device device() const override { return Device(); }
  std::vector<Tensor> all_reduce(ReduceOp, const std::vector<Tensor>& values) override { return values; }
  Tensor all_gather(const Tensor& value, int64_t axis) override {
    normalize_axis(axis, value.ndim(), "all_gather");
    return value;
  }
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

int LocalReplicaContext::replica_id_in_sync_group() const {
  return strategy_.worker_index() * strategy_.num_local_replicas() + replica_;
}

std::vector<Tensor> LocalReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values) {
  autograd::StopRecording no_tape;
  std::vector<Tensor> out(values.size());
  Communicator* workers = strategy_.worker_communicator();
  if (comm_.size() == 1 && !workers) {
    for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
    return out;
  }
  // Pack tensors of one dtype into flat buckets of at most bytes_per_pack (0: one bucket),
  // reduce each bucket with one collective, and unpack: one rendezvous per bucket rather
  // than per tensor.
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
      } while (end < indices.size() &&
               (pack_bytes <= 0 || bytes + int64_t(values[indices[end]].nbytes()) <= pack_bytes));
      Tensor buffer;
      if (end - begin == 1) {
        buffer = reshape(values[indices[begin]], {-1}).clone();
      } else {
        std::vector<Tensor> flat;
        for (size_t k = begin; k < end; ++k) flat.push_back(reshape(values[indices[k]], {values[indices[k]].numel()}));
        buffer = concat(flat, 0);
      }
      if (workers) {
        // Hierarchical: the local replicas' buckets are folded on the first replica, which
        // all-reduces the result across workers; every local replica copies it back.
        const ReduceOp local_op = op == ReduceOp::Mean ? ReduceOp::Sum : op;
        const std::string what = std::string("all_reduce(") + reduce_op_name(op) + ", " + dtype_name(buffer.dtype()) +
                                 shape_str(buffer.shape()) + ")";
        Tensor total = comm_.merge(what, buffer, [&](const std::vector<Tensor>& parts) {
          Tensor local = fold_reduce(parts, local_op, parts[0].device());
          return cross_worker_all_reduce(*workers, op, local, strategy_.num_replicas_in_sync());
        });
        // No barrier needed before the next merge: the first replica overwrites the shared
        // result only after every replica has arrived there, i.e. after copying this one.
        buffer.copy_(total);
      } else if (LocalCollectiveGroup* nccl = strategy_.local_collectives()) {
        // NcclAllReduce: each replica reduces its own GPU's buffer through its rank.
        nccl->communicator(comm_.rank()).all_reduce(buffer, op);
      } else {
        comm_.all_reduce(buffer, op);
      }
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
  Communicator* workers = strategy_.worker_communicator();
  if (!workers) return comm_.all_gather_concat(value, axis);
  autograd::StopRecording no_tape;
  const int64_t a = normalize_axis(axis, value.ndim(), "all_gather");
  const std::string what = "all_gather(axis " + std::to_string(a) + ", " + dtype_name(value.dtype()) + ", rank " +
                           std::to_string(value.ndim()) + ")";
  Tensor all = comm_.merge(what, value, [&](const std::vector<Tensor>& parts) {
    std::vector<Tensor> placed;
    for (const Tensor& p : parts) placed.push_back(p.device() == Device() ? p : p.to(Device()));
    return cross_worker_concat(*workers, concat(placed, a), a);
  });
  Tensor out = Tensor::empty(all.shape(), all.dtype(), device_);
  out.copy_(all);
  return out;
}

void LocalReplicaContext::barrier() {
  comm_.barrier();
  if (Communicator* workers = strategy_.worker_communicator()) {
    comm_.run_once("barrier()", [&]() -> std::shared_ptr<void> {
      workers->barrier();
      return nullptr;
    });
  }
}

Tensor LocalReplicaContext::merge_call(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                       const Tensor& value) {
  return merge_call("merge_call()", fn, value);
}

Tensor LocalReplicaContext::merge_call(const std::string& what,
                                       const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                       const Tensor& value) {
  return comm_.merge(what, value, [&](const std::vector<Tensor>& values) {
    detail::CrossReplicaGuard cross_replica;  // fn runs in cross-replica context
    return fn(values);
  });
}

void LocalReplicaContext::run_once(const std::function<void()>& fn) {
  run_once_shared("run_once()", [&]() -> std::shared_ptr<void> {
    fn();
    return nullptr;
  });
}

std::shared_ptr<void> LocalReplicaContext::run_once_shared(const std::string& what,
                                                           const std::function<std::shared_ptr<void>()>& fn) {
  return comm_.run_once(what, [&] {
    detail::CrossReplicaGuard cross_replica;
    return fn();
  });
}

}  // namespace strata::distribute
