// GradientTape: records the ops run while it is active and computes gradients by walking
// them backwards — TensorFlow's tf.GradientTape.
//
// Tapes are thread-local and stack: every active tape on a thread records the ops that
// touch something it watches, so nested tapes give higher derivatives (the inner tape's
// gradient computation is recorded by the outer one). Each replica thread has its own.
//
// The tape keeps the tensors an op's gradient needs (a variable's read value among them)
// by reference, not as copies. A tensor written in place after it was recorded (copy_, an
// assign, an optimizer step) is detected by its storage's version: gradient() raises when
// it would read the overwritten value, as PyTorch does (TensorFlow copies the variable on
// write instead). With a persistent tape, compute every gradient before updating.
#pragma once

#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <strata/autograd/id_set.h>
#include <strata/autograd/variable.h>
#include <strata/core/op_attrs.h>
#include <strata/core/op_id.h>
#include <strata/core/tensor.h>

namespace strata::autograd {

enum class UnconnectedGradients { None, Zero };

// Shape, dtype and device of a recorded tensor (what backward needs when the tensor itself
// was not saved).
struct TensorMeta {
  Shape shape;
  DType dtype = kFloat32;
  Device device;
};

// One recorded op.
struct TapeNode {
  OpId op;
  OpAttrs attrs;
  std::vector<uint64_t> input_ids;
  std::vector<TensorMeta> input_meta;
  std::vector<Tensor> inputs;  // saved only when the op's gradient needs them (else empty)
  uint64_t output_id = 0;
  TensorMeta output_meta;
  Tensor output;  // saved only when the op's gradient needs it
  // The storage versions of the saved inputs and output when they were recorded: backward
  // refuses tensors written in place since (their values are no longer the op's).
  std::vector<uint64_t> input_versions;
  uint64_t output_version = 0;
};

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false, bool watch_accessed_variables = true);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& t);
  void watch(const Variable& v);
  std::vector<Variable> watched_variables() const { return variables_; }

  // d target / d sources. Without output_gradients the target must have one element.
  // With a GradientReadyHook installed on the thread (autograd/gradient_hook.h), each
  // watched variable among the sources is reported to it as soon as its gradient is final.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const std::vector<Tensor>& output_gradients = {},
                               UnconnectedGradients unconnected = UnconnectedGradients::None);
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               const std::vector<Tensor>& output_gradients = {},
                               UnconnectedGradients unconnected = UnconnectedGradients::None);
  Tensor gradient(const Tensor& target, const Tensor& source,
                  UnconnectedGradients unconnected = UnconnectedGradients::None);
  // Full Jacobian d target[i] / d source[j], shaped target.shape + source.shape. Needs a
  // persistent tape or is the only gradient call. Meant for small cases (one backward
  // pass per target element).
  Tensor jacobian(const Tensor& target, const Tensor& source,
                  UnconnectedGradients unconnected = UnconnectedGradients::None);

  // Discards everything recorded so far (tf.GradientTape.reset).
  void reset();
  bool persistent() const { return persistent_; }
  size_t num_recorded_ops() const { return nodes_.size(); }

  // Called by the thread's recorder.
  void maybe_record(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                    std::span<const Tensor> outputs);
  void on_variable_read(const Variable& v, const Tensor& value);

 private:
  friend bool is_recording();

  bool is_watched(uint64_t id) const { return watched_.contains(id); }
  // False while this tape computes a gradient or a StopRecording made after it is alive.
  bool active() const;

  bool persistent_;
  bool watch_accessed_variables_;
  bool used_ = false;       // a non-persistent tape's gradient() was called
  int paused_ = 0;          // > 0 while this tape computes a gradient
  int stop_depth_ = 0;      // StopRecording scopes alive on this thread when the tape began
  bool hook_enabled_ = true;  // false while jacobian() runs (autograd/gradient_hook.h)
  IdSet watched_;  // watched tensors and everything computed from them
  std::unordered_map<uint64_t, Tensor> watched_tensors_;  // explicitly watched (kept alive)
  std::vector<Variable> variables_;
  std::vector<TapeNode> nodes_;
};

// Pauses recording on every tape of this thread that exists when it is made, for its
// lifetime (tf.GradientTape.stop_recording; also used by custom_gradient). A tape created
// inside the scope records normally, as a new tf.GradientTape inside stop_recording does.
class StopRecording {
 public:
  StopRecording();
  ~StopRecording();
  StopRecording(const StopRecording&) = delete;
  StopRecording& operator=(const StopRecording&) = delete;
};

// True when some tape on this thread is recording.
bool is_recording();

namespace detail {
// Variable::read() calls this so that active tapes watch trainable variables.
void notify_variable_read(const Variable& v, const Tensor& value);
}  // namespace detail

}  // namespace strata::autograd

namespace strata {
using autograd::GradientTape;
}
