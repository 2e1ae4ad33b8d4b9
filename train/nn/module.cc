#include <strata/train/nn/module.h>

#include <unordered_set>

#include <strata/core/error.h>

namespace strata::nn {

namespace {
// The per-call training flag of the innermost call(x, options) on this thread that set
// one: thread-local, so replica threads calling one model with different flags never
// see each other's.
thread_local std::optional<bool> t_call_training;

class CallTrainingScope {
 public:
  explicit CallTrainingScope(std::optional<bool> training) : saved_(t_call_training) {
    if (training) t_call_training = training;
  }
  ~CallTrainingScope() { t_call_training = saved_; }
  CallTrainingScope(const CallTrainingScope&) = delete;
  CallTrainingScope& operator=(const CallTrainingScope&) = delete;

 private:
  std::optional<bool> saved_;
};
}  // namespace

Module::Module(std::string kind) : kind_(std::move(kind)), policy_(mixed_precision::global_policy()) {}

Tensor Module::forward(const Tensor&) {
  fail("nn::Module '", kind_, "': this module has no single-input forward()");
}

Tensor Module::call(const Tensor& x) {
  bool cast = autocast_ && explicit_policy_;
  for (size_t i = 0; autocast_ && !cast && i < variables_.size(); ++i)
    cast = is_floating(variables_[i].second.dtype());
  return forward(cast ? autocast(x) : x);
}

Tensor Module::call(const Tensor& x, const CallOptions& options) {
  CallTrainingScope scope(options.training);
  return call(x);
}

bool Module::training() const {
  return t_call_training ? *t_call_training : training_.load(std::memory_order_relaxed);
}

void Module::add_loss(std::function<Tensor()> loss) {
  STRATA_CHECK(bool(loss), "nn::", kind_, ".add_loss: empty loss function");
  losses_.push_back(std::move(loss));
}

std::vector<Tensor> Module::losses() const {
  std::unordered_set<const Module*> seen;
  std::vector<const Module*> order;
  // Depth-first in registration order, each module once (a shared layer's losses count once).
  std::vector<const Module*> stack{this};
  while (!stack.empty()) {
    const Module* m = stack.back();
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    order.push_back(m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it) stack.push_back(it->second.get());
  }
  std::vector<Tensor> out;
  for (const Module* m : order)
    for (const auto& loss : m->losses_) {
      Tensor l = loss();
      STRATA_CHECK(l.defined() && l.ndim() == 0, "nn::", m->kind_,
                   ": a registered loss (regularizer) must return a scalar, got ",
                   l.defined() ? shape_str(l.shape()) : std::string("undefined"));
      out.push_back(l);
    }
  return out;
}

void Module::set_dtype_policy(const mixed_precision::Policy& policy) {
  for (const auto& [name, v] : variables_)
    STRATA_CHECK(!is_floating(v.dtype()) || v.dtype() == policy.variable_dtype(), "nn::", kind_,
                 ": cannot set the dtype policy '", policy.name(), "' (variables in ",
                 policy.variable_dtype(), "): variable '", name, "' already exists in ", v.dtype());
  policy_ = policy;
  explicit_policy_ = true;
}

void Module::check_new_name(const std::string& name, const char* what) const {
  STRATA_CHECK(!name.empty(), "nn::", kind_, ": ", what, " name must not be empty");
  STRATA_CHECK(name.find('/') == std::string::npos, "nn::", kind_, ": ", what, " name '", name,
               "' must not contain '/' (object paths are built from names)");
  for (const auto& [n, v] : variables_)
    STRATA_CHECK(n != name, "nn::", kind_, ": a variable named '", name, "' already exists");
  for (const auto& [n, m] : children_)
    STRATA_CHECK(n != name, "nn::", kind_, ": a submodule named '", name, "' already exists");
}

Variable Module::register_variable(const std::string& name, Variable variable) {
  check_new_name(name, "variable");
  STRATA_CHECK(variable.defined(), "nn::", kind_, ": variable '", name, "' is undefined");
  variables_.emplace_back(name, variable);
  return variable;
}

Variable Module::add_weight(const std::string& name, const Shape& shape, DType dtype,
                            const Initializer& init, autograd::VariableOptions options,
                            regularizers::Regularizer regularizer) {
  check_new_name(name, "variable");
  STRATA_CHECK(bool(init), "nn::", kind_, ": variable '", name, "' has no initializer");
  Tensor initial = init(shape, dtype);
  STRATA_CHECK(initial.defined() && initial.shape() == shape && initial.dtype() == dtype, "nn::",
               kind_, ": the initializer of '", name, "' returned ",
               initial.defined() ? shape_str(initial.shape()) : std::string("undefined"),
               " (expected ", shape_str(shape), " ", dtype_name(dtype), ")");
  if (options.name.empty() || options.name == "Variable") options.name = kind_ + "/" + name;
  Variable v = register_variable(name, Variable(initial, std::move(options)));
  if (regularizer) {
    // read(): the penalty is watched by an active tape, so its gradient reaches the weight.
    add_loss([v, reg = std::move(regularizer)] { return reg(v.read()); });
  }
  return v;
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "submodule");
  STRATA_CHECK(module != nullptr, "nn::", kind_, ": submodule '", name, "' is empty");
  STRATA_CHECK(module.get() != this, "nn::", kind_, ": a module cannot contain itself");
  // Nor indirectly: every walk over the tree (variables, calls, set_training's) would never
  // end. Shared submodules (a DAG) are fine.
  std::unordered_set<const Module*> seen;
  std::vector<const Module*> stack{module.get()};
  while (!stack.empty()) {
    const Module* m = stack.back();
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    for (const auto& [child_name, child] : m->children_) {
      STRATA_CHECK(child.get() != this, "nn::", kind_, ": adding submodule '", name, "' (", module->kind_,
                   ") would make a cycle: it already contains this module");
      stack.push_back(child.get());
    }
  }
  children_.emplace_back(name, std::move(module));
}

