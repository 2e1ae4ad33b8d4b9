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
#include <vector>

#include <strata/core/error.h>
#include <strata/data/dataset.h>
#include <strata/data/iterator_state.h>

namespace strata::data::detail {

class IteratorBase {
 public:
  virtual ~IteratorBase() = default;
  // The next element or nullopt at the end; may throw (the consumer rethrows).
  virtual std::optional<Element> next() = 0;
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

// Mixes two 64-bit values into a well-spread key (splitmix64 finaliser).
uint64_t mix_keys(uint64_t a, uint64_t b);

// The state of `it` as a standalone word vector (an anchor).
std::vector<int64_t> save_words(const IteratorBase& it);
// Restores a freshly made iterator from standalone words; all must be consumed.
void restore_words(IteratorBase& it, const std::vector<int64_t>& words, const char* stage);
// Pulls and drops n elements; throws naming `stage` when the input ends first (the state
// does not belong to this input).
void skip_elements(IteratorBase& it, int64_t n, const char* stage);

// When a background stage should snapshot its input's state (Note [anchors]): always
// while a snapshot costs under 5% of producing an element, otherwise every k-th element
// with k chosen to keep that ratio (at most kMaxInterval), so that saving stays cheap and
// the replay on restore stays short (at most k elements).
class AnchorClock {
 public:
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

inline double elapsed_ns(AnchorClock::Clock::time_point since) {
  return std::chrono::duration<double, std::nano>(AnchorClock::Clock::now() - since).count();
}

}  // namespace strata::data::detail
