// Variables of ParameterServerStrategy and the step scope that reads and updates them.
//
// A PsVariableImpl is a handle on a variable stored on the parameter servers: whole on one
// server, or sharded along axis 0 over several (TensorFlow's ShardedVariable; the handle
// then reads and writes the whole tensor and splits or concatenates the shards itself).
//
// Reads and writes depend on where they happen:
//
//  - Inside a StepScope (every closure the coordinator runs on a worker is one): the
//    first read of a variable in the step fetches it (with every other variable of the
//    strategy, one request per server) into the step's cache; later reads return the same
//    tensor, so a GradientTape that watched it finds it again. Updates change the cached
//    tensor — in place, including an optimizer's `var.value().copy_(...)` and its slot
//    updates — and StepScope::commit() sends the changes: what was assigned as an assign,
//    everything else as the difference from the fetched value, which the server adds
//    atomically. Two workers that update the same variable from the same starting value
//    therefore both count: no update is lost (asynchronous training, as with TensorFlow's
//    parameter servers, where reads may be stale but updates are applied one by one).
//  - Outside a StepScope (the chief, between steps): value() fetches a fresh copy on every
//    call (an in-place change to it goes nowhere), and assign / assign_add / assign_sub
//    are sent at once, atomically. Reading a variable inside Strategy::run of its
//    strategy without a StepScope throws: the step's in-place updates would be lost.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/autograd/variable.h>

namespace strata::distribute {

class ParameterServerStrategy;

struct VariableShard {
  int ps = 0;              // the parameter-server task holding it
  std::string key;         // its key on that server
  int64_t row_offset = 0;  // its first row along axis 0 (0 when not sharded)
  int64_t rows = 0;        // its rows along axis 0 (0 for a scalar)
};

struct VariablePlacement {
  std::string key;  // the variable's key in the job: "<name>#<n-th variable of that name>"
  DType dtype = kFloat32;
  Shape shape;
  std::vector<VariableShard> shards;  // one unless partitioned

  bool sharded() const { return shards.size() > 1; }
  nlohmann::json to_json() const;
  static VariablePlacement from_json(const nlohmann::json& j);
};

class PsVariableImpl final : public autograd::VariableImpl {
 public:
  PsVariableImpl(ParameterServerStrategy& strategy, std::shared_ptr<const VariablePlacement> placement,
                 autograd::VariableOptions options);

  Tensor value() const override;
  void assign(const Tensor& v) override;
  void assign_add(const Tensor& delta) override;
  void assign_sub(const Tensor& delta) override;
  // Optimizer slots: placed like this variable (the same servers and shard rows when the
  // shape matches), created on the servers if absent.
  std::shared_ptr<autograd::VariableImpl> make_like(const Tensor& initial,
                                                    autograd::VariableOptions options) const override;
  std::string kind() const override { return placement_->sharded() ? "ShardedVariable" : "ParameterServerVariable"; }
  // From the placement: no fetch from the servers (value() is a round trip).
  Shape shape() const override { return placement_->shape; }
  DType dtype() const override { return placement_->dtype; }

  const VariablePlacement& placement() const { return *placement_; }
  const std::shared_ptr<const VariablePlacement>& placement_ptr() const { return placement_; }
  ParameterServerStrategy& strategy() const { return strategy_; }

 private:
  // Checks a value for assign (shape equal) / assign_add (broadcastable), cast to dtype.
  Tensor prepare(const Tensor& v, const char* method, bool broadcast) const;

  ParameterServerStrategy& strategy_;
  std::shared_ptr<const VariablePlacement> placement_;
};

// One step's view of a strategy's variables (see above). Not nestable; one thread.
class StepScope {
 public:
  explicit StepScope(ParameterServerStrategy& strategy);
  // Discards changes that were not committed (the step failed).
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

  // Sends every change made since the scope began (or the last commit) to the parameter
  // servers: one atomic update request per server. Throws ParameterServerUnavailable.
  void commit();

  ParameterServerStrategy& strategy() const { return strategy_; }
  // The calling thread's active scope, or nullptr.
  static StepScope* current();

 private:
  friend class PsVariableImpl;
  struct Entry {
    std::shared_ptr<const VariablePlacement> placement;
    Tensor value;  // what the step reads and updates in place
    Tensor base;   // the value fetched (or last committed)
    bool assigned = false;
  };
  Entry& entry(const PsVariableImpl& var);

  ParameterServerStrategy& strategy_;
  std::unordered_map<uint64_t, Entry> entries_;  // by VariableImpl::unique_id
  bool prefetched_ = false;
};

}  // namespace strata::distribute
