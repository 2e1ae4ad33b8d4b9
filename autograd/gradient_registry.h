// The gradient (vector-Jacobian product) of every op, registered under the op's id.
//
// A VJP receives the recorded call (attrs, saved inputs/output, their metadata) and the
// gradient of the op's output, and returns one gradient per input (undefined for inputs
// that get none, such as integer indices). VJPs are written with strata's own ops, so a
// tape that watches the backward pass records it: higher derivatives come for free.
#pragma once

#include <cstdint>
#include <vector>

#include <strata/autograd/tape.h>

namespace strata::autograd {

struct GradContext {
  OpId op;
  const OpAttrs& attrs;
  const std::vector<Tensor>& inputs;  // undefined entries unless needs_inputs
  const std::vector<TensorMeta>& input_meta;
  const Tensor& output;  // undefined unless needs_output
  const TensorMeta& output_meta;
  // Bit k set: the gradient of input k is used. A VJP may return an undefined tensor for
  // the others (a matmul skips the product for an unwatched input, e.g. the data batch).
  uint64_t wanted = ~uint64_t(0);
  bool wants(size_t k) const { return k >= 64 || ((wanted >> k) & 1) != 0; }
};

using VjpFn = std::vector<Tensor> (*)(const GradContext& ctx, const Tensor& grad);

struct GradientDef {
  VjpFn vjp = nullptr;
  bool needs_inputs = true;
  bool needs_output = false;
  bool differentiable = true;  // false: an explicit "not differentiable" mark
};

void register_gradient(OpId op, GradientDef def);
void mark_not_differentiable(OpId op);
// The registered definition, or nullptr when the op has neither gradient nor mark.
const GradientDef* find_gradient(OpId op);

// Sums `grad` over the axes that broadcasting added or stretched, giving `shape`.
Tensor unbroadcast(const Tensor& grad, const Shape& shape);

}  // namespace strata::autograd
