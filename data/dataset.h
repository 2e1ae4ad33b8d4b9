// Dataset: a tf.data-style input pipeline description, and the Iterator that runs it.
//
//   auto ds = data::mnist(dir, data::Split::Train).shuffle(10000, /*seed=*/1)
//                 .batch(128).prefetch(2);
//   for (auto& batch : ds) { ... batch[0] (images), batch[1] (labels) ... }
//
// A Dataset is an immutable graph of stages held by shared pointer: copying it is cheap
// and copies describe the same pipeline. Each iteration (range-for, make_iterator())
// builds a fresh Iterator; a Dataset may be iterated from several threads at once.
// Elements are std::vector<Tensor> of CPU tensors.
//
// Determinism: for given seeds the sequence of elements is a pure function of the
// pipeline and the iteration number, independent of num_parallel_calls, prefetch depth and
// thread timing. With reshuffle_each_iteration, shuffle draws a new order on each
// iteration of the dataset (each make_iterator() on it, and each epoch of a repeat above
// it), derived from (seed, iteration), so a resumed job sees the orders it would have seen:
// restoring an iterator made by make_iterator() also moves its Dataset's iteration count
// past the restored one, so the next make_iterator() (the next epoch's range-for) gets the
// iteration number the uninterrupted job's had.
//
// Errors: misuse throws strata::Error naming the stage. An exception raised by a map
// function or a generator (on any thread) is rethrown, unchanged, from the consumer's
// next(); the iterator then stays failed (every later next() rethrows it) until restore().
//
// Threads: prefetch() runs its input on one background thread with a bounded queue (a
// parked thread that outlives the iterator and serves the next one, data/parked_threads.h);
// map(fn, n > 1) runs fn on n worker threads and delivers results in input order.
// Destroying an iterator stops its background work promptly (after the element each
// thread is working on). No stage spins: a prefetch consumer and a parked thread poll
// for at most 100 us, yielding the core on every turn, before they sleep.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/tensor.h>
#include <strata/data/input_context.h>
#include <strata/data/iterator_state.h>

namespace strata::data {

// One element of a dataset: its components, e.g. {image, label}.
using Element = std::vector<Tensor>;
// A batched element: b[0] images, b[1] labels, for the readers in data/.
using Batch = Element;

using MapFn = std::function<Element(const Element&)>;
using Predicate = std::function<bool(const Element&)>;
// A generator returns the next element, or std::nullopt at the end.
using Generator = std::function<std::optional<Element>()>;
// Called once per iteration to start a fresh generator (as Python's generator functions
// are); restore() calls it again and skips the elements already delivered, so it must
// produce the same sequence each time.
using GeneratorFactory = std::function<Generator()>;

// cardinality() values that are not element counts.
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;
// Let the library choose: num_parallel_calls = the number of cores, prefetch depth = 2.
inline constexpr int64_t kAutotune = -1;

namespace detail {
class DatasetNode;
class IteratorBase;
}  // namespace detail

// Runs a pipeline. Movable, not copyable; safe to destroy on any thread while no other
// thread is inside next().
class Iterator {
 public:
  Iterator(std::shared_ptr<const detail::DatasetNode> node, uint64_t iteration);
  // `iterations`: the count of the Dataset that made it, which restore() moves on.
  Iterator(std::shared_ptr<const detail::DatasetNode> node, uint64_t iteration,
           std::shared_ptr<std::atomic<uint64_t>> iterations);
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  // The next element, or std::nullopt when the dataset is exhausted.
  std::optional<Element> next();

  // The position reached so far: restoring it (into an iterator over the same pipeline,
  // in this or another process) yields exactly the elements this iterator would yield
  // next. Elements already prefetched but not yet returned are not counted as consumed.
  IteratorState save() const;
  // Rewinds or advances to a saved position; throws strata::Error when the state was
  // saved from a pipeline of a different shape, leaving this iterator unchanged.
  void restore(const IteratorState& state);

  // Range-for over the remaining elements.
  class RangeIterator;
  RangeIterator begin();
  std::default_sentinel_t end() { return {}; }

