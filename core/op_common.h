// Shared helpers of the op front-ends (core/ops_*.cc): device checks, output allocation
// and the call-kernel-then-record sequence. Internal to core.
#pragma once

#include <initializer_list>
#include <vector>

#include <strata/core/dispatch.h>
#include <strata/core/ops.h>
#include <strata/core/recorder.h>

namespace strata::detail {

// The one device rule of every op: an input must sit in the op's device memory, except a
// rank-0 host (CPU) tensor, a scalar that kernels of every backend read on the host.
inline bool is_host_scalar(const Tensor& t) { return t.ndim() == 0 && t.device().is_cpu(); }
inline bool usable_on(const Tensor& t, Device device) {
  return same_memory(t.device(), device) || is_host_scalar(t);
}
// The error for an input that breaks the rule.
[[noreturn]] void device_mismatch(const char* op, Device op_device, Device input_device);

// The device the op runs on: that of the first input that is not a host scalar. Inputs on
// other devices are an error naming the op.
Device op_device(const char* op, const Tensor* const* inputs, size_t n);
inline Device op_device(const char* op, std::initializer_list<const Tensor*> inputs) {
  return op_device(op, inputs.begin(), inputs.size());
}
inline Device op_device(const char* op, const std::vector<Tensor>& inputs) {
  std::vector<const Tensor*> ptrs;
  for (const auto& t : inputs) ptrs.push_back(&t);
  return op_device(op, ptrs.data(), ptrs.size());
}


void require_float(const char* op, const Tensor& t);
void require_defined(const char* op, const Tensor& t);

// Runs the kernel for op and records the call on the active tape, if any.
inline void compute(OpId op, const OpAttrs& attrs, std::span<const Tensor> in,
                    std::span<const Tensor> out) {
  run_kernel(op, attrs, in, out);
  record_op(op, attrs, in, out);
}

// Single-output convenience: allocates out(shape, dtype, device), computes, returns it.
Tensor compute1(OpId op, const OpAttrs& attrs, std::initializer_list<Tensor> in,
                const Shape& shape, DType dtype, Device device);

// A view of x (sharing storage), recorded under `op` with x as its input.
Tensor make_view(OpId op, const OpAttrs& attrs, const Tensor& x, Shape shape, Strides strides,
                 int64_t offset);

}  // namespace strata::detail
