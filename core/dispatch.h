// Kernel registry: per (OpId, DeviceType) a kernel function, registered by the backend
// source files (kernels/cpu, kernels/cuda) at static-initialisation time.
//
// Front-ends (core/ops) check arguments, infer and allocate outputs, then call
// run_kernel(); kernels write into the preallocated outputs.
#pragma once

#include <span>

#include "core/op_attrs.h"
#include "core/op_id.h"
#include "core/tensor.h"

namespace strata {

struct KernelArgs {
  OpId op;
  const OpAttrs& attrs;
  std::span<const Tensor> in;
  std::span<const Tensor> out;
};

using KernelFn = void (*)(const KernelArgs&);

void register_kernel(OpId op, DeviceType device, KernelFn fn);
KernelFn find_kernel(OpId op, DeviceType device);  // nullptr when none
// Runs the kernel for `op` on the device of the outputs (or first input); throws a
// strata::Error naming op and device when no kernel is registered.
void run_kernel(OpId op, const OpAttrs& attrs, std::span<const Tensor> in,
                std::span<const Tensor> out);

// Registers every backend's kernels exactly once (called lazily by find_kernel).
void ensure_cpu_kernels_registered();
// Defined by kernels/cpu (and kernels/cuda in CUDA builds): register_kernel() for each op.
void register_cpu_kernels();
void register_cuda_kernels();
// View ops (reshape, transpose, slice, broadcast_to) are computed by the front-end for
// every device without a kernel; the registry test accepts them as such.
bool is_view_op(OpId op);

}  // namespace strata
