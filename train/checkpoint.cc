#include <strata/train/checkpoint.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include <strata/autograd/tape.h>
#include <strata/core/error.h>
#include <strata/train/checkpoint_file.h>

namespace strata::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSlotMarker = "/.OPTIMIZER_SLOT/";

const char* object_kind(const Trackable::Object& o) {
  switch (o.index()) {
    case 0: return "module";
    case 1: return "optimizer";
    case 2: return "metric";
    case 3: return "variable";
    default: return "extra";
  }
}

// The variables of the tracked objects, by object path, except optimizer slots (which
// are named after the variables they belong to).
struct ObjectGraph {
  std::map<std::string, Variable> by_path;
  // Module variables in traversal order with their first path, and variables tracked
  // directly: what slots are named after.
  std::vector<std::pair<std::string, Variable>> module_variables;
  std::vector<std::pair<std::string, optim::Optimizer>> optimizers;
  std::vector<std::pair<std::string, ExtraState>> extras;

  void add(const std::string& path, const Variable& v) {
    STRATA_CHECK(v.defined(), "Checkpoint: the variable at '", path, "' is undefined");
    STRATA_CHECK(by_path.emplace(path, v).second, "Checkpoint: two tracked variables map to the path '",
                 path, "'");
  }
};

ObjectGraph collect(const std::vector<std::pair<std::string, Trackable>>& objects) {
  ObjectGraph g;
  std::set<const autograd::VariableImpl*> in_modules;
  for (const auto& [name, t] : objects) {
    const auto& o = t.object();
    if (auto* m = std::get_if<nn::AnyModule>(&o)) {
      for (auto& nv : m->named_variables(name)) {
        g.add(nv.path, nv.variable);
        if (in_modules.insert(nv.variable.impl_ptr().get()).second)
          g.module_variables.emplace_back(nv.path, nv.variable);
      }
    } else if (auto* opt = std::get_if<optim::Optimizer>(&o)) {
      // "iterations", and a LossScaleOptimizer's "loss_scale" and "good_steps".
      for (const auto& [key, v] : opt->checkpoint_variables()) g.add(name + "/" + key, v);
      g.optimizers.emplace_back(name, *opt);
    } else if (auto* metric = std::get_if<metrics::Metric>(&o)) {
      for (const auto& [state, v] : metric->variables()) g.add(name + "/" + state, v);
    } else if (auto* v = std::get_if<Variable>(&o)) {
      g.add(name, *v);
      // Its optimizer slots are saved too, named after it, as a module variable's are
      // (TensorFlow saves the slots of every tracked variable).
      if (in_modules.insert(v->impl_ptr().get()).second) g.module_variables.emplace_back(name, *v);
    } else {
      g.extras.emplace_back(name, std::get<ExtraState>(o));
    }
  }
  return g;
}

std::string slot_path(const std::string& var_path, const std::string& optimizer,
                      const std::string& slot) {
  return var_path + kSlotMarker + optimizer + "/" + slot;
}

void check_name(const std::string& name) {
  STRATA_CHECK(!name.empty(), "Checkpoint::track: object names must not be empty");
  STRATA_CHECK(name.find('/') == std::string::npos, "Checkpoint::track: object name '", name,
               "' must not contain '/'");
  STRATA_CHECK(name[0] != '.', "Checkpoint::track: object name '", name,
               "' must not start with '.' (reserved)");
}

// The optimizer's kind as the metadata records it: its name, and a wrapper's wrapped
// optimizer in brackets ("LossScaleOptimizer(Adam)").
std::string optimizer_kind(const optim::OptimizerImpl& impl) {
  std::string kind = impl.name();
  if (const auto inner = impl.wrapped()) kind += "(" + optimizer_kind(*inner) + ")";
  return kind;
}

