// Distributed variables: MirroredVariable (one component per replica, kept equal by
// identical updates) and SyncOnReadVariable (per-replica components aggregated on read),
// with TensorFlow's assign semantics in replica and cross-replica context.
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace strata::distribute {

class Strategy;

class DistributedVariableImpl : public autograd::VariableImpl {
 public:
  DistributedVariableImpl(Strategy& strategy, const Tensor& initial, autograd::VariableOptions options);
  bool is_replicated() const override { return true; }
  const std::vector<Tensor>& components() const { return components_; }
  Strategy& strategy() const { return strategy_; }
  std::shared_ptr<autograd::VariableImpl> make_like(const Tensor& initial,
                                                    autograd::VariableOptions options) const override;

 protected:
  // The replica index of the calling thread for this strategy, or -1 in cross-replica context.
  int current_replica() const;
  Strategy& strategy_;
  std::vector<Tensor> components_;
};

class MirroredVariableImpl final : public DistributedVariableImpl {
 public:
  using DistributedVariableImpl::DistributedVariableImpl;
  Tensor value() const override;
  void assign(const Tensor& v) override;
  void assign_add(const Tensor& delta) override;
  void assign_sub(const Tensor& delta) override;
  std::string kind() const override { return "MirroredVariable"; }

 private:
  enum class Update { Assign, Add, Sub };
  void update(const Tensor& v, Update kind);
};

class SyncOnReadVariableImpl final : public DistributedVariableImpl {
 public:
  using DistributedVariableImpl::DistributedVariableImpl;
  Tensor value() const override;
  void assign(const Tensor& v) override;
  void assign_add(const Tensor& delta) override;
  void assign_sub(const Tensor& delta) override;
  Tensor checkpoint_value() const override { return aggregate(); }
  void restore_checkpoint_value(const Tensor& v) override;
  std::string kind() const override { return "SyncOnReadVariable"; }
  // The aggregate over replicas (Sum, Mean or the first replica's value).
  Tensor aggregate() const;
};

// Creates the right distributed variable for options under strategy (Mirrored for
// OnWrite/Auto, SyncOnRead for OnRead).
std::shared_ptr<autograd::VariableImpl> make_distributed_variable(Strategy& strategy, const Tensor& initial,
                                                                  const autograd::VariableOptions& options);

}  // namespace strata::distribute
