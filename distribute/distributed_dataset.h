// DistributedDataset: a dataset whose elements are fed to the replicas of a strategy
// (tf.distribute.DistributedDataset).
//
// From experimental_distribute_dataset: each element is a global batch, split along axis
// 0 as TensorFlow's rebatching does. A full batch of B examples gives the first B % n
// replicas one example more than the others ([3, 3, 2] for 8 over 3); a shorter batch
// (the last one) fills the replicas in order up to those sizes, so some get fewer or zero
// examples ([3, 2, 0] for 5 over 3, [4, 2] for 6 over 2 with B = 8). Nothing is dropped
// silently. B is the largest batch seen so far by this iterator (saved with its position).
//
// From distribute_datasets_from_function: the function's dataset yields per-replica
// batches, handed to the local replicas in turn; when it ends part-way, the remaining
// replicas get empty batches shaped like the first replica's. With
// InputOptions::experimental_replication_mode = PerReplica the function is called once per
// replica instead and each replica reads its own dataset; a replica whose dataset has ended
// gets empty batches while another's goes on (replica_pipelines_stage.h).
//
// Across W workers (MultiWorkerMirroredStrategy) experimental_distribute_dataset follows
// InputOptions::auto_shard_policy, and a step of every worker together consumes one global
// batch B, each worker B / W of it, split further between its local replicas:
//  - Data (and Auto when the pipeline does not read enough files): every worker reads
//    the whole dataset; each global batch is split across all replicas of the job, as
//    above, and a worker keeps its replicas' parts. Each example is used exactly once.
//  - File (and Auto when every worker can get a file): worker w reads only the files
//    i with i % W == w; each batch it reads is cut into one part per replica of the job
//    and the worker hands its local replicas consecutive parts (TensorFlow's rebatching).
//  - Off: every worker reads the whole dataset and rebatches it as with File, so each
//    example is used once per worker.
//
// Workers whose input is their own (File and Off sharding, distribute_datasets_from_function)
// may have different numbers of batches. Every worker then runs as many steps as the one
// with the most, as TensorFlow's partial batches do: each step the workers tell each other
// whether they still have input (one small collective per step, only in these modes), a
// worker whose input has ended gets empty batches (axis 0 of extent 0) shaped like the
// input it had, or like another worker's when it had none, and the iterator ends on every
// worker at once when every worker's input has ended. Without that, the worker with more
// batches would wait in its step's collectives for workers that had stopped. A worker whose
// input fails tells the others in the same exchange, so every worker raises at that step.
// When every worker's pipeline is infinite (repeat()) there is no end to agree on and no
// exchange: a worker whose input fails then leaves the job, and the others' next
// collective names it. On GPU replicas across workers over NCCL the exchange reads back on the host,
// so each such step waits for the previous one's GPU work (TensorFlow's partial batches
// cost the same). A step that may get empty batches computes its loss with the global
// batch size given (compute_average_loss(losses, global_batch)): without it an empty
// local batch raises, as in TensorFlow.
//
// Each replica's part is copied to its device and one batch per replica is prepared ahead
// on a background thread (InputOptions). Iteration state can be saved and restored
// (replica_split_stage.h): with one worker, and with Data sharding, where every worker
// reads the whole pipeline, every worker's position is the same, and a position saved
// under one strategy restores under another and under any replica count. With File and Off
// sharding, and with distribute_datasets_from_function across workers, each worker reads
// input of its own: a checkpoint then holds every worker's position (with one pipeline per
// replica, every replica's)
// (DistributedIterator::save_job_position), and resumes with the same number of workers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include <strata/data/dataset.h>
#include <strata/distribute/empty_batch.h>
#include <strata/distribute/input_options.h>
#include <strata/distribute/replica_split_stage.h>
#include <strata/distribute/values.h>

