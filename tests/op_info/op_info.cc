#include "tests/op_info/op_info.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <strata/core/stream.h>
#include "tests/op_info/entries.h"

namespace strata::testing {

std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol) {
  std::ostringstream os;
  if (!got.defined() || !want.defined()) {
    os << (got.defined() ? "the expected" : "the actual") << " result is undefined";
    return os.str();
  }
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    os << "got " << got.dtype() << shape_str(got.shape()) << ", expected " << want.dtype()
       << shape_str(want.shape());
    return os.str();
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isinf(w[i])) {
      ok = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
    } else {
      const double err = std::abs(g[i] - w[i]);
      ok = err <= tol.atol + tol.rtol * std::abs(w[i]);
      if (!ok) worst = std::max(worst, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
    }
    if (!ok && bad++ == 0) first = int64_t(i);
  }
  if (bad == 0) return "";
  os << bad << " of " << g.size() << " elements differ (max |error| " << worst << ", rtol " << tol.rtol
     << ", atol " << tol.atol << "); first at flat index " << first << ": got " << g[size_t(first)]
     << ", expected " << w[size_t(first)];
  return os.str();
}

std::vector<Tensor> OpSample::run(const std::vector<Tensor>& in) const {
  DeviceGuard on(device);
  return call(in);
}

Tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float64:
      return {1e-10, 1e-10};
    case DType::Float32:
      return {1e-5, 1e-5};
    case DType::Float16:
      return {2e-3, 2e-3};
    case DType::BFloat16:
      return {1.6e-2, 1.6e-2};
    default:
      return {0.0, 0.0};
  }
}

bool OpInfo::supports(DType dtype) const {
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

Domain OpInfo::domain(size_t input) const {
  return domains.empty() ? Domain::Any : domains[std::min(input, domains.size() - 1)];
}

Tolerance OpInfo::tolerance(DType dtype) const {
  for (const auto& [dt, tol] : tolerances) {
    if (dt == dtype) return tol;
  }
  return default_tolerance(dtype);
}

namespace {

// FNV-1a of the op's name: seeds stay the same when op ids are renumbered.
uint64_t seed_of(OpId op) {
  uint64_t h = 1469598103934665603ull;
  for (const char* c = op_name(op); *c; ++c)
    h = (h ^ uint64_t(static_cast<unsigned char>(*c))) * 1099511628211ull;
  return h & 0xffffffffull;
}

}  // namespace

std::vector<OpSample> OpInfo::samples(DType dtype, Device device) const {
  SampleMaker make(dtype, domains, seed_of(op));
  std::vector<OpSample> out;
  {
    DeviceGuard on_cpu{Device()};  // made on cpu:0, whatever the caller's current device
    out = build(make);
  }
  for (OpSample& s : out) {
    s.device = device;
    for (Tensor& t : s.inputs) t = t.to(device);
  }
  return out;
}

const std::vector<OpInfo>& op_infos() {
  static const std::vector<OpInfo> table = [] {
    std::vector<OpInfo> t;
    add_elementwise_entries(t);
    add_reduce_shape_entries(t);
    add_nn_entries(t);
    add_creation_entries(t);
    std::sort(t.begin(), t.end(), [](const OpInfo& a, const OpInfo& b) { return a.op < b.op; });
    return t;
  }();
  return table;
}

const OpInfo* find_op_info(OpId op) {
  const auto& t = op_infos();
  auto it = std::lower_bound(t.begin(), t.end(), op, [](const OpInfo& e, OpId id) { return e.op < id; });
  return it != t.end() && it->op == op ? &*it : nullptr;
}

}  // namespace strata::testing
