// Variable: a named, mutable tensor that training updates in place — TensorFlow's
// tf.Variable. A Variable is a cheap shared handle to a VariableImpl; distribute/ supplies
// impls with one component per replica (mirrored, sync-on-read) through the creator hook.
//
// Reading a trainable variable while a GradientTape is active watches it automatically.
#pragma once

#include <functional>
#include <optional>
#include <memory>
#include <mutex>
#include <string>

#include <strata/core/tensor.h>

namespace strata::autograd {

// As tf.VariableSynchronization / tf.VariableAggregation.
enum class VariableSynchronization { Auto, None, OnWrite, OnRead };
enum class VariableAggregation { None, Sum, Mean, OnlyFirstReplica };
const char* synchronization_name(VariableSynchronization s);
const char* aggregation_name(VariableAggregation a);

struct VariableOptions {
  std::string name = "Variable";
  bool trainable = true;
  VariableSynchronization synchronization = VariableSynchronization::Auto;
  VariableAggregation aggregation = VariableAggregation::None;
  // Place on this device instead of the current default (cpu:0 unless a strategy decides).
  std::optional<Device> device = std::nullopt;
};

class Variable;

// The behaviour behind a Variable handle. The default impl holds one tensor; distributed
// impls hold one per replica and resolve the current one from the replica context.
class VariableImpl {
 public:
  explicit VariableImpl(VariableOptions options) : options_(std::move(options)) {}
  virtual ~VariableImpl() = default;

  // The tensor that ops in the current context read (stable id: updates are in place).
  virtual Tensor value() const = 0;
  virtual void assign(const Tensor& v) = 0;
  virtual void assign_add(const Tensor& delta);
  virtual void assign_sub(const Tensor& delta);
  // A new variable placed and synchronised like this one (optimizer slots).
  virtual std::shared_ptr<VariableImpl> make_like(const Tensor& initial, VariableOptions options) const;
  // The value to checkpoint (the aggregate for sync-on-read) and how to restore it.
  virtual Tensor checkpoint_value() const { return value(); }
  virtual void restore_checkpoint_value(const Tensor& v) { assign(v); }
  // True when every replica holds its own component (mirrored, sync-on-read): replicas
  // may then update their components concurrently. A variable shared by all replicas
  // (local, or central storage) must be updated once per step instead.
  virtual bool is_replicated() const { return false; }
  // Short kind for messages: "Variable", "MirroredVariable", ...
  virtual std::string kind() const { return "Variable"; }
  // The value's metadata. Overridden where value() is costly: a sync-on-read variable's
  // value in cross-replica context is an aggregate (a collective across workers), but its
  // shape and dtype are those of any component — TensorFlow answers from the primary.
  virtual Shape shape() const { return value().shape(); }
  virtual DType dtype() const { return value().dtype(); }
  virtual Device device() const { return value().device(); }

  const VariableOptions& options() const { return options_; }
  uint64_t unique_id() const { return unique_id_; }

 protected:
  VariableOptions options_;
  uint64_t unique_id_ = next_tensor_id();
};

// A variable with one tensor.
class LocalVariableImpl : public VariableImpl {
 public:
  LocalVariableImpl(const Tensor& initial, VariableOptions options);
  Tensor value() const override { return value_; }
  // Updates are atomic per variable (a mutex each): replica threads may update one local
  // variable concurrently without losing updates.
  void assign(const Tensor& v) override;
  void assign_add(const Tensor& delta) override;
  void assign_sub(const Tensor& delta) override;

 private:
  void assign_locked(const Tensor& v);

  Tensor value_;
  std::mutex mutex_;
};

class Variable {
 public:
  Variable() = default;
  // Creates a variable through the current creator (a strategy's scope, else local).
  Variable(const Tensor& initial, VariableOptions options = {});
  explicit Variable(std::shared_ptr<VariableImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  // Reads the value; watched by active tapes when trainable.
  Tensor read() const;
  // Reads without notifying tapes (for optimizers, checkpoints, printing).
  Tensor value() const { return impl().value(); }
  void assign(const Tensor& v) const;
  void assign_add(const Tensor& delta) const;
  void assign_sub(const Tensor& delta) const;

  const std::string& name() const { return impl().options().name; }
  bool trainable() const { return impl().options().trainable; }
  VariableSynchronization synchronization() const { return impl().options().synchronization; }
  VariableAggregation aggregation() const { return impl().options().aggregation; }
  // No collective: these never read a distributed variable's aggregate.
  Shape shape() const { return impl().shape(); }
  DType dtype() const { return impl().dtype(); }
  Device device() const { return impl().device(); }
  uint64_t unique_id() const { return impl().unique_id(); }

  VariableImpl& impl() const {
    STRATA_CHECK(impl_ != nullptr, "Variable: use of an undefined variable");
    return *impl_;
  }
  const std::shared_ptr<VariableImpl>& impl_ptr() const { return impl_; }
  friend bool operator==(const Variable& a, const Variable& b) { return a.impl_ == b.impl_; }

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// Variable creators (tf.variable_creator_scope): the innermost active creator on this
// thread builds every new Variable. Strategies install one inside scope().
using VariableCreator =
    std::function<std::shared_ptr<VariableImpl>(const Tensor& initial, const VariableOptions&)>;

class VariableCreatorScope {
 public:
  explicit VariableCreatorScope(VariableCreator creator);
  ~VariableCreatorScope();
  VariableCreatorScope(const VariableCreatorScope&) = delete;
  VariableCreatorScope& operator=(const VariableCreatorScope&) = delete;
};

// Runs the innermost creator (or makes a LocalVariableImpl).
std::shared_ptr<VariableImpl> create_variable_impl(const Tensor& initial, const VariableOptions& options);

}  // namespace strata::autograd

namespace strata {
using autograd::Variable;
}
