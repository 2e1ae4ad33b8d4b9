#include <strata/distribute/cross_worker.h>

#include <algorithm>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>

namespace strata::distribute {

namespace {
// A contiguous copy on the communicator's buffer device (cpu:0 for Gloo, the worker's GPU
// for NCCL) that the communicator may overwrite.
Tensor own_copy(const Tensor& t, Device device) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  out.copy_(t);
  return out;
}

// `t` on the communicator's buffer device (a copy only when it lives elsewhere).
Tensor on_buffer_device(const Tensor& t, Device device) { return t.device() == device ? t : t.to(device); }

// Small host-side values (shapes, counts) read back on the host.
std::vector<int64_t> host_int64(const Tensor& t) {
  return (t.device().is_cpu() ? t : t.to(Device())).to_vector<int64_t>();
}
}  // namespace

Tensor cross_worker_all_reduce(Communicator& workers, ReduceOp op, const Tensor& local, int64_t total_replicas) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(local.defined(), "cross-worker all_reduce: undefined value");
  const ReduceOp across = op == ReduceOp::Mean ? ReduceOp::Sum : op;
  const bool boolean = local.dtype() == kBool;
  STRATA_CHECK(!boolean || op == ReduceOp::Max || op == ReduceOp::Min, "cross-worker all_reduce(", reduce_op_name(op),
               "): bool values can only be reduced with max or min");
  Tensor buffer = own_copy(boolean ? cast(local, kInt32) : local, workers.buffer_device());
  workers.all_reduce(buffer, across);
  if (boolean) buffer = cast(buffer, kBool);
  if (op == ReduceOp::Mean && total_replicas > 1) {
    const double n = double(total_replicas);
    buffer = is_floating(buffer.dtype()) ? buffer / n : cast(cast(buffer, kFloat64) / n, buffer.dtype());
  }
  if (!(buffer.device() == local.device())) buffer = buffer.to(local.device());
  return buffer;
}

Tensor cross_worker_concat(Communicator& workers, const Tensor& value, int64_t axis) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(value.defined(), "cross-worker all_gather: undefined value");
  const int64_t a = normalize_axis(axis, value.ndim(), "cross-worker all_gather");
  const int n = workers.size();
  if (n == 1) return value.contiguous();
  // 1. Every worker's shape (padded with the dtype code), so that each part can be cut out.
  const int64_t rank = value.ndim();
  std::vector<int64_t> mine(value.shape().begin(), value.shape().end());
  mine.push_back(int64_t(value.dtype()));
  mine.push_back(rank);
  const Device dev = workers.buffer_device();
  Tensor my_shape = on_buffer_device(Tensor::from_vector(mine, {rank + 2}, kInt64, Device()), dev);
  Tensor shapes = Tensor::empty({int64_t(n) * (rank + 2)}, kInt64, dev);
  workers.all_gather(my_shape, shapes);
  const std::vector<int64_t> all = host_int64(shapes);
  std::vector<Shape> part_shapes;
  int64_t max_numel = 0;
  for (int w = 0; w < n; ++w) {
    const int64_t* s = all.data() + size_t(w) * size_t(rank + 2);
    bool same = s[rank + 1] == rank && s[rank] == int64_t(value.dtype());
    Shape shape(s, s + rank);
    for (int64_t d = 0; same && d < rank; ++d) same = d == a || shape[size_t(d)] == value.shape()[size_t(d)];
    STRATA_CHECK(same, "cross-worker all_gather along axis ", a, ": worker ", workers.rank(), " has ",
                 dtype_name(value.dtype()), shape_str(value.shape()), " but worker ", w,
                 " has a different dtype, rank or extent off the gather axis");
    max_numel = std::max(max_numel, numel_of(shape));
    part_shapes.push_back(std::move(shape));
  }
  // 2. Every worker's values, padded to the largest part (Gloo gathers equal sizes).
  Tensor padded = zeros({std::max<int64_t>(max_numel, 1)}, value.dtype(), dev);
  if (value.numel() > 0) padded.slice(0, 0, value.numel()).copy_(reshape(value.contiguous(), {value.numel()}));
  Tensor gathered = Tensor::empty({int64_t(n) * padded.numel()}, value.dtype(), dev);
  workers.all_gather(padded, gathered);
  std::vector<Tensor> parts;
  for (int w = 0; w < n; ++w) {
    const int64_t begin = int64_t(w) * padded.numel();
    parts.push_back(reshape(gathered.slice(0, begin, begin + numel_of(part_shapes[size_t(w)])), part_shapes[size_t(w)]));
  }
  Tensor out = concat(parts, a);
  if (!(out.device() == value.device())) out = out.to(value.device());
  return out;
}

