// The algorithms of kernels/cpu/vec_math.h, written once over a lane type V and compiled
// per instruction set (Note [Runtime ISA dispatch] in vec_math.h). Included only by
// vec_math.cc (V = one float) and vec_math_avx2.cc (V = 8 floats in a __m256); everything
// here has internal linkage, so the AVX2 translation unit shares no inline function with
// the rest of the program (the linker could otherwise keep its AVX2 copy for every caller).
//
// A lane type provides, as free functions found by argument-dependent lookup:
//   V(float) broadcast; V::kLanes; V::load(const float*) / store(float*, V), unaligned;
//   + - * / ; fma(a, b, c) = a*b + c (fused where the ISA has it); min(a, b) / max(a, b)
//   returning b when either is NaN (x86 minps/maxps); abs; neg; copysign(mag, sign);
//   lt / le (masks), select(mask, a, b); square_lo(a, hi), the exact a*a - hi for hi = a*a
//   rounded; scale_pow2(y, n) = y * 2^n for the integer n held in the float n + 2^23 * 1.5
//   (see exp below); hsum (a fixed-order horizontal sum) and hmax.
//
// The coefficients are float32 literals: the accuracy statements in vec_math.h were
// measured with exactly these values.
#pragma once

#include <cstdint>

#include <strata/kernels/cpu/vec_math.h>

