#include <strata/distribute/distributed_dataset.h>

#include <algorithm>

#include <strata/core/ops.h>
#include <strata/distribute/cross_worker.h>
#include <strata/distribute/device_fetch.h>
#include <strata/distribute/empty_batch.h>
#include <strata/distribute/replica_split_stage.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

// ---- iterator ----

namespace {

// Every worker's `words` (their counts may differ), in worker order: a collective.
std::vector<std::vector<int64_t>> gather_words(Communicator& workers, const std::vector<int64_t>& words) {
  const int64_t count = int64_t(words.size());
  const Tensor counts =
      cross_worker_concat(workers, Tensor::from_vector(std::vector<int64_t>{count}, {1}, kInt64, Device()), 0);
  const std::vector<int64_t> all =
      cross_worker_concat(workers, Tensor::from_vector(words, {count}, kInt64, Device()), 0).to_vector<int64_t>();
  std::vector<std::vector<int64_t>> out;
  size_t at = 0;
  for (int64_t n : counts.to_vector<int64_t>()) {
    const auto first = all.begin() + std::ptrdiff_t(at);
    out.emplace_back(first, first + std::ptrdiff_t(n));
    at += size_t(n);
  }
  return out;
}

}  // namespace

DistributedIterator::DistributedIterator(Strategy& strategy, data::Iterator it, Options options)
    : strategy_(strategy), it_(std::move(it)), options_(options) {}

void DistributedIterator::restore(const data::IteratorState& state) { restore_position(state); }

void DistributedIterator::restore_position(const data::IteratorState& state) {
  try {
    it_.restore(state);
  } catch (const Error& e) {
    if (!options_.replica_pipelines) throw;
    throw Error(::strata::detail::concat(
        "distribute_datasets_from_function (InputReplicationMode::PerReplica, ", strategy_.num_local_replicas(),
        " local replicas): the saved position does not restore into this worker's replicas' pipelines; each "
        "replica's position is its own, so resume with the number of replicas and the dataset function it was "
        "saved with (", e.what(), ")"));
  }
  // What the previous position knew of the input's end no longer holds.
  ended_on_every_worker_ = false;
  batch_spec_.clear();
}

JobInputPosition DistributedIterator::save_job_position() {
  JobInputPosition position;
  const data::IteratorState mine = it_.save();
  if (!options_.per_worker_positions) {
    position.states.push_back(mine);
    return position;
  }
  Communicator* workers = strategy_.worker_communicator();
  STRATA_CHECK(workers != nullptr, "DistributedIterator::save_job_position: positions per worker but no worker "
               "communicator");
  position.per_worker = true;
  for (std::vector<int64_t>& words : gather_words(*workers, mine.words)) {
    position.states.push_back(data::IteratorState{std::move(words)});
  }
  return position;
}

void DistributedIterator::restore_job_position(const JobInputPosition& position) {
  const int workers = strategy_.num_workers();
  if (!options_.per_worker_positions) {
    STRATA_CHECK(!position.per_worker,
                 "DistributedIterator::restore_job_position: the checkpoint holds the input positions of ",
                 position.states.size(), " workers that each read input of their own (File/Off auto-sharding, or "
                 "distribute_datasets_from_function across workers), but in this job every worker reads the same "
                 "input (", workers == 1 ? "one worker" : "Data auto-sharding",
                 "): resume with the sharding and the number of workers it was saved with");
    STRATA_CHECK(position.states.size() == 1, "DistributedIterator::restore_job_position: expected one shared "
                 "position, got ", position.states.size());
    restore_position(position.states[0]);
    return;
  }
  STRATA_CHECK(position.per_worker,
               "DistributedIterator::restore_job_position: in this job each of the ", workers,
               " workers reads input of its own (File/Off auto-sharding, or distribute_datasets_from_function), but "
               "the checkpoint holds one position shared by every worker (saved by one worker, or under Data "
               "auto-sharding): resume with the sharding and the number of workers it was saved with");
  STRATA_CHECK(int(position.states.size()) == workers, "DistributedIterator::restore_job_position: the checkpoint "
               "holds the input positions of ", position.states.size(), " workers that each read input of their own, "
               "but this job has ", workers, " workers: resume with ", position.states.size(), " workers");
  restore_position(position.states[size_t(strategy_.worker_index())]);
}

std::optional<PerReplica<data::Batch>> DistributedIterator::next() {
  if (options_.per_worker_positions && strategy_.num_workers() > 1) return next_in_step_with_workers();
  return next_on_this_worker();
}

std::vector<data::Batch> DistributedIterator::empty_batches(const BatchSpec& spec, int first,
                                                            const std::string& whose) const {
  std::vector<data::Batch> parts;
  for (int r = first; r < strategy_.num_local_replicas(); ++r) {
    parts.push_back(empty_batch(spec, options_.fetch ? strategy_.devices()[size_t(r)] : Device(), whose));
  }
  return parts;
}