Tensor cross_worker_reduce(Communicator& workers, CrossDeviceOps ops, ReduceOp op, const std::vector<Tensor>& values,
                           std::optional<int64_t> axis, int64_t total_replicas, Device destination) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(!values.empty(), "Strategy::reduce: no values");
  const DType dtype = values[0].dtype();
  if (!axis) {
    const ReduceOp local_op = op == ReduceOp::Mean ? ReduceOp::Sum : op;
    Tensor local = cross_device_reduce(ops, local_op, values, destination);
    if (op == ReduceOp::Mean && !is_floating(dtype)) {
      return cast(cross_worker_all_reduce(workers, ReduceOp::Sum, local, total_replicas), kFloat64) /
             double(total_replicas);
    }
    return cross_worker_all_reduce(workers, op, local, total_replicas);
  }
  // With an axis: each replica's value reduced along it, stacked (zero rows when every
  // local replica is empty along the axis), gathered from every worker and folded.
  std::vector<Tensor> partial;
  int64_t count = 0;
  Shape rest;
  for (const Tensor& v : values) {
    const int64_t a = normalize_axis(*axis, v.ndim(), "Strategy::reduce");
    count += v.dim(a);
    rest = v.shape();
    rest.erase(rest.begin() + a);
    if (v.dim(a) == 0 && (op == ReduceOp::Max || op == ReduceOp::Min)) continue;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean: partial.push_back(sum(v, std::vector<int64_t>{a})); break;
      case ReduceOp::Max: partial.push_back(max(v, std::vector<int64_t>{a})); break;
      case ReduceOp::Min: partial.push_back(min(v, std::vector<int64_t>{a})); break;
    }
  }
  Tensor local;
  if (partial.empty()) {
    Shape empty = rest;
    empty.insert(empty.begin(), 0);
    local = Tensor::empty(empty, op == ReduceOp::Sum || op == ReduceOp::Mean ? sum(values[0]).dtype() : dtype, Device());
  } else {
    std::vector<Tensor> placed;
    for (const Tensor& p : partial) placed.push_back(p.device() == Device() ? p : p.to(Device()));
    local = stack(placed, 0);
  }
  Tensor all = cross_worker_concat(workers, local, 0);
  Tensor counts = on_buffer_device(Tensor::from_vector(std::vector<int64_t>{count}, {1}, kInt64, Device()),
                                  workers.buffer_device());
  workers.all_reduce(counts, ReduceOp::Sum);
  const int64_t total_count = host_int64(counts)[0];
  STRATA_CHECK(all.dim(0) > 0, "Strategy::reduce(", reduce_op_name(op), "): every replica's value on every worker is "
               "empty along axis ", *axis, ", so there is nothing to take the ", reduce_op_name(op), " of");
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < all.dim(0); ++i) rows.push_back(all.slice(0, i, i + 1).reshape(rest));
  const ReduceOp across = op == ReduceOp::Mean ? ReduceOp::Sum : op;
  Tensor total = fold_reduce(rows, across, destination);
  if (op != ReduceOp::Mean) return total;
  return is_floating(total.dtype()) ? total / double(total_count) : cast(total, kFloat64) / double(total_count);
}

}  // namespace strata::distribute
