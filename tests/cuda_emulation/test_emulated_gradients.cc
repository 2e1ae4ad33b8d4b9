// Gradient parity of the emulated CUDA backend: for every differentiable op-info entry, in
// float64 and float32, the tape's gradients of sum(outputs * fixed random cotangents) with
// respect to every floating input, computed on cpu:0 and on the emulated cuda:0 from the
// same values, must match within the entry's tolerance (and parity.h's CUDA floor). The
// backward pass runs with cuda:0 current, so its temporaries land on the device too. Ops
// whose forward or backward reaches a library op (cuBLAS/cuDNN: matmul, conv2d*) cannot run
// under the emulator and are reported as "not emulated", never counted as passing.
// Every sample is compared: the op-info samples are small, so the whole run takes seconds
// (one std::thread per emulated CUDA thread), also under TSan.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include "tests/cuda/parity.h"
#include "tests/cuda_emulation/emulated_runtime.h"
#include "tests/op_info/op_info.h"

using namespace strata;
using strata::testing::Tolerance;

namespace {

struct GradReport {
  int64_t samples = 0;                    // compared and matching
  std::map<std::string, int64_t> per_op;  // op -> samples compared
  std::vector<std::string> failures;
  std::set<std::string> not_emulated;     // reaches a library op (cuBLAS/cuDNN)
  std::set<std::string> no_kernel;        // reaches a non-library op with no CUDA kernel

  std::string summary() const {
    std::ostringstream os;
    os << "gradients: " << per_op.size() << " ops compared, " << samples << " samples match the CPU, "
       << failures.size() << " failures";
    auto list = [&](const char* what, const std::set<std::string>& s) {
      os << "; " << what << " (" << s.size() << "):";
      for (const std::string& n : s) os << " " << n;
    };
    list("not emulated", not_emulated);
    if (!no_kernel.empty()) list("no CUDA kernel", no_kernel);
    return os.str();
  }
};

// The op-info entry named `name`, if any.
const testing::OpInfo* info_named(const std::string& name) {
  for (const testing::OpInfo& info : testing::op_infos()) {
    if (name == info.name()) return &info;
  }
  return nullptr;
}

// Gradients of sum_i sum(outputs[i] * cotangents[i]) w.r.t. the floating inputs of `s`,
// computed with s.device current and moved to the host, in input order.
// `cotangents` (on the host, one per output; undefined for non-floating outputs) are drawn
// from `seed` on the first call (the CPU's) and reused by the second (the device's).
std::vector<Tensor> sample_gradients(const testing::OpSample& s, std::vector<Tensor>& cotangents,
                                     uint64_t seed) {
  std::vector<Tensor> grads;
  {
    DeviceGuard on(s.device);
    GradientTape tape;
    std::vector<Tensor> sources;
    for (const Tensor& t : s.inputs) {
      if (is_floating(t.dtype())) {
        tape.watch(t);
        sources.push_back(t);
      }
    }
    const std::vector<Tensor> outs = s.run(s.inputs);
    if (cotangents.empty()) {
      for (size_t i = 0; i < outs.size(); ++i) {
        const bool use = outs[i].defined() && is_floating(outs[i].dtype());
        cotangents.push_back(use ? random::normal(outs[i].shape(), seed + i, 0.0, 1.0, kFloat64, Device())
                                       .cast(outs[i].dtype())
                                 : Tensor());
      }
    }
    STRATA_CHECK(cotangents.size() == outs.size(), "gradient parity: output count differs");
    Tensor loss;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!cotangents[i].defined()) continue;
      const Tensor term = sum(mul(outs[i], cotangents[i].to(s.device)));
      loss = loss.defined() ? add(loss, term) : term;
    }
    if (!loss.defined()) return {};
    const std::vector<Tensor> g = tape.gradient(loss, sources, {}, autograd::UnconnectedGradients::Zero);
    for (const Tensor& t : g) {
      STRATA_CHECK(!t.defined() || t.device() == s.device, "gradient parity: a gradient landed on ",
                   t.device(), ", not ", s.device);
      grads.push_back(t.defined() ? t.to(Device()) : t);
    }
  }
  return grads;
}

