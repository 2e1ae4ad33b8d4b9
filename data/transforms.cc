// Element-wise and counting stages: filter, batch, unbatch, repeat, take, skip, shard,
// enumerate. (map: data/map.cc; shuffle, cache, prefetch: their own files.)
#include <algorithm>
#include <cstring>
#include <limits>

#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/data/copy_sharing.h>
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

constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max();

// ---- filter ----

class FilterNode final : public UnaryNode {
 public:
  FilterNode(NodePtr input, Predicate pred) : UnaryNode(std::move(input)), pred_(std::move(pred)) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    return input_->cardinality() == kInfiniteCardinality ? kInfiniteCardinality : kUnknownCardinality;
  }
  std::string name() const override { return "filter"; }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<FilterNode>(std::move(input), pred_);
  }
  Predicate pred_;
};

class FilterIterator final : public IteratorBase {
 public:
  FilterIterator(const FilterNode& node, uint64_t key)
      : node_(node), input_(node.input()->make_iterator(key)) {}
  std::optional<Element> next() override {
    while (auto e = input_->next()) {
      if (node_.pred_(*e)) return e;
    }
    return std::nullopt;
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Filter);
    input_->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Filter);
    input_->restore(r);
  }

 private:
  const FilterNode& node_;
  std::unique_ptr<IteratorBase> input_;
};

std::unique_ptr<IteratorBase> FilterNode::make_iterator(uint64_t key) const {
  return std::make_unique<FilterIterator>(*this, key);
}

// ---- batch ----

class BatchNode final : public UnaryNode {
 public:
  BatchNode(NodePtr input, int64_t n, bool drop)
      : UnaryNode(std::move(input)), batch_size_(n), drop_remainder_(drop) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (c < 0) return c;
    return drop_remainder_ ? c / batch_size_ : (c + batch_size_ - 1) / batch_size_;
  }
  std::string name() const override {
    return str_of("batch(", batch_size_, drop_remainder_ ? ", drop_remainder" : "", ")");
  }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<BatchNode>(std::move(input), batch_size_, drop_remainder_);
  }
  int64_t batch_size_;
  bool drop_remainder_;
};

// Runs copy(begin, count) over items [0, n) of `item_bytes` each. On a prefetch
// producer's thread a copy of more than kShareChunkBytes is offered to the waiting consumer
// in chunks of about that size (Note [copy sharing]); smaller copies (a batch's labels)
// are not worth the hand-over, and other threads copy in one go.
template <class F>
void copy_in_chunks(size_t n, size_t item_bytes, F&& copy) {
  constexpr size_t kShareChunkBytes = 32 * 1024;
  detail::CopySharing* sharing = detail::current_copy_sharing();
  const size_t per_chunk = std::max<size_t>(1, kShareChunkBytes / std::max<size_t>(1, item_bytes));
  if (sharing == nullptr || n <= per_chunk) {
    copy(size_t(0), n);
    return;
  }
  sharing->run((n + per_chunk - 1) / per_chunk, [&](size_t c) {
    const size_t begin = c * per_chunk;
    copy(begin, std::min(per_chunk, n - begin));
  });
}

// stack() for host tensors that are each contiguous: one allocation and a memcpy per
// element. strata::stack builds an expand_dims view per element and runs the generic
// strided concat kernel; batching MNIST rows that way measured ~2x slower (see the
// "[.bench]" test).
std::optional<Tensor> stack_contiguous(const std::vector<Tensor>& column) {
  for (const auto& t : column) {
    if (!t.device().is_cpu() || !t.is_contiguous()) return std::nullopt;
  }
  Shape shape{int64_t(column.size())};
  shape.insert(shape.end(), column[0].shape().begin(), column[0].shape().end());
  Tensor out = Tensor::empty(shape, column[0].dtype(), column[0].device());
  const size_t bytes = column[0].nbytes();
  if (bytes == 0) return out;
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  copy_in_chunks(column.size(), bytes, [&](size_t begin, size_t count) {
    for (size_t i = begin; i < begin + count; ++i) std::memcpy(dst + i * bytes, column[i].raw_data(), bytes);
  });
  return out;
}

