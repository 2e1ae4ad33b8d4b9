// The AVX2 + FMA table of kernels/cpu/vec_math.h: vec_math_impl.h's algorithms over 8
// floats in a __m256. Compiled with -mavx2 -mfma -ffp-contract=off on x86-64
// (core/CMakeLists.txt) whatever the build's -march; only ever called after the cpuid check
// in vec_math.cc (Note [Runtime ISA dispatch]). It includes no header with inline
// functions shared with other translation units (immintrin.h's are always_inline), so no
// AVX2 code can stand in for another file's copy at link time.
#include <strata/kernels/cpu/vec_math.h>
#include <strata/kernels/cpu/vec_math_impl.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

namespace strata::cpu_kernels::vec {

namespace {

struct F8 {
  static constexpr int64_t kLanes = 8;
  __m256 v;
  F8() = default;
  F8(__m256 x) : v(x) {}                    // NOLINT: implicit, for the operators below
  F8(float x) : v(_mm256_set1_ps(x)) {}     // NOLINT: implicit, as V(1.0f) in the algorithms
  static F8 load(const float* p) { return _mm256_loadu_ps(p); }
};
struct M8 {
  __m256 v;
};

inline F8 operator+(F8 a, F8 b) { return _mm256_add_ps(a.v, b.v); }
inline F8 operator-(F8 a, F8 b) { return _mm256_sub_ps(a.v, b.v); }
inline F8 operator*(F8 a, F8 b) { return _mm256_mul_ps(a.v, b.v); }
inline F8 operator/(F8 a, F8 b) { return _mm256_div_ps(a.v, b.v); }
inline F8 fma(F8 a, F8 b, F8 c) { return _mm256_fmadd_ps(a.v, b.v, c.v); }
// minps/maxps return their second operand when either is NaN.
inline F8 min(F8 a, F8 b) { return _mm256_min_ps(a.v, b.v); }
inline F8 max(F8 a, F8 b) { return _mm256_max_ps(a.v, b.v); }
inline F8 abs(F8 a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v); }
inline F8 neg(F8 a) { return _mm256_xor_ps(_mm256_set1_ps(-0.0f), a.v); }
inline F8 copysign(F8 mag, F8 sign) {
  const __m256 s = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(s, mag.v), _mm256_and_ps(s, sign.v));
}
inline M8 lt(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)}; }
inline M8 le(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LE_OQ)}; }
inline F8 select(M8 m, F8 a, F8 b) { return _mm256_blendv_ps(b.v, a.v, m.v); }
inline void store(float* p, F8 a) { _mm256_storeu_ps(p, a.v); }

// As the portable scale_pow2 (vec_math.cc): y * 2^(n >> 1) * 2^(n - (n >> 1)).
inline F8 scale_pow2(F8 y, F8 shifted) {
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(shifted.v), _mm256_set1_epi32(0x4B400000));
  const __m256i n1 = _mm256_srai_epi32(n, 1);
  const __m256i n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y.v, s1), s2);
}

// As the portable add_exponent: y's bits + (shifted's bits << 23).
inline F8 add_exponent(F8 y, F8 shifted) {
  return _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_castps_si256(y.v), _mm256_slli_epi32(_mm256_castps_si256(shifted.v), 23)));
}

// As the portable exponent_field: shifted's bits << 23.
inline F8 exponent_field(F8 shifted) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(shifted.v), 23));
}

// Horizontal sum and maximum in a fixed order: halves, then pairs, then the last two.
inline float hsum(F8 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
inline float hmax(F8 a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace

const Functions* avx2_table() {
  static const Functions f = make_functions<F8>("avx2+fma");
  return &f;
}

}  // namespace strata::cpu_kernels::vec

#else

namespace strata::cpu_kernels::vec {
const Functions* avx2_table() { return nullptr; }
}  // namespace strata::cpu_kernels::vec

#endif
