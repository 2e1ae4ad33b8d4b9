// Source stages: from_tensor_slices, range, from_generator, zip.
#include <algorithm>
#include <limits>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>

namespace strata::data {

using detail::IteratorBase;
using detail::NodePtr;
using detail::StageTag;
using detail::StateReader;
using detail::StateWriter;

namespace {

// ---- from_tensor_slices ----

class TensorSlicesNode final : public detail::DatasetNode,
                               public std::enable_shared_from_this<TensorSlicesNode> {
 public:
  explicit TensorSlicesNode(std::vector<Tensor> components) : components_(std::move(components)) {}

  int64_t size() const { return components_[0].dim(0); }

  const std::vector<Tensor>& components() const { return components_; }

  std::unique_ptr<IteratorBase> make_iterator(uint64_t) const override;
  int64_t cardinality() const override { return size(); }
  std::string name() const override {
    std::string s = "from_tensor_slices(";
    for (size_t i = 0; i < components_.size(); ++i) {
      if (i) s += ", ";
      s += shape_str(components_[i].shape());
      s += dtype_name(components_[i].dtype());
    }
    return s + ")";
  }

 private:
  std::vector<Tensor> components_;
};

class TensorSlicesIterator final : public IteratorBase {
 public:
  explicit TensorSlicesIterator(std::shared_ptr<const TensorSlicesNode> node)
      : node_(std::move(node)) {}
  // Element i: a view of row i of every component (no copy).
  std::optional<Element> next() override {
    if (index_ >= node_->size()) return std::nullopt;
    return detail::row_element(node_->components(), index_++);
  }
  const std::vector<Tensor>* rows() const override { return &node_->components(); }
  int64_t next_row() override { return index_ < node_->size() ? index_++ : detail::kNoRow; }
  void save(StateWriter& w) const override {
    w.stage(StageTag::TensorSlices);
    w.put(index_);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::TensorSlices);
    index_ = r.get_in("from_tensor_slices position", 0, node_->size());
  }

 private:
  std::shared_ptr<const TensorSlicesNode> node_;
  int64_t index_ = 0;
};

std::unique_ptr<IteratorBase> TensorSlicesNode::make_iterator(uint64_t) const {
  return std::make_unique<TensorSlicesIterator>(shared_from_this());
}

// ---- range ----

class RangeNode final : public detail::DatasetNode {
 public:
  RangeNode(int64_t start, int64_t stop, int64_t step) : start_(start), stop_(stop), step_(step) {}

  int64_t cardinality() const override {
    if (step_ > 0) return stop_ > start_ ? (stop_ - start_ + step_ - 1) / step_ : 0;
    return start_ > stop_ ? (start_ - stop_ + (-step_) - 1) / (-step_) : 0;
  }
  std::unique_ptr<IteratorBase> make_iterator(uint64_t) const override;
  std::string name() const override {
    return detail::str_of("range(", start_, ", ", stop_, ", ", step_, ")");
  }

  int64_t start_, stop_, step_;
};

class RangeIterator final : public IteratorBase {
 public:
  explicit RangeIterator(const RangeNode& node)
      : start_(node.start_), step_(node.step_), count_(node.cardinality()) {}
  std::optional<Element> next() override {
    if (index_ >= count_) return std::nullopt;
    const int64_t v = start_ + index_++ * step_;
    return Element{Tensor::from_vector(std::vector<int64_t>{v}, Shape{})};
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Range);
    w.put(index_);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Range);
    index_ = r.get_in("range position", 0, count_);
  }

 private:
  int64_t start_, step_, count_;
  int64_t index_ = 0;
};

std::unique_ptr<IteratorBase> RangeNode::make_iterator(uint64_t) const {
  return std::make_unique<RangeIterator>(*this);
}

// ---- from_generator ----

class GeneratorNode final : public detail::DatasetNode {
 public:
  explicit GeneratorNode(GeneratorFactory factory) : factory_(std::move(factory)) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t) const override;
  int64_t cardinality() const override { return kUnknownCardinality; }
  std::string name() const override { return "from_generator"; }

  GeneratorFactory factory_;
};

class GeneratorIterator final : public IteratorBase {
 public:
  explicit GeneratorIterator(const GeneratorNode& node) : factory_(node.factory_) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    if (!gen_) {
      gen_ = factory_();
      STRATA_CHECK(static_cast<bool>(gen_), "from_generator: the factory returned an empty generator");
    }
    auto e = gen_();
    if (!e) {
      done_ = true;
      return std::nullopt;
    }
    ++count_;
    return e;
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Generator);
    w.put(count_);
    w.put(done_ ? 1 : 0);
  }
  // A generator cannot be rewound: start a fresh one and skip what was delivered.
  void restore(StateReader& r) override {
    r.stage(StageTag::Generator);
    const int64_t count = r.get_in("from_generator position", 0, std::numeric_limits<int64_t>::max());
    const bool done = r.get_in("from_generator end flag", 0, 1) == 1;
    detail::skip_elements(*this, count, "from_generator");
    done_ = done;
  }

 private:
  GeneratorFactory factory_;
  Generator gen_;
  int64_t count_ = 0;
  bool done_ = false;
};

