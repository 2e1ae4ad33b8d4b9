#include <strata/distribute/sharded_collectives.h>

#include <algorithm>
#include <string>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/collective/nccl_communicator.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

int64_t shard_width(int64_t numel, int replicas) {
  STRATA_CHECK(replicas >= 1 && numel >= 0, "shard_width: ", numel, " elements over ", replicas, " replicas");
  return (numel + replicas - 1) / replicas;
}

std::pair<int64_t, int64_t> shard_range(int64_t numel, int replicas, int replica) {
  STRATA_CHECK(replica >= 0 && replica < replicas, "shard_range: replica ", replica, " out of range for ", replicas,
               " replicas");
  const int64_t w = shard_width(numel, replicas);
  const int64_t begin = std::min(numel, int64_t(replica) * w);
  return {begin, std::min(numel, begin + w)};
}

namespace {
std::string describe(const char* what, const Tensor& t) {
  return std::string(what) + "(" + dtype_name(t.dtype()) + shape_str(t.shape()) + ")";
}

// A contiguous copy of `t` on `device` that a communicator may overwrite.
Tensor own_copy(const Tensor& t, Device device) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  out.copy_(t);
  return out;
}
}  // namespace

Tensor reduce_scatter_rows(LocalReplicaContext& ctx, const Tensor& rows) {
  autograd::StopRecording no_tape;
  Strategy& strategy = ctx.strategy();
  const int n = strategy.num_replicas_in_sync(), local = strategy.num_local_replicas();
  STRATA_CHECK(rows.defined() && rows.ndim() == 2 && rows.dim(0) == n, "reduce_scatter_rows: expected a [", n,
               ", S] matrix (one row per replica in sync), got ",
               rows.defined() ? dtype_name(rows.dtype()) + shape_str(rows.shape()) : std::string("undefined"));
  const int64_t width = rows.dim(1);
  Tensor out = Tensor::empty({width}, rows.dtype(), ctx.device());
  Communicator* workers = strategy.worker_communicator();
  if (!workers) {
    Tensor input = rows.is_contiguous() ? rows : rows.contiguous();
    Tensor mine = reshape(out, {1, width});
    if (LocalCollectiveGroup* nccl = strategy.local_collectives()) {
      nccl->communicator(ctx.local_index()).reduce_scatter(input, mine, ReduceOp::Sum);
    } else {
      ctx.communicator().reduce_scatter(input, mine, ReduceOp::Sum);
    }
    return out;
  }
  // Hierarchical, as LocalReplicaContext::all_reduce: the first local replica folds the
  // local replicas' matrices in replica order, reduce-scatters the fold across workers
  // (each worker keeps its local replicas' rows), and every local replica copies its row.
  Tensor worker_rows = ctx.communicator().merge(describe("reduce_scatter_rows", rows), rows,
                                                [&](const std::vector<Tensor>& parts) {
    Tensor folded = own_copy(fold_reduce(parts, ReduceOp::Sum, parts[0].device()), workers->buffer_device());
    Tensor mine = Tensor::empty({int64_t(local), width}, rows.dtype(), workers->buffer_device());
    workers->reduce_scatter(folded, mine, ReduceOp::Sum);
    return mine;
  });
  // No barrier before the next merge: the first replica overwrites the shared result only
  // after every replica has arrived there, i.e. after copying this one.
  out.copy_(reshape(worker_rows.slice(0, ctx.local_index(), ctx.local_index() + 1), {width}));
  return out;
}

Tensor all_gather_rows(LocalReplicaContext& ctx, const Tensor& row) {
  autograd::StopRecording no_tape;
  Strategy& strategy = ctx.strategy();
  const int n = strategy.num_replicas_in_sync(), local = strategy.num_local_replicas();
  STRATA_CHECK(row.defined() && row.ndim() == 1, "all_gather_rows: expected a row [S], got ",
               row.defined() ? dtype_name(row.dtype()) + shape_str(row.shape()) : std::string("undefined"));
  const int64_t width = row.dim(0);
  Communicator* workers = strategy.worker_communicator();
  if (!workers) {
    Tensor out = Tensor::empty({int64_t(n), width}, row.dtype(), ctx.device());
    Tensor input = reshape(row.contiguous(), {1, width});
    if (LocalCollectiveGroup* nccl = strategy.local_collectives()) {
      nccl->communicator(ctx.local_index()).all_gather(input, out);
    } else {
      ctx.communicator().all_gather(input, out);
    }
    return out;
  }
  // Hierarchical: the first local replica stacks the local rows (local replica order =
  // replica id order within the worker) and gathers the workers' stacks in worker order.
  return ctx.communicator().merge(describe("all_gather_rows", row), row, [&](const std::vector<Tensor>& parts) {
    Tensor stacked = Tensor::empty({int64_t(local), width}, row.dtype(), workers->buffer_device());
    for (int l = 0; l < local; ++l) stacked.slice(0, l, l + 1).copy_(reshape(parts[size_t(l)], {1, width}));
    Tensor all = Tensor::empty({int64_t(n), width}, row.dtype(), workers->buffer_device());
    workers->all_gather(stacked, all);
    return all;
  });
}

}  // namespace strata::distribute
