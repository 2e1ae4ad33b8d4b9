#include "autograd/tape.h"

#include <algorithm>

#include "autograd/gradient_registry.h"
#include "core/ops.h"
#include "core/recorder.h"

namespace strata::autograd {

void ensure_gradients_registered();

namespace {

// The active tapes of this thread, innermost last.
thread_local std::vector<GradientTape*> t_tapes;

// Forwards each op to every active tape of the thread.
class TapeRecorder final : public Recorder {
 public:
  void record(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
              std::span<const Tensor> outputs) override {
    for (GradientTape* tape : t_tapes) tape->maybe_record(op, attrs, inputs, outputs);
  }
};
thread_local TapeRecorder t_recorder;

TensorMeta meta_of(const Tensor& t) { return TensorMeta{t.shape(), t.dtype(), t.device()}; }

// Decrements a pause counter on scope exit (even when a VJP throws).
struct PauseGuard {
  int& counter;
  explicit PauseGuard(int& c) : counter(c) { ++counter; }
  ~PauseGuard() { --counter; }
};

}  // namespace

bool is_recording() { return thread_recorder() != nullptr && !t_tapes.empty(); }

StopRecording::StopRecording() : saved_(thread_recorder()) { set_thread_recorder(nullptr); }
StopRecording::~StopRecording() { set_thread_recorder(static_cast<Recorder*>(saved_)); }

namespace detail {
void notify_variable_read(const Variable& v, const Tensor& value) {
  if (thread_recorder() == nullptr) return;
  for (GradientTape* tape : t_tapes) tape->on_variable_read(v, value);
}
}  // namespace detail

GradientTape::GradientTape(bool persistent, bool watch_accessed_variables)
    : persistent_(persistent), watch_accessed_variables_(watch_accessed_variables) {
  ensure_gradients_registered();
  t_tapes.push_back(this);
  set_thread_recorder(&t_recorder);
}

GradientTape::~GradientTape() {
  auto it = std::find(t_tapes.begin(), t_tapes.end(), this);
  if (it != t_tapes.end()) t_tapes.erase(it);
  if (t_tapes.empty()) set_thread_recorder(nullptr);
}

void GradientTape::watch(const Tensor& t) {
  STRATA_CHECK(t.defined(), "GradientTape.watch: undefined tensor");
  STRATA_CHECK(is_floating(t.dtype()), "GradientTape.watch: only floating-point tensors can be "
               "watched, got ", t.dtype(), " with shape ", shape_str(t.shape()));
  watched_.insert(t.id());
  watched_tensors_.emplace(t.id(), t);
}

void GradientTape::watch(const Variable& v) {
  watch(v.value());
  if (std::find(variables_.begin(), variables_.end(), v) == variables_.end()) variables_.push_back(v);
}

void GradientTape::on_variable_read(const Variable& v, const Tensor& value) {
  if (!watch_accessed_variables_ || paused_ > 0 || !is_floating(value.dtype())) return;
  watched_.insert(value.id());
  if (std::find(variables_.begin(), variables_.end(), v) == variables_.end()) variables_.push_back(v);
}

void GradientTape::maybe_record(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                                std::span<const Tensor> outputs) {
  if (paused_ > 0 || outputs.size() != 1 || !is_floating(outputs[0].dtype())) return;
  bool touches = false;
  for (const Tensor& t : inputs) {
    if (watched_.count(t.id())) {
      touches = true;
      break;
    }
  }
  if (!touches) return;
  const GradientDef* def = find_gradient(op);
  STRATA_CHECK(def != nullptr, op_name(op), ": no gradient registered (internal error)");
  if (!def->differentiable) return;  // e.g. stop_gradient: outputs stay unwatched
  TapeNode node;
  node.op = op;
  node.attrs = attrs;
  node.input_ids.reserve(inputs.size());
  node.input_meta.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node.input_ids.push_back(t.id());
    node.input_meta.push_back(meta_of(t));
  }
  if (def->needs_inputs) node.inputs.assign(inputs.begin(), inputs.end());
  node.inputs.resize(inputs.size());
  node.output_id = outputs[0].id();
  node.output_meta = meta_of(outputs[0]);
  if (def->needs_output) node.output = outputs[0];
  watched_.insert(node.output_id);
  nodes_.push_back(std::move(node));
}

