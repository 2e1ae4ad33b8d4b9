// kernels/cpu/vec_math.h: the accuracy each function states, measured in ulps (or as an
// absolute bound where stated) against a double-precision reference over dense sweeps of float inputs (every exponent, plus a
// fine linear grid), for the portable table and, on a CPU with AVX2 and FMA, the AVX2
// table; special values; and that an element's value does not depend on where it sits
// in the array (the tails of map and exp_sum).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include <strata/kernels/cpu/vec_math.h>
#include "tests/test_util.h"

// A named namespace around everything: in a unity batch (cmake/StrataUnity.cmake) these
// helpers share a translation unit with test_elementwise.cc's (gelu_tanh_ref, ...).
namespace vec_math_tests {

using strata::cpu_kernels::vec::Functions;
using strata::cpu_kernels::vec::UnaryFn;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMinNormal = std::numeric_limits<float>::min();

std::vector<const Functions*> tables() {
  std::vector<const Functions*> t = {&strata::cpu_kernels::vec::portable_functions()};
  if (const Functions* avx2 = strata::cpu_kernels::vec::avx2_functions()) t.push_back(avx2);
  return t;
}

// Inputs in [lo, hi]: a linear grid of `linear` points, and every 2^shift-th float by bit
// pattern of either sign (magnitudes from the smallest denormal up), so every binade is
// covered as densely as the linear grid covers [lo, hi].
std::vector<float> sweep(float lo, float hi, int linear = 1 << 19, int shift = 10) {
  std::vector<float> xs;
  for (int i = 0; i <= linear; ++i) xs.push_back(lo + (hi - lo) * float(double(i) / linear));
  const float top = std::max(std::fabs(lo), std::fabs(hi));
  for (uint32_t b = 1; b <= std::bit_cast<uint32_t>(top); b += 1u << shift) {
    const float m = std::bit_cast<float>(b);
    if (m <= hi) xs.push_back(m);
    if (-m >= lo) xs.push_back(-m);
  }
  return xs;
}

// The distance |got - want| in units of the float spacing at want (the denormal spacing
// below the smallest normal).
double ulps(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : HUGE_VAL;
  if (std::isinf(want)) return got == float(want) ? 0 : HUGE_VAL;
  const double a = std::fabs(want);
  const double spacing = a < kMinNormal ? std::ldexp(1.0, -149) : std::ldexp(1.0, std::ilogb(a) - 23);
  return std::fabs(double(got) - want) / spacing;
}

struct Worst {
  double ulps = 0;
  float x = 0;
  float got = 0;
  double want = 0;
  std::string str() const {
    std::ostringstream s;
    s.precision(9);
    s << ulps << " ulp at x = " << x << " (got " << got << ", want " << want << ")";
    return s.str();
  }
};

std::vector<float> run(UnaryFn f, const std::vector<float>& xs) {
  std::vector<float> ys(xs.size());
  f(xs.data(), ys.data(), int64_t(xs.size()));
  return ys;
}

// The largest error over xs where `counts(x, want)` (the points a bound is stated for).
template <typename Ref, typename Counts>
Worst worst(UnaryFn f, const std::vector<float>& xs, Ref ref, Counts counts) {
  const std::vector<float> ys = run(f, xs);
  Worst w;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = ref(double(xs[i]));
    if (!counts(xs[i], want)) continue;
    const double u = ulps(ys[i], want);
    if (u > w.ulps) w = {u, xs[i], ys[i], want};
  }
  return w;
}

const auto everywhere = [](float, double) { return true; };

std::vector<float> specials() {
  return {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), kMinNormal,
          std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
          -std::numeric_limits<float>::max()};
}

double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_u(double x) { return std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
double gelu_tanh_ref(double x) { return x / (1.0 + std::exp(-2.0 * gelu_tanh_u(x))); }

}  // namespace

