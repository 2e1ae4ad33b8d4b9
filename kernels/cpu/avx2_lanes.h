// Lane masks for the AVX2 kernels (gemm_direct_avx2.cc, conv_direct_avx2.cc): include it
// only from translation units compiled with -mavx2. Its function has internal linkage (an
// unnamed namespace), so no AVX2 copy can be merged with, or stand in for, code compiled
// for the build's baseline ISA (the reason those files share no other inline helpers).
#pragma once

#if !defined(__AVX2__)
#error "kernels/cpu/avx2_lanes.h is for translation units compiled with -mavx2"
#endif

#include <immintrin.h>

#include <cstdint>

namespace strata::cpu_kernels::detail {
namespace {

// The first `count` (0..8) of a vector's eight float lanes set, for masked loads and stores.
inline __m256i lane_mask(int64_t count) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), index);
}

}  // namespace
}  // namespace strata::cpu_kernels::detail
