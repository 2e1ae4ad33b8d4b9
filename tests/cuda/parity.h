// CPU-vs-CUDA parity over the op-info table (tests/op_info): every sample of every op, in
// every dtype the op supports, run on cpu:0 and on a CUDA device from the same values,
// compared within a tolerance per dtype. Shared by the emulation tests (tests/cuda_emulation,
// hand-written kernels run by g++ on the CPU) and the GPU tests (tests/cuda, a real device),
// so a new kernel family is covered in both as soon as it registers its kernels.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <strata/core/dispatch.h>
#include <strata/core/op_id.h>
#include <strata/core/tensor.h>
#include "tests/op_info/op_info.h"

namespace strata::cuda_testing {

// The largest difference the CUDA backend may show against the CPU, per dtype, before
// the op-info entry's own tolerance (the looser of the two applies). Transcendentals come
// from different libraries on each side (Eigen's packet math vs CUDA's libdevice, both
// within a few ulp); half types round a float32 result that may already differ by an ulp.
// TF32 is what cuBLASLt matmuls/cuDNN convolutions compute float32 in when allowed (10-bit
// mantissa); exactly rounded ops (add, mul, compare, cast, copy, uniform/bernoulli draws)
// are bitwise equal in every dtype and integer/bool results are always exact.
struct DtypeTolerance {
  const char* dtype;
  testing::Tolerance tol;
};
inline constexpr DtypeTolerance kCudaTolerances[] = {
    {"float64", {1e-12, 1e-12}},
    {"float32", {1e-5, 1e-6}},
    {"tf32", {5e-3, 5e-3}},
    {"float16", {2e-3, 2e-3}},
    {"bfloat16", {1.6e-2, 1.6e-2}},
};

inline testing::Tolerance cuda_tolerance(DType dtype, bool tf32 = false) {
  const char* name = tf32 && dtype == kFloat32 ? "tf32" : dtype_name(dtype);
  for (const DtypeTolerance& t : kCudaTolerances) {
    if (std::string(t.dtype) == name) return t.tol;
  }
  return {0.0, 0.0};  // integer and bool: exact
}

// Ops whose CUDA path is a library call (cuBLASLt, cuDNN): the emulation build cannot run
// them, and reports them as "not emulated" rather than passing (comparing the CPU with
// itself would prove nothing). Their marshalling is checked on a real GPU.
inline bool library_op(OpId op) {
  switch (op) {
    case OpId::MatMul:
    case OpId::Conv2D:
    case OpId::Conv2DBackpropInput:
    case OpId::Conv2DBackpropFilter:
      return true;
    default:
      return false;
  }
}

// (op, dtype) pairs the CUDA backend refuses by design with a strata::Error
// (CLARIFICATIONS: integer matmul is not required on the GPU). The parity run reports
// them apart ("unsupported on CUDA") instead of comparing them.
inline bool cuda_unsupported(OpId op, DType dtype) {
  return op == OpId::MatMul && (dtype == kInt32 || dtype == kInt64);
}

// The family of an op (core/op_id.h): "Unary", "Binary", "Reduce", ...
inline const char* op_family(OpId op) {
  switch (op) {
#define STRATA_PARITY_FAMILY(id, name, family) \
  case OpId::id:                               \
    return #family;
    STRATA_FOR_EACH_OP(STRATA_PARITY_FAMILY)
#undef STRATA_PARITY_FAMILY
  }
  return "?";
}

struct ParityReport {
  int64_t samples = 0;                       // compared and matching
  std::map<std::string, int64_t> per_op;     // op -> samples compared
  std::vector<std::string> failures;         // what differed or raised
  std::set<std::string> no_kernel;           // ops without a CUDA kernel yet
  std::set<std::string> not_emulated;        // library ops (emulation only)
  std::set<std::string> unsupported;         // "op dtype" refused by design (cuda_unsupported)

  std::string summary() const {
    std::ostringstream os;
    os << samples << " samples of " << per_op.size() << " ops match the CPU; " << failures.size()
       << " failures";
    auto list = [&](const char* what, const std::set<std::string>& s) {
      if (s.empty()) return;
      os << "\n" << what << " (" << s.size() << "):";
      for (const std::string& n : s) os << " " << n;
    };
    list("not on CUDA yet", no_kernel);
    list("not emulated (library calls, checked on a GPU)", not_emulated);
    list("unsupported on CUDA by design", unsupported);
    return os.str();
  }
};

// Runs every op-info sample of the ops `include` accepts on `device` and on cpu:0. With
// tf32, float32 samples are compared at the TF32 tolerance (for a run with
// strata::backends::cuda::set_allow_tf32(true)).
template <typename Include>
ParityReport run_parity(Device device, bool emulated, Include include, bool tf32 = false) {
  ParityReport r;
  for (const testing::OpInfo& info : testing::op_infos()) {
    if (!include(info.op)) continue;
    const std::string name = info.name();
    if (emulated && library_op(info.op)) {
      r.not_emulated.insert(name);
      continue;
    }
    if (find_kernel(info.op, device.type) == nullptr && !is_view_op(info.op)) {
      r.no_kernel.insert(name);
      continue;
    }
    for (DType dt : info.dtypes) {
      if (cuda_unsupported(info.op, dt)) {
        r.unsupported.insert(name + " " + dtype_name(dt));
        continue;
      }
      const std::vector<testing::OpSample> on_cpu = info.samples(dt);
      const std::vector<testing::OpSample> on_dev = info.samples(dt, device);
      testing::Tolerance tol = info.tolerance(dt);
      const testing::Tolerance floor = cuda_tolerance(dt, tf32);
      tol.rtol = std::max(tol.rtol, floor.rtol);
      tol.atol = std::max(tol.atol, floor.atol);
      for (size_t k = 0; k < on_cpu.size(); ++k) {
        const std::string where = name + " " + dtype_name(dt) + " " + on_cpu[k].description;
        std::vector<Tensor> want, got;
        try {
          want = on_cpu[k].run();
        } catch (const Error&) {
          continue;  // a sample the CPU refuses (the op-info test checks those)
        }
        try {
          got = on_dev[k].run();
          for (Tensor& t : got) t = t.defined() ? t.to(Device()) : t;
        } catch (const Error& e) {
          const std::string msg = e.what();
          if (msg.find("no kernel for device") != std::string::npos) {
            // A helper op of the sample (or the op itself) has no CUDA kernel yet.
            r.no_kernel.insert(name + " (via: " + msg.substr(0, msg.find(':')) + ")");
          } else {
            r.failures.push_back(where + ": raised on " + device.str() + ": " + msg);
          }
          continue;
        }
        if (got.size() != want.size()) {
          r.failures.push_back(where + ": " + std::to_string(got.size()) + " outputs, expected " +
                               std::to_string(want.size()));
          continue;
        }
        bool ok = true;
        for (size_t i = 0; i < want.size(); ++i) {
          const std::string m = testing::mismatch(got[i], want[i], tol);
          if (!m.empty()) {
            r.failures.push_back(where + ": output " + std::to_string(i) + ": " + m);
            ok = false;
          }
        }
        if (ok) {
          ++r.samples;
          ++r.per_op[name];
        }
      }
    }
  }
  return r;
}

}  // namespace strata::cuda_testing
