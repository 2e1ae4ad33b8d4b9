// DTypes: names, sizes, NumPy-style promotion (float widths never mix silently), casts, and
// the float16/bfloat16 storage types against a brute-force round-to-nearest-even reference.
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>

#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;

namespace {

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even into a 16-bit float format, by searching the sorted table of its
// non-negative finite values (an implementation independent of core/half.h's bit tricks).
struct Reference16 {
  std::vector<double> values;  // indexed by bit pattern 0 .. max_finite
  uint16_t inf_bits;

  template <typename ToFloat>
  Reference16(uint16_t max_finite, uint16_t inf, ToFloat to_float) : inf_bits(inf) {
    for (uint32_t b = 0; b <= max_finite; ++b) values.push_back(double(to_float(uint16_t(b))));
  }

  uint16_t round(float f) const {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::abs(double(f));
    const double max = values.back(), prev = values[values.size() - 2];
    if (a >= max + (max - prev) / 2) return uint16_t(sign | inf_bits);  // max has an odd mantissa
    auto it = std::upper_bound(values.begin(), values.end(), a);
    const size_t hi = size_t(it - values.begin());  // first value > a
    const size_t lo = hi - 1;
    if (hi == values.size() || values[lo] == a) return uint16_t(sign | lo);
    const double dl = a - values[lo], dh = values[hi] - a;
    const size_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return uint16_t(sign | pick);
  }
};

const Reference16& half_reference() {
  static const Reference16 r(0x7bff, 0x7c00, [](uint16_t b) { return Half::to_float(b); });
  return r;
}
const Reference16& bf16_reference() {
  static const Reference16 r(0x7f7f, 0x7f80, [](uint16_t b) { return bits_to_float(uint32_t(b) << 16); });
  return r;
}

bool half_is_nan(uint16_t b) { return (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

}  // namespace

TEST_CASE("dtype: names, sizes and parsing", "[dtype]") {
  const std::vector<std::pair<DType, size_t>> sizes = {
      {kFloat32, 4}, {kFloat64, 8}, {kFloat16, 2}, {kBFloat16, 2},
      {kInt32, 4},   {kInt64, 8},   {kBool, 1}};
  for (auto [t, n] : sizes) {
    CHECK(dtype_size(t) == n);
    CHECK(dtype_from_name(dtype_name(t)) == t);
  }
  CHECK(std::string(dtype_name(kBFloat16)) == "bfloat16");
  CHECK(dtype_from_name("f16") == kFloat16);
  CHECK(dtype_from_name("bf16") == kBFloat16);
  CHECK(dtype_from_name("double") == kFloat64);
  CHECK(dtype_from_name("i64") == kInt64);
  REQUIRE_THROWS_WITH(dtype_from_name("complex64"), Contains("dtype: unknown dtype name 'complex64'"));
  CHECK(is_floating(kBFloat16));
  CHECK_FALSE(is_floating(kInt32));
  CHECK(is_integral(kInt64));
  CHECK_FALSE(is_integral(kBool));
  CHECK(is_half(kFloat16));
  CHECK_FALSE(is_half(kFloat32));
  std::ostringstream os;
  os << kInt32;
  CHECK(os.str() == "int32");
}

TEST_CASE("dtype: promotion follows NumPy for int/float and refuses mixed float widths", "[dtype]") {
  CHECK(promote_types(kInt32, kFloat32, "add") == kFloat32);
  CHECK(promote_types(kInt64, kFloat64, "add") == kFloat64);
  CHECK(promote_types(kInt64, kFloat16, "add") == kFloat16);
  CHECK(promote_types(kInt32, kInt64, "add") == kInt64);
  CHECK(promote_types(kBool, kInt32, "add") == kInt32);
  CHECK(promote_types(kBool, kBFloat16, "add") == kBFloat16);
  CHECK(promote_types(kFloat16, kFloat16, "add") == kFloat16);
  REQUIRE_THROWS_WITH(promote_types(kFloat32, kFloat64, "mul"),
                      Contains("mul: cannot mix float dtypes float32 and float64 without an explicit cast"));
  REQUIRE_THROWS_WITH(promote_types(kFloat16, kBFloat16, "add"),
                      Contains("cannot mix float dtypes float16 and bfloat16"));

  SECTION("through the ops") {
    Tensor i = Tensor::from_vector(std::vector<int32_t>{1, 2, 3});
    Tensor f = tensor({0.5f, 0.5f, 0.5f});
    Tensor r = i + f;
    CHECK(r.dtype() == kFloat32);
    CHECK(r.to_vector<float>() == std::vector<float>{1.5f, 2.5f, 3.5f});
    CHECK((f * i).dtype() == kFloat32);
    Tensor l = Tensor::from_vector(std::vector<int64_t>{10, 20, 30});
    CHECK((i + l).dtype() == kInt64);
    CHECK((i + l).to_vector<int64_t>() == std::vector<int64_t>{11, 22, 33});
    Tensor b = Tensor::from_vector(std::vector<bool>{true, false, true});
    CHECK((b + i).dtype() == kInt32);
    CHECK((b + i).to_vector<int>() == std::vector<int>{2, 2, 4});
    CHECK(less(i, f + 1.0).dtype() == kBool);
    CHECK(where(b, i, f).dtype() == kFloat32);
    REQUIRE_THROWS_WITH(f + f.cast(kFloat64),
                        Contains("add: cannot mix float dtypes float32 and float64 without an explicit cast"));
    REQUIRE_THROWS_WITH(maximum(f.cast(kFloat16), f),
                        Contains("maximum: cannot mix float dtypes float16 and float32"));
    REQUIRE_THROWS_WITH(where(b, f, f.cast(kFloat64)), Contains("where: cannot mix float dtypes"));
    REQUIRE_THROWS_WITH(b + b, Contains("add: expected numeric tensors, got bool and bool"));
    // A host scalar takes the tensor's dtype.
    CHECK((f.cast(kFloat64) * 2.0).dtype() == kFloat64);
    CHECK((i * 2.0).dtype() == kInt32);
    CHECK((f.cast(kBFloat16) + 1.0).dtype() == kBFloat16);
    // Integer division by a scalar gives float32, like NumPy's true division.
    CHECK((i / 2.0).dtype() == kFloat32);
    CHECK((i / 2.0).to_vector<float>() == std::vector<float>{0.5f, 1.0f, 1.5f});
  }
}

TEST_CASE("dtype: cast between every pair of dtypes", "[dtype][cast]") {
  const std::vector<DType> all = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};
  const std::vector<double> v = {0, 1, 2, 3, 100};  // exact in every dtype but bool
  for (DType from : all) {
    for (DType to : all) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      Tensor x = Tensor::from_vector(v, {5}, from);
      Tensor y = x.cast(to);
      CHECK(y.dtype() == to);
      std::vector<double> want = x.to_vector<double>();
      if (to == kBool) {
        for (double& w : want) w = w != 0 ? 1 : 0;
      }
      CHECK(y.to_vector<double>() == want);
      // Non-contiguous sources cast their logical values.
      CHECK(testing::strided_copy(x).cast(to).to_vector<double>() == want);
    }
  }
  Tensor same = ones({2});
  CHECK(same.cast(kFloat32).impl_ptr() == same.impl_ptr());  // no-op cast aliases

