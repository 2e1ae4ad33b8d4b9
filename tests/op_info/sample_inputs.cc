#include "tests/op_info/sample_inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include <strata/core/random.h>

namespace strata::testing {

const char* domain_name(Domain d) {
  switch (d) {
    case Domain::Any:
      return "any";
    case Domain::Positive:
      return "positive";
    case Domain::AwayFromZero:
      return "away from zero";
    case Domain::Grid:
      return "distinct multiples of 1/8";
    case Domain::OffGrid:
      return "distinct odd multiples of 1/16";
    case Domain::FewValues:
      return "integers in -2..2";
    case Domain::Indices:
      return "integer indices";
    case Domain::WithNonFinite:
      return "any, with inf, -inf and NaN";
  }
  return "?";
}

namespace {

// n uniforms in [0, 1) from seed, on cpu:0 whatever the current device.
std::vector<double> uniforms(int64_t n, uint64_t seed) {
  return random::uniform({n}, seed, 0.0, 1.0, kFloat64, Device()).to_vector<double>();
}

// A permutation of 0..n-1 (Fisher-Yates over the seed's uniforms).
std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
  const std::vector<double> u = uniforms(n, seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = std::min<int64_t>(int64_t(u[size_t(i)] * double(i + 1)), i);
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

}  // namespace

Tensor draw(const Shape& shape, Domain d, DType dtype, uint64_t seed) {
  const int64_t n = numel_of(shape);
  const bool integral = is_integral(dtype) || dtype == kBool;
  const std::vector<double> u = uniforms(n, seed);
  std::vector<double> v(static_cast<size_t>(n));
  switch (d) {
    case Domain::Any:
    case Domain::WithNonFinite:
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = dtype == kBool ? double(u[i] < 0.5)
               : integral     ? std::floor(-4.0 + 9.0 * u[i])
                              : -2.0 + 4.0 * u[i];
      }
      break;
    case Domain::Positive:
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = integral ? 1.0 + std::floor(5.0 * u[i]) : 0.25 + 2.25 * u[i];
      }
      break;
    case Domain::AwayFromZero: {
      const std::vector<double> sign = uniforms(n, seed ^ 0x5eed5eedull);
      for (size_t i = 0; i < v.size(); ++i) {
        const double mag = integral ? 1.0 + std::floor(4.0 * u[i]) : 0.25 + 1.75 * u[i];
        v[i] = (dtype == kBool || sign[i] < 0.5) ? mag : -mag;
      }
      break;
    }
    case Domain::Grid:
    case Domain::OffGrid: {
      if (dtype == kBool) {  // two values cannot be distinct: any bools
        for (size_t i = 0; i < v.size(); ++i) v[i] = double(u[i] < 0.5);
        break;
      }
      const std::vector<int64_t> p = permutation(n, seed);
      for (size_t i = 0; i < v.size(); ++i) {
        const double k = double(p[i] - n / 2);
        v[i] = integral ? k : k / 8.0 + (d == Domain::OffGrid ? 1.0 / 16.0 : 0.0);
      }
      break;
    }
    case Domain::FewValues:
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = dtype == kBool ? double(u[i] < 0.5) : std::min(std::floor(-2.0 + 5.0 * u[i]), 2.0);
      }
      break;
    case Domain::Indices:
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::floor(5.0 * u[i]);
      break;
  }
  if (d == Domain::WithNonFinite && is_floating(dtype)) {
    const double special[3] = {std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()};
    for (size_t i = 1; i < v.size(); i += 3) v[i] = special[(i / 3) % 3];
  }
  return Tensor::from_vector(v, shape, dtype, Device());
}

std::string check_domain(const Tensor& t, Domain d) {
  const std::vector<double> v = t.to_vector<double>();
  const DType dtype = t.dtype();
  std::ostringstream os;
  auto offender = [&](size_t i, const char* rule) {
    os << "element " << i << " = " << v[i] << " of a " << dtype << shape_str(t.shape()) << " input is not "
       << rule << " (domain: " << domain_name(d) << ")";
    return os.str();
  };
  if (d == Domain::Indices) {
    if (!is_integral(dtype)) return "indices must be int32 or int64, got " + std::string(dtype_name(dtype));
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0) return offender(i, "a non-negative index");
    }
    return "";
  }
  if (d == Domain::WithNonFinite) return "";
  std::set<double> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    if (!std::isfinite(x)) return offender(i, "finite");
    if (dtype == kBool) {
      if ((d == Domain::Positive || d == Domain::AwayFromZero) && x == 0) return offender(i, "true");
      continue;
    }
    switch (d) {
      case Domain::Positive:
        if (!(x > 0)) return offender(i, "positive");
        break;
      case Domain::AwayFromZero:
        if (!(std::abs(x) >= 0.25)) return offender(i, "at least 0.25 from zero");
        break;
      case Domain::Grid:
      case Domain::OffGrid: {
        if (!seen.insert(x).second) return offender(i, "distinct from the other elements");
        const double scaled = is_floating(dtype) ? x * 16.0 : 0.0;
        const bool odd = std::fmod(std::abs(scaled), 2.0) == 1.0;
        if (is_floating(dtype) && (scaled != std::floor(scaled) || odd != (d == Domain::OffGrid))) {
          return offender(i, d == Domain::Grid ? "a multiple of 1/8" : "an odd multiple of 1/16");
        }
        break;
      }
      case Domain::FewValues:
        if (x != std::floor(x) || std::abs(x) > 2) return offender(i, "an integer in -2..2");
        break;
      default:
        break;
    }
  }
  return "";
}

SampleMaker::SampleMaker(DType dtype, std::vector<Domain> domains, uint64_t seed)
    : dtype_(dtype), domains_(std::move(domains)), seed_(seed) {}

Tensor SampleMaker::input(size_t k, const Shape& shape) { return input(k, shape, dtype_); }

Tensor SampleMaker::input(size_t k, const Shape& shape, DType dtype) {
  const Domain d = domains_.empty() ? Domain::Any : domains_[std::min(k, domains_.size() - 1)];
  return draw(shape, d, dtype, seed_++);
}

Tensor SampleMaker::indices(const Shape& shape, int64_t extent, DType dtype) {
  std::vector<double> u = random::uniform(shape, seed_++, 0.0, 1.0, kFloat64, Device()).to_vector<double>();
  for (double& x : u) x = std::min(std::floor(x * double(extent)), double(extent - 1));
  return Tensor::from_vector(u, shape, dtype, Device());
}

}  // namespace strata::testing