TEST_CASE("vec_math: exp within 2 ulp, flushed below the smallest normal, inf above", "[vec_math]") {
  const double log_min = std::log(double(kMinNormal)), log_max = std::log(double(std::numeric_limits<float>::max()));
  for (const Functions* t : tables()) {
    INFO(t->isa);
    const std::vector<float> xs = sweep(-110.0f, 95.0f);
    const Worst w = worst(t->exp, xs, [](double x) { return std::exp(x); },
                          [&](float x, double) { return x > log_min + 1e-4 && x < log_max - 1e-4; });
    INFO("worst: " << w.str());
    CHECK(w.ulps <= 2.0);
    const std::vector<float> ys = run(t->exp, xs);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (xs[i] <= log_min - 1e-4) {
        INFO("x = " << xs[i]);
        REQUIRE(ys[i] == 0.0f);
      }
      if (xs[i] >= log_max + 1e-4) {
        INFO("x = " << xs[i]);
        REQUIRE(ys[i] == kInf);
      }
    }
    const std::vector<float> s = run(t->exp, specials());
    CHECK(s[0] == 1.0f);
    CHECK(s[1] == 1.0f);
    CHECK(s[2] == kInf);
    CHECK(s[3] == 0.0f);
    CHECK(std::isnan(s[4]));
    CHECK(s[5] == 1.0f);
    CHECK(s[7] == kInf);
    CHECK(s[8] == 0.0f);
  }
}

TEST_CASE("vec_math: sigmoid within 3 ulp", "[vec_math]") {
  for (const Functions* t : tables()) {
    INFO(t->isa);
    const Worst w = worst(t->sigmoid, sweep(-100.0f, 100.0f), [](double x) { return 1.0 / (1.0 + std::exp(-x)); },
                          [](float, double want) { return want >= kMinNormal; });
    INFO("worst: " << w.str());
    CHECK(w.ulps <= 3.0);
    const std::vector<float> s = run(t->sigmoid, specials());
    CHECK(s[0] == 0.5f);
    CHECK(s[2] == 1.0f);
    CHECK(s[3] == 0.0f);
    CHECK(std::isnan(s[4]));
  }
}

TEST_CASE("vec_math: tanh within 7 ulp", "[vec_math]") {
  for (const Functions* t : tables()) {
    INFO(t->isa);
    const Worst w = worst(t->tanh, sweep(-20.0f, 20.0f), [](double x) { return std::tanh(x); }, everywhere);
    INFO("worst: " << w.str());
    CHECK(w.ulps <= 7.0);
    const std::vector<float> s = run(t->tanh, specials());
    CHECK(s[0] == 0.0f);
    CHECK(std::signbit(s[1]));
    CHECK(s[2] == 1.0f);
    CHECK(s[3] == -1.0f);
    CHECK(std::isnan(s[4]));
    CHECK(s[7] == 1.0f);
  }
}

TEST_CASE("vec_math: erf within 8 ulp", "[vec_math]") {
  for (const Functions* t : tables()) {
    INFO(t->isa);
    const Worst w = worst(t->erf, sweep(-12.0f, 12.0f), [](double x) { return std::erf(x); }, everywhere);
    INFO("worst: " << w.str());
    CHECK(w.ulps <= 8.0);
    const std::vector<float> s = run(t->erf, specials());
    CHECK(s[0] == 0.0f);
    CHECK(s[2] == 1.0f);
    CHECK(s[3] == -1.0f);
    CHECK(std::isnan(s[4]));
  }
}

TEST_CASE("vec_math: gelu within 4 ulp for x >= 0, |x| 2^-21 below", "[vec_math]") {
  for (const Functions* t : tables()) {
    INFO(t->isa);
    const Worst pos = worst(t->gelu, sweep(0.0f, 20.0f), gelu_ref, everywhere);
    INFO("worst for x >= 0: " << pos.str());
    CHECK(pos.ulps <= 4.0);
    const std::vector<float> xs = sweep(-20.0f, 0.0f);
    const std::vector<float> ys = run(t->gelu, xs);
    double worst_abs = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      // (Plus the denormal spacing: x/2 of a denormal x rounds.)
      const double bound = std::fabs(double(xs[i])) * std::ldexp(1.0, -21) + std::ldexp(1.0, -149);
      const double scaled = std::fabs(double(ys[i]) - gelu_ref(xs[i])) / bound;
      if (scaled > worst_abs) {
        worst_abs = scaled;
        worst_x = xs[i];
      }
    }
    INFO("worst for x < 0: " << worst_abs << " of the bound at x = " << worst_x);
    CHECK(worst_abs <= 1.0);
    const std::vector<float> s = run(t->gelu, specials());
    CHECK(s[0] == 0.0f);
    CHECK(s[2] == kInf);
    CHECK(std::isnan(s[4]));
  }
}

