// The recording hook through which autograd tapes ops, without core depending on autograd.
//
// Autograd installs a thread-local Recorder while a GradientTape is active on that thread.
// After an op computes its outputs, the front-end calls record_op(); the recorder decides
// whether any active tape watches one of the inputs and, if so, tapes the op.
#pragma once

#include <span>

#include <strata/core/op_attrs.h>
#include <strata/core/op_id.h>
#include <strata/core/tensor.h>

namespace strata {

class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual void record(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                      std::span<const Tensor> outputs) = 0;
};

// The active recorder of the calling thread (nullptr when no tape is active).
Recorder* thread_recorder();
void set_thread_recorder(Recorder* recorder);

inline void record_op(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                      std::span<const Tensor> outputs) {
  if (Recorder* r = thread_recorder()) r->record(op, attrs, inputs, outputs);
}

}  // namespace strata