  // float -> int truncates toward zero (C semantics, as NumPy's astype)...
  CHECK(tensor({-2.7f, 2.7f, -0.5f}).cast(kInt32).to_vector<int>() == std::vector<int>{-2, 2, 0});
  // ...and, where C++ leaves the result undefined, NaN gives 0 and out-of-range values saturate.
  const int32_t imax = std::numeric_limits<int32_t>::max(), imin = std::numeric_limits<int32_t>::min();
  Tensor odd = tensor({NAN, INFINITY, -INFINITY, 3e9f, -3e9f, 2147483520.0f});
  const std::vector<int> sat = {0, imax, imin, imax, imin, 2147483520};
  CHECK(odd.cast(kInt32).to_vector<int>() == sat);
  CHECK(odd.to_vector<int>() == sat);
  CHECK(odd.cast(kFloat16).cast(kInt32).to_vector<int>()[1] == imax);
  CHECK(odd.cast(kFloat64).cast(kInt64).to_vector<int64_t>()[1] == std::numeric_limits<int64_t>::max());
  CHECK(Tensor::from_vector(std::vector<double>{1e30, -1e300}).cast(kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()});
  // Anything non-zero is true, including tiny values, NaN and negative numbers.
  Tensor d = Tensor::from_vector(std::vector<double>{1e-50, -3, 0, NAN, -0.0});
  CHECK(d.cast(kBool).to_vector<bool>() == std::vector<bool>{true, true, false, true, false});
  CHECK(d.to_vector<bool>() == std::vector<bool>{true, true, false, true, false});
  CHECK(Tensor::from_vector(std::vector<float>{1e-30f}).cast(kBool).item<bool>());
  // Large int64 survives a float64 round trip when exactly representable.
  Tensor big = Tensor::from_vector(std::vector<int64_t>{int64_t(1) << 52, -(int64_t(1) << 40)});
  CHECK(big.cast(kFloat64).cast(kInt64).to_vector<int64_t>() == big.to_vector<int64_t>());
}

