// Sharded collectives: the two collectives of ZeRO-1 (train/sharded_optimizer_state.h,
// docs/ZERO.md) over every replica in sync of a strategy, local replicas and workers.
//
// A flat tensor of n elements is sharded over N replicas in chunks of w = ceil(n / N):
// replica g (its replica_id_in_sync_group) owns [g * w, min(n, (g + 1) * w)), possibly
// empty when n < N. Several tensors are packed into a [N, S] matrix whose row g holds the
// chunk g of each tensor, each padded to its w, so that one reduce-scatter gives every
// replica exactly its chunks and one all-gather gives every replica everyone's.
//
// reduce_scatter_rows adds the replicas' values in the order all_reduce does (replica
// order in-process; the local fold then the worker communicator across workers), so
// each replica's row is bitwise the corresponding slice of the all-reduced matrix.
//
// Both are collectives: every replica of every worker calls them in the same order with
// matrices of the same shape and dtype; a missing or failed replica makes them throw on
// every replica within the strategy's timeouts (never a hang).
#pragma once

#include <cstdint>
#include <utility>

#include <strata/core/tensor.h>

namespace strata::distribute {

class LocalReplicaContext;

// The chunk width w = ceil(numel / replicas) (0 for an empty tensor).
int64_t shard_width(int64_t numel, int replicas);
// [begin, end) of the flat elements that replica `replica` of `replicas` owns.
std::pair<int64_t, int64_t> shard_range(int64_t numel, int replicas, int replica);

// `rows` ([num_replicas_in_sync, S], this replica's contribution, on its device): the Sum
// over every replica in sync of row replica_id_in_sync_group, as a new [S] tensor on this
// replica's device.
Tensor reduce_scatter_rows(LocalReplicaContext& ctx, const Tensor& rows);

// `row` ([S], on this replica's device): every replica's row, as [num_replicas_in_sync, S]
// in replica order. The result may be a buffer shared by the local replicas: read it
// before this replica's next collective, never write to it.
Tensor all_gather_rows(LocalReplicaContext& ctx, const Tensor& row);

}  // namespace strata::distribute
