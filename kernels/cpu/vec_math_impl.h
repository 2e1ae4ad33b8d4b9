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
//   lt / le (masks), select(mask, a, b); for the integer n held in the float
//   shifted = n + 1.5 * 2^23 (exp_reduced), scale_pow2(y, shifted) = y * 2^n as two
//   normal factors 2^(n/2), and add_exponent(y, shifted), n added to y's exponent field
//   (for a normal result); exponent_field(shifted), the float whose bits are shifted's
//   bits << 23 (2^(m - 127) for shifted = m + 1.5 * 2^23, 0 < m < 255); hsum (a
//   fixed-order horizontal sum) and hmax.
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

// Every step of the algorithms below is forced inline into the array loops: GCC's
// heuristics would otherwise call the larger ones (erf, gelu, an unrolled exp) per vector,
// passing the vectors through memory (measured 2-3x slower).
#define STRATA_VEC_INLINE inline __attribute__((always_inline))

// Horner's rule, highest coefficient first: ((c0 t + c1) t + ...) + cN.
template <class V, int N>
STRATA_VEC_INLINE V horner(V t, const float (&c)[N]) {
  V p(c[0]);
  for (int i = 1; i < N; ++i) p = fma(p, t, V(c[i]));
  return p;
}

// e^r for the reduction of x (|x| <= 127 ln 2 or so) as in Cephes' expf: x = n ln2 + r,
// |r| <= ln2 / 2, with ln2 split in two (0.693359375 has 9 significant bits, so n * it is
// exact and x - n * it loses nothing); e^r = 1 + r (1 + r P(r)), P Cephes' degree-5 fit
// of (e^r - 1 - r) / r^2, in one chain of fused multiply-adds. `shifted` returns n + 1.5 * 2^23:
// adding 1.5 * 2^23 rounds x log2(e) to the nearest integer n, which the sum holds in its
// low mantissa bits (read by scale_pow2 and add_exponent); subtracting it back gives n.
template <class V>
STRATA_VEC_INLINE V exp_reduced(V x, V& shifted) {
  shifted = x * V(1.44269502f) + V(12582912.0f);
  const V n = shifted - V(12582912.0f);
  V r = fma(n, V(-0.693359375f), x);
  r = fma(n, V(2.12194440e-4f), r);
  static constexpr float kPoly[] = {1.98756915e-4f, 1.39819995e-3f, 8.33345190e-3f, 4.16657959e-2f,
                                    1.66666655e-1f, 5.00000012e-1f, 1.0f,           1.0f};
  return horner(r, kPoly);
}

// log(FLT_MIN) rounded to float: e^x for x <= this is below the smallest normal float.
constexpr float kExpFlushBelow = -87.3365448f;

// e^x with results below the smallest normal float flushed to 0 (as kernels/cpu/
// flushed_exp.h does for float64, and as TensorFlow and PyTorch give softmax([0, -1000])).
template <class V>
STRATA_VEC_INLINE V exp_flushed(V x) {
  // Clamped so that n stays within [-127, 129]: above 89 the result is +inf anyway (e^89
  // overflows below), at or below the flush threshold it is 0. min/max pass NaN through
  // (their second operand) and NaN stays NaN to the end.
  V shifted(0.0f);
  const V p = exp_reduced(max(V(-88.0f), min(V(89.0f), x)), shifted);
  return select(le(x, V(kExpFlushBelow)), V(0.0f), scale_pow2(p, shifted));
}

// exp_flushed for x <= 0 (or NaN), the softmax rows' case, in fewer operations: n is then
// within [-127, 0], and for n >= -126 p 2^n is a normal float made by adding n to p's
// exponent field; n = -127 only below the flush threshold, where the result is 0 anyway.
template <class V>
STRATA_VEC_INLINE V exp_nonpositive(V x) {
  V shifted(0.0f);
  const V p = exp_reduced(max(V(-88.0f), x), shifted);
  return select(le(x, V(kExpFlushBelow)), V(0.0f), add_exponent(p, shifted));
}

