#include <strata/distribute/replica_pipelines_stage.h>

#include <algorithm>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>
#include <strata/distribute/device_fetch.h>
#include <strata/distribute/empty_batch.h>

namespace strata::distribute {

namespace {

using data::Element;
using data::detail::IteratorBase;
using data::detail::NodePtr;
using data::detail::StageTag;
using data::detail::StateReader;
using data::detail::StateWriter;

class ReplicaPipelinesNode final : public data::detail::DatasetNode {
 public:
  ReplicaPipelinesNode(std::vector<NodePtr> inputs, std::vector<Device> devices, bool fetch)
      : inputs_(std::move(inputs)), devices_(std::move(devices)), fetch_(fetch) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  // The longest input's: the stage ends when every input has ended.
  int64_t cardinality() const override {
    int64_t longest = 0;
    bool unknown = false;
    for (const auto& in : inputs_) {
      const int64_t c = in->cardinality();
      if (c == data::kInfiniteCardinality) return c;
      unknown |= c == data::kUnknownCardinality;
      longest = std::max(longest, c);
    }
    return unknown ? data::kUnknownCardinality : longest;
  }
  std::string name() const override {
    return data::detail::str_of("replica_pipelines(replicas=", inputs_.size(), fetch_ ? ", fetch" : "", ")");
  }
  // Where the parts are placed does not change the positions.
  std::string signature() const override { return "replica_pipelines"; }
  std::vector<NodePtr> inputs() const override { return inputs_; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override {
    return std::make_shared<ReplicaPipelinesNode>(std::move(inputs), devices_, fetch_);
  }

  std::vector<NodePtr> inputs_;
  std::vector<Device> devices_;
  bool fetch_;
};

class ReplicaPipelinesIterator final : public IteratorBase {
 public:
  ReplicaPipelinesIterator(const ReplicaPipelinesNode& node, uint64_t key)
      : node_(node), ended_(node.inputs_.size(), false) {
    // Each replica's pipeline gets an iteration key of its own, as zip's inputs do, so
    // pipelines that reshuffle each epoch do not all draw the same order.
    for (size_t r = 0; r < node.inputs_.size(); ++r) {
      inputs_.push_back(node.inputs_[r]->make_iterator(data::detail::mix_keys(key, r)));
    }
  }

  std::optional<Element> next() override {
    const size_t n = inputs_.size();
    std::vector<std::optional<Element>> parts(n);
    std::optional<size_t> first_live;
    for (size_t r = 0; r < n; ++r) {
      if (ended_[r]) continue;
      parts[r] = inputs_[r]->next();
      if (!parts[r]) {
        ended_[r] = true;
        continue;
      }
      if (!first_live) {
        first_live = r;
      } else {
        STRATA_CHECK(parts[r]->size() == parts[*first_live]->size(), "distribute_datasets_from_function "
                     "(InputReplicationMode::PerReplica): replica ", r, "'s pipeline yielded an element of ",
                     parts[r]->size(), " components but replica ", *first_live, "'s has ",
                     parts[*first_live]->size(), " (every replica's elements need the same components)");
      }
    }
    if (!first_live) return std::nullopt;
    const Element& model = *parts[*first_live];
    Element out;
    out.reserve(model.size() * n);
    for (size_t r = 0; r < n; ++r) {
      if (parts[r]) {
        for (const Tensor& t : *parts[r]) out.push_back(place_on(t, node_.devices_[r], node_.fetch_));
        continue;
      }
      // This replica's pipeline has ended while another's goes on: an empty batch.
      const std::string whose = data::detail::str_of("distribute_datasets_from_function (InputReplicationMode::"
                                                     "PerReplica): replica ", r, "'s pipeline has ended and replica ",
                                                     *first_live);
      for (Tensor& t : empty_batch(spec_of(model), node_.fetch_ ? node_.devices_[r] : Device(), whose)) {
        out.push_back(std::move(t));
      }
    }
    return out;
  }

  // Record: the number of replicas, each one's end flag, then each input's state.
  void save(StateWriter& w) const override {
    w.stage(StageTag::ReplicaPipelines);
    w.put(int64_t(inputs_.size()));
    for (bool ended : ended_) w.put(ended ? 1 : 0);
    for (const auto& in : inputs_) in->save(w);
  }

  void restore(StateReader& r) override {
    r.stage(StageTag::ReplicaPipelines);
    const int64_t n = r.get("replica_pipelines replica count");
    STRATA_CHECK(n == int64_t(inputs_.size()), "Iterator::restore: distribute_datasets_from_function "
                 "(InputReplicationMode::PerReplica): the state holds the positions of ", n, " replicas' "
                 "pipelines but this input has ", inputs_.size(), " (each replica's position is its own: resume "
                 "with the same number of replicas)");
    std::vector<bool> ended(inputs_.size());
    for (size_t k = 0; k < inputs_.size(); ++k) ended[k] = r.get_in("replica_pipelines end flag", 0, 1) == 1;
    for (auto& in : inputs_) in->restore(r);
    ended_ = std::move(ended);
  }

 private:
  const ReplicaPipelinesNode& node_;
  std::vector<std::unique_ptr<IteratorBase>> inputs_;
  std::vector<bool> ended_;
};

std::unique_ptr<IteratorBase> ReplicaPipelinesNode::make_iterator(uint64_t key) const {
  return std::make_unique<ReplicaPipelinesIterator>(*this, key);
}

}  // namespace

data::Dataset combine_replica_pipelines(const std::vector<data::Dataset>& inputs, std::vector<Device> devices,
                                        bool fetch) {
  STRATA_CHECK(!inputs.empty(), "combine_replica_pipelines: no replica pipelines");
  STRATA_CHECK(devices.size() == inputs.size(), "combine_replica_pipelines: ", devices.size(), " devices for ",
               inputs.size(), " replica pipelines");
  std::vector<NodePtr> nodes;
  nodes.reserve(inputs.size());
  for (const data::Dataset& d : inputs) nodes.push_back(d.node());
  return data::Dataset(std::make_shared<ReplicaPipelinesNode>(std::move(nodes), std::move(devices), fetch));
}

}  // namespace strata::distribute
