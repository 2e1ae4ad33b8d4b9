// Helpers shared by strata's tests.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/core/ops.h>
#include <strata/core/tensor.h>
#include "tests/test_paths.h"  // shared_dir(), source_dir(), bin_dir()

namespace strata::testing {

// True when every element of a and b (as float64) satisfies |a-b| <= atol + rtol*|b|.
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  if (a.shape() != b.shape()) return false;
  auto va = a.to_vector<double>();
  auto vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) && std::isnan(vb[i])) continue;
    if (std::isinf(va[i]) && va[i] == vb[i]) continue;
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) return false;
  }
  return true;
}

}  // namespace strata::testing

// Evaluates a and b once each (they may be calls with side effects, e.g. tape.gradient).
#define REQUIRE_ALLCLOSE(a, b, ...)                                                     \
  do {                                                                                  \
    const ::strata::Tensor strata_got_ = (a);                                           \
    const ::strata::Tensor strata_want_ = (b);                                          \
    INFO("got " << strata_got_ << "\nwant " << strata_want_);                           \
    REQUIRE(::strata::testing::allclose(strata_got_, strata_want_ __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