 private:
  std::shared_ptr<const detail::DatasetNode> node_;
  uint64_t iteration_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> iterations_;  // the Dataset's count, or null
  std::unique_ptr<detail::IteratorBase> impl_;
  std::exception_ptr error_;  // sticky failure, see the header comment
};

class Iterator::RangeIterator {
 public:
  using value_type = Element;
  using difference_type = std::ptrdiff_t;
  using iterator_category = std::input_iterator_tag;

  RangeIterator() = default;
  RangeIterator(Iterator* it, std::shared_ptr<Iterator> owner);
  Element& operator*() { return *current_; }
  Element* operator->() { return &*current_; }
  RangeIterator& operator++();
  void operator++(int) { ++*this; }
  bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

 private:
  std::shared_ptr<Iterator> owner_;  // set when the range owns its iterator
  Iterator* it_ = nullptr;
  std::optional<Element> current_;
};

class Dataset {
 public:
  // ---- sources ----
  // Slices each component along axis 0 (all must have the same leading extent). Slices
  // are views of the given tensors (moved to host memory first when they are elsewhere).
  static Dataset from_tensor_slices(std::vector<Tensor> components);
  static Dataset from_tensor_slices(const Tensor& tensor);
  // int64 scalars start, start+step, ... up to but excluding stop (step may be negative).
  static Dataset range(int64_t stop);
  static Dataset range(int64_t start, int64_t stop, int64_t step = 1);
  static Dataset from_generator(GeneratorFactory factory);
  // Elements of all datasets side by side (components concatenated); ends with the
  // shortest.
  static Dataset zip(const std::vector<Dataset>& datasets);

  // ---- transformations ----
  // fn on each element; with num_parallel_calls > 1 (or kAutotune), on that many worker
  // threads, results still in input order.
  Dataset map(MapFn fn, int64_t num_parallel_calls = 1) const;
  Dataset filter(Predicate predicate) const;
  // Stacks batch_size consecutive elements (component-wise, strata::stack on axis 0). The
  // last, shorter batch is kept unless drop_remainder.
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // Splits each element along axis 0 (the inverse of batch).
  Dataset unbatch() const;
  // Uniform sample from a buffer of buffer_size elements refilled from the input.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  // count epochs of the input (count < 0: forever; an epoch without elements ends it).
  Dataset repeat(int64_t count = -1) const;
  Dataset take(int64_t count) const;  // count < 0: all
  Dataset skip(int64_t count) const;  // count < 0: all
  // Every num_shards-th element starting at index: shards 0..n-1 partition the input.
  Dataset shard(int64_t num_shards, int64_t index) const;
  // Prepends an int64 scalar counter (start, start+1, ...) to each element.
  Dataset enumerate(int64_t start = 0) const;
  // Remembers the first complete pass in memory; later iterations read from memory.
  Dataset cache() const;
  // Produces up to buffer_size elements ahead on a background thread (0: no-op).
  Dataset prefetch(int64_t buffer_size = kAutotune) const;
  // Splits this pipeline for worker `index` of `num_shards` following `policy` (used by
  // distributed datasets): Data shards elements at the end of the pipeline (batches,
  // when batched); File shards the files of a file-based source (binary_records) and
  // throws when there is none or it has fewer files than shards; Auto tries File, then
  // Data; Off returns this dataset.
  Dataset auto_shard(int64_t num_shards, int64_t index, AutoShardPolicy policy) const;

  // Number of elements, or kInfiniteCardinality / kUnknownCardinality (filter, generator).
  int64_t cardinality() const;
  // One line per stage, outermost first, e.g. "prefetch(2) <- batch(128) <- ...".
  std::string describe() const;

  // ---- iteration ----
  // A fresh iterator; each call is a new iteration (it advances reshuffling).
  Iterator make_iterator() const;
  // An iterator for a given iteration number (what the n-th make_iterator() returns).
  Iterator make_iterator(uint64_t iteration) const;
  Iterator::RangeIterator begin() const;
  std::default_sentinel_t end() const { return {}; }

  const std::shared_ptr<const detail::DatasetNode>& node() const { return node_; }
  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node);

 private:
  std::shared_ptr<const detail::DatasetNode> node_;
  // Iterations started on this dataset value (shared by its copies).
  std::shared_ptr<std::atomic<uint64_t>> iterations_;
};

}  // namespace strata::data