TEST_CASE("vec_math: gelu_tanh within 4 + 4|2u| ulp of x / (1 + e^-2u), 4 ulp for x >= 0", "[vec_math]") {
  for (const Functions* t : tables()) {
    INFO(t->isa);
    const std::vector<float> xs = sweep(-20.0f, 20.0f);
    const std::vector<float> ys = run(t->gelu_tanh, xs);
    // e^(-2u) carries the relative rounding of 2u (a few roundings of 2^-24) as an absolute
    // error of its exponent: |2u| 2^-22 relative, i.e. 4 |2u| ulp, which matters only in
    // the negative tail (x < -2, where the result is below 5% of |x|).
    double worst_ratio = 0;
    Worst w;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = gelu_tanh_ref(xs[i]);
      if (std::fabs(want) < 1e-30) continue;
      const double u = ulps(ys[i], want);
      const double ratio = u / (4.0 + 4.0 * std::fabs(2.0 * gelu_tanh_u(xs[i])));
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        w = {u, xs[i], ys[i], want};
      }
    }
    INFO("worst against its bound: " << w.str());
    CHECK(worst_ratio <= 1.0);
    // For x >= 0, e^(-2u) <= 1 and its error hardly reaches the result: 4 ulp.
    const Worst pos = worst(t->gelu_tanh, sweep(0.0f, 20.0f), gelu_tanh_ref, everywhere);
    INFO("worst for x >= 0: " << pos.str());
    CHECK(pos.ulps <= 4.0);
    const std::vector<float> s = run(t->gelu_tanh, specials());
    CHECK(s[0] == 0.0f);
    CHECK(s[2] == kInf);
    CHECK(std::isnan(s[4]));
  }
}

TEST_CASE("vec_math: an element's value does not depend on its position in the array", "[vec_math]") {
  std::vector<float> xs(1031);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(std::sin(double(i) * 12.9898) * 6.0);
  for (const Functions* t : tables()) {
    INFO(t->isa);
    for (UnaryFn f : {t->exp, t->sigmoid, t->tanh, t->erf, t->gelu, t->gelu_tanh}) {
      const std::vector<float> whole = run(f, xs);
      for (int64_t start : {1, 3, 8, 13}) {
        for (int64_t n : {1, 5, 8, 9, 100}) {
          std::vector<float> part(static_cast<size_t>(n));
          f(xs.data() + start, part.data(), n);
          for (int64_t i = 0; i < n; ++i) REQUIRE(part[size_t(i)] == whole[size_t(start + i)]);
        }
      }
      std::vector<float> in_place = xs;
      f(in_place.data(), in_place.data(), int64_t(in_place.size()));
      CHECK(in_place == whole);
    }
  }
}

// exp_sum's exponential (vec_math.h: <= 2.5 ulp for x <= 0, flushed as exp is), measured
// through exp_sum's terms with shift 0 over a dense sweep of x <= 0.
TEST_CASE("vec_math: exp_sum's terms within 2.5 ulp of e^x, flushed below the smallest normal", "[vec_math]") {
  const double log_min = std::log(double(kMinNormal));
  for (const Functions* t : tables()) {
    INFO(t->isa);
    const std::vector<float> xs = sweep(-110.0f, 0.0f, 1 << 21);
    std::vector<float> ys(xs.size());
    const float sum = t->exp_sum(xs.data(), 0.0f, ys.data(), int64_t(xs.size()), {});
    CHECK(std::isfinite(sum));
    Worst w;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (xs[i] <= log_min - 1e-4) {
        INFO("x = " << xs[i]);
        REQUIRE(ys[i] == 0.0f);
      } else if (xs[i] > log_min + 1e-4) {
        const double want = std::exp(double(xs[i]));
        const double u = ulps(ys[i], want);
        if (u > w.ulps) w = {u, xs[i], ys[i], want};
      }
    }
    INFO("worst: " << w.str());
    CHECK(w.ulps <= 2.5);
    // Far below the threshold (where 2^n's exponent field would wrap), -inf, and the largest
    // negative float are flushed; NaN stays NaN; 0 gives exactly 1.
    const std::vector<float> s = {-1000.0f, -1e30f, -kInf, -std::numeric_limits<float>::max(), 0.0f, -0.0f,
                                  -std::numeric_limits<float>::denorm_min()};
    std::vector<float> e(s.size());
    t->exp_sum(s.data(), 0.0f, e.data(), int64_t(s.size()), {});
    for (size_t i = 0; i < 4; ++i) CHECK(e[i] == 0.0f);
    CHECK(e[4] == 1.0f);
    CHECK(e[5] == 1.0f);
    CHECK(e[6] == 1.0f);
    const float nan_in[] = {std::numeric_limits<float>::quiet_NaN()};
    float nan_out[1];
    t->exp_sum(nan_in, 0.0f, nan_out, 1, {});
    CHECK(std::isnan(nan_out[0]));
  }
}