// e^x for x <= 0 (or NaN) in the softmax row passes (exp_sum), in fewer operations than
// exp_nonpositive: 9 multiply-adds and multiplies where that takes 10 and an add, and no
// clamp (issue 22: the exp-and-sum pass was ~80% of a 1024-float row's time in L1). As in XNNPACK's
// f32 raddstoreexpminusmax kernels: the same reduction as exp_reduced (Cephes' split of
// ln 2, exact without FMA), but a degree-5 minimax polynomial e^r = 1 + r P(r) on
// |r| <= ln2/2 (XNNPACK's coefficients; Cephes' fit is degree 7), and 2^n made by shifting
// the biased exponent n + 127, held in the low bits of `shifted`, into a float's exponent
// field. A softmax row sums these terms and divides by the sum, so their error reaches each
// output relatively, as is: <= 2.5 ulp (vec_math.h), against exp's 2. Results below the
// smallest normal float are flushed to 0 as exp's are: for x at or below the threshold, n
// may leave [-126, 0] and 2^n is garbage (a NaN or an infinity of r P(r) included), which
// the final select discards; NaN fails the comparison and stays NaN through the products.
template <class V>
STRATA_VEC_INLINE V exp_softmax(V x) {
  const V shifted = fma(x, V(1.44269502f), V(12583039.0f));  // 1.5 * 2^23 + 127
  const V pow2n = exponent_field(shifted);
  const V n = shifted - V(12583039.0f);
  V r = fma(n, V(-0.693359375f), x);
  r = fma(n, V(2.12194440e-4f), r);
  static constexpr float kPoly[] = {0x1.0F9F9Cp-7f, 0x1.573A1Ap-5f, 0x1.555A80p-3f, 0x1.FFFDC6p-2f, 0x1.FFFFF6p-1f};
  const V p = horner(r, kPoly);
  // 2^n (1 + r P(r)) as 2^n + (r 2^n) P(r), the last step one fused multiply-add.
  return select(le(x, V(kExpFlushBelow)), V(0.0f), fma(r * pow2n, p, pow2n));
}

// 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below, both from e = e^-|x| <= 1: no
// overflow, and the negative side keeps e^x's relative accuracy down to the flush.
template <class V>
STRATA_VEC_INLINE V sigmoid(V x) {
  const V e = exp_nonpositive(neg(abs(x)));
  const V s = V(1.0f) / (V(1.0f) + e);
  return select(lt(x, V(0.0f)), e * s, s);
}

// tanh and erf are rational functions x P(x^2) / Q(x^2), with the coefficients of Eigen's
// generic_fast_tanh_float and generic_fast_erf_float (Eigen/src/Core/MathFunctionsImpl.h,
// unsupported/.../SpecialFunctionsImpl.h; Eigen's MPL2 allows it): one division and a
// dozen FMAs, where a range-reduced form needs an exponential and both sides of a branch
// (measured 2-3x slower here, for 3-5x less error than the few ulps stated in vec_math.h).

// tanh: the rational on x clamped to +-7.9053 (where it stays below 1 with or without
// FMA), x itself below |x| = 0.0004 and +-1 from the clamp on (tanh(7.9053) rounds to
// 1 - 4 ulp, and to 1 from 9.01).
template <class V>
STRATA_VEC_INLINE V tanh(V x) {
  constexpr float kClamp = 7.90531110763549805f;
  const V xc = max(V(-kClamp), min(V(kClamp), x));
  const V z = xc * xc;
  static constexpr float kP[] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                                 5.12229709037114e-08f,  1.48572235717979e-05f, 6.37261928875436e-04f,
                                 4.89352455891786e-03f};
  static constexpr float kQ[] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                                 4.89352518554385e-03f};
  const V ax = abs(x);
  const V r = select(lt(ax, V(0.0004f)), x, xc * (horner(z, kP) / horner(z, kQ)));
  return select(le(V(kClamp), ax), copysign(V(1.0f), x), r);  // NaN: r
}

// erf on x clamped to +-4 (erf rounds to +-1 beyond 3.92); x times P/Q rather than
// (x P) / Q, which would pass through denormals for |x| < 1e-36.
template <class V>
STRATA_VEC_INLINE V erf(V x) {
  const V xc = max(V(-4.0f), min(V(4.0f), x));
  const V z = xc * xc;
  static constexpr float kP[] = {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                                 -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                                 -1.60960333262415e-02f};
  static constexpr float kQ[] = {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                                 -7.37332916720468e-03f, -1.42647390514189e-02f};
  return xc * (horner(z, kP) / horner(z, kQ));
}