// Resuming with another optimizer (SGD over an Adam checkpoint, or a LossScaleOptimizer
// wrapping AdamW over one wrapping Adam) would silently drop the saved slots or, worse,
// read them as different state: refuse it. The kind is in the metadata since this check
// exists (a wrapper's inner optimizer since 2026-11-28; before, the wrapper's name only);
// older checkpoints are judged by their slot names.
void check_same_optimizer(const TensorCheckpoint& ck, const std::string& file, const std::string& name,
                          const optim::Optimizer& opt) {
  const json& meta = ck.metadata;
  if (meta.is_object() && meta.contains("optimizers") && meta["optimizers"].is_object() &&
      meta["optimizers"].contains(name) && meta["optimizers"][name].is_string()) {
    const std::string saved = meta["optimizers"][name].get<std::string>();
    const std::string kind = optimizer_kind(opt.impl());
    const bool wrapper_name_only = opt.impl().wrapped() != nullptr && saved == opt.name();
    STRATA_CHECK(saved == kind || wrapper_name_only, "Checkpoint::restore: ", file, ": '", name,
                 "' was saved by the ", saved, " optimizer but the program uses ", kind, "; changing the optimizer "
                 "on resume would drop or misread its state (resume with ", saved, ", or start from a new "
                 "directory)");
  }
  const auto own = opt.slot_names();
  const std::string marker = std::string(kSlotMarker) + name + "/";
  for (const auto& [path, t] : ck.tensors) {
    const size_t at = path.find(marker);
    if (at == std::string::npos) continue;
    const std::string slot = path.substr(at + marker.size());
    STRATA_CHECK(slot != optim::kAverageSlot || opt.use_ema(), "Checkpoint::restore: ", file, ": '", path,
                 "' is the moving average of a variable, kept by an optimizer with use_ema, but the program's "
                 "optimizer '", name, "' (", opt.name(), ") has use_ema off: resuming would drop the averages "
                 "(turn use_ema on, or start from a new directory)");
    STRATA_CHECK(std::find(own.begin(), own.end(), slot) != own.end(), "Checkpoint::restore: ", file,
                 ": '", path, "' is a slot '", slot, "' that the program's optimizer '", name, "' (", opt.name(),
                 ") does not have: the checkpoint was written by another optimizer (resume with that one, or "
                 "start from a new directory)");
  }
}

}  // namespace

ExtraState iterator_state(data::Iterator& iterator) {
  data::Iterator* it = &iterator;
  ExtraState e;
  e.save = [it] { return json(it->save().to_string()); };
  e.validate = [](const json& j) {
    STRATA_CHECK(j.is_string(), "iterator state: expected a string, got ", j.dump());
    data::IteratorState::from_string(j.get<std::string>());
  };
  e.restore = [it](const json& j) {
    it->restore(data::IteratorState::from_string(j.get<std::string>()));
  };
  return e;
}

Checkpoint::Checkpoint(std::initializer_list<std::pair<std::string, Trackable>> objects) {
  for (const auto& [name, object] : objects) track(name, object);
}

Checkpoint& Checkpoint::track(const std::string& name, Trackable object) {
  check_name(name);
  for (const auto& [n, o] : objects_)
    STRATA_CHECK(n != name, "Checkpoint::track: an object named '", name, "' is already tracked");
  const auto& o = object.object();
  if (auto* m = std::get_if<nn::AnyModule>(&o))
    STRATA_CHECK(m->defined(), "Checkpoint::track: module '", name, "' is an empty handle");
  if (auto* opt = std::get_if<optim::Optimizer>(&o))
    STRATA_CHECK(opt->defined(), "Checkpoint::track: optimizer '", name, "' is an empty handle");
  if (auto* metric = std::get_if<metrics::Metric>(&o))
    STRATA_CHECK(metric->defined(), "Checkpoint::track: metric '", name, "' is an empty handle");
  if (auto* v = std::get_if<Variable>(&o))
    STRATA_CHECK(v->defined(), "Checkpoint::track: variable '", name, "' is undefined");
  if (auto* e = std::get_if<ExtraState>(&o))
    STRATA_CHECK(e->save && e->restore, "Checkpoint::track: extra state '", name,
                 "' needs both save and restore functions");
  objects_.emplace_back(name, std::move(object));
  return *this;
}

