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

LocalVariableImpl::LocalVariableImpl(const Tensor& initial, VariableOptions options)
    : VariableImpl(std::move(options)) {
  STRATA_CHECK(initial.defined(), "Variable '", options_.name, "': undefined initial value");
  const Device device = options_.device.value_or(initial.device());
  // Own a private copy: the variable is updated in place and must not alias its initializer.
  value_ = Tensor::empty(initial.shape(), initial.dtype(), device);
  value_.copy_(initial);
}

void LocalVariableImpl::assign(const Tensor& v) {
  STRATA_CHECK(v.defined(), "Variable '", options_.name, "'.assign: undefined value");
  STRATA_CHECK(v.shape() == value_.shape(), "Variable '", options_.name, "'.assign: shape ",
               shape_str(v.shape()), " does not match the variable's shape ",
               shape_str(value_.shape()));
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

void Variable::assign(const Tensor& v) const { impl().assign(v); }
void Variable::assign_add(const Tensor& delta) const { impl().assign_add(delta); }
void Variable::assign_sub(const Tensor& delta) const { impl().assign_sub(delta); }

}  // namespace strata::autograd
