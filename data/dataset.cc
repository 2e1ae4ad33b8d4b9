// Dataset and Iterator: the public handles over the stage graph (data/dataset_node.h).
#include <strata/data/dataset.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>

namespace strata::data {

namespace {
constexpr int64_t kStateMagic = 0x5354524154414431;  // "STRATAD1"
constexpr int64_t kStateVersion = 1;

// A structural fingerprint of the pipeline (stage signatures, outermost first), stored
// in saved states so a state from another pipeline is rejected up front.
uint64_t fingerprint(const detail::DatasetNode& node) {
  uint64_t h = std::hash<std::string>{}(node.signature());
  for (const auto& in : node.inputs()) h = detail::mix_keys(h, fingerprint(*in));
  return h;
}
}  // namespace

namespace detail {

NodePtr DatasetNode::with_inputs(std::vector<NodePtr> inputs) const {
  fail("Dataset: stage '", name(), "' cannot be rebuilt over new inputs");
}

UnaryNode::UnaryNode(NodePtr input) : input_(std::move(input)) {
  STRATA_CHECK(input_ != nullptr, "Dataset: stage given a null input");
}

NodePtr UnaryNode::with_inputs(std::vector<NodePtr> inputs) const {
  STRATA_CHECK(inputs.size() == 1, "Dataset: stage '", name(), "' takes one input, got ",
               inputs.size());
  return clone_with(std::move(inputs[0]));
}

NodePtr DatasetNode::with_files(std::vector<std::string>) const {
  fail("Dataset: stage '", name(), "' does not read files");
}

Tensor row_view(const Tensor& t, int64_t i) {
  Shape shape(t.shape().begin() + 1, t.shape().end());
  Strides strides(t.strides().begin() + 1, t.strides().end());
  return Tensor::view_of(t.storage(), t.offset() + i * t.strides()[0], std::move(shape),
                         std::move(strides), t.dtype());
}

Element row_element(const std::vector<Tensor>& components, int64_t i) {
  Element e;
  e.reserve(components.size());
  for (const auto& c : components) e.push_back(row_view(c, i));
  return e;
}

int64_t IteratorBase::next_row() {
  fail("Dataset: internal error: next_row() on an iterator without rows (Note [row mode])");
}

uint64_t mix_keys(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<int64_t> save_words(const IteratorBase& it, size_t reserve) {
  std::vector<int64_t> words;
  words.reserve(reserve);
  StateWriter w(words);
  it.save(w);
  return words;
}

void restore_words(IteratorBase& it, const std::vector<int64_t>& words, const char* stage) {
  StateReader r(words);
  it.restore(r);
  STRATA_CHECK(r.done(), "Iterator::restore: ", stage, ": input state has ",
               words.size() - r.position(), " unread words");
}

bool drop_element(IteratorBase& it) {
  return it.rows() != nullptr ? it.next_row() != kNoRow : it.next().has_value();
}

void skip_elements(IteratorBase& it, int64_t n, const char* stage) {
  for (int64_t i = 0; i < n; ++i) {
    STRATA_CHECK(drop_element(it), "Iterator::restore: ", stage, ": the input ended after ",
                 i, " of the ", n, " elements the saved state says were consumed; the state ",
                 "belongs to a different input");
  }
}

void ConsumerPosition::restore(StateReader& r, IteratorBase& input, const char* stage) {
  // The producer snapshots its input at least every AnchorClock::kMaxInterval elements, so
  // a larger count is a corrupt state; refusing it keeps the replay below from running
  // (over an endless input) without end.
  const int64_t since = r.get_in(str_of(stage, " elements since anchor").c_str(), 0, AnchorClock::kMaxInterval);
  input.restore(r);
  // The stages that read ahead are one-to-one and their functions pure: skipping inputs
  // skips outputs.
  skip_elements(input, since, stage);
}

bool AnchorClock::produced(double produce_ns) {
  produce_ema_ = produce_ema_ == 0.0 ? produce_ns : 0.9 * produce_ema_ + 0.1 * produce_ns;
  return ++since_capture_ >= interval_;
}

void AnchorClock::captured(double save_ns) {
  save_ema_ = save_ema_ == 0.0 ? save_ns : 0.9 * save_ema_ + 0.1 * save_ns;
  since_capture_ = 0;
  const double budget = kBudget * std::max(produce_ema_, 1.0);
  interval_ = std::clamp<int64_t>(int64_t(std::ceil(save_ema_ / budget)), 1, kMaxInterval);
}

}  // namespace detail

// ---- Iterator ----

Iterator::Iterator(std::shared_ptr<const detail::DatasetNode> node, uint64_t iteration)
    : Iterator(std::move(node), iteration, nullptr) {}

Iterator::Iterator(std::shared_ptr<const detail::DatasetNode> node, uint64_t iteration,
                   std::shared_ptr<std::atomic<uint64_t>> iterations)
    : node_(std::move(node)), iteration_(iteration), iterations_(std::move(iterations)) {
  STRATA_CHECK(node_ != nullptr, "Iterator: null dataset");
  impl_ = node_->make_iterator(iteration_);
}

Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&&) noexcept = default;
Iterator::~Iterator() = default;

std::optional<Element> Iterator::next() {
  STRATA_CHECK(impl_ != nullptr, "Iterator::next: use of a moved-from iterator");
  if (error_) std::rethrow_exception(error_);
  try {
    return impl_->next();
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
}

IteratorState Iterator::save() const {
  STRATA_CHECK(impl_ != nullptr, "Iterator::save: use of a moved-from iterator");
  STRATA_CHECK(!error_, "Iterator::save: the iterator failed earlier; its position is undefined "
               "(restore a state saved before the failure)");
  IteratorState state;
  state.words = {kStateMagic, kStateVersion, static_cast<int64_t>(fingerprint(*node_)),
                 static_cast<int64_t>(iteration_)};
  detail::StateWriter w(state.words);
  impl_->save(w);
  return state;
}

void Iterator::restore(const IteratorState& state) {
  STRATA_CHECK(node_ != nullptr, "Iterator::restore: use of a moved-from iterator");
  detail::StateReader r(state.words);
  STRATA_CHECK(!state.words.empty() && r.get("magic") == kStateMagic,
               "Iterator::restore: not a dataset iterator state");
  const int64_t version = r.get("version");
  STRATA_CHECK(version == kStateVersion, "Iterator::restore: state version ", version,
               " is not supported (expected ", kStateVersion, ")");
  const uint64_t fp = r.get_u64("fingerprint");
  STRATA_CHECK(fp == fingerprint(*node_), "Iterator::restore: state does not match this pipeline ",
               "(it was saved from a pipeline with different stages or arguments; this one is ",
               Dataset(node_).describe(), ")");
  const uint64_t iteration = r.get_u64("iteration");
  // Build and restore a fresh tree first: a failure leaves this iterator as it was.
  auto fresh = node_->make_iterator(iteration);
  fresh->restore(r);
  STRATA_CHECK(r.done(), "Iterator::restore: state has ", state.words.size() - r.position(),
               " unread words after the last stage");
  impl_ = std::move(fresh);
  iteration_ = iteration;
  error_ = nullptr;
  if (iterations_) {
    // The Dataset's next iteration is the one after the restored one (never back).
    uint64_t count = iterations_->load(std::memory_order_relaxed);
    while (count <= iteration && !iterations_->compare_exchange_weak(count, iteration + 1, std::memory_order_relaxed)) {
    }
  }
}

Iterator::RangeIterator Iterator::begin() { return RangeIterator(this, nullptr); }

Iterator::RangeIterator::RangeIterator(Iterator* it, std::shared_ptr<Iterator> owner)
    : owner_(std::move(owner)), it_(it) {
  current_ = it_->next();
}

Iterator::RangeIterator& Iterator::RangeIterator::operator++() {
  STRATA_CHECK(it_ != nullptr && current_.has_value(), "Dataset iterator: ++ past the end");
  current_ = it_->next();
  return *this;
}

// ---- Dataset ----

Dataset::Dataset(std::shared_ptr<const detail::DatasetNode> node)
    : node_(std::move(node)), iterations_(std::make_shared<std::atomic<uint64_t>>(0)) {
  STRATA_CHECK(node_ != nullptr, "Dataset: null stage");
}

Iterator Dataset::make_iterator() const {
  return Iterator(node_, iterations_->fetch_add(1, std::memory_order_relaxed), iterations_);
}

Iterator Dataset::make_iterator(uint64_t iteration) const { return Iterator(node_, iteration, iterations_); }

Iterator::RangeIterator Dataset::begin() const {
  auto it = std::make_shared<Iterator>(make_iterator());
  Iterator* raw = it.get();
  return Iterator::RangeIterator(raw, std::move(it));
}

int64_t Dataset::cardinality() const { return node_->cardinality(); }

std::string Dataset::describe() const {
  std::string out;
  std::function<void(const detail::DatasetNode&)> walk = [&](const detail::DatasetNode& n) {
    out += n.name();
    auto ins = n.inputs();
    if (ins.size() == 1) {
      out += " <- ";
      walk(*ins[0]);
    } else if (!ins.empty()) {
      out += " <- (";
      for (size_t i = 0; i < ins.size(); ++i) {
        if (i) out += ", ";
        walk(*ins[i]);
      }
      out += ")";
    }
  };
  walk(*node_);
  return out;
}

namespace {

using detail::NodePtr;

// Shards the files of every file-based source below `node`; counts the sources found.
NodePtr shard_files(const NodePtr& node, int64_t n, int64_t index, int* sources) {
  if (const auto* files = node->files()) {
    STRATA_CHECK(int64_t(files->size()) >= n, "Dataset::auto_shard: policy File needs at least ",
                 n, " files to give each of ", n, " workers one, but '", node->name(), "' reads ",
                 files->size());
    std::vector<std::string> mine;
    for (size_t i = size_t(index); i < files->size(); i += size_t(n)) mine.push_back((*files)[i]);
    ++*sources;
    return node->with_files(std::move(mine));
  }
  auto ins = node->inputs();
  if (ins.empty()) return node;
  for (auto& in : ins) in = shard_files(in, n, index, sources);
  return node->with_inputs(std::move(ins));
}

bool has_enough_files(const NodePtr& node, int64_t n) {
  if (const auto* files = node->files()) return int64_t(files->size()) >= n;
  for (const auto& in : node->inputs()) {
    if (has_enough_files(in, n)) return true;
  }
  return false;
}

// shard(n, i) placed below any trailing prefetch stages (TensorFlow's Data policy).
Dataset shard_data(const Dataset& ds, int64_t n, int64_t index) {
  const auto& node = ds.node();
  if (node->is_prefetch()) {
    auto inner = shard_data(Dataset(node->inputs().at(0)), n, index);
    return Dataset(node->with_inputs({inner.node()}));
  }
  return ds.shard(n, index);
}

}  // namespace

Dataset Dataset::auto_shard(int64_t num_shards, int64_t index, AutoShardPolicy policy) const {
  STRATA_CHECK(num_shards >= 1 && index >= 0 && index < num_shards, "Dataset::auto_shard: ",
               "index ", index, " outside [0, ", num_shards, ")");
  if (policy == AutoShardPolicy::Off || num_shards == 1) return *this;
  if (policy == AutoShardPolicy::Data) return shard_data(*this, num_shards, index);
  if (policy == AutoShardPolicy::Auto && !has_enough_files(node_, num_shards)) {
    return shard_data(*this, num_shards, index);
  }
  int sources = 0;
  auto sharded = shard_files(node_, num_shards, index, &sources);
  STRATA_CHECK(sources > 0, "Dataset::auto_shard: policy File but the pipeline reads no files (",
               describe(), "); use AutoShardPolicy::Data");
  return Dataset(sharded);
}

}  // namespace strata::data