namespace {
// Calls fn on `root` and every submodule, each once (an iterative walk with a visited set:
// shared submodules are visited once).
void for_each_module(Module& root, const std::function<void(Module&)>& fn) {
  std::unordered_set<const Module*> seen;
  std::vector<Module*> stack{&root};
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    fn(*m);
    for (const auto& [name, child] : m->children()) stack.push_back(child.get());
  }
}
}  // namespace

void Module::set_trainable(bool trainable) {
  for_each_module(*this, [&](Module& m) { m.trainable_.store(trainable, std::memory_order_relaxed); });
}

void Module::set_training(bool training) {
  for_each_module(*this, [&](Module& m) { m.training_.store(training, std::memory_order_relaxed); });
}

namespace {

void collect(const Module& m, const std::string& prefix, std::unordered_set<const Module*>& seen,
             std::unordered_set<const autograd::VariableImpl*>& seen_vars,
             std::vector<NamedVariable>& out) {
  if (!seen.insert(&m).second) return;
  const std::string base = prefix.empty() ? prefix : prefix + "/";
  for (const auto& [name, v] : m.own_variables())
    if (seen_vars.insert(v.impl_ptr().get()).second) out.push_back({base + name, v});
  for (const auto& [name, child] : m.children()) collect(*child, base + name, seen, seen_vars, out);
}

}  // namespace

std::vector<NamedVariable> Module::named_variables(const std::string& prefix) const {
  std::unordered_set<const Module*> seen;
  std::unordered_set<const autograd::VariableImpl*> seen_vars;
  std::vector<NamedVariable> out;
  collect(*this, prefix, seen, seen_vars, out);
  return out;
}

std::vector<Variable> Module::variables() const {
  std::vector<Variable> out;
  for (auto& nv : named_variables()) out.push_back(nv.variable);
  return out;
}

namespace {
// The variables of `m` and its submodules that train: their own flag is set and no module
// on the way down is frozen (Keras: a frozen layer's trainable_weights are empty, its
// sublayers' included). In named_variables() order.
std::unordered_set<const autograd::VariableImpl*> training_variables(const Module& root) {
  std::unordered_set<const autograd::VariableImpl*> out;
  std::unordered_set<const Module*> seen;
  std::vector<const Module*> stack{&root};
  while (!stack.empty()) {
    const Module* m = stack.back();
    stack.pop_back();
    if (!m->trainable() || !seen.insert(m).second) continue;
    for (const auto& [name, v] : m->own_variables())
      if (v.trainable()) out.insert(v.impl_ptr().get());
    for (const auto& [name, child] : m->children()) stack.push_back(child.get());
  }
  return out;
}
}  // namespace

std::vector<Variable> Module::trainable_variables() const {
  const auto training = training_variables(*this);
  std::vector<Variable> out;
  for (auto& nv : named_variables())
    if (training.contains(nv.variable.impl_ptr().get())) out.push_back(nv.variable);
  return out;
}

std::vector<Variable> Module::non_trainable_variables() const {
  const auto training = training_variables(*this);
  std::vector<Variable> out;
  for (auto& nv : named_variables())
    if (!training.contains(nv.variable.impl_ptr().get())) out.push_back(nv.variable);
  return out;
}

Module& AnyModule::module() const {
  STRATA_CHECK(module_ != nullptr, "nn: use of an empty module handle (default-constructed layer)");
  return *module_;
}

}  // namespace strata::nn
