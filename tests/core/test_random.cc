// Counter-based random numbers: Philox known answers, determinism per (seed, element),
// independence from the thread count, ranges and distribution statistics.
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::testing::identical;

TEST_CASE("random: Philox4x32-10 matches Random123's known-answer vectors", "[random]") {
  // Counter words (c0..c3) are (counter_lo low, counter_lo high, counter_hi low, counter_hi high);
  // key words (k0, k1) are (key low, key high).
  uint32_t out[4];
  random::Philox::block(0, 0, 0, out);
  CHECK(out[0] == 0x6627e8d5u);
  CHECK(out[1] == 0xe169c58du);
  CHECK(out[2] == 0xbc57ac4cu);
  CHECK(out[3] == 0x9b00dbd8u);
  random::Philox::block(~uint64_t(0), ~uint64_t(0), ~uint64_t(0), out);
  CHECK(out[0] == 0x408f276du);
  CHECK(out[1] == 0x41c83b0eu);
  CHECK(out[2] == 0xa20bc7c6u);
  CHECK(out[3] == 0x6d5451fdu);
  random::Philox::block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, out);
  CHECK(out[0] == 0xd16cfe09u);
  CHECK(out[1] == 0x94fdccebu);
  CHECK(out[2] == 0x5001e420u);
  CHECK(out[3] == 0x24126ea1u);
}

TEST_CASE("random: values depend only on seed and element index", "[random]") {
  Tensor a = random::uniform({1000}, 7);
  CHECK(identical(a, random::uniform({1000}, 7)));
  CHECK_FALSE(identical(a, random::uniform({1000}, 8)));
  // A prefix of a larger draw, and the same draw in another shape, are the same numbers.
  CHECK(identical(random::uniform({10}, 7), a.slice(0, 0, 10)));
  CHECK(identical(random::uniform({25, 40}, 7).reshape({1000}), a));
  CHECK(identical(random::normal({10}, 7), random::normal({100}, 7).slice(0, 0, 10)));
  CHECK(identical(random::bernoulli({10}, 0.5, 7), random::bernoulli({100}, 0.5, 7).slice(0, 0, 10)));
  // Different distributions with one seed use different streams.
  Tensor n = random::normal({1000}, 7);
  Tensor t = random::truncated_normal({1000}, 7);
  CHECK_FALSE(identical(n, t));
  CHECK_FALSE(identical(random::uniform({1000}, 7, -4.0, 4.0), random::normal({1000}, 7)));
  // float64 draws keep more bits than float32 ones of the same numbers.
  Tensor u64 = random::uniform({100}, 9, 0.0, 1.0, kFloat64);
  CHECK(identical(u64.cast(kFloat32), random::uniform({100}, 9)));
  CHECK(random::uniform({0}, 1).shape() == Shape{0});
  CHECK(random::uniform({}, 1).ndim() == 0);
  CHECK(random::uniform({3}, 1, 0.0, 1.0, kFloat32, cpu(1)).device() == cpu(1));
}

TEST_CASE("random: draws do not depend on the thread count", "[random][threads]") {
  auto draw = [] {
    return std::vector<Tensor>{random::uniform({1 << 18}, 11), random::normal({1 << 18}, 11),
                               random::truncated_normal({1 << 16}, 11), random::bernoulli({1 << 18}, 0.3, 11),
                               random::permutation(1 << 16, 11), random::uniform({1 << 16}, 11, -2.0, 2.0, kBFloat16)};
  };
  std::vector<Tensor> one, two;
  {
    testing::ThreadCountGuard g(1);
    one = draw();
  }
  {
    testing::ThreadCountGuard g(2);
    two = draw();
  }
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("draw #" << i);
    CHECK(identical(one[i], two[i]));
  }
}