void GradientTape::reset() {
  nodes_.clear();
  watched_.clear();
  watched_tensors_.clear();
  variables_.clear();
  used_ = false;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const std::vector<Tensor>& output_gradients,
                                           UnconnectedGradients unconnected) {
  STRATA_CHECK(!used_, "GradientTape.gradient: a non-persistent tape can compute gradients only "
               "once; create it with persistent=true to call gradient() several times");
  STRATA_CHECK(target.defined(), "GradientTape.gradient: undefined target");
  STRATA_CHECK(is_floating(target.dtype()), "GradientTape.gradient: the target must be a "
               "floating-point tensor, got ", target.dtype());
  Tensor seed;
  if (output_gradients.empty()) {
    STRATA_CHECK(target.numel() == 1, "GradientTape.gradient: the target has shape ",
                 shape_str(target.shape()), "; a non-scalar target needs output_gradients "
                 "(or reduce it to a scalar first)");
    seed = ones_like(target);
  } else {
    STRATA_CHECK(output_gradients.size() == 1 && output_gradients[0].shape() == target.shape(),
                 "GradientTape.gradient: output_gradients must hold one tensor of the target's "
                 "shape ", shape_str(target.shape()));
    seed = output_gradients[0].dtype() == target.dtype() ? output_gradients[0]
                                                         : cast(output_gradients[0], target.dtype());
  }
  PauseGuard pause(paused_);

  // Forward sweep: which recorded tensors depend on a source.
  std::unordered_set<uint64_t> source_ids, reach;
  for (const Tensor& s : sources) {
    STRATA_CHECK(s.defined(), "GradientTape.gradient: undefined source tensor");
    source_ids.insert(s.id());
  }
  reach = source_ids;
  for (const TapeNode& node : nodes_) {
    for (uint64_t id : node.input_ids) {
      if (reach.count(id)) {
        reach.insert(node.output_id);
        break;
      }
    }
  }

  // Backward sweep, newest op first.
  std::unordered_map<uint64_t, Tensor> grads;
  if (reach.count(target.id())) grads.emplace(target.id(), seed);
  for (size_t i = nodes_.size(); i-- > 0 && !grads.empty();) {
    const TapeNode& node = nodes_[i];
    auto it = grads.find(node.output_id);
    if (it == grads.end()) continue;
    Tensor g = it->second;
    if (!source_ids.count(node.output_id)) grads.erase(it);
    const GradientDef* def = find_gradient(node.op);
    GradContext ctx{node.op, node.attrs, node.inputs, node.input_meta, node.output, node.output_meta};
    std::vector<Tensor> in_grads = def->vjp(ctx, g);
    STRATA_CHECK(in_grads.size() == node.input_ids.size(), op_name(node.op),
                 ": gradient returned ", in_grads.size(), " tensors for ", node.input_ids.size(),
                 " inputs (internal error)");
    for (size_t k = 0; k < in_grads.size(); ++k) {
      const uint64_t id = node.input_ids[k];
      if (!in_grads[k].defined() || !reach.count(id)) continue;
      Tensor gk = in_grads[k];
      const TensorMeta& m = node.input_meta[k];
      STRATA_CHECK(gk.shape() == m.shape, op_name(node.op), ": gradient for input ", k, " has shape ",
                   shape_str(gk.shape()), ", expected ", shape_str(m.shape), " (internal error)");
      if (gk.dtype() != m.dtype && is_floating(m.dtype)) gk = cast(gk, m.dtype);
      auto [pos, inserted] = grads.emplace(id, gk);
      if (!inserted) pos->second = add(pos->second, gk);
    }
  }

  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (const Tensor& s : sources) {
    auto it = grads.find(s.id());
    if (it != grads.end()) {
      result.push_back(it->second);
    } else {
      result.push_back(unconnected == UnconnectedGradients::Zero ? zeros_like(s) : Tensor());
    }
  }
  if (!persistent_) {
    used_ = true;
    nodes_.clear();
    nodes_.shrink_to_fit();
    watched_.clear();
    watched_tensors_.clear();
  }
  return result;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Variable>& sources,
                                           const std::vector<Tensor>& output_gradients,
                                           UnconnectedGradients unconnected) {
  std::vector<Tensor> values;
  values.reserve(sources.size());
  for (const Variable& v : sources) values.push_back(v.value());
  return gradient(target, values, output_gradients, unconnected);
}

Tensor GradientTape::gradient(const Tensor& target, const Tensor& source,
                              UnconnectedGradients unconnected) {
  return gradient(target, std::vector<Tensor>{source}, {}, unconnected)[0];
}

Tensor GradientTape::jacobian(const Tensor& target, const Tensor& source,
                              UnconnectedGradients unconnected) {
  STRATA_CHECK(!used_, "GradientTape.jacobian: this non-persistent tape was already used");
  const bool was_persistent = persistent_;
  persistent_ = true;
  std::vector<Tensor> rows;
  const int64_t n = target.numel();
  try {
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> e(static_cast<size_t>(n), 0.0);
      e[size_t(i)] = 1.0;
      Tensor seed = Tensor::from_vector(e, target.shape(), target.dtype(), target.device());
      Tensor g = gradient(target, std::vector<Tensor>{source}, {seed}, unconnected)[0];
      if (!g.defined()) break;  // unconnected: the same for every row
      rows.push_back(g);
    }
  } catch (...) {
    persistent_ = was_persistent;
    throw;
  }
  persistent_ = was_persistent;
  if (!persistent_) {
    used_ = true;
    nodes_.clear();
    watched_.clear();
    watched_tensors_.clear();
  }
  Shape shape = target.shape();
  shape.insert(shape.end(), source.shape().begin(), source.shape().end());
  if (rows.size() != size_t(n)) return Tensor();  // unconnected, UnconnectedGradients::None
  if (rows.empty()) return zeros(shape, source.dtype(), source.device());
  return reshape(stack(rows, 0), shape);
}

}  // namespace strata::autograd