namespace strata::distribute {

class Strategy;

// The input position of a whole job, as a checkpoint holds it.
struct JobInputPosition {
  // false: states[0] is every worker's position. true: states[w] is worker w's.
  bool per_worker = false;
  std::vector<data::IteratorState> states;
};

class DistributedIterator {
 public:
  struct Options {
    // Elements are per-replica batches handed to the replicas in turn (one pipeline per
    // worker); otherwise each element holds every local replica's part, flattened.
    bool per_replica_elements = false;
    // The elements come from one pipeline per replica (replica_pipelines_stage.h).
    bool replica_pipelines = false;
    // Each worker's position is its own (see above).
    bool per_worker_positions = false;
    // Parts are on the replicas' devices (InputOptions::experimental_fetch_to_device):
    // empty batches are made there too, else on the host.
    bool fetch = true;
    // The pipeline never ends (repeated): workers need not tell each other it has.
    bool infinite = false;
  };
  // `it` runs the prepared pipeline.
  DistributedIterator(Strategy& strategy, data::Iterator it, Options options);
  // The next element for every local replica, or nullopt at the end (with input of each
  // worker's own across workers: a collective, see above).
  std::optional<PerReplica<data::Batch>> next();
  // This worker's position.
  data::IteratorState save() const { return it_.save(); }
  void restore(const data::IteratorState& state);

  // The job's position: this worker's when every worker's is the same, otherwise every
  // worker's, gathered over the worker communicator — then a collective: every worker
  // calls it at the same step, as every worker saves a checkpoint at the same step.
  JobInputPosition save_job_position();
  // Restores this worker's part of a job position; throws strata::Error naming both sides
  // when it was saved by another number of workers with positions of their own, or when
  // one side's workers share a position and the other's do not.
  void restore_job_position(const JobInputPosition& position);

  class RangeIterator {
   public:
    RangeIterator() = default;
    explicit RangeIterator(DistributedIterator* it) : it_(it) { ++*this; }
    PerReplica<data::Batch>& operator*() { return *current_; }
    PerReplica<data::Batch>* operator->() { return &*current_; }
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
  // This worker's next element, without asking the other workers.
  std::optional<PerReplica<data::Batch>> next_on_this_worker();
  // next() across workers whose input is their own (see above).
  std::optional<PerReplica<data::Batch>> next_in_step_with_workers();
  // Empty batches for local replicas [first, n), shaped like `spec` (`whose` batches, for
  // the error when they cannot be).
  std::vector<data::Batch> empty_batches(const BatchSpec& spec, int first, const std::string& whose) const;
  // it_.restore, naming the per-replica pipelines when the state is not theirs.
  void restore_position(const data::IteratorState& state);

  Strategy& strategy_;
  data::Iterator it_;
  Options options_;
  // The components of a replica's part (dtype and shape each), from the last element of
  // this worker or, when it had none, of another's: empty batches are shaped like it.
  BatchSpec batch_spec_;
  bool ended_on_every_worker_ = false;
  // Whether the workers exchange each step whether they have a batch: decided by them
  // all at the first next() (not when every worker's pipeline is infinite).
  std::optional<bool> exchange_each_step_;
};

class DistributedDataset {
 public:
  enum class Mode {
    SplitGlobalBatches,  // experimental_distribute_dataset
    PerReplicaElements,   // distribute_datasets_from_function, one pipeline per worker
    PerReplicaPipelines,  // distribute_datasets_from_function, one pipeline per replica:
                          // `dataset` is combine_replica_pipelines' stage
  };
  DistributedDataset(Strategy& strategy, data::Dataset dataset, Mode mode, const InputOptions& options = {});

  DistributedIterator make_iterator() const;
  // Range-for: each loop gets a fresh iterator (one epoch).
  DistributedIterator::RangeIterator begin();
  std::default_sentinel_t end() { return {}; }
  // The dataset as given (before splitting, placement and prefetching); with one pipeline
  // per replica, the stage combining them (replica_pipelines_stage.h).
  const data::Dataset& dataset() const { return dataset_; }

 private:
  // The multi-worker pipeline of experimental_distribute_dataset (see above).
  // Sets *per_worker_positions when each worker's input position is its own.
  static data::Dataset split_across_workers(Strategy& strategy, const data::Dataset& dataset,
                                            const InputOptions& options, bool* per_worker_positions);

  Strategy* strategy_;
  data::Dataset dataset_;
  data::Dataset pipeline_;  // dataset_ with the split / placement / prefetch stages
  Mode mode_;
  bool per_worker_positions_ = false;  // see DistributedIterator
  bool fetch_ = true;
  std::shared_ptr<DistributedIterator> active_;  // the iterator of the current range-for
};

}  // namespace strata::distribute
