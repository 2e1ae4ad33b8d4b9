#include <strata/distribute/ps/ps_variable.h>

#include <cstring>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/ps/parameter_server_strategy.h>
#include <strata/distribute/ps/protocol.h>

namespace strata::distribute {

using nlohmann::json;

json VariablePlacement::to_json() const {
  json shards_json = json::array();
  for (const auto& s : shards)
    shards_json.push_back({{"ps", s.ps}, {"key", s.key}, {"row_offset", s.row_offset}, {"rows", s.rows}});
  return {{"key", key}, {"dtype", dtype_name(dtype)}, {"shape", shape}, {"shards", shards_json}};
}

VariablePlacement VariablePlacement::from_json(const json& j) {
  VariablePlacement p;
  p.key = j.at("key").get<std::string>();
  p.dtype = dtype_from_name(j.at("dtype").get<std::string>());
  p.shape = j.at("shape").get<Shape>();
  for (const auto& s : j.at("shards")) {
    p.shards.push_back(VariableShard{s.at("ps").get<int>(), s.at("key").get<std::string>(),
                                     s.at("row_offset").get<int64_t>(), s.at("rows").get<int64_t>()});
  }
  STRATA_CHECK(!p.shards.empty(), "VariablePlacement: variable '", p.key, "' has no shards");
  return p;
}

// ---------------------------------------------------------------------------- variable

PsVariableImpl::PsVariableImpl(ParameterServerStrategy& strategy, std::shared_ptr<const VariablePlacement> placement,
                               autograd::VariableOptions options)
    : VariableImpl(std::move(options)), strategy_(strategy), placement_(std::move(placement)) {}

Tensor PsVariableImpl::value() const {
  if (StepScope* step = StepScope::current(); step && &step->strategy() == &strategy_) return step->entry(*this).value;
  STRATA_CHECK(strategy_.current_local_context() == nullptr, "Variable '", options_.name,
               "' (on the parameter servers) read inside Strategy::run of the ParameterServerStrategy without a "
               "StepScope: the step's in-place updates would never reach the parameter servers; run the step "
               "through ClusterCoordinator::schedule, or open a distribute::StepScope around strategy.run and "
               "commit() it");
  autograd::StopRecording no_tape;
  return strategy_.read_variables({placement_.get()})[0];
}

Tensor PsVariableImpl::prepare(const Tensor& v, const char* method, bool broadcast) const {
  STRATA_CHECK(v.defined(), "Variable '", options_.name, "'.", method, ": undefined value");
  const Shape& shape = placement_->shape;
  if (broadcast) {
    STRATA_CHECK(broadcast_shapes(v.shape(), shape, method) == shape, "Variable '", options_.name, "'.", method,
                 ": value of shape ", shape_str(v.shape()), " does not broadcast to the variable's shape ",
                 shape_str(shape));
  } else {
    STRATA_CHECK(v.shape() == shape, "Variable '", options_.name, "'.", method, ": shape ", shape_str(v.shape()),
                 " does not match the variable's shape ", shape_str(shape));
  }
  Tensor out = v.dtype() == placement_->dtype ? v : v.cast(placement_->dtype);
  if (out.shape() != shape) out = out.broadcast_to(shape);
  return out;
}

void PsVariableImpl::assign(const Tensor& v) {
  autograd::StopRecording no_tape;
  const Tensor value = prepare(v, "assign", false);
  if (StepScope* step = StepScope::current(); step && &step->strategy() == &strategy_) {
    StepScope::Entry& e = step->entry(*this);
    e.value.copy_(value);
    e.assigned = true;
    return;
  }
  strategy_.write_variables({{placement_.get(), ps::kOpAssign, value}});
}

void PsVariableImpl::assign_add(const Tensor& delta) {
  autograd::StopRecording no_tape;
  const Tensor d = prepare(delta, "assign_add", true);
  if (StepScope* step = StepScope::current(); step && &step->strategy() == &strategy_) {
    StepScope::Entry& e = step->entry(*this);
    e.value.copy_(add(e.value, d));
    return;
  }
  strategy_.write_variables({{placement_.get(), ps::kOpAdd, d}});
}

void PsVariableImpl::assign_sub(const Tensor& delta) {
  autograd::StopRecording no_tape;
  const Tensor d = prepare(delta, "assign_sub", true);
  if (StepScope* step = StepScope::current(); step && &step->strategy() == &strategy_) {
    StepScope::Entry& e = step->entry(*this);
    e.value.copy_(sub(e.value, d));
    return;
  }
  strategy_.write_variables({{placement_.get(), ps::kOpSub, d}});
}

std::shared_ptr<autograd::VariableImpl> PsVariableImpl::make_like(const Tensor& initial,
                                                                  autograd::VariableOptions options) const {
  return strategy_.create_slot(*this, initial, options);
}

// ---------------------------------------------------------------------------- step scope

namespace {
thread_local StepScope* t_step = nullptr;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}
}  // namespace

StepScope::StepScope(ParameterServerStrategy& strategy) : strategy_(strategy) {
  STRATA_CHECK(t_step == nullptr, "StepScope: a step scope is already active on this thread (they do not nest; "
               "a closure run by ClusterCoordinator already has one)");
  t_step = this;
}

StepScope::~StepScope() { t_step = nullptr; }

StepScope* StepScope::current() { return t_step; }

StepScope::Entry& StepScope::entry(const PsVariableImpl& var) {
  auto it = entries_.find(var.unique_id());
  if (it != entries_.end()) return it->second;
  autograd::StopRecording no_tape;
  // The first read of the step fetches every variable of the strategy at once: a step
  // reads the model and the optimizer's state anyway, and one request per server beats
  // one per variable.
  std::vector<std::shared_ptr<PsVariableImpl>> vars;
  if (!prefetched_) {
    prefetched_ = true;
    vars = strategy_.live_variables();
  }
  bool listed = false;
  for (const auto& v : vars) listed = listed || v.get() == &var;
  std::vector<const VariablePlacement*> placements;
  std::vector<const PsVariableImpl*> owners;
  for (const auto& v : vars) {
    if (entries_.count(v->unique_id())) continue;
    placements.push_back(&v->placement());
    owners.push_back(v.get());
  }
  if (!listed) {
    placements.push_back(&var.placement());
    owners.push_back(&var);
  }
  std::vector<Tensor> values = strategy_.read_variables(placements);
  for (size_t i = 0; i < owners.size(); ++i) {
    Entry e;
    e.placement = owners[i]->placement_ptr();
    e.value = values[i].contiguous();
    e.base = e.value.clone();
    entries_.emplace(owners[i]->unique_id(), std::move(e));
  }
  return entries_.at(var.unique_id());
}

void StepScope::commit() {
  autograd::StopRecording no_tape;
  std::vector<ParameterServerStrategy::Write> writes;
  std::vector<Entry*> changed;
  for (auto& [id, e] : entries_) {
    if (e.assigned) {
      writes.push_back({e.placement.get(), ps::kOpAssign, e.value});
    } else if (!same_bytes(e.value, e.base)) {
      // Bool variables have no difference: they are assigned.
      if (e.value.dtype() == kBool) {
        writes.push_back({e.placement.get(), ps::kOpAssign, e.value});
      } else {
        writes.push_back({e.placement.get(), ps::kOpAdd, sub(e.value, e.base)});
      }
    } else {
      continue;
    }
    changed.push_back(&e);
  }
  if (writes.empty()) return;
  strategy_.write_variables(writes);
  for (Entry* e : changed) {
    e->base.copy_(e->value);
    e->assigned = false;
  }
}

}  // namespace strata::distribute
