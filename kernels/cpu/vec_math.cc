// The portable (one lane at a time) table of kernels/cpu/vec_math.h and the choice between
// it and the AVX2 table (Note [Runtime ISA dispatch]). Compiled with -ffp-contract=off
// (core/CMakeLists.txt): the algorithms round as written, whatever -march allows.
#include <cstring>

#include <strata/kernels/cpu/vec_math.h>
#include <strata/kernels/cpu/vec_math_impl.h>

namespace strata::cpu_kernels::vec {

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// One float: the lane type of vec_math_impl.h on any CPU.
struct F1 {
  static constexpr int64_t kLanes = 1;
  float v;
  F1() = default;
  F1(float x) : v(x) {}  // NOLINT: implicit, as V(1.0f) in the algorithms
  static F1 load(const float* p) { return *p; }
};

inline F1 operator+(F1 a, F1 b) { return a.v + b.v; }
inline F1 operator-(F1 a, F1 b) { return a.v - b.v; }
inline F1 operator*(F1 a, F1 b) { return a.v * b.v; }
inline F1 operator/(F1 a, F1 b) { return a.v / b.v; }
inline F1 fma(F1 a, F1 b, F1 c) { return a.v * b.v + c.v; }
inline F1 min(F1 a, F1 b) { return a.v < b.v ? a.v : b.v; }
inline F1 max(F1 a, F1 b) { return a.v > b.v ? a.v : b.v; }
inline F1 abs(F1 a) { return from_bits(bits(a.v) & 0x7fffffffu); }
inline F1 neg(F1 a) { return from_bits(bits(a.v) ^ 0x80000000u); }
inline F1 copysign(F1 mag, F1 sign) {
  return from_bits((bits(mag.v) & 0x7fffffffu) | (bits(sign.v) & 0x80000000u));
}
inline bool lt(F1 a, F1 b) { return a.v < b.v; }
inline bool le(F1 a, F1 b) { return a.v <= b.v; }
// Through bit masks rather than ?:, which GCC compiles to a branch that the softmax and
// sigmoid data (signs at random) mispredict half the time.
inline F1 select(bool m, F1 a, F1 b) {
  const uint32_t mask = 0u - uint32_t(m);
  return from_bits((bits(a.v) & mask) | (bits(b.v) & ~mask));
}
inline void store(float* p, F1 a) { *p = a.v; }
inline float hsum(F1 a) { return a.v; }
inline float hmax(F1 a) { return a.v; }

// y * 2^n, n the integer in the low bits of shifted = n + 1.5 * 2^23, as two factors 2^(n/2)
// so that each stays a normal float for n in [-127, 129]. Unsigned arithmetic: a NaN's
// bits give an arbitrary n (the product is NaN regardless), never an overflow.
inline F1 scale_pow2(F1 y, F1 shifted) {
  const uint32_t n = bits(shifted.v) - 0x4B400000u;
  const uint32_t n1 = uint32_t(int32_t(n) >> 1);
  const uint32_t n2 = n - n1;
  return y.v * from_bits((n1 + 127u) << 23) * from_bits((n2 + 127u) << 23);
}

// y * 2^n by integer addition to y's exponent field: n's low 9 bits are shifted's, and
// (n + 1.5 * 2^23)'s bits << 23 leave exactly n << 23.
inline F1 add_exponent(F1 y, F1 shifted) { return from_bits(bits(y.v) + (bits(shifted.v) << 23)); }
// 2^(m - 127) for shifted = m + 1.5 * 2^23, 0 < m < 255: m's low 9 bits become the exponent
// field (the upper bits of shifted shift out), the mantissa is 0.
inline F1 exponent_field(F1 shifted) { return from_bits(bits(shifted.v) << 23); }

}  // namespace

const Functions& portable_functions() {
  static const Functions f = make_functions<F1>("portable");
  return f;
}

const Functions* avx2_functions() {
#if defined(__x86_64__)
  static const bool usable = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return usable ? avx2_table() : nullptr;
#else
  return nullptr;
#endif
}

const Functions& functions() {
  static const Functions& f = avx2_functions() ? *avx2_functions() : portable_functions();
  return f;
}

}  // namespace strata::cpu_kernels::vec