// Copies rows rows[0..n) of `base` (rows `stride` bytes apart, each `row_bytes` long)
// to `dst`, one after another.
void copy_rows(uint8_t* dst, const uint8_t* base, ptrdiff_t stride, size_t row_bytes, const int64_t* rows,
               size_t n) {
  // Shuffled rows are scattered over the source: the next row's first cache lines (up to
  // 4 KiB, an MNIST image is 3136 bytes) are requested while this row is copied, so each
  // row does not start with a wait on memory (a standalone gather of MNIST rows in this
  // order took 5-15% less thread CPU time with it, four runs of 61 repetitions).
  const size_t ahead = row_bytes >= 256 ? std::min<size_t>(row_bytes, 4096) : 0;
  for (size_t i = 0; i < n; ++i) {
    if (ahead && i + 1 < n) {
      const uint8_t* next = base + rows[i + 1] * stride;
      for (size_t o = 0; o < ahead; o += 64) __builtin_prefetch(next + o);
    }
    std::memcpy(dst, base + rows[i] * stride, row_bytes);
    dst += row_bytes;
  }
}

// Rows `rows` of `source` stacked along a new leading axis: what stacking row_view(source, r)
// for each r would give, gathered straight from the source (Note [row mode]) with one
// memcpy per row when a row is contiguous in memory, through strata::stack otherwise.
Tensor gather_rows(const Tensor& source, const std::vector<int64_t>& rows) {
  if (!detail::row_view(source, rows[0]).is_contiguous()) {
    std::vector<Tensor> views;
    views.reserve(rows.size());
    for (int64_t r : rows) views.push_back(detail::row_view(source, r));
    return stack(views, 0);
  }
  Shape shape = source.shape();
  shape[0] = int64_t(rows.size());
  Tensor out = Tensor::empty(shape, source.dtype(), source.device());
  const size_t row_bytes = size_t(numel_of(Shape(shape.begin() + 1, shape.end()))) * source.itemsize();
  if (row_bytes == 0) return out;
  const auto* base = static_cast<const uint8_t*>(source.raw_data());
  const auto row_stride = static_cast<ptrdiff_t>(source.strides()[0] * int64_t(source.itemsize()));
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  copy_in_chunks(rows.size(), row_bytes, [&](size_t begin, size_t count) {
    copy_rows(dst + begin * row_bytes, base, row_stride, row_bytes, rows.data() + begin, count);
  });
  return out;
}

// Stacks the components of `elements` along a new leading axis.
Element stack_elements(const std::vector<Element>& elements) {
  const Element& first = elements[0];
  for (size_t i = 1; i < elements.size(); ++i) {
    const Element& e = elements[i];
    STRATA_CHECK(e.size() == first.size(), "batch: element ", i, " of the batch has ", e.size(),
                 " components but element 0 has ", first.size());
    for (size_t c = 0; c < e.size(); ++c) {
      STRATA_CHECK(e[c].shape() == first[c].shape() && e[c].dtype() == first[c].dtype(),
                   "batch: component ", c, " of element ", i, " of the batch is ",
                   shape_str(e[c].shape()), " ", e[c].dtype(), " but in element 0 it is ",
                   shape_str(first[c].shape()), " ", first[c].dtype(),
                   "; batch needs equal shapes (map them to one shape first)");
    }
  }
  Element out;
  out.reserve(first.size());
  std::vector<Tensor> column(elements.size());
  for (size_t c = 0; c < first.size(); ++c) {
    for (size_t i = 0; i < elements.size(); ++i) column[i] = elements[i][c];
    auto fast = stack_contiguous(column);
    out.push_back(fast ? std::move(*fast) : stack(column, 0));
  }
  return out;
}

