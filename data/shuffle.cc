// shuffle: TensorFlow's buffered shuffle. A buffer of buffer_size elements is filled from
// the input; each next() returns a uniformly chosen buffered element and the slot is
// refilled from the input on the following call.
//
// The choice for the k-th output is a counter-based hash of (seed, iteration key, k), so
// the order needs no generator state to save. The saved state records where in the input
// each buffered element came from and an input state at or before the oldest of them
// (Note [anchors] in data/dataset_node.h); restore replays the input from there and keeps
// the elements that were buffered. Anchors are taken every buffer_size/4 input elements,
// so the replay is bounded by the age of the oldest buffered element, not by the epoch.
//
// Over an input in row mode (Note [row mode] in data/dataset_node.h) the buffer holds row
// indices instead of elements, and the iterator stays in row mode itself.
#include <algorithm>
#include <deque>
#include <unordered_map>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>

namespace strata::data {

using detail::IteratorBase;
using detail::NodePtr;
using detail::StageTag;
using detail::StateReader;
using detail::StateWriter;
using detail::str_of;
using detail::UnaryNode;

namespace {

class ShuffleNode final : public UnaryNode {
 public:
  ShuffleNode(NodePtr input, int64_t buffer, uint64_t seed, bool reshuffle)
      : UnaryNode(std::move(input)), buffer_size_(buffer), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override {
    return str_of("shuffle(", buffer_size_, ", seed=", seed_,
                  reshuffle_ ? "" : ", reshuffle_each_iteration=false", ")");
  }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<ShuffleNode>(std::move(input), buffer_size_, seed_, reshuffle_);
  }

  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
};

class ShuffleIterator final : public IteratorBase {
 public:
  ShuffleIterator(const ShuffleNode& node, uint64_t key)
      : capacity_(node.buffer_size_),
        seed_(detail::mix_keys(node.seed_, node.reshuffle_ ? key : 0)),
        anchor_interval_(std::max<int64_t>(1, node.buffer_size_ / 4)),
        input_(node.input()->make_iterator(key)),
        rows_(input_->rows()) {}

  std::optional<Element> next() override {
    if (!rows_) return draw(buffer_, detail::PullElement{});
    const int64_t row = draw(row_buffer_, detail::PullRow{});
    if (row == detail::kNoRow) return std::nullopt;
    return detail::row_element(*rows_, row);
  }
  const std::vector<Tensor>* rows() const override { return rows_; }
  int64_t next_row() override {
    if (!rows_) return IteratorBase::next_row();  // fails: not in row mode
    return draw(row_buffer_, detail::PullRow{});
  }

  void save(StateWriter& w) const override {
    w.stage(StageTag::Shuffle);
    w.put(emitted_);
    w.put(pulled_);
    w.put(exhausted_ ? 1 : 0);
    w.put(int64_t(origin_.size()));
    for (int64_t p : origin_) w.put(p);
    if (origin_.empty()) {
      w.put(pulled_);
      input_->save(w);
      return;
    }
    const int64_t oldest = *std::min_element(origin_.begin(), origin_.end());
    const Anchor* best = nullptr;
    for (const auto& a : anchors_) {
      if (a.position <= oldest) best = &a;
    }
    STRATA_CHECK(best != nullptr, "shuffle: internal error: no anchor at or before input ",
                 "position ", oldest);
    w.put(best->position);
    w.append(best->state);
  }

  void restore(StateReader& r) override {
    r.stage(StageTag::Shuffle);
    const int64_t emitted = r.get_in("shuffle outputs", 0, INT64_MAX);
    const int64_t pulled = r.get_in("shuffle inputs read", 0, INT64_MAX);
    const bool exhausted = r.get_in("shuffle end flag", 0, 1) == 1;
    const int64_t n = r.get_in("shuffle buffered count", 0, capacity_);
    std::unordered_map<int64_t, size_t> slot_of;
    std::vector<int64_t> origin(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      origin[size_t(i)] = r.get_in("shuffle buffered position", 0, pulled - 1);
      STRATA_CHECK(slot_of.emplace(origin[size_t(i)], size_t(i)).second,
                   "Iterator::restore: corrupt state: shuffle buffers input position ",
                   origin[size_t(i)], " twice");
    }
    const int64_t oldest = n > 0 ? *std::min_element(origin.begin(), origin.end()) : pulled;
    const int64_t anchor = r.get_in("shuffle anchor position", 0, oldest);
    input_->restore(r);

    origin_ = origin;
    anchors_.clear();
    anchors_.push_back({anchor, detail::save_words(*input_)});
    if (rows_) {
      replay(row_buffer_, detail::PullRow{}, slot_of, anchor, pulled);
    } else {
      replay(buffer_, detail::PullElement{}, slot_of, anchor, pulled);
    }
    pulled_ = pulled;
    emitted_ = emitted;
    exhausted_ = exhausted;
    prune_anchors();
  }