TEST_CASE("dtype: float16 rounding, subnormals, overflow, inf and nan", "[dtype][half]") {
  auto h = [](float f) { return Half::from_float(f); };
  CHECK(h(0.0f) == 0x0000);
  CHECK(h(-0.0f) == 0x8000);
  CHECK(h(1.0f) == 0x3c00);
  CHECK(h(-2.0f) == 0xc000);
  CHECK(h(65504.0f) == 0x7bff);  // largest finite
  CHECK(h(65519.0f) == 0x7bff);  // below the halfway point to 65536
  CHECK(h(65520.0f) == 0x7c00);  // the tie rounds to even: infinity
  CHECK(h(1e6f) == 0x7c00);
  CHECK(h(-1e6f) == 0xfc00);
  CHECK(h(INFINITY) == 0x7c00);
  CHECK(h(-INFINITY) == 0xfc00);
  CHECK(half_is_nan(h(NAN)));
  CHECK(half_is_nan(h(bits_to_float(0x7f800001))));  // signalling NaN stays NaN
  // Ties go to the even mantissa.
  CHECK(h(1.0f + 0x1p-11f) == 0x3c00);          // halfway between 1 and 1+2^-10 -> 1
  CHECK(h(1.0f + 3 * 0x1p-11f) == 0x3c02);      // halfway between 1+2^-10 and 1+2^-9 -> even
  CHECK(h(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);  // just above halfway rounds up
  // Subnormals: the smallest is 2^-24; half of it is a tie that rounds to zero.
  CHECK(h(0x1p-24f) == 0x0001);
  CHECK(h(0x1p-25f) == 0x0000);
  CHECK(h(0x1.8p-25f) == 0x0001);
  CHECK(h(0x1.8p-24f) == 0x0002);                // 1.5 ulps: tie -> even (2)
  CHECK(h(0x1p-14f) == 0x0400);                  // smallest normal
  CHECK(h(0x1p-14f - 0x1p-24f) == 0x03ff);       // largest subnormal
  CHECK(h(0x1p-14f - 0x1p-26f) == 0x0400);       // rounds up into the normal range
  CHECK(h(1e-10f) == 0x0000);
  CHECK(Half::to_float(0x0001) == 0x1p-24f);
  CHECK(Half::to_float(0x03ff) == 0x1p-14f - 0x1p-24f);
  CHECK(Half::to_float(0x7bff) == 65504.0f);
  CHECK(std::isinf(Half::to_float(0x7c00)));
  CHECK(std::isnan(Half::to_float(0x7e00)));
  CHECK(std::signbit(Half::to_float(0x8000)));

  SECTION("every float16 value round-trips through float32") {
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const float f = Half::to_float(uint16_t(b));
      if (half_is_nan(uint16_t(b))) {
        REQUIRE(std::isnan(f));
        REQUIRE(half_is_nan(Half::from_float(f)));
      } else {
        REQUIRE(Half::from_float(f) == b);
      }
    }
  }
  SECTION("rounding of arbitrary floats matches the brute-force reference") {
    std::mt19937 rng(12345);
    // Cover the whole range that maps to finite halves and a little beyond.
    std::uniform_int_distribution<uint32_t> bits(0, 0x47900000);
    for (int i = 0; i < 200000; ++i) {
      const uint32_t u = bits(rng) | (i % 2 ? 0x80000000u : 0u);
      const float f = bits_to_float(u);
      INFO("float bits 0x" << std::hex << u);
      REQUIRE(Half::from_float(f) == half_reference().round(f));
    }
    // And every midpoint between neighbouring halves exactly.
    for (uint32_t b = 0; b < 0x7bff; ++b) {
      const float mid = float((double(Half::to_float(uint16_t(b))) + double(Half::to_float(uint16_t(b + 1)))) / 2);
      REQUIRE(Half::from_float(mid) == half_reference().round(mid));
    }
  }
}