class BatchIterator final : public IteratorBase {
 public:
  BatchIterator(const BatchNode& node, uint64_t key)
      : node_(node), input_(node.input()->make_iterator(key)), rows_(input_->rows()) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    if (rows_) return next_gathered();
    std::vector<Element> elements;
    // Room for a usual batch only: "batch everything" with a huge size must not reserve it.
    elements.reserve(size_t(std::min<int64_t>(node_.batch_size_, 4096)));
    while (int64_t(elements.size()) < node_.batch_size_) {
      auto e = input_->next();
      if (!e) {
        done_ = true;
        break;
      }
      elements.push_back(std::move(*e));
    }
    if (elements.empty()) return std::nullopt;
    if (int64_t(elements.size()) < node_.batch_size_ && node_.drop_remainder_) return std::nullopt;
    return stack_elements(elements);
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Batch);
    w.put(done_ ? 1 : 0);
    input_->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Batch);
    done_ = r.get_in("batch end flag", 0, 1) == 1;
    input_->restore(r);
  }

 private:
  // Row mode: the batch's row indices first, then each component gathered in one go.
  std::optional<Element> next_gathered() {
    indices_.clear();
    while (int64_t(indices_.size()) < node_.batch_size_) {
      const int64_t row = input_->next_row();
      if (row == detail::kNoRow) {
        done_ = true;
        break;
      }
      indices_.push_back(row);
    }
    if (indices_.empty()) return std::nullopt;
    if (int64_t(indices_.size()) < node_.batch_size_ && node_.drop_remainder_) return std::nullopt;
    Element out;
    out.reserve(rows_->size());
    for (const Tensor& component : *rows_) out.push_back(gather_rows(component, indices_));
    return out;
  }

  const BatchNode& node_;
  std::unique_ptr<IteratorBase> input_;
  const std::vector<Tensor>* rows_;  // non-null: the input is in row mode
  std::vector<int64_t> indices_;     // row mode: the rows of the batch being built
  bool done_ = false;
};

std::unique_ptr<IteratorBase> BatchNode::make_iterator(uint64_t key) const {
  return std::make_unique<BatchIterator>(*this, key);
}

// ---- unbatch ----

class UnbatchNode final : public UnaryNode {
 public:
  using UnaryNode::UnaryNode;
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    return input_->cardinality() == kInfiniteCardinality ? kInfiniteCardinality : kUnknownCardinality;
  }
  std::string name() const override { return "unbatch"; }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<UnbatchNode>(std::move(input));
  }
};

class UnbatchIterator final : public IteratorBase {
 public:
  UnbatchIterator(const UnbatchNode& node, uint64_t key) : input_(node.input()->make_iterator(key)) {}

  std::optional<Element> next() override {
    while (!batch_ || index_ >= rows_) {
      if (!pull()) return std::nullopt;
    }
    Element out;
    out.reserve(batch_->size());
    for (const auto& c : *batch_) out.push_back(detail::row_view(c, index_));
    ++index_;
    return out;
  }
  // State: the input's state before the current batch, and the row reached in it.
  void save(StateWriter& w) const override {
    w.stage(StageTag::Unbatch);
    if (batch_ && index_ < rows_) {
      w.put(index_);
      w.append(anchor_);
    } else {
      w.put(-1);
      input_->save(w);
    }
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Unbatch);
    const int64_t index = r.get_in("unbatch row", -1, kMaxCount);
    input_->restore(r);
    if (index >= 0) {
      STRATA_CHECK(pull(), "Iterator::restore: unbatch: the input ended where the saved state "
                   "has a partly consumed batch");
      STRATA_CHECK(index < rows_, "Iterator::restore: unbatch: saved row ", index,
                   " outside the restored batch of ", rows_, " rows");
      index_ = index;
    }
  }

 private:
  bool pull() {
    anchor_ = detail::save_words(*input_);
    batch_ = input_->next();
    index_ = 0;
    rows_ = 0;
    if (!batch_) return false;
    STRATA_CHECK(!batch_->empty(), "unbatch: input element has no components");
    for (size_t c = 0; c < batch_->size(); ++c) {
      const Tensor& t = (*batch_)[c];
      STRATA_CHECK(t.ndim() >= 1, "unbatch: component ", c, " is a scalar; unbatch needs rank >= 1");
      STRATA_CHECK(t.dim(0) == (*batch_)[0].dim(0), "unbatch: component ", c, " has ", t.dim(0),
                   " rows (shape ", shape_str(t.shape()), ") but component 0 has ",
                   (*batch_)[0].dim(0));
    }
    rows_ = (*batch_)[0].dim(0);
    return true;
  }

  std::unique_ptr<IteratorBase> input_;
  std::optional<Element> batch_;
  std::vector<int64_t> anchor_;
  int64_t index_ = 0;
  int64_t rows_ = 0;
};

