// Module: the base of every layer — named variables, named submodules, a training flag,
// and a structural object path for every variable (Keras's Layer / torch::nn::Module).
//
// Layers are used through cheap, copyable handles (AnyModule, ModuleHolder<Impl>) that
// share one Module, the way libtorch's ModuleHolder does, so that
//
//   nn::Sequential model;
//   model = nn::Sequential{nn::Dense(784, 256), nn::ReLU(), nn::Dense(256, 10)};
//   Tensor logits = model(x);
//
// works and copies of `model` alias the same variables.
//
// Object paths are structural: a variable's path is its owners' names from the root down,
// then its own name ("dense_1/kernel"; a checkpoint prefixes the tracked object's name:
// "model/dense_1/kernel"). They never depend on the order in which layers or variables
// were created, so a checkpoint restores into a model built in a different order.
//
// Variables are created with autograd::Variable(initial, options), i.e. through the
// current variable creator: inside a strategy's scope they become distributed variables.
//
// Mixed precision (train/policy.h): every module has a dtype policy, the global policy
// when it was constructed unless its options name one. Layers create their variables in
// the variable dtype and read them through read_variable(), which casts them to the
// compute dtype. Calling a module through a handle (AnyModule::operator()) casts floating
// inputs to the compute dtype first when the module owns floating variables or was given
// a policy explicitly (set_dtype_policy, a layer's `dtype` option). Parameter-free layers
// without an explicit policy (activations, pooling, Flatten, Dropout) keep their input's
// dtype — there is nothing to match, and under a mixed policy their input already comes
// in the compute dtype from the layer before — and containers such as Sequential leave
// casting to their layers.
//
// Training flag: module-wide (set_training) or per call, as Keras's `training=` argument:
// `model(x, {.training = false})` runs that call, and every layer it reaches, with the flag
// given, on the calling thread only — replica threads running the same model with different
// flags do not interfere. The per-call flag wins over set_training for the call's duration.
//
// Regularization losses (Keras's `layer.losses`): a layer given a regularizer (e.g.
// DenseOptions::kernel_regularizer) registers a loss; losses() recomputes every registered
// loss of the module and its submodules from the current weights.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/variable.h>
#include <strata/core/tensor.h>
#include <strata/train/nn/initializers.h>
#include <strata/train/policy.h>
#include <strata/train/regularizers.h>

namespace strata::nn {

// Per-call options of a module call (Keras's call arguments).
struct CallOptions {
  // Keras's `training`: unset uses the module's flag (set_training).
  std::optional<bool> training{};
};

struct NamedVariable {
  std::string path;  // structural object path, e.g. "dense_1/kernel"
  Variable variable;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  // `kind` is the snake_case layer kind ("dense", "conv2d", ...): the default name a
  // Sequential gives the module.
  explicit Module(std::string kind);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The layer's computation. The default throws: containers without a single-input
  // forward (user modules with several inputs) define their own call methods.
  virtual Tensor forward(const Tensor& x);
  // forward() on x, autocast to the compute dtype as described above (what calling a
  // handle runs).
  Tensor call(const Tensor& x);
  // call(x) with per-call options (the training flag for this call, on this thread).
  Tensor call(const Tensor& x, const CallOptions& options);

  // The dtype policy (Keras's layer.dtype_policy) and its two dtypes.
  const mixed_precision::Policy& dtype_policy() const { return policy_; }
  DType compute_dtype() const { return policy_.compute_dtype(); }
  DType variable_dtype() const { return policy_.variable_dtype(); }
  // Sets this module's policy explicitly (not its submodules': build layers under a
  // global policy or give each its `dtype` option). Variables already created keep their
  // dtype, so the new variable dtype must match theirs (in practice: switch between a
  // mixed policy and float32, or set the policy of a layer without variables); otherwise
  // this throws.
  void set_dtype_policy(const mixed_precision::Policy& policy);

  const std::string& kind() const { return kind_; }

  // Every variable reachable from this module, each once (a variable or module shared by
  // two owners is listed under the first path found), in registration order: this
  // module's own variables first, then each submodule's. Paths are "prefix/child/name"
  // (no leading '/' when prefix is empty).
  std::vector<NamedVariable> named_variables(const std::string& prefix = "") const;
  std::vector<Variable> variables() const;
  std::vector<Variable> trainable_variables() const;
  std::vector<Variable> non_trainable_variables() const;

  // This module's own variables and direct submodules, in registration order.
  const std::vector<std::pair<std::string, Variable>>& own_variables() const { return variables_; }
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }

  // The training flag (true by default, as in PyTorch): Dropout drops and
  // BatchNormalization uses batch statistics only while it is set. Inside a call with
  // CallOptions::training on this thread, that value; else the module's own flag.
  bool training() const;
  // Sets the module's own flag, for it and every submodule. It is shared by every thread:
  // replicas inside Strategy::run should pass the flag per call instead
  // (`model(x, {.training = false})`).
  void set_training(bool training);