TEST_CASE("random: uniform stays in low..high in every float dtype", "[random]") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0, 1}, {-3, -1}, {-1, 1}, {10, 11}}) {
      Tensor u = random::uniform({1 << 16}, 21, lo, hi, dt);
      CHECK(u.dtype() == dt);
      const auto v = u.to_vector<double>();
      double sum = 0;
      for (double e : v) {
        REQUIRE(e >= lo);
        REQUIRE(e < hi);
        sum += e;
      }
      CHECK(sum / double(v.size()) == Approx((lo + hi) / 2).margin((hi - lo) * 0.01));
    }
  }
  CHECK(identical(random::uniform({5}, 3, 2.0, 2.0), full({5}, 2)));
  REQUIRE_THROWS_WITH(random::uniform({2}, 1, 1.0, 0.0), Contains("random::uniform: low 1 > high 0"));
  REQUIRE_THROWS_WITH(random::uniform({2}, 1, 0.0, 1.0, kInt32), Contains("random::uniform: expected a floating dtype, got int32"));
}

TEST_CASE("random: normal, truncated normal and bernoulli statistics", "[random]") {
  const int64_t n = 1 << 18;
  auto moments = [](const Tensor& t) {
    const auto v = t.to_vector<double>();
    double m = 0, s = 0;
    for (double e : v) m += e;
    m /= double(v.size());
    for (double e : v) s += (e - m) * (e - m);
    return std::pair<double, double>{m, std::sqrt(s / double(v.size()))};
  };
  auto [m, s] = moments(random::normal({n}, 31, 2.0, 3.0));
  CHECK(m == Approx(2.0).margin(0.03));
  CHECK(s == Approx(3.0).margin(0.03));
  // Fraction within one standard deviation ~ 68.27%.
  const auto z = random::normal({n}, 32).to_vector<double>();
  int64_t within = 0;
  for (double e : z) within += std::abs(e) < 1;
  CHECK(double(within) / double(n) == Approx(0.6827).margin(0.005));

  Tensor t = random::truncated_normal({n}, 33, -1.0, 0.5);
  const auto tv = t.to_vector<double>();
  for (double e : tv) REQUIRE(std::abs(e + 1.0) <= 1.0 + 1e-6);  // within two deviations
  auto [tm, ts] = moments(t);
  CHECK(tm == Approx(-1.0).margin(0.01));
  CHECK(ts == Approx(0.5 * 0.8796).margin(0.01));  // the std of N(0,1) truncated at +-2

  for (double p : {0.0, 0.1, 0.5, 1.0}) {
    Tensor b = random::bernoulli({n}, p, 34);
    auto [bm, bs] = moments(b);
    CHECK(bm == Approx(p).margin(0.005));
  }
  CHECK(random::bernoulli({4}, 0.5, 1, kBool).dtype() == kBool);
  REQUIRE_THROWS_WITH(random::bernoulli({2}, 1.5, 1), Contains("random::bernoulli: probability must be in [0,1], got 1.5"));
  REQUIRE_THROWS_WITH(random::normal({2}, 1, 0.0, -1.0), Contains("random::normal: stddev must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(random::truncated_normal({2}, 1, 0.0, 1.0, kInt64), Contains("random::truncated_normal: expected a floating dtype"));
}

TEST_CASE("random: permutation", "[random]") {
  Tensor p = random::permutation(1000, 41);
  CHECK(p.dtype() == kInt64);
  auto v = p.to_vector<int64_t>();
  CHECK(identical(p, random::permutation(1000, 41)));
  CHECK_FALSE(identical(p, random::permutation(1000, 42)));
  std::vector<int64_t> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[size_t(i)] == i);
  int64_t fixed = 0;
  for (int64_t i = 0; i < 1000; ++i) fixed += v[size_t(i)] == i;
  CHECK(fixed < 10);  // a shuffle, not the identity (expected ~1 fixed point)
  CHECK(random::permutation(0, 1).shape() == Shape{0});
  CHECK(random::permutation(1, 1).to_vector<int64_t>() == std::vector<int64_t>{0});
  REQUIRE_THROWS_WITH(random::permutation(-1, 1), Contains("random::permutation: n must be >= 0, got -1"));
}
