// Kernel registry: per (OpId, DeviceType) a kernel function, registered by the backends
// (kernels/cpu, kernels/cuda) when they are initialised; and per (source, destination)
// device type a copy function.
//
// Front-ends (core/ops) check arguments, infer and allocate outputs, then call
// run_kernel(); kernels write into the preallocated outputs, enqueued on `stream`.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <strata/core/op_attrs.h>
#include <strata/core/op_id.h>
#include <strata/core/stream.h>
#include <strata/core/tensor.h>

namespace strata {

struct KernelArgs {
  OpId op;
  const OpAttrs& attrs;
  std::span<const Tensor> in;   // on the op's device, or rank-0 host scalars
  std::span<const Tensor> out;  // on the op's device
  Stream stream;                // the current stream of the op's device
};

using KernelFn = void (*)(const KernelArgs&);

void register_kernel(OpId op, DeviceType device, KernelFn fn);
KernelFn find_kernel(OpId op, DeviceType device);  // nullptr when none
// Runs the kernel for `op` on the device of its outputs (or of its first input when it has
// none) and that device's current stream. Raises a strata::Error naming the op and the
// devices when an input lives elsewhere (rank-0 host scalars excepted: kernels read them
// on the host) or no kernel is registered.
void run_kernel(OpId op, const OpAttrs& attrs, std::span<const Tensor> in,
                std::span<const Tensor> out);

// Copies between devices: one function per (source type, destination type), registered
// by the backends. `dst` is contiguous with src's shape and dtype (src may be strided);
// the copy is enqueued on `stream` (that of the non-CPU side) and, unless non_blocking,
// has finished when the function returns.
using CopyFn = void (*)(const Tensor& src, const Tensor& dst, const Stream& stream,
                        bool non_blocking);
void register_copy(DeviceType src, DeviceType dst, CopyFn fn);
CopyFn find_copy(DeviceType src, DeviceType dst);  // nullptr when none

// Backends register themselves: each backend library defines one static
// BackendRegistration whose init function registers its kernels, copies, allocator and
// stream backend. Core names no backend but the host's own CPU kernels (compiled into
// strata_core): the first kernel lookup runs the CPU's registration and then every
// registered backend's init, once; a backend registered later is initialised at once.
struct BackendRegistration {
  BackendRegistration(const char* name, void (*init)());
};
// Runs every backend's registration exactly once (called lazily by find_kernel).
void ensure_backends_registered();
// The names of the backends registered so far ("cpu" first).
std::vector<std::string> registered_backends();
// Defined by kernels/cpu: register_kernel()/register_copy() for the CPU.
void register_cpu_kernels();

// View ops (reshape, transpose, slice, broadcast_to) are computed by the front-end for
// every device without a kernel; the registry test accepts them as such.
bool is_view_op(OpId op);

}  // namespace strata
