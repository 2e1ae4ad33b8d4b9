#include <strata/distribute/replica_split_stage.h>

#include <algorithm>
#include <deque>
#include <limits>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>
#include <strata/distribute/device_fetch.h>

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

using data::Batch;
using data::Element;
using data::detail::IteratorBase;
using data::detail::NodePtr;
using data::detail::StageTag;
using data::detail::StateReader;
using data::detail::StateWriter;

constexpr int64_t kMaxWord = std::numeric_limits<int64_t>::max();

const char* mode_name(ReplicaSplitOptions::Mode mode) {
  return mode == ReplicaSplitOptions::Mode::Keep ? "keep" : "rebatch";
}

int64_t rows_of(const Element& e) { return !e.empty() && e[0].defined() && e[0].ndim() >= 1 ? e[0].dim(0) : 0; }

class ReplicaSplitNode final : public data::detail::UnaryNode {
 public:
  ReplicaSplitNode(NodePtr input, ReplicaSplitOptions options)
      : UnaryNode(std::move(input)), options_(std::move(options)) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (options_.mode == ReplicaSplitOptions::Mode::Keep || c < 0) return c;
    // Rebatch: every batch gives total / local elements.
    const int64_t per_batch = options_.total_parts / options_.local_parts;
    return c > kMaxWord / per_batch ? data::kUnknownCardinality : c * per_batch;
  }
  std::string name() const override {
    return data::detail::str_of("split_between_replicas(", mode_name(options_.mode), ", parts=", options_.total_parts,
                                ", first=", options_.first_part, ", local=", options_.local_parts, ")");
  }
  // A pipeline's fingerprint, which a saved state must match, is made of its stages'
  // signatures. Positions move between replica counts (see the header), so the options are
  // not part of this one; and it is the signature of the map this stage replaced, so the
  // states that map saved still restore.
  std::string signature() const override { return "map"; }

  const ReplicaSplitOptions& options() const { return options_; }

 protected:
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<ReplicaSplitNode>(std::move(input), options_);
  }

 private:
  ReplicaSplitOptions options_;
};

class ReplicaSplitIterator final : public IteratorBase {
 public:
  ReplicaSplitIterator(const ReplicaSplitNode& node, uint64_t key)
      : o_(node.options()), input_(node.input()->make_iterator(key)) {}

  std::optional<Element> next() override {
    if (o_.mode == ReplicaSplitOptions::Mode::Keep) {
      auto e = input_->next();
      if (!e) return std::nullopt;
      if (o_.total_parts == 1) return place_whole(*e);
      full_ = std::max(full_, rows_of(*e));
      std::vector<Batch> parts = split_batch(*e, o_.total_parts, full_);
      return flatten(parts.begin() + o_.first_part, parts.begin() + o_.first_part + o_.local_parts);
    }
    // Batches give total_parts parts, a multiple of local_parts: an element is always whole.
    if (queued_.empty() && (done_ || !read_batch())) {
      done_ = true;
      return std::nullopt;
    }
    Element out = flatten(queued_.begin(), queued_.begin() + o_.local_parts);
    queued_.erase(queued_.begin(), queued_.begin() + o_.local_parts);
    return out;
  }

  // Record: B, the parts taken of the queued batch (-1: none queued), total_parts, the end
  // flag, then the input's state before the queued batch (or now, when none is queued).
  void save(StateWriter& w) const override {
    w.stage(StageTag::ReplicaSplit);
    w.put(full_);
    w.put(queued_.empty() ? -1 : o_.total_parts - int64_t(queued_.size()));
    w.put(o_.total_parts);
    w.put(done_ ? 1 : 0);
    if (queued_.empty()) {
      input_->save(w);
    } else {
      w.append(anchor_);
    }
  }