std::optional<PerReplica<data::Batch>> DistributedIterator::next_in_step_with_workers() {
  if (ended_on_every_worker_) return std::nullopt;
  Communicator* workers = strategy_.worker_communicator();
  STRATA_CHECK(workers != nullptr, "DistributedIterator::next: input per worker but no worker communicator");
  const int count = strategy_.num_workers(), me = strategy_.worker_index();
  const auto exchange = [&](const std::vector<int64_t>& words) {
    return cross_worker_all_reduce(*workers, ReduceOp::Sum,
                                   Tensor::from_vector(words, {int64_t(words.size())}, kInt64, Device()), count)
        .to_vector<int64_t>();
  };
  if (!exchange_each_step_) {
    // Decided together: when no worker's pipeline can end, there is nothing to agree on.
    exchange_each_step_ = exchange({options_.infinite ? 0 : 1})[0] > 0;
  }
  if (!*exchange_each_step_) return next_on_this_worker();
  // This worker's batch, or its failure, which every worker then raises at this step.
  std::optional<PerReplica<data::Batch>> mine;
  std::exception_ptr failure;
  try {
    mine = next_on_this_worker();
    if (mine) batch_spec_ = spec_of((*mine)[0]);
  } catch (...) {
    failure = std::current_exception();
  }
  // Per worker: [has a batch], [has none and nothing to shape empty ones like], [failed],
  // [has none and cannot shape empty ones like its own].
  const auto at = [&](int group, int w) { return size_t(group * count + w); };
  std::vector<int64_t> flags(size_t(4 * count), 0);
  flags[at(0, me)] = mine ? 1 : 0;
  flags[at(1, me)] = !failure && !mine && batch_spec_.empty() ? 1 : 0;
  flags[at(2, me)] = failure ? 1 : 0;
  flags[at(3, me)] = !failure && !mine && !cannot_shape_empty(batch_spec_).empty() ? 1 : 0;
  flags = exchange(flags);
  int first_with_batch = -1;
  bool description_needed = false;
  for (int w = 0; w < count; ++w) {
    if (first_with_batch < 0 && flags[at(0, w)] > 0) first_with_batch = w;
    description_needed |= flags[at(1, w)] > 0;
  }
  if (failure) std::rethrow_exception(failure);  // its own error first
  for (int w = 0; w < count; ++w) {
    if (flags[at(2, w)] == 0) continue;
    fail("DistributedIterator::next: the input of worker ", w, " failed at this step (its error is reported there); "
         "every worker stops here");
  }
  for (int w = 0; w < count; ++w) {
    if (flags[at(3, w)] == 0 || first_with_batch < 0) continue;
    fail("DistributedIterator::next: the input of worker ", w, " has ended while worker ", first_with_batch,
         "'s goes on, and its batches cannot be shaped empty: ", w == me ? cannot_shape_empty(batch_spec_)
                                                                         : std::string("a component has no batch axis"),
         " (give every worker the same number of batches, or components with a batch axis)");
  }
  if (first_with_batch < 0) {
    ended_on_every_worker_ = true;
    return std::nullopt;
  }
  if (description_needed) {
    // A worker without input so far: the first worker with a batch describes its batches,
    // and every worker checks the description the same way.
    const std::vector<std::vector<int64_t>> all =
        gather_words(*workers, me == first_with_batch ? encode_spec(batch_spec_) : std::vector<int64_t>{});
    const BatchSpec described =
        decode_spec(all[size_t(first_with_batch)], "worker " + std::to_string(first_with_batch));
    const std::string why = cannot_shape_empty(described);
    STRATA_CHECK(why.empty(), "DistributedIterator::next: a worker without any input needs empty batches shaped like "
                 "worker ", first_with_batch, "'s, whose ", why,
                 " (give every worker the same number of batches, or components with a batch axis)");
    if (!mine && batch_spec_.empty()) batch_spec_ = described;
  }
  if (mine) return mine;
  // This worker's input has ended while another's goes on: empty batches for its replicas.
  return PerReplica<data::Batch>(empty_batches(batch_spec_, 0, "worker " + std::to_string(me)));
}

std::optional<PerReplica<data::Batch>> DistributedIterator::next_on_this_worker() {
  const int n = strategy_.num_local_replicas();
  if (options_.per_replica_elements) {
    std::vector<data::Batch> parts;
    for (int r = 0; r < n; ++r) {
      auto e = it_.next();
      if (!e) {
        if (r == 0) return std::nullopt;
        // Fewer elements than replicas at the end: the rest get empty batches shaped like
        // the first one, so every replica still runs the step.
        const std::string whose = "distribute_datasets_from_function: replica " + std::to_string(r) +
                                  " has no element left and the first replica";
        for (data::Batch& empty : empty_batches(spec_of(parts[0]), r, whose)) parts.push_back(std::move(empty));
        break;
      }
      parts.push_back(std::move(*e));
    }
    return PerReplica<data::Batch>(std::move(parts));
  }
  auto e = it_.next();
  if (!e) return std::nullopt;
  // The pipeline flattened the n parts: replica r's components are [r*k, (r+1)*k).
  const size_t k = e->size() / size_t(n);
  std::vector<data::Batch> parts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    parts[size_t(r)].assign(e->begin() + std::ptrdiff_t(size_t(r) * k), e->begin() + std::ptrdiff_t(size_t(r + 1) * k));
  }
  return PerReplica<data::Batch>(std::move(parts));
}

