// cache: keeps the first complete pass over the input in memory; later iterations (of
// this dataset and its copies, from any thread) read the remembered elements. Element
// tensors are shared handles to the cached storage: consumers must not write into them.
//
// The input is always iterated with one fixed iteration key, so every pass that may fill
// the cache sees the same elements (a reshuffling shuffle below a cache is frozen, as in
// TensorFlow). That makes the content independent of which pass completes first, so a
// restored iterator — whose interrupted pass cannot fill the cache — and a fresh process
// rebuild exactly what the original run had cached.
#include <mutex>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>

namespace strata::data {

using detail::IteratorBase;
using detail::NodePtr;
using detail::StageTag;
using detail::StateReader;
using detail::StateWriter;
using detail::UnaryNode;

namespace {

using Elements = std::vector<Element>;

// Shared by the iterators of one cache node. Written once (the first complete pass),
// read-only afterwards.
class CacheStore {
 public:
  std::shared_ptr<const Elements> get() const {
    std::lock_guard lk(mu_);
    return data_;
  }
  void commit(std::shared_ptr<const Elements> data) {
    std::lock_guard lk(mu_);
    if (!data_) data_ = std::move(data);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Elements> data_;
};

// The iteration key every pass over a cache's input uses (see the file comment).
constexpr uint64_t kCacheInputKey = 0x4341434845ULL;  // "CACHE"

class CacheNode final : public UnaryNode {
 public:
  explicit CacheNode(NodePtr input) : UnaryNode(std::move(input)), store_(std::make_shared<CacheStore>()) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override { return "cache"; }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<CacheNode>(std::move(input));
  }

  std::shared_ptr<CacheStore> store_;
};

class CacheIterator final : public IteratorBase {
 public:
  explicit CacheIterator(const CacheNode& node) : node_(node) {
    data_ = node_.store_->get();
    if (!data_) start_filling();
  }

  std::optional<Element> next() override {
    if (data_) {
      if (pos_ >= int64_t(data_->size())) return std::nullopt;
      return (*data_)[size_t(pos_++)];
    }
    if (!input_) return std::nullopt;  // finished filling
    auto e = input_->next();
    if (e) {
      if (partial_) partial_->push_back(*e);
      return e;
    }
    if (partial_) node_.store_->commit(std::move(partial_));
    partial_.reset();
    input_.reset();
    return std::nullopt;
  }

  void save(StateWriter& w) const override {
    w.stage(StageTag::Cache);
    if (data_) {
      w.put(1);
      w.put(pos_);
    } else {
      w.put(0);
      w.put(input_ ? 1 : 0);
      if (input_) input_->save(w);
    }
  }

  void restore(StateReader& r) override {
    r.stage(StageTag::Cache);
    const bool reading = r.get_in("cache mode", 0, 1) == 1;
    if (reading) {
      const int64_t pos = r.get_in("cache position", 0, INT64_MAX);
      data_ = node_.store_->get();
      if (!data_) {
        // A fresh process: redo the pass that filled the cache.
        auto input = node_.input()->make_iterator(kCacheInputKey);
        auto all = std::make_shared<Elements>();
        while (auto e = input->next()) all->push_back(std::move(*e));
        node_.store_->commit(std::move(all));
        data_ = node_.store_->get();
      }
      STRATA_CHECK(pos <= int64_t(data_->size()), "Iterator::restore: cache: saved position ", pos,
                   " beyond the ", data_->size(), " cached elements");
      pos_ = pos;
      input_.reset();
      partial_.reset();
    } else {
      // Mid-way through a filling pass: continue it, but without the elements delivered
      // before the save this pass cannot fill the cache (a later complete pass will).
      data_.reset();
      const bool live = r.get_in("cache live flag", 0, 1) == 1;
      input_.reset();
      partial_.reset();
      if (live) {
        input_ = node_.input()->make_iterator(kCacheInputKey);
        input_->restore(r);
      }
    }
  }

 private:
  void start_filling() {
    input_ = node_.input()->make_iterator(kCacheInputKey);
    partial_ = std::make_shared<Elements>();
  }

  const CacheNode& node_;
  // Reading: the cached elements and the next index.
  std::shared_ptr<const Elements> data_;
  int64_t pos_ = 0;
  // Filling: the input and what this pass has seen (null when it cannot fill the cache).
  std::unique_ptr<IteratorBase> input_;
  std::shared_ptr<Elements> partial_;
};

std::unique_ptr<IteratorBase> CacheNode::make_iterator(uint64_t) const {
  return std::make_unique<CacheIterator>(*this);
}

}  // namespace

Dataset Dataset::cache() const {
  // It would hold every element of an endless first pass, growing until memory runs out.
  STRATA_CHECK(node_->cardinality() != kInfiniteCardinality, "Dataset::cache: the dataset is infinite (",
               describe(), "); cache before repeat(): ds.cache().repeat()");
  return Dataset(std::make_shared<CacheNode>(node_));
}

}  // namespace strata::data