// gelu(x) = x/2 (1 + erf(x / sqrt 2)), as PyTorch and TensorFlow compute it: erf's few ulps
// of 1 make the error absolute (about |x| 2^-22) where 1 + erf cancels, in the negative
// tail.
template <class V>
STRATA_VEC_INLINE V gelu(V x) {
  return (V(0.5f) * x) * (V(1.0f) + erf(x * V(0.707106769f)));
}

// gelu with the tanh approximation, 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// written as x / (1 + e^(-2u)) (1 + tanh(u) = 2 / (1 + e^(-2u))): one exponential, and no
// cancellation in the negative tail. As in sigmoid, e = e^-2|u| <= 1 and x e / (1 + e) for
// x < 0.
template <class V>
STRATA_VEC_INLINE V gelu_tanh(V x) {
  const V m = fma(x * x, V(0.044715f), V(1.0f));
  const V e = exp_nonpositive((abs(x) * V(-1.59576912f)) * m);  // -2 sqrt(2/pi) = -1.5957691216
  const V s = x / (V(1.0f) + e);
  return select(lt(x, V(0.0f)), s * e, s);
}

// K lane vectors processed in step: every operation is issued for all K before the next
// one, so that K independent dependency chains sit side by side in the instruction stream.
// An exponential is a chain of ~15 dependent operations (~50 cycles); issued one vector
// after another, the out-of-order window holds too few of them to hide that latency (a
// softmax row ran at 17 cycles per 8 floats). With K = 4 the loop is bound by the FMA
// pipes instead.
template <class V, int K>
struct Unrolled {
  static constexpr int64_t kLanes = V::kLanes * K;
  V v[K];
  STRATA_VEC_INLINE Unrolled(float x) : Unrolled([x](int) { return V(x); }) {}  // NOLINT: implicit, as V(1.0f)
  template <class F>
  STRATA_VEC_INLINE explicit Unrolled(F&& f, decltype(f(0))* = nullptr) : v{} {
    for (int k = 0; k < K; ++k) v[k] = f(k);
  }
  STRATA_VEC_INLINE static Unrolled load(const float* p) {
    return Unrolled([p](int k) { return V::load(p + k * V::kLanes); });
  }
};
template <class M, int K>
struct UnrolledMask {
  M m[K];
};

#define STRATA_VEC_UNROLLED_BINARY(NAME, EXPR)                                          \
  template <class V, int K>                                                             \
  STRATA_VEC_INLINE Unrolled<V, K> NAME(const Unrolled<V, K>& a, const Unrolled<V, K>& b) {        \
    return Unrolled<V, K>([&](int k) { return EXPR; });                                 \
  }
STRATA_VEC_UNROLLED_BINARY(operator+, a.v[k] + b.v[k])
STRATA_VEC_UNROLLED_BINARY(operator-, a.v[k] - b.v[k])
STRATA_VEC_UNROLLED_BINARY(operator*, a.v[k] * b.v[k])
STRATA_VEC_UNROLLED_BINARY(operator/, a.v[k] / b.v[k])
STRATA_VEC_UNROLLED_BINARY(min, min(a.v[k], b.v[k]))
STRATA_VEC_UNROLLED_BINARY(max, max(a.v[k], b.v[k]))
STRATA_VEC_UNROLLED_BINARY(copysign, copysign(a.v[k], b.v[k]))
STRATA_VEC_UNROLLED_BINARY(scale_pow2, scale_pow2(a.v[k], b.v[k]))
STRATA_VEC_UNROLLED_BINARY(add_exponent, add_exponent(a.v[k], b.v[k]))
#undef STRATA_VEC_UNROLLED_BINARY

template <class V, int K>
STRATA_VEC_INLINE Unrolled<V, K> exponent_field(const Unrolled<V, K>& a) {
  return Unrolled<V, K>([&](int k) { return exponent_field(a.v[k]); });
}

