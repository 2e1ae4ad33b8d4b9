#include <strata/distribute/local_replica_context.h>

#include <algorithm>

#include <strata/autograd/custom_gradient.h>
#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/thread_pool.h>
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
                                         std::shared_ptr<InProcessGroup> group,
                                         std::shared_ptr<InProcessGroup> gradient_group)
    : strategy_(strategy),
      replica_(replica),
      device_(device),
      comm_(std::move(group), replica),
      gradient_comm_(std::move(gradient_group), replica) {}

int LocalReplicaContext::num_replicas_in_sync() const { return strategy_.num_replicas_in_sync(); }

int LocalReplicaContext::replica_id_in_sync_group() const {
  return strategy_.worker_index() * strategy_.num_local_replicas() + replica_;
}

void LocalReplicaContext::reduce_buffer(InProcessCommunicator& comm, const Tensor& buffer, ReduceOp op,
                                        const std::string& what) {
  if (Communicator* workers = strategy_.worker_communicator()) {
    if (comm.size() == 1 && op != ReduceOp::Mean && buffer.dtype() != kBool && buffer.is_contiguous() &&
        same_memory(buffer.device(), workers->buffer_device())) {
      // One replica per worker: nothing to fold locally, so the buffer itself is reduced
      // across workers in place (the path below would copy it three times on the way).
      workers->all_reduce(buffer, op);
      return;
    }
    // Hierarchical: the local replicas' buffers are folded on the first replica, which
    // all-reduces the result across workers; every local replica copies it back. No
    // barrier is needed before the next merge: the first replica overwrites the shared
    // result only after every replica has arrived there, i.e. after copying this one.
    const ReduceOp local_op = op == ReduceOp::Mean ? ReduceOp::Sum : op;
    Tensor total = comm.merge(what, buffer, [&](const std::vector<Tensor>& parts) {
      Tensor local = fold_reduce(parts, local_op, parts[0].device());
      return cross_worker_all_reduce(*workers, op, local, strategy_.num_replicas_in_sync());
    });
    buffer.copy_(total);
  } else if (LocalCollectiveGroup* nccl = strategy_.local_collectives()) {
    // NcclAllReduce: each replica reduces its own GPU's buffer through its rank.
    nccl->communicator(comm.rank()).all_reduce(buffer, op);
  } else {
    comm.all_reduce(buffer, op, what);
  }
}

namespace {
// The replica context a collective's gradient runs its all-reduce in: the one backward
// runs in, which must be the Strategy::run that made the collective.
ReplicaContext& replica_for_gradient(const char* collective) {
  ReplicaContext* ctx = get_replica_context();
  STRATA_CHECK(ctx != nullptr && ctx->num_replicas_in_sync() > 1, "ReplicaContext::", collective,
               ": its gradient is an all-reduce across the replicas, so compute it inside the Strategy::run that "
               "made it (here there is no replica context)");
  return *ctx;
}
}  // namespace

std::vector<Tensor> LocalReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values) {
  if (comm_.size() == 1 && !strategy_.worker_communicator()) return values;
  std::vector<Tensor> out;
  {
    autograd::StopRecording no_tape;
    drain_gradients();
    // One rendezvous per bucket rather than per tensor (gradient_reducer.h packs).
    out = GradientReducer::reduce_packed(values, strategy_.communication_options().bytes_per_pack,
                                         [&](const Tensor& buffer) {
                                           reduce_buffer(comm_, buffer, op,
                                                         std::string("all_reduce(") + reduce_op_name(op) + ", " +
                                                             dtype_name(buffer.dtype()) + shape_str(buffer.shape()) +
                                                             ")");
                                         });
  }
  // Differentiable, as TensorFlow's: replica r's value reaches every replica's result, so
  // its gradient is the sum (the mean, for Mean) of every replica's gradient there — an
  // all-reduce in backward, which every replica reaches in the same order because they
  // run the same step. Max and Min are not differentiated (no gradient flows through).
  if ((op == ReduceOp::Sum || op == ReduceOp::Mean) && autograd::is_recording()) {
    for (size_t i = 0; i < values.size(); ++i) {
      if (!values[i].defined() || !is_floating(values[i].dtype())) continue;
      const Tensor reduced = out[i];
      out[i] = autograd::custom_gradient({values[i]}, [reduced, op](const std::vector<Tensor>&) {
        autograd::CustomVjp vjp = [op](const Tensor& grad) {
          return std::vector<Tensor>{replica_for_gradient("all_reduce").all_reduce(op, grad)};
        };
        return autograd::CustomResult{reduced, std::move(vjp)};
      });
    }
  }
  return out;
}