TEST_CASE("dtype: bfloat16 rounding, subnormals, overflow, inf and nan", "[dtype][half]") {
  auto b = [](float f) { return BFloat16::from_float(f); };
  CHECK(b(1.0f) == 0x3f80);
  CHECK(b(-0.0f) == 0x8000);
  CHECK(b(1.0f + 0x1p-8f) == 0x3f80);      // tie -> even
  CHECK(b(1.0f + 3 * 0x1p-8f) == 0x3f82);  // tie -> even
  CHECK(b(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  CHECK(b(3.4e38f) == 0x7f80);             // beyond the largest finite bfloat16: inf
  CHECK(b(bits_to_float(0x7f7f7fff)) == 0x7f7f);
  CHECK(b(bits_to_float(0x7f7f8000)) == 0x7f80);
  CHECK(b(INFINITY) == 0x7f80);
  CHECK(b(-INFINITY) == 0xff80);
  CHECK(bf16_is_nan(b(NAN)));
  CHECK(bf16_is_nan(b(bits_to_float(0x7f800001))));  // low-payload NaN must not become inf
  CHECK(bf16_is_nan(b(bits_to_float(0xff800001))));
  CHECK(b(bits_to_float(0x00010000)) == 0x0001);     // float32 subnormals keep their top bits
  CHECK(b(bits_to_float(0x00008000)) == 0x0000);     // tie -> even (0)
  CHECK(b(bits_to_float(0x00018000)) == 0x0002);     // tie -> even (2)
  CHECK(float(BFloat16(2.5f)) == 2.5f);

  SECTION("every bfloat16 value round-trips through float32") {
    for (uint32_t v = 0; v < 0x10000; ++v) {
      const float f = bits_to_float(v << 16);
      if (bf16_is_nan(uint16_t(v))) {
        REQUIRE(bf16_is_nan(BFloat16::from_float(f)));
      } else {
        REQUIRE(BFloat16::from_float(f) == v);
      }
    }
  }
  SECTION("rounding of arbitrary floats matches the brute-force reference") {
    std::mt19937 rng(54321);
    std::uniform_int_distribution<uint32_t> bits(0, 0x7f800000);
    for (int i = 0; i < 200000; ++i) {
      const uint32_t u = bits(rng) | (i % 2 ? 0x80000000u : 0u);
      const float f = bits_to_float(u);
      INFO("float bits 0x" << std::hex << u);
      REQUIRE(BFloat16::from_float(f) == bf16_reference().round(f));
    }
  }
}

TEST_CASE("dtype: float16/bfloat16 tensors compute in float32 and round once", "[dtype][half]") {
  SECTION("tensor casts round to nearest even") {
    Tensor x = Tensor::from_vector(std::vector<float>{1.0f + 0x1p-11f, 65519.0f, 65520.0f, 0x1p-25f,
                                                      0x1.8p-25f, NAN, -INFINITY});
    const auto back = x.cast(kFloat16).cast(kFloat32).to_vector<float>();
    CHECK(back[0] == 1.0f);
    CHECK(back[1] == 65504.0f);
    CHECK(back[2] == INFINITY);
    CHECK(back[3] == 0.0f);
    CHECK(back[4] == 0x1p-24f);
    CHECK(std::isnan(back[5]));
    CHECK(back[6] == -INFINITY);
    const auto bb = x.cast(kBFloat16).cast(kFloat32).to_vector<float>();
    CHECK(bb[1] == 65536.0f);
    CHECK(std::isnan(bb[5]));
  }
  SECTION("arithmetic") {
    Tensor a = full({3}, 2048, kFloat16);
    CHECK((a + 1.0).to_vector<float>() == std::vector<float>(3, 2048.0f));  // 2049 ties to 2048
    CHECK((a + 3.0).to_vector<float>() == std::vector<float>(3, 2052.0f));  // 2051 ties to 2052
    CHECK((a * 32.0).to_vector<float>() == std::vector<float>(3, INFINITY));  // overflow
    Tensor c = full({2}, 256, kBFloat16);
    CHECK((c + 1.0).to_vector<float>() == std::vector<float>(2, 256.0f));
    CHECK((c + 3.0).to_vector<float>() == std::vector<float>(2, 260.0f));
    Tensor x = Tensor::from_vector(std::vector<float>{0.1f, -1.5f, 3.0f, 0.25f}, {4}, kFloat16);
    CHECK(exp(x).dtype() == kFloat16);
    CHECK(testing::allclose(exp(x).cast(kFloat32), exp(x.cast(kFloat32)), 1e-3, 1e-3));
    CHECK(sum(x).dtype() == kFloat16);
    CHECK(std::abs(sum(x).item<float>() - 1.85f) < 2e-3f);
    CHECK(testing::allclose(softmax(x).cast(kFloat32), softmax(x.cast(kFloat32)), 2e-3, 2e-3));
    Tensor m = matmul(x.reshape({2, 2}), x.reshape({2, 2}));
    CHECK(m.dtype() == kFloat16);
    CHECK(testing::allclose(m.cast(kFloat32),
                            matmul(x.cast(kFloat32).reshape({2, 2}), x.cast(kFloat32).reshape({2, 2})),
                            1e-3, 1e-3));
  }
  SECTION("mean of many float16 elements does not overflow the element count") {
    Tensor x = full({70000}, 0.5, kFloat16);
    CHECK(mean(x).dtype() == kFloat16);
    CHECK(mean(x).item<float>() == 0.5f);
    Tensor y = full({300, 1001}, 0.25, kBFloat16);
    CHECK(mean(y).item<float>() == 0.25f);
    CHECK(mean(y, std::vector<int64_t>{1}).to_vector<float>() == std::vector<float>(300, 0.25f));
  }
}