std::map<std::string, Variable> Checkpoint::variables_by_path() const {
  ObjectGraph g = collect(objects_);
  std::map<std::string, Variable> out = g.by_path;
  std::unordered_map<const autograd::VariableImpl*, std::string> path_of;
  for (const auto& [path, v] : g.module_variables) path_of.emplace(v.impl_ptr().get(), path);
  for (const auto& [name, opt] : g.optimizers) {
    const auto slot_names = opt.slot_names();
    for (const auto& [var, slots] : opt.all_slots()) {
      auto it = path_of.find(var.impl_ptr().get());
      if (it == path_of.end()) continue;  // untracked variable: its slots are not saved
      for (size_t k = 0; k < slots.size(); ++k) {
        const std::string path = slot_path(it->second, name, slot_names[k]);
        STRATA_CHECK(out.emplace(path, slots[k]).second, "Checkpoint: two tracked variables map to '",
                     path, "'");
      }
    }
  }
  return out;
}

CheckpointSnapshot Checkpoint::snapshot(std::optional<int64_t> step, bool own_copies) const {
  autograd::StopRecording no_tape;
  CheckpointSnapshot out;
  for (const auto& [path, v] : variables_by_path()) {
    Tensor value = v.impl().checkpoint_value();
    // A host copy of its own: the variable's memory (or a device's) may change under an
    // asynchronous write. to() copies from any other device, logical CPUs included.
    if (own_copies) value = value.device() == Device() ? value.clone() : value.to(Device());
    out.tensors.emplace(path, std::move(value));
  }
  json metadata = json::object();
  if (step) metadata["step"] = *step;
  json objects = json::object();
  json extra = json::object();
  json optimizers = json::object();
  for (const auto& [name, t] : objects_) {
    objects[name] = object_kind(t.object());
    if (auto* e = std::get_if<ExtraState>(&t.object())) extra[name] = e->save();
    if (auto* opt = std::get_if<optim::Optimizer>(&t.object())) optimizers[name] = optimizer_kind(opt->impl());
  }
  metadata["objects"] = objects;
  metadata["extra"] = extra;
  // Which optimizer wrote the slots: restoring them into another kind is refused.
  metadata["optimizers"] = optimizers;
  out.metadata = std::move(metadata);
  return out;
}

void CheckpointSnapshot::write(const fs::path& prefix, const AtomicWriteHooks& hooks) const {
  STRATA_CHECK(!prefix.empty(), "Checkpoint::save: empty prefix");
  if (prefix.has_parent_path()) fs::create_directories(prefix.parent_path());
  SaveTensorsOptions options;
  options.hooks = hooks;
  save_tensors(prefix, tensors, metadata, options);
}

void Checkpoint::save(const fs::path& prefix, std::optional<int64_t> step) const {
  STRATA_CHECK(!prefix.empty(), "Checkpoint::save: empty prefix");
  snapshot(step, /*own_copies=*/false).write(prefix);
}