std::vector<Tensor> LocalReplicaContext::sum_gradients(const std::vector<Tensor>& grads) {
  // GradientTape::gradient returned the sums already (aggregate_gradients_in_backward);
  // whatever the step did to them since (clipping) was done to sums.
  if (reducer_ && reducer_->aggregates()) return grads;
  if (!reducer_) return all_reduce(ReduceOp::Sum, grads);
  autograd::StopRecording no_tape;
  std::vector<Tensor> out = reducer_->take(grads);
  // The gradients the reducer does not hold (changed after backward, or computed without
  // its hook) are reduced now; which ones is the same on every replica.
  std::vector<size_t> rest;
  std::vector<Tensor> values;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined() && !out[i].defined()) {
      rest.push_back(i);
      values.push_back(grads[i]);
    }
  }
  if (!values.empty()) {
    std::vector<Tensor> reduced = all_reduce(ReduceOp::Sum, values);
    for (size_t k = 0; k < rest.size(); ++k) out[rest[k]] = reduced[k];
  }
  return out;
}

GradientReducer* LocalReplicaContext::gradient_hook() {
  const CommunicationOptions& options = strategy_.communication_options();
  // ZeRO-1 reduce-scatters the gradients itself in apply_gradients: all-reducing buckets
  // during backward too would move every gradient twice.
  STRATA_CHECK(!options.aggregate_gradients_in_backward ||
                   (options.overlap_gradient_reduction && !strategy_.shard_optimizer_state()),
               "CommunicationOptions::aggregate_gradients_in_backward needs overlap_gradient_reduction on and no "
               "optimizer-state sharding (ZeRO-1 reduce-scatters the gradients in apply_gradients)");
  if (!options.overlap_gradient_reduction || strategy_.num_replicas_in_sync() <= 1 ||
      strategy_.shard_optimizer_state()) {
    return nullptr;
  }
  if (!reducer_) {
    GradientReducer::Options o;
    o.bytes_per_pack = options.bytes_per_pack;
    o.aggregate = options.aggregate_gradients_in_backward;
    // One bucket's collective: the local wait, plus the cross-worker one.
    o.wait_timeout_seconds = gradient_comm_.group().timeout_seconds() + options.timeout_seconds + 10.0;
    if (stream_gradient_communicator()) {
      // NCCL sums this GPU's buckets by itself, on the GPU's communication stream: no
      // communication thread. Looked up at each launch (a local group is rebuilt after a
      // failed round).
      reducer_ = std::make_unique<GradientReducer>(
          GradientReducer::StreamTransport{[this](const Tensor& bucket, const std::string&) {
            return stream_gradient_communicator()->all_reduce_async(bucket, ReduceOp::Sum);
          }},
          o);
      return reducer_.get();
    }
    // The communication thread serves CPU replicas. GPU replicas reducing in device
    // memory (logical GPUs, or hierarchically before NCCL or Gloo across workers) launch
    // each bucket inline, from the replica thread, keeping its device stream order.
    o.asynchronous = device_.is_cpu() && strategy_.local_collectives() == nullptr;
    // The communication thread folds with the replica thread's share of the cores (one
    // on a machine with as many cores as replicas), not the whole intra-op pool, which
    // the replicas computing backward are using.
    const int limit = thread_parallelism_limit();
    reducer_ = std::make_unique<GradientReducer>(
        [this, limit](const std::vector<Tensor>& gradients, Tensor& bucket, const std::string& what) {
          set_thread_parallelism_limit(limit);
          if (!strategy_.worker_communicator() && !strategy_.local_collectives()) {
            // Replicas of one process: summed straight from every replica's gradients;
            // on logical CPU devices (one memory) into one bucket all replicas read,
            // instead of a copy of the sums per replica.
            if (device_.is_cpu())
              bucket = gradient_comm_.all_reduce_parts_shared(gradients, bucket, ReduceOp::Sum, what);
            else
              gradient_comm_.all_reduce_parts(gradients, bucket, ReduceOp::Sum, what);
            return;
          }
          GradientReducer::pack_into(gradients, bucket);
          reduce_buffer(gradient_comm_, bucket, ReduceOp::Sum, what);
        },
        o);
    if (o.aggregate && o.asynchronous && device_.is_cpu() && !strategy_.worker_communicator() &&
        !strategy_.local_collectives()) {
      // Replicas of one process on logical CPU devices: the weight gradients of their
      // matmuls are summed from the factors, each rank computing a block of rows.
      reducer_->set_product_transport(
          [this, limit](const Tensor& a, const Tensor& b, Tensor& sums, const std::string& what) {
            set_thread_parallelism_limit(limit);
            sums = gradient_comm_.sum_products_shared(a, b, sums, what);
          });
    }
  }
  return reducer_.get();
}

