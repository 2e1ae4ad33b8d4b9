#include <strata/autograd/tape.h>

#include <algorithm>
#include <array>

#include <strata/autograd/gradient_hook.h>
#include <strata/autograd/gradient_registry.h>
#include <strata/core/ops.h>
#include <strata/core/recorder.h>

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

// Number of StopRecording scopes alive on this thread. A tape records only while this
// equals the count at its creation, so a scope pauses exactly the tapes older than it.
thread_local int t_stop_depth = 0;

// Vectors of n undefined tensors, n < kMaxUnsavedInputs: what a VJP sees as the inputs of
// an op whose gradient does not need them. Immutable once built, so shared by threads.
constexpr size_t kMaxUnsavedInputs = 8;
const std::vector<Tensor>& undefined_inputs(size_t n) {
  static const auto table = [] {
    std::array<std::vector<Tensor>, kMaxUnsavedInputs> t;
    for (size_t i = 0; i < t.size(); ++i) t[i].resize(i);
    return t;
  }();
  return table[n];
}

thread_local GradientReadyHook* t_gradient_hook = nullptr;

// Decrements a pause counter on scope exit (even when a VJP throws).
struct PauseGuard {
  int& counter;
  explicit PauseGuard(int& c) : counter(c) { ++counter; }
  ~PauseGuard() { --counter; }
};

}  // namespace

GradientHookScope::GradientHookScope(GradientReadyHook* hook) : saved_(t_gradient_hook) { t_gradient_hook = hook; }
GradientHookScope::~GradientHookScope() { t_gradient_hook = saved_; }
GradientReadyHook* current_gradient_hook() { return t_gradient_hook; }

Tensor GradientReadyHook::product_ready(const Variable& variable, const Tensor& a, const Tensor& b) {
  Tensor gradient = matmul(a, b, true, false);
  gradient_ready(variable, gradient);
  return gradient;
}

bool is_recording() {
  if (thread_recorder() == nullptr) return false;
  for (const GradientTape* tape : t_tapes) {
    if (tape->active()) return true;
  }
  return false;
}

bool GradientTape::active() const { return paused_ == 0 && stop_depth_ == t_stop_depth; }

// The recorder is removed while every tape is paused (so ops skip the recording call) and
// reinstalled by a tape created inside the scope or when the scope ends.
StopRecording::StopRecording() {
  ++t_stop_depth;
  set_thread_recorder(nullptr);
}

StopRecording::~StopRecording() {
  --t_stop_depth;
  set_thread_recorder(t_tapes.empty() ? nullptr : &t_recorder);
}

namespace detail {
void notify_variable_read(const Variable& v, const Tensor& value) {
  if (thread_recorder() == nullptr) return;
  for (GradientTape* tape : t_tapes) tape->on_variable_read(v, value);
}
}  // namespace detail

GradientTape::GradientTape(bool persistent, bool watch_accessed_variables)
    : persistent_(persistent),
      watch_accessed_variables_(watch_accessed_variables),
      stop_depth_(t_stop_depth) {
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
  if (!watch_accessed_variables_ || !active() || !is_floating(value.dtype())) return;
  watched_.insert(value.id());
  if (std::find(variables_.begin(), variables_.end(), v) == variables_.end()) variables_.push_back(v);
}

namespace {

uint64_t storage_version(const Tensor& t) { return t.defined() && t.storage() ? t.storage()->version() : 0; }

// A saved tensor written in place after it was recorded (a variable updated by an
// optimizer step or an assign between recording and gradient(), a copy_ into it) no
// longer holds the op's input. Such tensors are handed to the op's gradient as undefined:
// one it does not read (mul's own input, for the gradient with respect to that input)
// costs nothing, and one it reads makes it throw, which gradient() reports naming the
// tensor (PyTorch's "modified by an inplace operation"; before, the gradient came out
// silently wrong). The first such tensor's description, or "" when none.
std::string first_modified(const TapeNode& node) {
  auto describe = [&](const Tensor& t, uint64_t recorded, const std::string& which) {
    return ::strata::detail::concat(which, " of ", op_name(node.op), " (", dtype_name(t.dtype()), " ",
                                    shape_str(t.shape()), ") was written in place ", storage_version(t) - recorded,
                                    " time(s) after it was recorded");
  };
  for (size_t i = 0; i < node.inputs.size() && i < node.input_versions.size(); ++i)
    if (storage_version(node.inputs[i]) != node.input_versions[i])
      return describe(node.inputs[i], node.input_versions[i], "input " + std::to_string(i));
  if (node.output.defined() && storage_version(node.output) != node.output_version)
    return describe(node.output, node.output_version, "the output");
  return "";
}

}  // namespace