RestoreStatus Checkpoint::restore(const fs::path& prefix) const {
  // ---- load and verify the files (throws naming the file) ----
  TensorCheckpoint ck = load_tensors(prefix);
  const std::string file = checkpoint_manifest_path(prefix).string();
  std::set<std::string> consumed;

  auto tensor_for = [&](const std::string& path, const Variable& v) -> const Tensor& {
    auto it = ck.tensors.find(path);
    STRATA_CHECK(it != ck.tensors.end(), "Checkpoint::restore: ", file, ": missing variable '",
                 path, "' (", dtype_name(v.dtype()), " ", shape_str(v.shape()), ")");
    STRATA_CHECK(it->second.dtype() == v.dtype(), "Checkpoint::restore: ", file, ": variable '",
                 path, "' has dtype ", dtype_name(it->second.dtype()),
                 " in the checkpoint but ", dtype_name(v.dtype()), " in the program");
    STRATA_CHECK(it->second.shape() == v.shape(), "Checkpoint::restore: ", file, ": variable '",
                 path, "' has shape ", shape_str(it->second.shape()),
                 " in the checkpoint but ", shape_str(v.shape()), " in the program");
    consumed.insert(path);
    return it->second;
  };

  // ---- validate everything, changing nothing ----
  ObjectGraph g = collect(objects_);
  std::vector<std::pair<Variable, Tensor>> assignments;
  for (const auto& [path, v] : g.by_path) assignments.emplace_back(v, tensor_for(path, v));

  struct SlotPlan {
    optim::Optimizer optimizer;
    Variable variable;
    std::vector<Tensor> values;  // empty: drop the variable's slots
  };
  std::vector<SlotPlan> slot_plans;
  for (const auto& [name, opt] : g.optimizers) {
    check_same_optimizer(ck, file, name, opt);
    for (const auto& wrapper_variable : opt.impl().wrapper_variables()) {
      const std::string& key = wrapper_variable.first;
      const std::string path = name + "/" + key;
      const auto it = ck.tensors.find(path);
      if (it == ck.tensors.end() || it->second.numel() != 1) continue;  // reported below, with the rest
      try {
        opt.impl().check_restored(key, it->second);
      } catch (const Error& e) {
        fail("Checkpoint::restore: ", file, ": '", path, "': ", e.what());
      }
    }
  }
  for (const auto& [name, opt] : g.optimizers) {
    const auto slot_names = opt.slot_names();
    if (slot_names.empty()) continue;
    for (const auto& [path, var] : g.module_variables) {
      std::vector<std::string> present, missing;
      for (const auto& s : slot_names)
        (ck.tensors.count(slot_path(path, name, s)) ? present : missing).push_back(s);
      SlotPlan plan{opt, var, {}};
      if (!present.empty()) {
        // A checkpoint written without use_ema: the averages start at the restored
        // weights, as they start at the weights when use_ema is on from the first step.
        const bool average_only = missing.size() == 1 && missing[0] == optim::kAverageSlot;
        STRATA_CHECK(missing.empty() || average_only, "Checkpoint::restore: ", file, ": missing variable '",
                     slot_path(path, name, missing[0]), "' (the other slots of '", path,
                     "' are present)");
        for (const auto& s : slot_names)
          plan.values.push_back(s == optim::kAverageSlot && average_only ? tensor_for(path, var)
                                                                         : tensor_for(slot_path(path, name, s), var));
      }
      slot_plans.push_back(std::move(plan));
    }
  }

  const json extras = ck.metadata.is_object() && ck.metadata.contains("extra")
                          ? ck.metadata["extra"]
                          : json::object();
  STRATA_CHECK(extras.is_object(), "Checkpoint::restore: ", file,
               ": metadata 'extra' is not a JSON object");
  for (const auto& [name, e] : g.extras) {
    STRATA_CHECK(extras.contains(name), "Checkpoint::restore: ", file, ": missing extra state '",
                 name, "'");
    if (e.validate) {
      try {
        e.validate(extras[name]);
      } catch (const std::exception& ex) {
        fail("Checkpoint::restore: ", file, ": extra state '", name, "' is invalid: ", ex.what());
      }
    }
  }

  // ---- commit: extra states first (they may still refuse), then the variables ----
  for (const auto& [name, e] : g.extras) {
    try {
      e.restore(extras[name]);
    } catch (const std::exception& ex) {
      fail("Checkpoint::restore: ", file, ": restoring extra state '", name, "' failed: ", ex.what());
    }
  }
  autograd::StopRecording no_tape;
  for (auto& plan : slot_plans) {
    if (plan.values.empty()) {
      plan.optimizer.drop_slots(plan.variable);
      continue;
    }
    const auto slots = plan.optimizer.get_or_create_slots(plan.variable);
    for (size_t k = 0; k < slots.size(); ++k) assignments.emplace_back(slots[k], plan.values[k]);
  }
  for (const auto& [v, t] : assignments) v.impl().restore_checkpoint_value(t);

  RestoreStatus status;
  status.prefix = prefix;
  status.step = ck.step;
  for (const auto& [name, t] : ck.tensors)
    if (!consumed.count(name)) status.unused.push_back(name);
  return status;
}

}  // namespace strata::train
