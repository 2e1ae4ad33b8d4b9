// The contract every pipeline stage implements: a DatasetNode (the immutable description)
// makes IteratorBase objects (the running state). Included by the stage sources in data/
// and by readers that add their own sources; users never need it.
//
// Note [iteration keys]: make_iterator(key) receives a 64-bit key naming the iteration.
// The top-level key is the iteration number of the Dataset; repeat hands epoch e of its
// input the key mix_keys(key, e). Shuffle seeds its order from (seed, key) when it
// reshuffles each iteration, so orders differ per epoch yet are reproducible, and a
// restored iterator re-derives them from the saved key and epoch.
//
// Note [anchors]: states never contain elements. A stage that reads ahead of its
// consumer (prefetch, parallel map) or buffers elements (shuffle, unbatch) records an
// "anchor": the saved state of its input at some earlier point, plus what happened since
// (how many elements were delivered, which buffered elements came from where). Restore
// restores the input to the anchor and replays it deterministically. Background stages
// snapshot their input's state as often as that stays cheap (AnchorClock), so the replay
// on restore is short.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/core/error.h>
#include <strata/data/dataset.h>
#include <strata/data/iterator_state.h>

namespace strata::data::detail {

// Note [row mode]: the elements of a from_tensor_slices source are rows of fixed host
// tensors, and stages that only select, reorder or repeat elements (shuffle, repeat, take,
// skip, shard) keep that true. Such an iterator returns those tensors from rows(), and
// next_row() advances it exactly as next() would but returns only the row index. batch
// gathers rows straight from the tensors with them, and shuffle buffers row indices
// instead of elements, so no per-element Tensor views are built on that path. Elements,
// order, and saved states are the same in both modes; next() and next_row() may be mixed.
inline constexpr int64_t kNoRow = -1;  // next_row() at the end

class IteratorBase {
 public:
  virtual ~IteratorBase() = default;
  // The next element or nullopt at the end; may throw (the consumer rethrows).
  virtual std::optional<Element> next() = 0;
  // The tensors whose rows this iterator yields (Note [row mode]), the same for its whole
  // life, or null when its elements are not such rows.
  virtual const std::vector<Tensor>* rows() const { return nullptr; }
  // The row index of the next element, or kNoRow at the end. Only when rows() is non-null.
  virtual int64_t next_row();
  // Appends this stage's record (and its inputs' records) to w.
  virtual void save(StateWriter& w) const = 0;
  // Reads this stage's record. Called only on a freshly made iterator, before next().
  virtual void restore(StateReader& r) = 0;
};

using NodePtr = std::shared_ptr<const DatasetNode>;

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const = 0;
  virtual int64_t cardinality() const = 0;
  // Short description with arguments, e.g. "batch(128, drop_remainder=false)".
  virtual std::string name() const = 0;
  // name() without performance knobs (parallelism, prefetch depth): two pipelines with
  // the same signatures accept each other's saved states.
  virtual std::string signature() const { return name(); }
  virtual std::vector<NodePtr> inputs() const { return {}; }
  // The same stage over other inputs (as many as inputs()).
  virtual NodePtr with_inputs(std::vector<NodePtr> inputs) const;
  // File-based sources list their files and can be rebuilt over a subset of them.
  virtual const std::vector<std::string>* files() const { return nullptr; }
  virtual NodePtr with_files(std::vector<std::string> files) const;
  virtual bool is_prefetch() const { return false; }
};