  void restore(StateReader& r) override {
    if (r.next_is(StageTag::Map)) {
      // The record of the map that split batches before this stage existed: a sequential
      // map's (0 elements since its anchor, its input's state). B is learned again.
      r.stage(StageTag::Map);
      r.get_in("split_between_replicas: the earlier map's elements since anchor", 0, 0);
      input_->restore(r);
      return;
    }
    r.stage(StageTag::ReplicaSplit);
    const int64_t full = r.get_in("split_between_replicas full batch", 0, kMaxWord);
    const int64_t taken = r.get_in("split_between_replicas parts taken", -1, kMaxWord);
    const int64_t total = r.get_in("split_between_replicas parts per batch", 1, kMaxWord);
    const bool done = r.get_in("split_between_replicas end flag", 0, 1) == 1;
    input_->restore(r);
    full_ = full;
    done_ = done;
    if (taken < 0) return;
    STRATA_CHECK(o_.mode == ReplicaSplitOptions::Mode::Rebatch && total == o_.total_parts,
                 "Iterator::restore: split_between_replicas: the state was saved part-way through a batch cut "
                 "into ", total, " parts (File/Off auto-sharding), but this input ",
                 o_.mode == ReplicaSplitOptions::Mode::Rebatch
                     ? data::detail::str_of("cuts batches into ", o_.total_parts, " parts")
                     : std::string("splits each global batch itself (Data auto-sharding, or one worker)"),
                 "; resume with the same number of replicas in sync (", total, ")");
    STRATA_CHECK(taken < total && taken % o_.local_parts == 0, "Iterator::restore: corrupt state: "
                 "split_between_replicas took ", taken, " parts of a batch of ", total, " (whole elements of ",
                 o_.local_parts, " parts are taken)");
    STRATA_CHECK(read_batch(), "Iterator::restore: split_between_replicas: the input ended where the saved state "
                               "has a partly used batch (the state does not belong to this input)");
    for (int64_t i = 0; i < taken; ++i) queued_.pop_front();
  }

 private:
  // Reads one batch and queues its parts, remembering the input's state before it.
  bool read_batch() {
    anchor_ = data::detail::save_words(*input_);
    auto e = input_->next();
    if (!e) return false;
    full_ = std::max(full_, rows_of(*e));
    for (Batch& part : split_batch(*e, o_.total_parts, full_)) queued_.push_back(std::move(part));
    return true;
  }

  Tensor place(const Tensor& t, size_t replica) const { return place_on(t, o_.devices[replica], o_.fetch); }
  Element place_whole(const Element& e) const {
    Element out;
    out.reserve(e.size());
    for (const Tensor& t : e) out.push_back(place(t, 0));
    return out;
  }
  template <typename It>
  Element flatten(It first, It last) const {
    Element out;
    size_t replica = 0;
    for (It part = first; part != last; ++part, ++replica) {
      for (const Tensor& t : *part) out.push_back(place(t, replica));
    }
    return out;
  }

  const ReplicaSplitOptions& o_;
  std::unique_ptr<IteratorBase> input_;
  std::deque<Batch> queued_;     // Rebatch: parts of the last batch read, not yet handed out
  std::vector<int64_t> anchor_;  // Rebatch: the input's state before that batch
  int64_t full_ = 0;             // B: the largest batch seen
  bool done_ = false;
};

std::unique_ptr<IteratorBase> ReplicaSplitNode::make_iterator(uint64_t key) const {
  return std::make_unique<ReplicaSplitIterator>(*this, key);
}

}  // namespace

data::Dataset split_between_replicas(const data::Dataset& input, ReplicaSplitOptions o) {
  STRATA_CHECK(o.total_parts >= 1 && o.local_parts >= 1 && o.total_parts % o.local_parts == 0,
               "split_between_replicas: the total parts (", o.total_parts, ") must be a positive multiple of the "
               "local parts (", o.local_parts, "), as replicas in sync are of replicas per worker");
  STRATA_CHECK(o.first_part >= 0 && o.first_part + o.local_parts <= o.total_parts,
               "split_between_replicas: parts [", o.first_part, ", ", o.first_part + o.local_parts,
               ") outside the ", o.total_parts, " parts of a batch");
  STRATA_CHECK(int64_t(o.devices.size()) == o.local_parts, "split_between_replicas: ", o.devices.size(),
               " devices for ", o.local_parts, " local replicas");
  return data::Dataset(std::make_shared<ReplicaSplitNode>(input.node(), std::move(o)));
}

}  // namespace strata::distribute