 private:
  struct Anchor {
    int64_t position;            // input elements read before this state
    std::vector<int64_t> state;  // the input's saved state at that point
  };

  // The next output: a uniformly chosen buffered item (elements, or rows in row mode),
  // after topping the buffer up from the input.
  template <typename T, typename Pull>
  typename Pull::Item draw(std::vector<T>& buffer, Pull pull) {
    while (!exhausted_ && int64_t(buffer.size()) < capacity_) fill(buffer, pull);
    if (buffer.empty()) return detail::end_item<typename Pull::Item>();
    // Uniform index from a 64-bit hash (multiply-shift; bias below 2^-40 here).
    const uint64_t r = detail::mix_keys(seed_, uint64_t(emitted_++));
    const size_t j = size_t((static_cast<unsigned __int128>(r) * buffer.size()) >> 64);
    T out = std::move(buffer[j]);
    buffer[j] = std::move(buffer.back());
    origin_[j] = origin_.back();
    buffer.pop_back();
    origin_.pop_back();
    return out;
  }

  // The buffered form of a pulled item.
  static Element&& stored(std::optional<Element>& e) { return std::move(*e); }
  static int64_t stored(int64_t row) { return row; }

  template <typename T, typename Pull>
  void fill(std::vector<T>& buffer, Pull pull) {
    if (pulled_ % anchor_interval_ == 0 || anchors_.empty()) {
      prune_anchors();
      anchors_.push_back({pulled_, detail::save_words(*input_)});
    }
    auto item = pull(*input_);
    if (!detail::has_item(item)) {
      exhausted_ = true;
      return;
    }
    buffer.push_back(stored(item));
    origin_.push_back(pulled_++);
  }

  // Restore: replays the input from `anchor` to `pulled`, keeping the buffered items.
  template <typename T, typename Pull>
  void replay(std::vector<T>& buffer, Pull pull,
              const std::unordered_map<int64_t, size_t>& slot_of, int64_t anchor, int64_t pulled) {
    buffer.assign(slot_of.size(), T{});
    for (int64_t p = anchor; p < pulled; ++p) {
      if (p != anchor && p % anchor_interval_ == 0) anchors_.push_back({p, detail::save_words(*input_)});
      auto item = pull(*input_);
      STRATA_CHECK(detail::has_item(item), "Iterator::restore: shuffle: the input ended at position ",
                   p, " but the saved state read ", pulled, " elements; the state belongs to a ",
                   "different input");
      auto it = slot_of.find(p);
      if (it != slot_of.end()) buffer[it->second] = stored(item);
    }
  }

  // Drops anchors older than the newest one at or before the oldest buffered element.
  void prune_anchors() {
    const int64_t oldest =
        origin_.empty() ? pulled_ : *std::min_element(origin_.begin(), origin_.end());
    while (anchors_.size() >= 2 && anchors_[1].position <= oldest) anchors_.pop_front();
  }

  const int64_t capacity_;
  const uint64_t seed_;
  const int64_t anchor_interval_;
  std::unique_ptr<IteratorBase> input_;
  const std::vector<Tensor>* const rows_;  // non-null: row mode, row_buffer_ is used
  std::vector<Element> buffer_;
  std::vector<int64_t> row_buffer_;
  std::vector<int64_t> origin_;  // input position of each buffered element
  std::deque<Anchor> anchors_;
  int64_t pulled_ = 0;
  int64_t emitted_ = 0;
  bool exhausted_ = false;
};

std::unique_ptr<IteratorBase> ShuffleNode::make_iterator(uint64_t key) const {
  return std::make_unique<ShuffleIterator>(*this, key);
}

}  // namespace

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  STRATA_CHECK(buffer_size >= 1, "Dataset::shuffle: buffer_size must be >= 1, got ", buffer_size);
  return Dataset(std::make_shared<ShuffleNode>(node_, buffer_size, seed, reshuffle_each_iteration));
}

}  // namespace strata::data