namespace strata::cpu_kernels::vec {

// The AVX2 + FMA table as compiled (vec_math_avx2.cc), without the cpuid check that
// avx2_functions() adds; nullptr where it is not compiled in.
const Functions* avx2_table();

namespace {

// Horner's rule, highest coefficient first: ((c0 t + c1) t + ...) + cN.
template <class V, int N>
inline V horner(V t, const float (&c)[N]) {
  V p(c[0]);
  for (int i = 1; i < N; ++i) p = fma(p, t, V(c[i]));
  return p;
}

// log(FLT_MIN) rounded to float: e^x for x <= this is below the smallest normal float.
constexpr float kExpFlushBelow = -87.3365448f;

// e^x with results below the smallest normal float flushed to 0 (as kernels/cpu/
// flushed_exp.h does for float64, and as TensorFlow and PyTorch give softmax([0, -1000])).
// Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, with ln2 split in two (0.693359375 has 9
// significant bits, so n * it is exact and x - n * it loses nothing); e^r by a degree-5
// polynomial for (e^r - 1 - r) / r^2; 2^n built in the exponent field by integer addition.
template <class V>
inline V exp_flushed(V x) {
  // Clamped so that n stays within [-127, 129]: above 89 the result is +inf anyway (e^89
  // overflows below), at or below the flush threshold it is 0. min/max pass NaN through
  // (their second operand) and NaN stays NaN to the end.
  const V xc = max(V(-88.0f), min(V(89.0f), x));
  // Round-to-nearest of x log2(e) by adding 1.5 * 2^23: the sum's low mantissa bits are the
  // integer n (scale_pow2 reads them), and subtracting it back gives n as a float.
  const V shifted = xc * V(1.44269502f) + V(12582912.0f);
  const V n = shifted - V(12582912.0f);
  V r = fma(n, V(-0.693359375f), xc);
  r = fma(n, V(2.12194440e-4f), r);
  static constexpr float kPoly[] = {1.98756915e-4f, 1.39819995e-3f, 8.33345190e-3f,
                                    4.16657959e-2f, 1.66666655e-1f, 5.00000012e-1f};
  const V p = fma(horner(r, kPoly), r * r, r) + V(1.0f);
  return select(le(x, V(kExpFlushBelow)), V(0.0f), scale_pow2(p, shifted));
}

// 1 / (1 + e^-x): 0 for x below about -88.7 (e^-x overflows), 1 above 87.3 (e^-x flushed).
template <class V>
inline V sigmoid(V x) {
  return V(1.0f) / (V(1.0f) + exp_flushed(neg(x)));
}

// Cephes' tanhf on |x|: an odd polynomial |x| + |x|^3 P(x^2) below 0.625, 1 - 2 / (e^2|x| + 1)
// above (no cancellation there: the result is >= 0.55); then x's sign (tanh(-0) = -0).
template <class V>
inline V tanh(V x) {
  const V ax = abs(x);
  const V z = x * x;
  static constexpr float kPoly[] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                                    1.33314422036e-1f, -3.33332819422e-1f};
  const V small = fma(horner(z, kPoly) * z, ax, ax);
  const V large = V(1.0f) - V(2.0f) / (exp_flushed(ax + ax) + V(1.0f));
  return copysign(select(lt(ax, V(0.625f)), small, large), x);
}

// erfc(a) for 0 <= a <= 10 (NaN passes), given a^2 = sq_hi + sq_lo exactly:
// erfc(a) = e^(-a^2) t Q(t), t = 1 / (1 + a/2) (the substitution of Numerical Recipes'
// erfcc), Q a degree-10 Chebyshev fit of erfc(a) e^(a^2) / t on a in [0, 9.4], relative
// error 2e-9 before rounding the coefficients to float. Beyond a = 9.35, e^(-a^2) is
// flushed to 0. The exact square matters for the relative accuracy of small results:
// e^-(hi + lo) = e^-hi (1 - lo), while a rounded a^2 of 50 would cost 6e-6 relative.
template <class V>
inline V erfc_core(V a, V sq_hi, V sq_lo) {
  const V t = V(1.0f) / fma(a, V(0.5f), V(1.0f));
  static constexpr float kQ[] = {0.0309257396f,  -0.162719935f, 0.30892095f,   -0.182796523f,
                                 -0.121948905f,  0.0974281356f, 0.0291269012f, 0.192645386f,
                                 0.243963301f,   0.282371491f,  0.282083482f};
  const V e = exp_flushed(neg(sq_hi));
  return fma(e, neg(sq_lo), e) * (t * horner(t, kQ));
}

// erf(x) for |x| < 1: x + x P(x^2), P a degree-6 Chebyshev fit of erf(x)/x - 1 (relative
// error 6e-9; fitting erf(x)/x - 1 rather than erf(x)/x keeps the rounding of the leading
// 2/sqrt(pi) out of the result).
template <class V>
inline V erf_small(V x) {
  static constexpr float kP[] = {7.87587487e-05f, -8.01686430e-04f, 5.18908724e-03f, -2.68542115e-02f,
                                 1.12835944e-01f, -3.76126260e-01f, 1.28379166e-01f};
  return fma(x, horner(x * x, kP), x);
}

// erf: erf_small below |x| = 1, sign(x) (1 - erfc(|x|)) above.
template <class V>
inline V erf(V x) {
  const V ax = min(V(10.0f), abs(x));
  const V small = erf_small(x);
  const V sq = ax * ax;
  const V large = copysign(V(1.0f) - erfc_core(ax, sq, square_lo(ax, sq)), x);
  return select(lt(abs(x), V(1.0f)), small, large);
}

// gelu(x) = x Phi(x) = x/2 (1 + erf(u)), u = x / sqrt(2): 1 + erf_small(u) for
// -0.5 <= u < 1, erfc(-u) below (the negative tail keeps its relative accuracy where
// 1 + erf(u) would cancel: 1 + erf(-0.9) already loses 3 bits, 1 + erf(-3) 9) and
// 2 - erfc(u) above. u^2 for erfc is taken exactly as x^2 / 2 rather than from the
// rounded u.
template <class V>
inline V gelu(V x) {
  const V u = x * V(0.707106769f);
  const V ax = min(V(14.0f), abs(x));  // erfc(14 / sqrt 2) flushes to 0 already
  const V sq = ax * ax;
  const V half_sq = sq * V(0.5f);
  const V half_lo = square_lo(ax, sq) * V(0.5f);
  const V ec = erfc_core(ax * V(0.707106769f), half_sq, half_lo);
  const V upper = select(lt(u, V(1.0f)), V(1.0f) + erf_small(u), V(2.0f) - ec);
  return (V(0.5f) * x) * select(lt(u, V(-0.5f)), ec, upper);
}

// gelu with the tanh approximation, 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// written as x / (1 + e^(-2u)) (1 + tanh(u) = 2 / (1 + e^(-2u))): one exponential, and no
// cancellation in the negative tail.
template <class V>
inline V gelu_tanh(V x) {
  const V m = fma(x * x, V(0.044715f), V(1.0f));
  const V minus_2u = (x * V(-1.59576912f)) * m;  // -2 sqrt(2/pi) = -1.5957691216
  return x / (V(1.0f) + exp_flushed(minus_2u));
}

// out[i] = f(in[i]). The tail goes through a zero-padded vector so that it takes the same
// code as the body (Note [Runtime ISA dispatch]).
template <class V, V (*f)(V)>
void map(const float* in, float* out, int64_t n) {
  constexpr int64_t L = V::kLanes;
  int64_t i = 0;
  for (; i + L <= n; i += L) store(out + i, f(V::load(in + i)));
  if (i < n) {
    float buf[L] = {};
    for (int64_t j = i; j < n; ++j) buf[j - i] = in[j];
    store(buf, f(V::load(buf)));
    for (int64_t j = i; j < n; ++j) out[j] = buf[j - i];
  }
}

template <class V>
float row_max(const float* x, int64_t n) {
  constexpr int64_t L = V::kLanes;
  float m = x[0];
  int64_t i = 0;
  if (n >= 4 * L) {
    V m0 = V::load(x), m1 = V::load(x + L), m2 = V::load(x + 2 * L), m3 = V::load(x + 3 * L);
    for (i = 4 * L; i + 4 * L <= n; i += 4 * L) {
      m0 = max(m0, V::load(x + i));
      m1 = max(m1, V::load(x + i + L));
      m2 = max(m2, V::load(x + i + 2 * L));
      m3 = max(m3, V::load(x + i + 3 * L));
    }
    m = hmax(max(max(m0, m1), max(m2, m3)));
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// The fused exp-and-sum pass of a softmax row, in four independent accumulators (the add
// latency would otherwise bound the loop). The summation order depends on n alone.
template <class V>
float exp_sum(const float* x, float shift, float* out, int64_t n) {
  constexpr int64_t L = V::kLanes;
  const V s(shift);
  V acc[4] = {V(0.0f), V(0.0f), V(0.0f), V(0.0f)};
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    for (int k = 0; k < 4; ++k) {
      const V e = exp_flushed(V::load(x + i + k * L) - s);
      if (out) store(out + i + k * L, e);
      acc[k] = acc[k] + e;
    }
  }
  for (; i + L <= n; i += L) {
    const V e = exp_flushed(V::load(x + i) - s);
    if (out) store(out + i, e);
    acc[0] = acc[0] + e;
  }
  float total = hsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
  if (i < n) {
    float buf[L] = {};
    for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
    store(buf, exp_flushed(V::load(buf) - s));
    for (int64_t j = i; j < n; ++j) {
      if (out) out[j] = buf[j - i];
      total += buf[j - i];
    }
  }
  return total;
}

template <class V>
void scale(float* x, float s, int64_t n) {
  constexpr int64_t L = V::kLanes;
  const V sv(s);
  int64_t i = 0;
  for (; i + L <= n; i += L) store(x + i, V::load(x + i) * sv);
  for (; i < n; ++i) x[i] *= s;
}

template <class V>
Functions make_functions(const char* isa) {
  return Functions{isa,
                   map<V, exp_flushed<V>>,
                   map<V, sigmoid<V>>,
                   map<V, tanh<V>>,
                   map<V, erf<V>>,
                   map<V, gelu<V>>,
                   map<V, gelu_tanh<V>>,
                   row_max<V>,
                   exp_sum<V>,
                   scale<V>};
}

}  // namespace
}  // namespace strata::cpu_kernels::vec