  // Keras's layer.trainable (true by default). set_trainable(false) freezes the module
  // and every submodule: their variables leave trainable_variables() (so fit and the
  // optimizer leave them alone) and join non_trainable_variables(), and a frozen
  // BatchNormalization runs in inference mode (Keras 2's rule for fine-tuning). A module
  // under a frozen one stays frozen even if set trainable itself, as in Keras. The
  // variables' own trainable flags do not change.
  bool trainable() const { return trainable_.load(std::memory_order_relaxed); }
  void set_trainable(bool trainable);

  // The regularization losses of this module and its submodules (each module once), as
  // scalars computed from the weights' current values (Keras's `losses`).
  std::vector<Tensor> losses() const;
  // Registers a loss that losses() recomputes on each call (Keras's add_loss of a
  // callable, e.g. a regularizer applied to a weight).
  void add_loss(std::function<Tensor()> loss);

 protected:
  // Registers a variable under `name` (unique within this module, no '/').
  Variable register_variable(const std::string& name, Variable variable);
  // Creates a variable of `shape` and `dtype` initialised by `init` and registers it.
  // options.name defaults to "<kind>/<name>".
  // With a regularizer, its penalty on the weight is one of losses().
  Variable add_weight(const std::string& name, const Shape& shape, DType dtype,
                      const Initializer& init, autograd::VariableOptions options = {},
                      regularizers::Regularizer regularizer = {});
  // Registers a submodule under `name` (unique within this module, no '/').
  void register_module(const std::string& name, std::shared_ptr<Module> module);
  // Removes every registered submodule (Sequential rebuilding its list).
  void clear_modules() { children_.clear(); }

  // x cast to the compute dtype when floating (layers call it on their input too, so
  // that calling forward() directly behaves like calling the handle).
  Tensor autocast(const Tensor& x) const { return mixed_precision::autocast(x, compute_dtype()); }
  // v.read() (watched by tapes) cast to the compute dtype when floating.
  Tensor read_variable(const Variable& v) const { return autocast(v.read()); }
  // Whether call() casts inputs; containers switch it off (their layers cast).
  void set_autocast(bool autocast) { autocast_ = autocast; }

 private:
  void check_new_name(const std::string& name, const char* what) const;

  std::string kind_;
  std::atomic<bool> training_{true};  // atomic: set_training may race with replicas reading it
  std::atomic<bool> trainable_{true};
  bool autocast_ = true;
  bool explicit_policy_ = false;  // set_dtype_policy was called
  mixed_precision::Policy policy_;
  std::vector<std::pair<std::string, Variable>> variables_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::function<Tensor()>> losses_;
};

// A type-erased handle on any module (what Sequential holds).
class AnyModule {
 public:
  AnyModule() = default;
  AnyModule(std::shared_ptr<Module> module) : module_(std::move(module)) {}  // NOLINT

  // Runs the module's forward on x autocast to its compute dtype.
  Tensor operator()(const Tensor& x) const { return module().call(x); }
  // Per-call options: model(x, {.training = false}) (Keras's model(x, training=False)).
  Tensor operator()(const Tensor& x, const CallOptions& options) const {
    return module().call(x, options);
  }

  std::vector<NamedVariable> named_variables(const std::string& prefix = "") const {
    return module().named_variables(prefix);
  }
  std::vector<Variable> variables() const { return module().variables(); }
  std::vector<Variable> trainable_variables() const { return module().trainable_variables(); }
  std::vector<Variable> non_trainable_variables() const {
    return module().non_trainable_variables();
  }
  bool training() const { return module().training(); }
  void set_training(bool training) const { module().set_training(training); }
  bool trainable() const { return module().trainable(); }
  void set_trainable(bool trainable) const { module().set_trainable(trainable); }
  std::vector<Tensor> losses() const { return module().losses(); }
  const mixed_precision::Policy& dtype_policy() const { return module().dtype_policy(); }
  void set_dtype_policy(const mixed_precision::Policy& policy) const {
    module().set_dtype_policy(policy);
  }

  bool defined() const { return module_ != nullptr; }
  Module& module() const;
  const std::shared_ptr<Module>& ptr() const { return module_; }

 private:
  std::shared_ptr<Module> module_;
};

// A typed handle on a module of type Impl: impl() / operator-> reach layer-specific state.
template <typename Impl>
class ModuleHolder : public AnyModule {
 public:
  ModuleHolder() = default;  // empty: calling it throws
  explicit ModuleHolder(std::shared_ptr<Impl> impl) : AnyModule(std::move(impl)) {}

  Impl& impl() const { return static_cast<Impl&>(module()); }
  Impl* operator->() const { return &impl(); }
  std::shared_ptr<Impl> impl_ptr() const { return std::static_pointer_cast<Impl>(ptr()); }
};

}  // namespace strata::nn
