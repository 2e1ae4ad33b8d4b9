// Vectorised float32 math for the CPU kernels: exp, tanh, sigmoid, erf and gelu (exact and
// tanh forms) over arrays, and the passes of a softmax row (max, exp-and-sum, scale).
//
// Why not Eigen's packet math: Eigen's exp clamps at log(min normal) instead of flushing
// (kernels/cpu/flushed_exp.h's mask costs a multiply pass), a softmax row composed of
// Eigen expressions ran at half of memcpy bandwidth (issue 22), and Eigen evaluates an
// array's unaligned head and tail with scalar code that rounds differently (hence the
// padded copies of elementwise.cc's unary_loop). Here exp, sigmoid and gelu_tanh are
// range-reduced polynomials (Cephes' expf) with the exponent built by integer addition, and
// the softmax rows' exp_sum a cheaper degree-5 one (vec_math_impl.h's exp_softmax);
// tanh and erf are Eigen's rational fits (kernels/cpu/vec_math_impl.h) in the same
// framework; all run 4 x 8 lanes at a time.
//
// Note [Runtime ISA dispatch]
// One description of each algorithm (vec_math_impl.h) is compiled twice: for AVX2 + FMA
// (vec_math_avx2.cc, always built with -mavx2 -mfma on x86-64, whatever the build's -march)
// and for the build's own target (vec_math.cc, one float at a time). functions() picks the
// AVX2 table once, when cpuid reports AVX2 and FMA, so a binary built without
// STRATA_NATIVE_ARCH still runs the 8-lane code and one built with it never runs AVX2 code
// on a CPU without it. The two tables agree to within the accuracy stated below, not
// bitwise (FMA rounds once where the portable code rounds twice).
//
// Every element goes through the same code whatever its position (a tail shorter than a
// vector is padded and computed as a whole vector), so a value never depends on the memory
// layout, the alignment or how parallel_for split the work (Note [Layout-independent
// transcendentals] in elementwise.cc).
//
// Accuracy against a double-precision reference, checked over dense sweeps of float inputs
// by tests/core/test_vec_math.cc for both tables (worst cases measured avx2+fma / portable:
// exp 0.9 / 1.1, sigmoid 2.5 / 2.5, tanh 4.6 / 5.9, erf 5.7 / 6.6, gelu for x >= 0 2.9 /
// 3.2 ulp):
//   exp        <= 2 ulp; 0 (flushed) where e^x is below the smallest normal float,
//              +inf above log(FLT_MAX); exp(-inf) = 0, NaN stays NaN
//   exp_sum    its terms e^x, x = x[i] - shift <= 0: <= 2.5 ulp, flushed as exp (a degree-5
//              polynomial where exp's is degree 7: a softmax row is bound by it, issue 22;
//              measured 2.0 / 2.3 ulp)
//   sigmoid    <= 3 ulp (where the result is a normal float)
//   tanh       <= 7 ulp; exactly +-1 from |x| = 7.9053 on
//   erf        <= 8 ulp
//   gelu       <= 4 ulp for x >= 0; below, |error| <= |x| 2^-21 (+ a denormal spacing):
//              1 + erf(x / sqrt 2) cancels there, absolute as in PyTorch and TensorFlow
//   gelu_tanh  <= 4 ulp of x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), for
//              x >= 0; <= 4 + 4|2u| ulp below (the rounding of u, amplified by e^(-2u))
#pragma once

#include <cstdint>

namespace strata::cpu_kernels::vec {

// out[i] = f(in[i]) for i < n; `out` may be `in` (in place), not otherwise overlap it.
using UnaryFn = void (*)(const float* in, float* out, int64_t n);

// The next softmax row, for exp_sum to prefetch while it computes: its n input floats and,
// when not null, its n output floats (for writing). Either may be null. A row's passes run
// from L1 and compute for ~0.5 us (1024 floats); the hardware prefetcher follows the loads,
// so without this the next row's max pass found its input in L3 or memory and waited
// (perf, 4 MB of rows: row_max 6.4% of the samples against exp_sum's 10.7%, issue 22).
struct RowAhead {
  const float* in = nullptr;
  float* out = nullptr;
};

struct Functions {
  const char* isa;  // "avx2+fma" or "portable"
  UnaryFn exp, sigmoid, tanh, erf, gelu, gelu_tanh;
  // The largest element of x[0, n), n > 0 (NaN elements may or may not be returned: a
  // softmax row carries them through its sum instead).
  float (*max)(const float* x, int64_t n);
  // Sum over i < n of e^(x[i] - shift), with e^ as stated for exp_sum above (not `exp`: a
  // cheaper polynomial for arguments <= 0); also writes each term to out[i] when out is not null
  // (out may be x). shift >= every x[i] (the row maximum): an argument above 0 is outside
  // that exponential's range (a NaN in x gives NaN whatever the shift). Prefetches `ahead`
  // (only cache hints: the result is the same whatever it holds).
  float (*exp_sum)(const float* x, float shift, float* out, int64_t n, RowAhead ahead);
  // x[i] *= s (exactly rounded products: the same bits in both tables).
  void (*scale)(float* x, float s, int64_t n);
};

// The table for this CPU (Note [Runtime ISA dispatch]), chosen on the first call.
const Functions& functions();
// The one-lane table, compiled for the build's target (every CPU it runs on).
const Functions& portable_functions();
// The AVX2 + FMA table, or nullptr where it is not compiled in (not x86-64) or the CPU lacks
// AVX2 or FMA.
const Functions* avx2_functions();

}  // namespace strata::cpu_kernels::vec
