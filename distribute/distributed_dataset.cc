#include "distribute/distributed_dataset.h"

#include "core/ops.h"
#include "distribute/strategy.h"

namespace strata::distribute {

std::vector<data::Batch> split_batch(const data::Batch& batch, int n) {
  std::vector<data::Batch> parts(static_cast<size_t>(n));
  for (const Tensor& t : batch) {
    STRATA_CHECK(t.ndim() >= 1, "distribute: cannot split a rank-0 batch component across ",
                 n, " replicas");
    const int64_t b = t.dim(0), base = b / n, extra = b % n;
    int64_t start = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t len = base + (r < extra ? 1 : 0);
      parts[size_t(r)].push_back(t.slice(0, start, start + len));
      start += len;
    }
  }
  return parts;
}

DistributedIterator::DistributedIterator(Strategy& strategy, data::Iterator it, bool per_replica_elements)
    : strategy_(strategy), it_(std::move(it)), per_replica_elements_(per_replica_elements) {}

std::optional<PerReplica<data::Batch>> DistributedIterator::next() {
  const int n = strategy_.num_local_replicas();
  if (per_replica_elements_) {
    std::vector<data::Batch> parts;
    for (int r = 0; r < n; ++r) {
      auto e = it_.next();
      if (!e) {
        if (r == 0) return std::nullopt;
        // Fewer elements than replicas at the end: the rest get empty batches shaped like
        // the first one, so every replica still runs the step.
        for (int k = r; k < n; ++k) {
          data::Batch empty;
          for (const Tensor& t : parts[0]) empty.push_back(t.slice(0, 0, 0));
          parts.push_back(empty);
        }
        break;
      }
      parts.push_back(std::move(*e));
    }
    return PerReplica<data::Batch>(std::move(parts));
  }
  auto e = it_.next();
  if (!e) return std::nullopt;
  if (n == 1) return PerReplica<data::Batch>({std::move(*e)});
  return PerReplica<data::Batch>(split_batch(*e, n));
}

DistributedDataset::DistributedDataset(Strategy& strategy, data::Dataset dataset, bool per_replica_elements)
    : strategy_(&strategy), dataset_(std::move(dataset)), per_replica_elements_(per_replica_elements) {}

DistributedIterator DistributedDataset::make_iterator() const {
  return DistributedIterator(*strategy_, dataset_.make_iterator(), per_replica_elements_);
}

DistributedIterator::RangeIterator DistributedDataset::begin() {
  active_ = std::make_shared<DistributedIterator>(make_iterator());
  return active_->begin();
}

}  // namespace strata::distribute