std::unique_ptr<IteratorBase> GeneratorNode::make_iterator(uint64_t) const {
  return std::make_unique<GeneratorIterator>(*this);
}

// ---- zip ----

class ZipNode final : public detail::DatasetNode,
                      public std::enable_shared_from_this<ZipNode> {
 public:
  explicit ZipNode(std::vector<NodePtr> inputs) : inputs_(std::move(inputs)) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    int64_t best = kInfiniteCardinality;
    for (const auto& in : inputs_) {
      const int64_t c = in->cardinality();
      if (c == kUnknownCardinality) return kUnknownCardinality;
      if (c >= 0) best = best < 0 ? c : std::min(best, c);
    }
    return best;
  }
  std::string name() const override { return "zip"; }
  std::vector<NodePtr> inputs() const override { return inputs_; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override {
    return std::make_shared<ZipNode>(std::move(inputs));
  }

  std::vector<NodePtr> inputs_;
};

class ZipIterator final : public IteratorBase {
 public:
  ZipIterator(const ZipNode& node, uint64_t key) {
    for (size_t i = 0; i < node.inputs_.size(); ++i) {
      children_.push_back(node.inputs_[i]->make_iterator(detail::mix_keys(key, i)));
    }
  }
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    Element out;
    for (auto& child : children_) {
      auto e = child->next();
      if (!e) {
        done_ = true;
        return std::nullopt;
      }
      out.insert(out.end(), std::make_move_iterator(e->begin()), std::make_move_iterator(e->end()));
    }
    return out;
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Zip);
    w.put(int64_t(children_.size()));
    w.put(done_ ? 1 : 0);
    for (const auto& c : children_) c->save(w);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Zip);
    const int64_t n = r.get("zip input count");
    STRATA_CHECK(n == int64_t(children_.size()), "Iterator::restore: zip: state has ", n,
                 " inputs, this pipeline zips ", children_.size());
    done_ = r.get_in("zip end flag", 0, 1) == 1;
    for (auto& c : children_) c->restore(r);
  }

 private:
  std::vector<std::unique_ptr<IteratorBase>> children_;
  bool done_ = false;
};

std::unique_ptr<IteratorBase> ZipNode::make_iterator(uint64_t key) const {
  return std::make_unique<ZipIterator>(*this, key);
}

}  // namespace

Dataset Dataset::from_tensor_slices(std::vector<Tensor> components) {
  STRATA_CHECK(!components.empty(), "from_tensor_slices: no components given");
  for (size_t i = 0; i < components.size(); ++i) {
    auto& c = components[i];
    STRATA_CHECK(c.defined(), "from_tensor_slices: component ", i, " is an undefined tensor");
    STRATA_CHECK(c.ndim() >= 1, "from_tensor_slices: component ", i,
                 " is a scalar; slicing needs rank >= 1");
    STRATA_CHECK(c.dim(0) == components[0].dim(0), "from_tensor_slices: component ", i,
                 " has leading extent ", c.dim(0), " (shape ", shape_str(c.shape()),
                 ") but component 0 has ", components[0].dim(0), " (shape ",
                 shape_str(components[0].shape()), ")");
    // Elements are host tensors: bring device tensors over once, here.
    if (!c.device().is_cpu()) c = c.to(Device());
  }
  return Dataset(std::make_shared<TensorSlicesNode>(std::move(components)));
}

Dataset Dataset::from_tensor_slices(const Tensor& tensor) {
  return from_tensor_slices(std::vector<Tensor>{tensor});
}

Dataset Dataset::range(int64_t stop) { return range(0, stop, 1); }

Dataset Dataset::range(int64_t start, int64_t stop, int64_t step) {
  STRATA_CHECK(step != 0, "Dataset::range: step must not be 0");
  return Dataset(std::make_shared<RangeNode>(start, stop, step));
}

Dataset Dataset::from_generator(GeneratorFactory factory) {
  STRATA_CHECK(static_cast<bool>(factory), "Dataset::from_generator: empty factory");
  return Dataset(std::make_shared<GeneratorNode>(std::move(factory)));
}

Dataset Dataset::zip(const std::vector<Dataset>& datasets) {
  STRATA_CHECK(!datasets.empty(), "Dataset::zip: no datasets given");
  std::vector<NodePtr> inputs;
  for (const auto& d : datasets) inputs.push_back(d.node());
  return Dataset(std::make_shared<ZipNode>(std::move(inputs)));
}

}  // namespace strata::data
