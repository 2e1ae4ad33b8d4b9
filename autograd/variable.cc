#include <strata/autograd/variable.h>

#include <vector>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>

namespace strata::autograd {

const char* synchronization_name(VariableSynchronization s) {
  switch (s) {
    case VariableSynchronization::Auto: return "AUTO";
    case VariableSynchronization::None: return "NONE";
    case VariableSynchronization::OnWrite: return "ON_WRITE";
    case VariableSynchronization::OnRead: return "ON_READ";
  }
  return "?";
}

const char* aggregation_name(VariableAggregation a) {
  switch (a) {
    case VariableAggregation::None: return "NONE";
    case VariableAggregation::Sum: return "SUM";
    case VariableAggregation::Mean: return "MEAN";
    case VariableAggregation::OnlyFirstReplica: return "ONLY_FIRST_REPLICA";
  }
  return "?";
}

void VariableImpl::assign_add(const Tensor& delta) {
  StopRecording no_tape;
  assign(add(value(), delta));
}

void VariableImpl::assign_sub(const Tensor& delta) {
  StopRecording no_tape;
  assign(sub(value(), delta));
}

std::shared_ptr<VariableImpl> VariableImpl::make_like(const Tensor& initial,
                                                      VariableOptions options) const {
  if (!options.device) options.device = value().device();
  return std::make_shared<LocalVariableImpl>(initial, std::move(options));
}

namespace {
// assign copies into the variable's buffer, which would convert silently (float64 into a
// float32 variable loses precision; a float into an int variable truncates). TensorFlow
// refuses such an assign; so does strata: cast explicitly.
void check_assign_dtype(const std::string& name, DType variable, DType value) {
  STRATA_CHECK(value == variable, "Variable '", name, "'.assign: value of dtype ", dtype_name(value),
               " does not match the variable's dtype ", dtype_name(variable), " (cast it first)");
}
}  // namespace

LocalVariableImpl::LocalVariableImpl(const Tensor& initial, VariableOptions options)
    : VariableImpl(std::move(options)) {
  STRATA_CHECK(initial.defined(), "Variable '", options_.name, "': undefined initial value");
  const Device device = options_.device.value_or(initial.device());
  // Own a private copy: the variable is updated in place and must not alias its initializer.
  value_ = Tensor::empty(initial.shape(), initial.dtype(), device);
  value_.copy_(initial);
}

// Every update holds the variable's mutex: replica threads inside Strategy::run may update
// one variable created outside any strategy's scope (a metric, a counter), and each
// read-modify-write must see the previous one, as TensorFlow's resource variables
// guarantee. The lock is per variable, so unrelated variables never contend.
void LocalVariableImpl::assign(const Tensor& v) {
  std::lock_guard<std::mutex> lock(mutex_);
  assign_locked(v);
}

void LocalVariableImpl::assign_add(const Tensor& delta) {
  StopRecording no_tape;
  std::lock_guard<std::mutex> lock(mutex_);
  assign_locked(add(value_, delta));
}

void LocalVariableImpl::assign_sub(const Tensor& delta) {
  StopRecording no_tape;
  std::lock_guard<std::mutex> lock(mutex_);
  assign_locked(sub(value_, delta));
}

void LocalVariableImpl::assign_locked(const Tensor& v) {
  STRATA_CHECK(v.defined(), "Variable '", options_.name, "'.assign: undefined value");
  STRATA_CHECK(v.shape() == value_.shape(), "Variable '", options_.name, "'.assign: shape ",
               shape_str(v.shape()), " does not match the variable's shape ",
               shape_str(value_.shape()));
  check_assign_dtype(options_.name, value_.dtype(), v.dtype());
  value_.copy_(v);
}

namespace {
thread_local std::vector<VariableCreator>* t_creators = nullptr;
}

VariableCreatorScope::VariableCreatorScope(VariableCreator creator) {
  if (!t_creators) t_creators = new std::vector<VariableCreator>();
  t_creators->push_back(std::move(creator));
}

VariableCreatorScope::~VariableCreatorScope() {
  t_creators->pop_back();
  if (t_creators->empty()) {
    delete t_creators;
    t_creators = nullptr;
  }
}

std::shared_ptr<VariableImpl> create_variable_impl(const Tensor& initial,
                                                   const VariableOptions& options) {
  if (t_creators && !t_creators->empty()) return t_creators->back()(initial, options);
  return std::make_shared<LocalVariableImpl>(initial, options);
}

Variable::Variable(const Tensor& initial, VariableOptions options)
    : impl_(create_variable_impl(initial, options)) {}

Tensor Variable::read() const {
  Tensor v = impl().value();
  if (trainable()) detail::notify_variable_read(*this, v);
  return v;
}

void Variable::assign(const Tensor& v) const {
  // Checked on the handle as well, so that every kind of variable (mirrored, sync-on-read,
  // parameter-server) refuses a value of another dtype before any component changes.
  STRATA_CHECK(v.defined(), "Variable '", name(), "'.assign: undefined value");
  check_assign_dtype(name(), dtype(), v.dtype());
  impl().assign(v);
}
void Variable::assign_add(const Tensor& delta) const { impl().assign_add(delta); }
void Variable::assign_sub(const Tensor& delta) const { impl().assign_sub(delta); }

}  // namespace strata::autograd
