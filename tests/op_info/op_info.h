// The op-info table: one entry per OpId saying how to exercise that op in tests.
//
// Each entry names the dtypes the CPU backend supports for the op, whether the op is
// differentiable, the input domains that keep finite differences valid (log needs positive
// inputs, relu inputs away from its kink, max distinct values), tolerances per dtype, and a
// builder of sample calls: rank-0 to rank-3+ shapes, broadcasting where the op broadcasts,
// and non-contiguous operands (transposed or strided views).
//
// The op-info test (tests/autograd/test_op_info.cc) fails when an OpId has no entry, runs
// every sample in every listed dtype, checks the listed dtypes are exactly those the CPU
// accepts, and gradchecks every differentiable entry; the golden test checks that every op
// a golden case runs has an entry. The backend-parity test builds the same samples from
// the same seeds and compares a device against cpu:0:
//
//   for (const OpInfo& info : op_infos())
//     for (DType dt : info.dtypes) {
//       const auto on_cpu = info.samples(dt), on_gpu = info.samples(dt, cuda(0));
//       for (size_t k = 0; k < on_cpu.size(); ++k)  // sample k holds the same values on both
//         ... mismatch(on_gpu[k].run()[i].to(cpu()), on_cpu[k].run()[i], info.tolerance(dt)) ...
//     }
//
// Samples are made on cpu:0 from fixed seeds and moved with Tensor::to, so every device
// sees the same values. Their inputs are contiguous; the views that make an operand
// non-contiguous are taken inside OpSample::run, so they exist on any device (and
// gradcheck differentiates through them).
//
// The library is Catch-free: any test executable can link it (strata_test_op_info).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <strata/autograd/gradcheck.h>
#include <strata/core/device.h>
#include <strata/core/dtype.h>
#include <strata/core/op_id.h>
#include <strata/core/tensor.h>
#include "tests/op_info/sample_inputs.h"

namespace strata::testing {

// Elementwise closeness: |got - want| <= atol + rtol * |want|. Zero tolerances compare
// exactly (integer and bool results).
struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

// "" when `got` matches `want` within tol (same shape and dtype, NaN matching NaN,
// infinities matching exactly); otherwise what differs, for a failure message.
std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol);

// One call of an op on concrete inputs.
struct OpSample {
  // What the call covers, e.g. "[3,4] with [4]" or "transposed [4,3]".
  std::string description;
  // The tensors passed in, contiguous, on `device`. Integer inputs (indices, labels) and
  // bool conditions keep their own dtype; the others have the sample's dtype.
  std::vector<Tensor> inputs;
  Device device;
  // Calls the op through core/ops.h on (views of) the given inputs and returns its
  // outputs. The given inputs may differ from `inputs` (gradcheck perturbs them, the
  // float64 reference casts them) but have their shapes.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> call;
  // What the outputs must be, written down independently of the op's shape inference.
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  // False when finite differences cannot check this sample even in float64 (a cast to
  // float16 rounds away the perturbation). Samples with non-float outputs are skipped too.
  bool gradcheck = true;

  // Runs `call` with `device` current (creation ops allocate there).
  std::vector<Tensor> run(const std::vector<Tensor>& in) const;
  std::vector<Tensor> run() const { return run(inputs); }
};

// Makes an entry's samples in make.dtype() on cpu:0, drawing every value through `make`
// (so that the values follow the entry's domains and seeds).
using SampleBuilder = std::function<std::vector<OpSample>(SampleMaker& make)>;

struct OpInfo {
  OpId op{};
  // The dtypes the CPU backend runs the op in: the dtype of its data inputs (for creation
  // ops and one_hot, of the output). The op-info test checks every other dtype is refused.
  std::vector<DType> dtypes;
  // Must match the gradient registry (find_gradient(op)->differentiable).
  bool differentiable = false;
  // Where input k's values are drawn from (the last entry repeats for further inputs).
  std::vector<Domain> domains;
  SampleBuilder build;
  // Tolerance for comparing this op's results across devices, or a low-precision result
  // with the float64 result of the same inputs. Unset dtypes use default_tolerance().
  std::vector<std::pair<DType, Tolerance>> tolerances;
  // Finite-difference settings for the float64 gradcheck.
  autograd::GradcheckOptions gradcheck;
  // False when running the op leaves no trace on core's recording hook (core/recorder.h),
  // so the op-info test cannot confirm that the samples run it: the fused optimizer updates
  // are never recorded, and custom_gradient's forward pauses recording, which removes any
  // other recorder (its gradcheck shows that the custom node ran).
  bool recorded = true;

  const char* name() const { return op_name(op); }
  bool supports(DType dtype) const;
  Domain domain(size_t input) const;
  Tolerance tolerance(DType dtype) const;
  // The samples in `dtype` (also one it does not support, to check it is refused), made on
  // cpu:0 from seeds fixed per op and moved to `device`.
  std::vector<OpSample> samples(DType dtype, Device device = Device()) const;
};

// float64 1e-10, float32 1e-5, float16 2e-3, bfloat16 1.6e-2 (rtol and atol); exact for
// integer and bool results.
Tolerance default_tolerance(DType dtype);

// Every entry, in OpId order.
const std::vector<OpInfo>& op_infos();
// The entry of `op`, or nullptr when the table has none (the op-info test fails then).
const OpInfo* find_op_info(OpId op);

}  // namespace strata::testing