Communicator* LocalReplicaContext::stream_gradient_communicator() const {
  if (device_.is_cpu()) return nullptr;
  if (Communicator* workers = strategy_.worker_communicator()) {
    // Across workers: directly only when nothing is to be combined locally first.
    return strategy_.num_local_replicas() == 1 && workers->buffer_device() == device_ ? workers : nullptr;
  }
  if (LocalCollectiveGroup* nccl = strategy_.local_collectives()) return &nccl->communicator(local_index());
  return nullptr;
}

void LocalReplicaContext::end_step(bool failed) {
  if (reducer_) reducer_->end_step(failed);
}

Tensor LocalReplicaContext::all_gather(const Tensor& value, int64_t axis) {
  const int64_t a = normalize_axis(axis, value.ndim(), "all_gather");
  const bool taped = autograd::is_recording() && is_floating(value.dtype());
  // Replicas on distinct GPUs of one process gather through NCCL, in their streams' order
  // (no host wait), when every part has the same extent along axis 0.
  LocalCollectiveGroup* nccl = strategy_.worker_communicator() ? nullptr : strategy_.local_collectives();
  const bool nccl_may_gather = nccl != nullptr && a == 0 && value.device() == device_;
  if (!taped && !nccl_may_gather) return gather_values(value, a);
  // Every replica's extent along the axis (they may differ), gathered on the host.
  const Tensor extents = gather_values(full({1}, double(value.dim(a)), kInt64, Device()), 0);
  const std::vector<int64_t> sizes = extents.to_vector<int64_t>();
  const bool even = std::all_of(sizes.begin(), sizes.end(), [&](int64_t s) { return s == sizes[0]; });
  Tensor gathered;
  if (nccl_may_gather && even) {
    autograd::StopRecording no_tape;
    drain_gradients();
    Shape shape = value.shape();
    shape[0] *= int64_t(sizes.size());
    gathered = Tensor::empty(shape, value.dtype(), device_);
    nccl->communicator(comm_.rank()).all_gather(value.contiguous(), gathered);
  } else {
    gathered = gather_values(value, a);
  }
  if (!taped) return gathered;
  // Differentiable, as TensorFlow's: this replica's slice of the gathered result reaches
  // every replica's result, so its gradient is its slice of the sum of every replica's
  // gradient (an all-reduce in backward).
  int64_t start = 0;
  for (int r = 0; r < replica_id_in_sync_group(); ++r) start += sizes[size_t(r)];
  const int64_t length = value.dim(a);
  return autograd::custom_gradient({value}, [gathered, a, start, length](const std::vector<Tensor>&) {
    autograd::CustomVjp vjp = [a, start, length](const Tensor& grad) {
      return std::vector<Tensor>{
          replica_for_gradient("all_gather").all_reduce(ReduceOp::Sum, grad).slice(a, start, start + length)};
    };
    return autograd::CustomResult{gathered, std::move(vjp)};
  });
}

Tensor LocalReplicaContext::gather_values(const Tensor& value, int64_t a) {
  autograd::StopRecording no_tape;
  drain_gradients();
  Communicator* workers = strategy_.worker_communicator();
  if (!workers) return comm_.all_gather_concat(value, a);
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
  drain_gradients();
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
  drain_gradients();
  Tensor result = comm_.merge(what, value, [&](const std::vector<Tensor>& values) {
    detail::CrossReplicaGuard cross_replica;  // fn runs in cross-replica context
    return fn(values);
  });
  // fn ran on one replica's thread and left its result where it chose (replica 0's GPU):
  // each replica gets it in its own device's memory, where its ops can read it. A host
  // scalar is readable everywhere (the ops' device rule) and stays.
  const bool host_scalar = result.defined() && result.ndim() == 0 && result.device().is_cpu();
  if (result.defined() && !host_scalar && !same_memory(result.device(), device_)) result = result.to(device_);
  return result;
}

void LocalReplicaContext::run_once(const std::function<void()>& fn) {
  run_once_shared("run_once()", [&]() -> std::shared_ptr<void> {
    fn();
    return nullptr;
  });
}

std::shared_ptr<void> LocalReplicaContext::run_once_shared(const std::string& what,
                                                           const std::function<std::shared_ptr<void>()>& fn) {
  drain_gradients();
  return comm_.run_once(what, [&] {
    detail::CrossReplicaGuard cross_replica;
    return fn();
  });
}

}  // namespace strata::distribute
