// Cross-worker reductions: the second level of MultiWorkerMirroredStrategy's hierarchical
// collectives. Each worker first combines its local replicas' values (in-process), then
// the workers' results are combined through the worker communicator (Gloo), and every
// worker ends with the same result.
//
// All functions are collectives: every worker must call them in the same order with
// values of the same dtype and rank; a lost or stalled worker makes them throw the
// communicator's strata::Error (which names the rank) within its timeout.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <strata/core/tensor.h>
#include <strata/distribute/collective/communicator.h>
#include <strata/distribute/cross_device_ops.h>

namespace strata::distribute {

// All-reduces `local` (this worker's contribution, already combined over its local
// replicas with `op`, or Sum for Mean) across workers in place of a copy, and returns it.
// Mean divides the total by `total_replicas` (the replicas in sync over every worker;
// integers: truncating, as fold_reduce). bool is reduced as int32 (Max/Min only).
Tensor cross_worker_all_reduce(Communicator& workers, ReduceOp op, const Tensor& local, int64_t total_replicas);

// Concatenates every worker's `value` along `axis`, in worker order. The extents along
// `axis` may differ between workers (an uneven last batch); the other extents and the
// dtype must agree (checked: a mismatch throws naming the worker).
Tensor cross_worker_concat(Communicator& workers, const Tensor& value, int64_t axis);

// Strategy::reduce across workers: the local replicas' `values` are reduced with the
// strategy's cross-device ops, then across workers. With an axis, each value is first
// reduced along it and Mean divides by the true element count over every replica of
// every worker (an uneven split averages right); Mean of integers gives float64.
Tensor cross_worker_reduce(Communicator& workers, CrossDeviceOps ops, ReduceOp op, const std::vector<Tensor>& values,
                           std::optional<int64_t> axis, int64_t total_replicas, Device destination);

}  // namespace strata::distribute
