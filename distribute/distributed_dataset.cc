#include <strata/distribute/distributed_dataset.h>

#include <algorithm>
#include <deque>

#include <strata/core/ops.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

std::vector<int64_t> split_sizes(int64_t batch, int64_t full_batch, int replicas) {
  STRATA_CHECK(replicas >= 1, "split_sizes: replicas must be >= 1, got ", replicas);
  STRATA_CHECK(batch >= 0, "split_sizes: negative batch size ", batch);
  const int64_t full = std::max(batch, full_batch);
  const int64_t base = full / replicas, extra = full % replicas;
  std::vector<int64_t> sizes(static_cast<size_t>(replicas));
  int64_t remaining = batch;
  for (int r = 0; r < replicas; ++r) {
    const int64_t capacity = base + (r < extra ? 1 : 0);
    sizes[size_t(r)] = std::min(capacity, remaining);
    remaining -= sizes[size_t(r)];
  }
  return sizes;
}

std::vector<data::Batch> split_batch(const data::Batch& batch, int replicas, int64_t full_batch) {
  STRATA_CHECK(!batch.empty(), "distribute: cannot split an element without components across replicas");
  for (size_t k = 0; k < batch.size(); ++k) {
    STRATA_CHECK(batch[k].defined() && batch[k].ndim() >= 1, "distribute: cannot split component ", k,
                 " of the batch across ", replicas, " replicas: it has shape ",
                 batch[k].defined() ? shape_str(batch[k].shape()) : "undefined",
                 " (every component of a distributed batch needs a leading batch axis)");
    STRATA_CHECK(batch[k].dim(0) == batch[0].dim(0), "distribute: component ", k, " of the batch has ", batch[k].dim(0),
                 " rows but component 0 has ", batch[0].dim(0), " (they must share the batch axis)");
  }
  const std::vector<int64_t> sizes = split_sizes(batch[0].dim(0), full_batch, replicas);
  std::vector<data::Batch> parts(static_cast<size_t>(replicas));
  for (const Tensor& t : batch) {
    int64_t start = 0;
    for (int r = 0; r < replicas; ++r) {
      parts[size_t(r)].push_back(t.slice(0, start, start + sizes[size_t(r)]));
      start += sizes[size_t(r)];
    }
  }
  return parts;
}

namespace {
Tensor place(const Tensor& t, const Device& device, bool fetch) {
  return !fetch || t.device() == device ? t : t.to(device);
}
}  // namespace

// ---- iterator ----

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
          for (const Tensor& t : parts[0]) {
            STRATA_CHECK(t.ndim() >= 1, "distribute_datasets_from_function: replica ", k,
                         " has no element left and the first replica's component of shape ", shape_str(t.shape()),
                         " has no batch axis to build an empty batch from");
            Shape shape = t.shape();
            shape[0] = 0;
            empty.push_back(Tensor::empty(shape, t.dtype(), strategy_.devices()[size_t(k)]));
          }
          parts.push_back(std::move(empty));
        }
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

namespace {
// Replica r's components are [r*k, (r+1)*k) of the flattened element.
data::Element flatten_parts(const std::vector<data::Batch>& parts, const std::vector<Device>& devices, bool fetch) {
  data::Element out;
  for (size_t r = 0; r < parts.size(); ++r) {
    for (const Tensor& t : parts[r]) out.push_back(place(t, devices[r], fetch));
  }
  return out;
}

int64_t rows_of(const data::Element& e) { return !e.empty() && e[0].defined() && e[0].ndim() >= 1 ? e[0].dim(0) : 0; }
}  // namespace

