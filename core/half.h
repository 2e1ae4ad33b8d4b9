// float16 and bfloat16 storage types with round-to-nearest-even conversion from float.
//
// They are storage types: CPU kernels convert to float32, compute, and convert back.
#pragma once

#include <cstdint>
#include <cstring>

namespace strata {

namespace detail {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a numeric type
  operator float() const { return detail::bits_float(uint32_t(bits) << 16); }
  static uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
    return uint16_t((u + rounding) >> 16);
  }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (after rounding) -> inf
    if (abs < 0x38800000u) {                                  // subnormal or zero in half
      if (abs < 0x33000000u) return uint16_t(sign);           // below half of smallest subnormal
      uint32_t exp = abs >> 23;
      uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 ... bring to 10-bit subnormal
      uint32_t half_mant = mant >> (shift);
      uint32_t rem = mant & ((1u << shift) - 1);
      uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
      return uint16_t(sign | half_mant);
    }
    uint32_t exp = ((abs >> 23) - 112) << 10;
    uint32_t mant = (abs >> 13) & 0x3ffu;
    uint32_t out = exp | mant;
    uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (out & 1u))) ++out;
    return uint16_t(sign | out);
  }

  static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
      if (mant == 0) return detail::bits_float(sign);
      float f = float(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
      return sign ? -f : f;
    }
    if (exp == 31) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
    return detail::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

}  // namespace strata