std::unique_ptr<IteratorBase> UnbatchNode::make_iterator(uint64_t key) const {
  return std::make_unique<UnbatchIterator>(*this, key);
}

// ---- repeat ----

class RepeatNode final : public UnaryNode {
 public:
  RepeatNode(NodePtr input, int64_t count) : UnaryNode(std::move(input)), count_(count) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (c == 0 || count_ == 0) return 0;
    if (c == kUnknownCardinality) return c;
    if (count_ < 0 || c == kInfiniteCardinality) return kInfiniteCardinality;
    return c > kMaxCount / count_ ? kInfiniteCardinality : c * count_;
  }
  std::string name() const override {
    return count_ < 0 ? std::string("repeat") : str_of("repeat(", count_, ")");
  }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<RepeatNode>(std::move(input), count_);
  }
  int64_t count_;
};

class RepeatIterator final : public IteratorBase {
 public:
  RepeatIterator(const RepeatNode& node, uint64_t key) : node_(node), key_(key) {
    if (node_.count_ != 0) {
      input_ = node_.input()->make_iterator(detail::mix_keys(key_, 0));
      rows_ = input_->rows();
    }
  }
  std::optional<Element> next() override { return advance(detail::PullElement{}); }
  // Every epoch's iterator comes from the same input stage, so it slices the same tensors.
  const std::vector<Tensor>* rows() const override { return rows_; }
  int64_t next_row() override { return advance(detail::PullRow{}); }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Repeat);
    w.put(epoch_);
    w.put(in_epoch_);
    w.put(input_ ? 1 : 0);
    if (input_) input_->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Repeat);
    epoch_ = r.get_in("repeat epoch", 0, node_.count_ < 0 ? kMaxCount : node_.count_);
    in_epoch_ = r.get_in("repeat position in epoch", 0, kMaxCount);
    const bool live = r.get_in("repeat live flag", 0, 1) == 1;
    input_.reset();
    if (live) {
      input_ = node_.input()->make_iterator(detail::mix_keys(key_, uint64_t(epoch_)));
      input_->restore(r);
    }
  }

 private:
  template <typename Pull>
  typename Pull::Item advance(Pull pull) {
    while (input_) {
      auto item = pull(*input_);
      if (detail::has_item(item)) {
        ++in_epoch_;
        return item;
      }
      ++epoch_;
      // An epoch without elements would make repeat() spin forever: end instead.
      if (in_epoch_ == 0 || (node_.count_ >= 0 && epoch_ >= node_.count_)) {
        input_.reset();
        break;
      }
      in_epoch_ = 0;
      input_ = node_.input()->make_iterator(detail::mix_keys(key_, uint64_t(epoch_)));
      STRATA_CHECK(input_->rows() == rows_, "repeat: internal error: epoch ", epoch_,
                   " of the input changed its row mode (Note [row mode])");
    }
    return detail::end_item<typename Pull::Item>();
  }

  const RepeatNode& node_;
  uint64_t key_;
  std::unique_ptr<IteratorBase> input_;  // null once finished
  const std::vector<Tensor>* rows_ = nullptr;
  int64_t epoch_ = 0;
  int64_t in_epoch_ = 0;
};

std::unique_ptr<IteratorBase> RepeatNode::make_iterator(uint64_t key) const {
  return std::make_unique<RepeatIterator>(*this, key);
}

// ---- take / skip ----

class TakeNode final : public UnaryNode {
 public:
  TakeNode(NodePtr input, int64_t count) : UnaryNode(std::move(input)), count_(count) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (count_ < 0) return c;
    if (c == kInfiniteCardinality) return count_;
    if (c == kUnknownCardinality) return c;
    return std::min(c, count_);
  }
  std::string name() const override { return str_of("take(", count_, ")"); }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<TakeNode>(std::move(input), count_);
  }
  int64_t count_;
};