// A stage with one input; subclasses say how to rebuild themselves over another input.
// Iterators may keep references to their node: the Iterator owns the root node, which
// owns its inputs, so every node outlives the iterators made from it.
class UnaryNode : public DatasetNode {
 public:
  explicit UnaryNode(NodePtr input);
  std::vector<NodePtr> inputs() const override { return {input_}; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override;
  const NodePtr& input() const { return input_; }

 protected:
  virtual NodePtr clone_with(NodePtr input) const = 0;
  NodePtr input_;
};

// Streams arguments into a string (for stage names).
template <typename... Args>
std::string str_of(Args&&... args) {
  return ::strata::detail::concat(std::forward<Args>(args)...);
}

// Row i of t along axis 0 as a view sharing t's storage (no copy, one TensorImpl).
Tensor row_view(const Tensor& t, int64_t i);
// The element made of row i of each component (views), as from_tensor_slices yields it.
Element row_element(const std::vector<Tensor>& components, int64_t i);

// One body for a stage's next() and next_row() (Note [row mode]): a stage writes
// `template <typename Pull> auto advance(Pull pull)` that takes items from its input with
// pull(*input_), tests them with has_item() and ends with end_item<Item>().
struct PullElement {
  using Item = std::optional<Element>;
  Item operator()(IteratorBase& it) const { return it.next(); }
};
struct PullRow {
  using Item = int64_t;
  Item operator()(IteratorBase& it) const { return it.next_row(); }
};
inline bool has_item(const std::optional<Element>& e) { return e.has_value(); }
inline bool has_item(int64_t row) { return row != kNoRow; }
template <typename Item>
Item end_item() {
  if constexpr (std::is_same_v<Item, int64_t>) {
    return kNoRow;
  } else {
    return std::nullopt;
  }
}

// Mixes two 64-bit values into a well-spread key (splitmix64 finaliser).
uint64_t mix_keys(uint64_t a, uint64_t b);

// The state of `it` as a standalone word vector (an anchor), with room for `reserve` words
// reserved up front (a state of thousands of words, a shuffle buffer's positions, would
// otherwise be copied at every doubling).
std::vector<int64_t> save_words(const IteratorBase& it, size_t reserve = 0);
// Restores a freshly made iterator from standalone words; all must be consumed.
void restore_words(IteratorBase& it, const std::vector<int64_t>& words, const char* stage);
// Pulls and drops one element (only its row index in row mode); false at the end.
bool drop_element(IteratorBase& it);
// Pulls and drops n elements (as row indices in row mode); throws naming `stage` when the
// input ends first (the state does not belong to this input).
void skip_elements(IteratorBase& it, int64_t n, const char* stage);

// When a background stage should snapshot its input's state (Note [anchors]): always
// while a snapshot costs under kBudget of producing an element, otherwise every k-th
// element with k chosen to keep that ratio (at most kMaxInterval), so that saving stays
// cheap and the replay on restore stays short (at most k elements, which take about
// 1/kBudget snapshots' time to replay). At 5% the snapshots of a shuffle(10000) buffer
// (its thousands of buffered positions) still took 5% of an MNIST epoch's producer time;
// 1% bounds a restore's replay at ~100 snapshots (a few milliseconds there), paid once
// per resumed job.
class AnchorClock {
 public:
  static constexpr double kBudget = 0.01;
  static constexpr int64_t kMaxInterval = 1024;
  using Clock = std::chrono::steady_clock;

  // Call after each element is produced (taking `produce_ns`); true when a snapshot is due.
  bool produced(double produce_ns);
  // Call after a snapshot that took `save_ns`.
  void captured(double save_ns);

 private:
  double produce_ema_ = 0.0;
  double save_ema_ = 0.0;
  int64_t since_capture_ = 0;
  int64_t interval_ = 1;
};

// Where the consumer of a read-ahead stage (prefetch, parallel map) stands (Note
// [anchors]): the input's state at the last anchor it took, and the elements it took since.
// The stage's saved record is (elements since the anchor, the anchor); a stage that reads
// nothing ahead (not started yet, or sequential) writes (0, its input's state now), so both
// forms restore one another's records.
class ConsumerPosition {
 public:
  // Reading ahead begins: the input's state now is the first anchor.
  void start(const IteratorBase& input) {
    anchor_ = save_words(input);
    since_anchor_ = 0;
  }
  // The consumer took an element; `anchor` is the input's state after it, when one was taken.
  void took(std::optional<std::vector<int64_t>>& anchor) {
    if (anchor) {
      anchor_ = std::move(*anchor);
      since_anchor_ = 0;
    } else {
      ++since_anchor_;
    }
  }
  // Writes the record of a stage that reads ahead (since start()).
  void save(StateWriter& w) const {
    w.put(since_anchor_);
    w.append(anchor_);
  }
  // Writes the record of a stage whose input only the consumer reads.
  static void save_unread(StateWriter& w, const IteratorBase& input) {
    w.put(0);
    input.save(w);
  }
  // Restores a fresh input from either record and replays the elements taken since.
  static void restore(StateReader& r, IteratorBase& input, const char* stage);

 private:
  std::vector<int64_t> anchor_;
  int64_t since_anchor_ = 0;
};

inline double elapsed_ns(AnchorClock::Clock::time_point since) {
  return std::chrono::duration<double, std::nano>(AnchorClock::Clock::now() - since).count();
}

}  // namespace strata::data::detail