data::Dataset DistributedDataset::split_across_workers(Strategy& strategy, const data::Dataset& dataset,
                                                       const InputOptions& options) {
  const int workers = strategy.num_workers(), worker = strategy.worker_index();
  const int local = strategy.num_local_replicas(), total = strategy.num_replicas_in_sync();
  const std::vector<Device> devices = strategy.devices();
  const bool fetch = options.experimental_fetch_to_device;
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
  if (policy == data::AutoShardPolicy::Data) {
    // Every worker reads the same global batches and keeps its replicas' parts.
    auto full = std::make_shared<std::atomic<int64_t>>(0);
    return source.map([=](const data::Element& e) {
      const int64_t rows = rows_of(e);
      int64_t seen = full->load();
      while (rows > seen && !full->compare_exchange_weak(seen, rows)) {
      }
      std::vector<data::Batch> parts = split_batch(e, total, std::max(seen, rows));
      std::vector<data::Batch> mine(parts.begin() + std::ptrdiff_t(worker) * local,
                                    parts.begin() + std::ptrdiff_t(worker + 1) * local);
      return flatten_parts(mine, devices, fetch);
    });
  }
  // File / Off: TensorFlow's rebatching. Each batch read is cut into `total` parts (the
  // per-replica batches of one global batch); this worker's replicas take consecutive
  // parts, `local` per step.
  return data::Dataset::from_generator([=]() -> data::Generator {
    struct State {
      data::Iterator it;
      std::deque<data::Batch> parts;
      int64_t full = 0;
      bool done = false;
    };
    auto state = std::make_shared<State>(State{source.make_iterator(), {}, 0, false});
    return [state, local, total, devices, fetch]() -> std::optional<data::Element> {
      while (int(state->parts.size()) < local && !state->done) {
        auto e = state->it.next();
        if (!e) {
          state->done = true;
          break;
        }
        state->full = std::max(state->full, rows_of(*e));
        for (auto& part : split_batch(*e, total, state->full)) state->parts.push_back(std::move(part));
      }
      if (state->parts.empty()) return std::nullopt;
      std::vector<data::Batch> mine;
      for (int r = 0; r < local; ++r) {
        if (!state->parts.empty()) {
          mine.push_back(std::move(state->parts.front()));
          state->parts.pop_front();
          continue;
        }
        data::Batch empty;  // the input ended part-way through a step: empty batches
        for (const Tensor& t : mine[0]) {
          Shape shape = t.shape();
          shape[0] = 0;
          empty.push_back(Tensor::empty(shape, t.dtype(), t.device()));
        }
        mine.push_back(std::move(empty));
      }
      return flatten_parts(mine, devices, fetch);
    };
  });
}

// ---- dataset ----

DistributedDataset::DistributedDataset(Strategy& strategy, data::Dataset dataset, Mode mode,
                                       const InputOptions& options)
    : strategy_(&strategy), dataset_(std::move(dataset)), pipeline_(dataset_), mode_(mode) {
  STRATA_CHECK(options.experimental_per_replica_buffer_size >= 0,
               "InputOptions: experimental_per_replica_buffer_size must be >= 0, got ",
               options.experimental_per_replica_buffer_size);
  const int n = strategy.num_local_replicas();
  const std::vector<Device> devices = strategy.devices();
  const bool fetch = options.experimental_fetch_to_device;
  if (mode == Mode::SplitGlobalBatches && strategy.num_workers() > 1) {
    pipeline_ = split_across_workers(strategy, dataset_, options);
    if (options.experimental_per_replica_buffer_size > 0) {
      pipeline_ = pipeline_.prefetch(options.experimental_per_replica_buffer_size);
    }
  } else if (mode == Mode::SplitGlobalBatches) {
    // The full batch size, learned from the largest batch seen (shared by iterations).
    auto full = std::make_shared<std::atomic<int64_t>>(0);
    pipeline_ = dataset_.map([n, devices, fetch, full](const data::Element& e) {
      if (n == 1) {
        data::Element out;
        for (const Tensor& t : e) out.push_back(place(t, devices[0], fetch));
        return out;
      }
      const int64_t rows = !e.empty() && e[0].defined() && e[0].ndim() >= 1 ? e[0].dim(0) : 0;
      int64_t seen = full->load();
      while (rows > seen && !full->compare_exchange_weak(seen, rows)) {
      }
      const std::vector<data::Batch> parts = split_batch(e, n, std::max(seen, rows));
      data::Element out;
      out.reserve(e.size() * size_t(n));
      for (int r = 0; r < n; ++r) {
        for (const Tensor& t : parts[size_t(r)]) out.push_back(place(t, devices[size_t(r)], fetch));
      }
      return out;
    });
    if (options.experimental_per_replica_buffer_size > 0) {
      pipeline_ = pipeline_.prefetch(options.experimental_per_replica_buffer_size);
    }
  } else {
    // Element i goes to replica i % n: place it on that replica's device.
    pipeline_ = dataset_.enumerate().map([n, devices, fetch](const data::Element& e) {
      const int64_t i = e[0].item<int64_t>();
      const Device& device = devices[size_t(i % n)];
      data::Element out;
      for (size_t k = 1; k < e.size(); ++k) out.push_back(place(e[k], device, fetch));
      return out;
    });
    if (options.experimental_per_replica_buffer_size > 0) {
      pipeline_ = pipeline_.prefetch(options.experimental_per_replica_buffer_size * n);
    }
  }
}

DistributedIterator DistributedDataset::make_iterator() const {
  return DistributedIterator(*strategy_, pipeline_.make_iterator(), mode_ == Mode::PerReplicaElements);
}

DistributedIterator::RangeIterator DistributedDataset::begin() {
  active_ = std::make_shared<DistributedIterator>(make_iterator());
  return active_->begin();
}

}  // namespace strata::distribute