class TakeIterator final : public IteratorBase {
 public:
  TakeIterator(const TakeNode& node, uint64_t key)
      : limit_(node.count_ < 0 ? kMaxCount : node.count_), input_(node.input()->make_iterator(key)) {}
  std::optional<Element> next() override { return advance(detail::PullElement{}); }
  const std::vector<Tensor>* rows() const override { return input_->rows(); }
  int64_t next_row() override { return advance(detail::PullRow{}); }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Take);
    w.put(taken_);
    input_->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Take);
    taken_ = r.get_in("take count", 0, limit_);
    input_->restore(r);
  }

 private:
  template <typename Pull>
  typename Pull::Item advance(Pull pull) {
    if (taken_ >= limit_) return detail::end_item<typename Pull::Item>();
    auto item = pull(*input_);
    if (detail::has_item(item)) ++taken_;
    return item;
  }

  int64_t limit_;
  std::unique_ptr<IteratorBase> input_;
  int64_t taken_ = 0;
};

std::unique_ptr<IteratorBase> TakeNode::make_iterator(uint64_t key) const {
  return std::make_unique<TakeIterator>(*this, key);
}

class SkipNode final : public UnaryNode {
 public:
  SkipNode(NodePtr input, int64_t count) : UnaryNode(std::move(input)), count_(count) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (c < 0) return c == kInfiniteCardinality && count_ < 0 ? 0 : c;
    return count_ < 0 ? 0 : std::max<int64_t>(0, c - count_);
  }
  std::string name() const override { return str_of("skip(", count_, ")"); }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<SkipNode>(std::move(input), count_);
  }
  int64_t count_;
};

class SkipIterator final : public IteratorBase {
 public:
  SkipIterator(const SkipNode& node, uint64_t key)
      : to_skip_(node.count_ < 0 ? kMaxCount : node.count_), input_(node.input()->make_iterator(key)) {}
  std::optional<Element> next() override { return advance(detail::PullElement{}); }
  const std::vector<Tensor>* rows() const override { return input_->rows(); }
  int64_t next_row() override { return advance(detail::PullRow{}); }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Skip);
    w.put(to_skip_);
    w.put(done_ ? 1 : 0);
    input_->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Skip);
    to_skip_ = r.get_in("skip remaining", 0, to_skip_);
    done_ = r.get_in("skip end flag", 0, 1) == 1;
    input_->restore(r);
  }

 private:
  template <typename Pull>
  typename Pull::Item advance(Pull pull) {
    // Skipping happens lazily so that creating an iterator does no work.
    while (to_skip_ > 0) {
      if (!detail::drop_element(*input_)) {
        to_skip_ = 0;
        done_ = true;
      } else {
        --to_skip_;
      }
    }
    if (done_) return detail::end_item<typename Pull::Item>();
    return pull(*input_);
  }

  int64_t to_skip_;
  std::unique_ptr<IteratorBase> input_;
  bool done_ = false;
};

std::unique_ptr<IteratorBase> SkipNode::make_iterator(uint64_t key) const {
  return std::make_unique<SkipIterator>(*this, key);
}

// ---- shard ----

class ShardNode final : public UnaryNode {
 public:
  ShardNode(NodePtr input, int64_t n, int64_t index)
      : UnaryNode(std::move(input)), num_shards_(n), index_(index) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (c < 0) return c;
    return c > index_ ? (c - index_ + num_shards_ - 1) / num_shards_ : 0;
  }
  std::string name() const override { return str_of("shard(", num_shards_, ", ", index_, ")"); }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<ShardNode>(std::move(input), num_shards_, index_);
  }
  int64_t num_shards_, index_;
};