void GradientTape::maybe_record(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                                std::span<const Tensor> outputs) {
  if (!active() || outputs.size() != 1 || watched_.empty()) return;
  bool touches = false;
  for (const Tensor& t : inputs) {
    if (watched_.contains(t.id())) {
      touches = true;
      break;
    }
  }
  if (!touches || !is_floating(outputs[0].dtype())) return;
  const GradientDef* def = find_gradient(op);
  STRATA_CHECK(def != nullptr, op_name(op), ": no gradient registered (internal error)");
  if (!def->differentiable) return;  // e.g. stop_gradient: outputs stay unwatched
  // Built in place: this runs once per op under a tape, so it avoids temporaries. The first
  // record reserves room for a typical step, sparing the early doublings' moves and frees.
  if (nodes_.capacity() == 0) nodes_.reserve(128);
  TapeNode& node = nodes_.emplace_back();
  node.op = op;
  node.attrs = attrs;
  node.input_ids.resize(inputs.size());
  node.input_meta.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorImpl& impl = inputs[i].impl();
    node.input_ids[i] = impl.id;
    node.input_meta[i] = TensorMeta{impl.shape, impl.dtype, impl.device};
  }
  // Inputs not needed stay unsaved (empty vector), so the tape does not keep them alive.
  if (def->needs_inputs) {
    node.inputs.assign(inputs.begin(), inputs.end());
    node.input_versions.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) node.input_versions[i] = storage_version(inputs[i]);
  }
  const TensorImpl& out = outputs[0].impl();
  node.output_id = out.id;
  node.output_meta = TensorMeta{out.shape, out.dtype, out.device};
  if (def->needs_output) {
    node.output = outputs[0];
    node.output_version = storage_version(outputs[0]);
  }
  watched_.insert(node.output_id);
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
  IdSet source_ids, reach;
  for (const Tensor& s : sources) {
    STRATA_CHECK(s.defined(), "GradientTape.gradient: undefined source tensor");
    // Only what this tape watches (or computed from a watched tensor) gets a gradient, as
    // in TensorFlow: an unwatched tensor that merely met a watched one in some op is
    // unconnected, even though that op is on the tape.
    if (is_watched(s.id())) source_ids.insert(s.id());
  }
  reach = source_ids;
  for (const TapeNode& node : nodes_) {
    for (uint64_t id : node.input_ids) {
      if (reach.contains(id)) {
        reach.insert(node.output_id);
        break;
      }
    }
  }

  // With a gradient-ready hook: the watched variables among the sources, each with the
  // oldest node that reads it. Walking backwards, a variable's gradient is final once that
  // node has been processed (no older node can add to it).
  GradientReadyHook* const hook = hook_enabled_ ? t_gradient_hook : nullptr;
  std::vector<std::pair<uint64_t, Variable>> hooked;      // source id, its variable
  std::unordered_map<size_t, std::vector<size_t>> ready_after;  // node index -> hooked entries
  std::vector<bool> reported;
  // oldest_use doubles as the de-duplication set: two watched variables holding the same
  // value tensor are one source, reported once (the first in watch order).
  std::unordered_map<uint64_t, size_t> oldest_use;
  std::unordered_map<uint64_t, size_t> hooked_index;  // source id -> its entry in hooked
  // Product gradients (gradient_hook.h): not while another tape records this backward
  // pass, whose gradients must then be taped ops.
  const bool products = hook && !is_recording();
  if (hook) {
    for (const Variable& v : variables_) {
      const uint64_t id = v.value().id();
      if (!source_ids.contains(id)) continue;
      if (oldest_use.emplace(id, nodes_.size()).second) {
        hooked_index.emplace(id, hooked.size());
        hooked.emplace_back(id, v);
      }
    }
    for (size_t i = 0; i < nodes_.size() && !oldest_use.empty(); ++i) {
      for (uint64_t id : nodes_[i].input_ids) {
        auto it = oldest_use.find(id);
        if (it != oldest_use.end() && it->second == nodes_.size()) it->second = i;
      }
    }
    for (size_t k = 0; k < hooked.size(); ++k) {
      const size_t at = oldest_use.at(hooked[k].first);
      if (at < nodes_.size()) ready_after[at].push_back(k);
    }
    reported.assign(hooked.size(), false);
  }
  std::unordered_map<uint64_t, Tensor> grads;
  auto report = [&](size_t k) {
    if (reported[k]) return;
    auto it = grads.find(hooked[k].first);
    if (it == grads.end()) return;  // no gradient: unconnected
    reported[k] = true;
    hook->gradient_ready(hooked[k].second, it->second);
  };

  // Backward sweep, newest op first.
  if (reach.contains(target.id())) grads.emplace(target.id(), seed);
  for (size_t i = nodes_.size(); i-- > 0 && !grads.empty();) {
    if (hook) {
      // Node i+1 was the oldest reader of these variables: their gradients are final.
      auto ready = ready_after.find(i + 1);
      if (ready != ready_after.end()) {
        for (size_t k : ready->second) report(k);
      }
    }
    const TapeNode& node = nodes_[i];
    auto it = grads.find(node.output_id);
    if (it == grads.end()) continue;
    Tensor g = it->second;
    if (!source_ids.contains(node.output_id)) grads.erase(it);
    const GradientDef* def = find_gradient(node.op);
    // Unsaved inputs are presented as undefined tensors, one per input.
    std::vector<Tensor> unsaved;
    const std::vector<Tensor>* inputs = &node.inputs;
    if (node.inputs.size() != node.input_ids.size()) {
      inputs = node.input_ids.size() < kMaxUnsavedInputs ? &undefined_inputs(node.input_ids.size())
                                                         : &(unsaved = std::vector<Tensor>(node.input_ids.size()));
    }
    // Tells the VJP which inputs lead to a source, so it can skip the others' products.
    uint64_t wanted = 0;
    for (size_t k = 0; k < node.input_ids.size() && k < 64; ++k) {
      if (reach.contains(node.input_ids[k])) wanted |= uint64_t(1) << k;
    }
    // A hooked variable whose whole gradient is this matmul's weight gradient (x @ v, 2-D,
    // v read by no older node and by no newer one, which would have added to it already):
    // the hook gets its factors instead (gradient_hook.h).
    const std::string modified = first_modified(node);
    if (products && modified.empty() && node.op == OpId::MatMul && node.input_ids.size() == 2 && node.inputs.size() == 2 &&
        !node.attrs.transpose_a && !node.attrs.transpose_b && (wanted & 2) != 0 &&
        node.input_ids[0] != node.input_ids[1] && node.input_meta[0].shape.size() == 2 &&
        node.input_meta[1].shape.size() == 2 && g.ndim() == 2 &&
        hook->accepts_product(node.input_meta[1].dtype, node.input_meta[1].device)) {
      const uint64_t id = node.input_ids[1];
      auto at = hooked_index.find(id);
      if (at != hooked_index.end() && oldest_use.at(id) == i && !grads.contains(id)) {
        autograd::StopRecording no_tape;
        grads.emplace(id, hook->product_ready(hooked[at->second].second, node.inputs[0], g));
        reported[at->second] = true;
        wanted &= ~uint64_t(2);
      }
    }
    std::vector<Tensor> in_grads;
    if (modified.empty()) {
      GradContext ctx{node.op, node.attrs, *inputs, node.input_meta, node.output, node.output_meta, wanted};
      in_grads = def->vjp(ctx, g);
    } else {
      std::vector<Tensor> current = *inputs;
      for (size_t k = 0; k < current.size() && k < node.input_versions.size(); ++k)
        if (storage_version(current[k]) != node.input_versions[k]) current[k] = Tensor();
      const Tensor output = storage_version(node.output) == node.output_version ? node.output : Tensor();
      GradContext ctx{node.op, node.attrs, current, node.input_meta, output, node.output_meta, wanted};
      try {
        in_grads = def->vjp(ctx, g);
      } catch (const Error&) {
        fail("GradientTape.gradient: ", modified, " (copy_, an assign, or an optimizer step on a variable read "
             "under the tape), and its gradient needs it; compute every gradient before updating the variables, "
             "or record the computation again");
      }
    }
    STRATA_CHECK(in_grads.size() == node.input_ids.size(), op_name(node.op),
                 ": gradient returned ", in_grads.size(), " tensors for ", node.input_ids.size(),
                 " inputs (internal error)");
    for (size_t k = 0; k < in_grads.size(); ++k) {
      const uint64_t id = node.input_ids[k];
      if (!in_grads[k].defined() || !reach.contains(id)) continue;
      Tensor gk = in_grads[k];
      const TensorMeta& m = node.input_meta[k];
      STRATA_CHECK(gk.shape() == m.shape, op_name(node.op), ": gradient for input ", k, " has shape ",
                   shape_str(gk.shape()), ", expected ", shape_str(m.shape), " (internal error)");
      if (gk.dtype() != m.dtype && is_floating(m.dtype)) gk = cast(gk, m.dtype);
      if (gk.device() != m.device) gk = gk.to(m.device);  // a source's gradient lives with it
      auto [pos, inserted] = grads.emplace(id, gk);
      if (!inserted) pos->second = add(pos->second, gk);
    }
  }

  if (hook) {
    // The rest: read only by the oldest node, or the target itself.
    for (size_t k = 0; k < hooked.size(); ++k) report(k);
    hook->backward_done();
  }

  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (const Tensor& s : sources) {
    auto it = grads.find(s.id());
    if (it != grads.end()) {
      result.push_back(hook && hooked_index.contains(s.id()) ? hook->final_gradient(it->second) : it->second);
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
  // A Jacobian's rows are not gradients to apply: the gradient-ready hook is not told.
  hook_enabled_ = false;
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
    hook_enabled_ = true;
    throw;
  }
  persistent_ = was_persistent;
  hook_enabled_ = true;
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