TEST_CASE("vec_math: softmax row passes", "[vec_math]") {
  for (const Functions* t : tables()) {
    INFO(t->isa);
    for (int64_t n : {1, 7, 8, 31, 32, 33, 1000, 1024, 1031}) {
      INFO("n = " << n);
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(std::sin(double(i) * 12.9898) * 9.0);
      x[size_t(n / 2)] = 11.5f;  // the maximum, inside the row
      CHECK(t->max(x.data(), n) == 11.5f);
      // exp_sum's terms are e^(x - shift) within its 2.5 ulp, each the same whatever its
      // position (the tail's too: the terms of the shifted row with shift 0, computed as
      // one whole array, are the same bits), and sum to the double-precision sum within
      // the float accumulation's rounding.
      std::vector<float> shifted(x.size());
      for (size_t i = 0; i < x.size(); ++i) shifted[i] = x[i] - 11.5f;
      std::vector<float> want_terms(x.size());
      t->exp_sum(shifted.data(), 0.0f, want_terms.data(), n, {});
      std::vector<float> terms(x.size());
      const float sum = t->exp_sum(x.data(), 11.5f, terms.data(), n, {});
      CHECK(terms == want_terms);
      for (int64_t i = 0; i < n; ++i) REQUIRE(ulps(terms[size_t(i)], std::exp(double(shifted[size_t(i)]))) <= 2.5);
      std::vector<float> offset(x.size() + 5);
      t->exp_sum(x.data() + 1, 11.5f, offset.data() + 3, n - 1, {});
      for (int64_t i = 1; i < n; ++i) REQUIRE(offset[size_t(i + 2)] == terms[size_t(i)]);
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += std::exp(double(shifted[size_t(i)]));
      CHECK(std::fabs(double(sum) - want) <= 1e-6 * want);
      CHECK(t->exp_sum(x.data(), 11.5f, nullptr, n, {}) == sum);
      // Prefetching a next row changes nothing.
      std::vector<float> next_out(x.size()), terms_ahead(x.size());
      CHECK(t->exp_sum(x.data(), 11.5f, terms_ahead.data(), n, {shifted.data(), next_out.data()}) == sum);
      CHECK(terms_ahead == terms);
      std::vector<float> in_place = x;
      CHECK(t->exp_sum(in_place.data(), 11.5f, in_place.data(), n, {}) == sum);
      CHECK(in_place == want_terms);
      t->scale(terms.data(), 0.25f, n);
      for (int64_t i = 0; i < n; ++i) REQUIRE(terms[size_t(i)] == want_terms[size_t(i)] * 0.25f);
    }
    // A row of -inf but one element, and a row holding NaN.
    std::vector<float> r = {-kInf, -kInf, 2.0f, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
    CHECK(t->max(r.data(), 9) == 2.0f);
    CHECK(t->exp_sum(r.data(), 2.0f, nullptr, 9, {}) == 1.0f);
    r[7] = std::numeric_limits<float>::quiet_NaN();
    CHECK(std::isnan(t->exp_sum(r.data(), 2.0f, nullptr, 9, {})));
  }
}

}  // namespace vec_math_tests