class ShardIterator final : public IteratorBase {
 public:
  ShardIterator(const ShardNode& node, uint64_t key)
      : node_(node), input_(node.input()->make_iterator(key)), pending_(node.index_) {}
  std::optional<Element> next() override { return advance(detail::PullElement{}); }
  const std::vector<Tensor>* rows() const override { return input_->rows(); }
  int64_t next_row() override { return advance(detail::PullRow{}); }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Shard);
    w.put(pending_);
    w.put(done_ ? 1 : 0);
    input_->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Shard);
    pending_ = r.get_in("shard pending skips", 0, node_.num_shards_ - 1);
    done_ = r.get_in("shard end flag", 0, 1) == 1;
    input_->restore(r);
  }

 private:
  template <typename Pull>
  typename Pull::Item advance(Pull pull) {
    using Item = typename Pull::Item;
    if (done_) return detail::end_item<Item>();
    // Drop the elements that belong to the other shards, lazily.
    while (pending_ > 0) {
      if (!detail::drop_element(*input_)) {
        done_ = true;
        return detail::end_item<Item>();
      }
      --pending_;
    }
    auto item = pull(*input_);
    if (!detail::has_item(item)) {
      done_ = true;
      return detail::end_item<Item>();
    }
    pending_ = node_.num_shards_ - 1;
    return item;
  }

  const ShardNode& node_;
  std::unique_ptr<IteratorBase> input_;
  int64_t pending_;
  bool done_ = false;
};

std::unique_ptr<IteratorBase> ShardNode::make_iterator(uint64_t key) const {
  return std::make_unique<ShardIterator>(*this, key);
}

// ---- enumerate ----

class EnumerateNode final : public UnaryNode {
 public:
  EnumerateNode(NodePtr input, int64_t start) : UnaryNode(std::move(input)), start_(start) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override { return str_of("enumerate(", start_, ")"); }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<EnumerateNode>(std::move(input), start_);
  }
  int64_t start_;
};

class EnumerateIterator final : public IteratorBase {
 public:
  EnumerateIterator(const EnumerateNode& node, uint64_t key)
      : next_index_(node.start_), input_(node.input()->make_iterator(key)) {}
  std::optional<Element> next() override {
    auto e = input_->next();
    if (!e) return std::nullopt;
    Element out;
    out.reserve(e->size() + 1);
    out.push_back(Tensor::from_vector(std::vector<int64_t>{next_index_++}, Shape{}));
    out.insert(out.end(), std::make_move_iterator(e->begin()), std::make_move_iterator(e->end()));
    return out;
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Enumerate);
    w.put(next_index_);
    input_->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Enumerate);
    next_index_ = r.get("enumerate counter");
    input_->restore(r);
  }

 private:
  int64_t next_index_;
  std::unique_ptr<IteratorBase> input_;
};

std::unique_ptr<IteratorBase> EnumerateNode::make_iterator(uint64_t key) const {
  return std::make_unique<EnumerateIterator>(*this, key);
}

}  // namespace

Dataset Dataset::filter(Predicate predicate) const {
  STRATA_CHECK(static_cast<bool>(predicate), "Dataset::filter: empty predicate");
  return Dataset(std::make_shared<FilterNode>(node_, std::move(predicate)));
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  STRATA_CHECK(batch_size >= 1, "Dataset::batch: batch_size must be >= 1, got ", batch_size);
  return Dataset(std::make_shared<BatchNode>(node_, batch_size, drop_remainder));
}

Dataset Dataset::unbatch() const { return Dataset(std::make_shared<UnbatchNode>(node_)); }

Dataset Dataset::repeat(int64_t count) const {
  return Dataset(std::make_shared<RepeatNode>(node_, count < 0 ? -1 : count));
}

Dataset Dataset::take(int64_t count) const {
  return Dataset(std::make_shared<TakeNode>(node_, count < 0 ? -1 : count));
}

Dataset Dataset::skip(int64_t count) const {
  return Dataset(std::make_shared<SkipNode>(node_, count < 0 ? -1 : count));
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  STRATA_CHECK(num_shards >= 1, "Dataset::shard: num_shards must be >= 1, got ", num_shards);
  STRATA_CHECK(index >= 0 && index < num_shards, "Dataset::shard: index ", index,
               " outside [0, ", num_shards, ")");
  return Dataset(std::make_shared<ShardNode>(node_, num_shards, index));
}

Dataset Dataset::enumerate(int64_t start) const {
  return Dataset(std::make_shared<EnumerateNode>(node_, start));
}

}  // namespace strata::data