template <class V, int K>
STRATA_VEC_INLINE Unrolled<V, K> fma(const Unrolled<V, K>& a, const Unrolled<V, K>& b, const Unrolled<V, K>& c) {
  return Unrolled<V, K>([&](int k) { return fma(a.v[k], b.v[k], c.v[k]); });
}
template <class V, int K>
STRATA_VEC_INLINE Unrolled<V, K> abs(const Unrolled<V, K>& a) {
  return Unrolled<V, K>([&](int k) { return abs(a.v[k]); });
}
template <class V, int K>
STRATA_VEC_INLINE Unrolled<V, K> neg(const Unrolled<V, K>& a) {
  return Unrolled<V, K>([&](int k) { return neg(a.v[k]); });
}
template <class V, int K>
STRATA_VEC_INLINE auto lt(const Unrolled<V, K>& a, const Unrolled<V, K>& b) {
  UnrolledMask<decltype(lt(a.v[0], b.v[0])), K> r;
  for (int k = 0; k < K; ++k) r.m[k] = lt(a.v[k], b.v[k]);
  return r;
}
template <class V, int K>
STRATA_VEC_INLINE auto le(const Unrolled<V, K>& a, const Unrolled<V, K>& b) {
  UnrolledMask<decltype(le(a.v[0], b.v[0])), K> r;
  for (int k = 0; k < K; ++k) r.m[k] = le(a.v[k], b.v[k]);
  return r;
}
template <class M, class V, int K>
STRATA_VEC_INLINE Unrolled<V, K> select(const UnrolledMask<M, K>& m, const Unrolled<V, K>& a, const Unrolled<V, K>& b) {
  return Unrolled<V, K>([&](int k) { return select(m.m[k], a.v[k], b.v[k]); });
}
template <class V, int K>
STRATA_VEC_INLINE void store(float* p, const Unrolled<V, K>& a) {
  for (int k = 0; k < K; ++k) store(p + k * V::kLanes, a.v[k]);
}
// Fixed order: the K vectors summed pairwise first, then across lanes.
template <class V, int K>
STRATA_VEC_INLINE float hsum(const Unrolled<V, K>& a) {
  V t = a.v[0];
  for (int k = 1; k < K; ++k) t = t + a.v[k];
  return hsum(t);
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

// The fused exp-and-sum pass of a softmax row, V an Unrolled lane type (its K vectors
// are K independent accumulators: the add latency does not bound the loop). The summation
// order depends on n alone.
template <class V>
float exp_sum(const float* x, float shift, float* out, int64_t n, RowAhead ahead) {
  constexpr int64_t L = V::kLanes;
  const V s(shift);
  V acc(0.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    // The next row's lines as this one's are consumed, a few a step (prefetching the whole
    // next row before the row measured slower: paired ratio 0.34-0.36 against 0.37-0.40).
    for (int64_t j = 0; j < L; j += 16) {
      if (ahead.in) __builtin_prefetch(ahead.in + i + j, 0, 3);
      if (ahead.out) __builtin_prefetch(ahead.out + i + j, 1, 3);
    }
    const V e = exp_softmax(V::load(x + i) - s);
    if (out) store(out + i, e);
    acc = acc + e;
  }
  float total = hsum(acc);
  if (i < n) {
    float buf[L] = {};
    for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
    store(buf, exp_softmax(V::load(buf) - s));
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

// The table over lane type V, the transcendentals in steps of 4 vectors (Unrolled; 2 were
// measured up to 1.3x slower), and the scaling pass too (a load, a multiply and a store a
// vector: one at a time it ran at ~2 cycles a vector).
template <class V>
Functions make_functions(const char* isa) {
  using U = Unrolled<V, 4>;
  return Functions{isa,
                   map<U, exp_flushed<U>>,
                   map<U, sigmoid<U>>,
                   map<U, tanh<U>>,
                   map<U, erf<U>>,
                   map<U, gelu<U>>,
                   map<U, gelu_tanh<U>>,
                   row_max<V>,
                   exp_sum<U>,
                   scale<U>};
}

#undef STRATA_VEC_INLINE

}  // namespace
}  // namespace strata::cpu_kernels::vec