GradReport run_gradient_parity(Device device) {
  GradReport r;
  for (const testing::OpInfo& info : testing::op_infos()) {
    if (!info.differentiable) continue;
    const std::string name = info.name();
    if (cuda_testing::library_op(info.op)) {
      r.not_emulated.insert(name);
      continue;
    }
    for (DType dt : {kFloat64, kFloat32}) {
      if (!info.supports(dt)) continue;
      const std::vector<testing::OpSample> on_cpu = info.samples(dt);
      const std::vector<testing::OpSample> on_dev = info.samples(dt, device);
      testing::Tolerance tol = info.tolerance(dt);
      const testing::Tolerance floor = cuda_testing::cuda_tolerance(dt);
      tol.rtol = std::max(tol.rtol, floor.rtol);
      tol.atol = std::max(tol.atol, floor.atol);
      for (size_t k = 0; k < on_cpu.size(); ++k) {
        const std::string where = name + " " + dtype_name(dt) + " " + on_cpu[k].description;
        std::vector<Tensor> cotangents, want, got;
        try {
          want = sample_gradients(on_cpu[k], cotangents, /*seed=*/1000 + 17 * k);
        } catch (const Error&) {
          continue;  // a sample the CPU refuses (the op-info test checks those)
        }
        if (want.empty()) continue;  // no floating input or no floating output
        try {
          got = sample_gradients(on_dev[k], cotangents, 0);
        } catch (const Error& e) {
          const std::string msg = e.what();
          if (msg.find("no kernel for device") != std::string::npos) {
            const std::string via = msg.substr(0, msg.find(':'));
            const testing::OpInfo* via_info = info_named(via);
            const std::string entry = via == name ? name : name + " (via " + via + ")";
            if (via_info != nullptr && cuda_testing::library_op(via_info->op)) {
              r.not_emulated.insert(entry);
            } else {
              r.no_kernel.insert(entry);
            }
          } else {
            r.failures.push_back(where + ": raised on " + device.str() + ": " + msg);
          }
          continue;
        }
        if (got.size() != want.size()) {
          r.failures.push_back(where + ": " + std::to_string(got.size()) + " gradients, expected " +
                               std::to_string(want.size()));
          continue;
        }
        bool ok = true;
        for (size_t i = 0; i < want.size(); ++i) {
          if (!want[i].defined() || !got[i].defined()) {
            if (want[i].defined() != got[i].defined()) {
              r.failures.push_back(where + ": gradient " + std::to_string(i) + " defined on one side only");
              ok = false;
            }
            continue;
          }
          const std::string m = testing::mismatch(got[i], want[i], tol);
          if (!m.empty()) {
            r.failures.push_back(where + ": gradient of floating input " + std::to_string(i) + ": " + m);
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

}  // namespace

TEST_CASE("emulated CUDA: gradients of every differentiable op-info entry match the CPU", "[cuda-emulation]") {
  const int64_t launches_before = cuda_emulation::launches();
  const GradReport r = run_gradient_parity(cuda(0));
  std::cout << "[cuda-emulation gradient parity] " << r.summary() << "\n";
  for (const std::string& f : r.failures) FAIL_CHECK(f);
  CHECK(r.no_kernel.empty());
  CHECK(r.not_emulated.count("matmul") == 1);
  CHECK(r.samples > 0);
  CHECK(cuda_emulation::launches() > launches_before);
  // Every differentiable entry was compared or reported as not emulated.
  for (const testing::OpInfo& info : testing::op_infos()) {
    if (!info.differentiable) continue;
    INFO(info.name());
    const bool reported = std::any_of(r.not_emulated.begin(), r.not_emulated.end(), [&](const std::string& n) {
      return n == info.name() || n.rfind(std::string(info.name()) + " (via ", 0) == 0;
    });
    CHECK((r.per_op.count(info.name()) == 1 || reported));
  }
}