// ---- across workers ----

data::Dataset DistributedDataset::split_across_workers(Strategy& strategy, const data::Dataset& dataset,
                                                       const InputOptions& options, bool* per_worker_positions) {
  const int workers = strategy.num_workers(), worker = strategy.worker_index();
  const int local = strategy.num_local_replicas();
  data::AutoShardPolicy policy = options.auto_shard_policy;
  data::Dataset source = dataset;
  if (policy == data::AutoShardPolicy::File || policy == data::AutoShardPolicy::Auto) {
    try {
      source = dataset.auto_shard(workers, worker, data::AutoShardPolicy::File);
      policy = data::AutoShardPolicy::File;
    } catch (const Error&) {
      if (policy == data::AutoShardPolicy::File) throw;
      policy = data::AutoShardPolicy::Data;  // Auto: not enough files, shard by data
    }
  }
  ReplicaSplitOptions split;
  split.total_parts = strategy.num_replicas_in_sync();
  split.local_parts = local;
  split.devices = strategy.devices();
  split.fetch = options.experimental_fetch_to_device;
  // Data: every worker reads the same global batches and keeps its replicas' parts.
  // File / Off: TensorFlow's rebatching. Each batch read is cut into one part per replica
  // of the job (the per-replica batches of one global batch); this worker's replicas take
  // consecutive parts, `local` per step — so each worker's position is its own.
  split.mode = policy == data::AutoShardPolicy::Data ? ReplicaSplitOptions::Mode::Keep
                                                     : ReplicaSplitOptions::Mode::Rebatch;
  split.first_part = split.mode == ReplicaSplitOptions::Mode::Keep ? worker * local : 0;
  *per_worker_positions = split.mode == ReplicaSplitOptions::Mode::Rebatch;
  return split_between_replicas(source, std::move(split));
}

// ---- dataset ----

DistributedDataset::DistributedDataset(Strategy& strategy, data::Dataset dataset, Mode mode,
                                       const InputOptions& options)
    : strategy_(&strategy),
      dataset_(std::move(dataset)),
      pipeline_(dataset_),
      mode_(mode),
      fetch_(options.experimental_fetch_to_device) {
  STRATA_CHECK(options.experimental_per_replica_buffer_size >= 0,
               "InputOptions: experimental_per_replica_buffer_size must be >= 0, got ",
               options.experimental_per_replica_buffer_size);
  const int n = strategy.num_local_replicas();
  const std::vector<Device> devices = strategy.devices();
  const bool fetch = options.experimental_fetch_to_device;
  int64_t read_ahead = options.experimental_per_replica_buffer_size;
  if (mode == Mode::SplitGlobalBatches && strategy.num_workers() > 1) {
    pipeline_ = split_across_workers(strategy, dataset_, options, &per_worker_positions_);
  } else if (mode == Mode::SplitGlobalBatches) {
    ReplicaSplitOptions split;
    split.total_parts = n;
    split.local_parts = n;
    split.devices = devices;
    split.fetch = fetch;
    pipeline_ = split_between_replicas(dataset_, std::move(split));
  } else if (mode == Mode::PerReplicaPipelines) {
    // The replicas' pipelines, already placed on their devices by the stage; with
    // several workers each reads input of its own.
    per_worker_positions_ = strategy.num_workers() > 1;
  } else {
    // Each worker's function builds its own dataset.
    per_worker_positions_ = strategy.num_workers() > 1;
    // Element i goes to replica i % n: place it on that replica's device.
    pipeline_ = dataset_.enumerate().map([n, devices, fetch](const data::Element& e) {
      const int64_t i = e[0].item<int64_t>();
      const Device& device = devices[size_t(i % n)];
      data::Element out;
      for (size_t k = 1; k < e.size(); ++k) out.push_back(place_on(e[k], device, fetch));
      return out;
    });
    read_ahead *= n;  // one element per replica
  }
  if (read_ahead > 0) pipeline_ = pipeline_.prefetch(read_ahead);
}

DistributedIterator DistributedDataset::make_iterator() const {
  DistributedIterator::Options o;
  o.per_replica_elements = mode_ == Mode::PerReplicaElements;
  o.replica_pipelines = mode_ == Mode::PerReplicaPipelines;
  o.per_worker_positions = per_worker_positions_;
  o.fetch = fetch_;
  o.infinite = pipeline_.cardinality() == data::kInfiniteCardinality;
  return DistributedIterator(*strategy_, pipeline_.make_iterator(), o);
}

DistributedIterator::RangeIterator DistributedDataset::begin() {
  active_ = std::make_shared<DistributedIterator>(make_iterator());
  return active_->begin();
}

}  // namespace strata::distribute
