// DistributedDataset: a dataset whose elements are split across the replicas of a strategy
// (tf.distribute.DistributedDataset). Each global batch is split along axis 0 as evenly as
// possible — a short last batch gives some replicas fewer (possibly zero) examples and is
// never dropped silently. Across workers the dataset is first auto-sharded.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "data/dataset.h"
#include "distribute/values.h"

namespace strata::distribute {

class Strategy;

class DistributedIterator {
 public:
  DistributedIterator(Strategy& strategy, data::Iterator it, bool per_replica_elements);
  // The next element for every local replica, or nullopt at the end.
  std::optional<PerReplica<data::Batch>> next();
  data::IteratorState save() const { return it_.save(); }
  void restore(const data::IteratorState& state) { it_.restore(state); }

  class RangeIterator {
   public:
    RangeIterator() = default;
    explicit RangeIterator(DistributedIterator* it) : it_(it) { ++*this; }
    PerReplica<data::Batch>& operator*() { return *current_; }
    RangeIterator& operator++() {
      current_ = it_->next();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    DistributedIterator* it_ = nullptr;
    std::optional<PerReplica<data::Batch>> current_;
  };
  RangeIterator begin() { return RangeIterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  Strategy& strategy_;
  data::Iterator it_;
  bool per_replica_elements_;
};

class DistributedDataset {
 public:
  // per_replica_elements: the dataset yields one element per replica (from a dataset
  // function) rather than global batches to split.
  DistributedDataset(Strategy& strategy, data::Dataset dataset, bool per_replica_elements);

  DistributedIterator make_iterator() const;
  // Range-for: each loop gets a fresh iterator (one epoch).
  DistributedIterator::RangeIterator begin();
  std::default_sentinel_t end() { return {}; }
  const data::Dataset& dataset() const { return dataset_; }

 private:
  Strategy* strategy_;
  data::Dataset dataset_;
  bool per_replica_elements_;
  std::shared_ptr<DistributedIterator> active_;  // the iterator of the current range-for
};

// Splits every component of a global batch along axis 0 into n parts as even as possible
// (the first B % n parts get one more example).
std::vector<data::Batch> split_batch(const data::Batch& batch, int n);

}  // namespace strata::distribute
