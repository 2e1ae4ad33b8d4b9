// The direct GEMM kernel (kernels/cpu/gemm_direct.h) for AVX2 + FMA. Compiled with -mavx2
// -mfma on x86-64 whatever the build's -march (core/CMakeLists.txt) and only called after
// the cpuid check in gemm_direct.cc; it includes no header with inline functions shared
// with other translation units except the standard ones (immintrin.h's are always_inline)
// and avx2_lanes.h (internal linkage, AVX2 units only).
#include <strata/kernels/cpu/gemm_direct.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <strata/kernels/cpu/avx2_lanes.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata::cpu_kernels::detail {

namespace {

constexpr int64_t kLanes = 8;
// The swapped product (below) re-reads A's rows once per 4 outputs of the narrow side:
// it wins while A stays in L1 (32 KB on Zen 3; 128x10x64 A^T 1.57x OpenBLAS against 1.13x
// unswapped) and loses past it (512x10x128 A^T 0.88x against 1.07x).
constexpr int64_t kSwapMaxPanelFloats = 8192;
// ... and only for outputs this narrow: C^T's rows are the narrow side (4 to a tile).
constexpr int64_t kSwapMaxColumns = 16;

// A view of a matrix operand by element strides: element (i, p) at data[i * row + p * col].
struct StridedMatrix {
  const float* data;
  int64_t row, col;
};

// Where the tile's outputs go: C[i][j] at c[i * ldc + j], or with `transposed` at
// c[j * ldc + i] (the swapped product computes C^T's tiles).
struct Output {
  float* c;
  int64_t ldc;
  float beta;
};

// One register tile: rows x (kVectors * 8) outputs of A[rows x k] * panel[k x ...], the
// panel's rows `panel_stride` floats apart. `columns` (<= kVectors * 8) are stored.
template <int kRows, int kVectors, bool kTransposed>
void tile(int64_t k, StridedMatrix a, const float* panel, int64_t panel_stride, Output out, int64_t columns) {
  __m256 acc[kRows][kVectors];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    __m256 b[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) b[v] = _mm256_loadu_ps(panel + p * panel_stride + kLanes * v);
    const float* ap = a.data + p * a.col;
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m256 x = _mm256_broadcast_ss(ap + r * a.row);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm256_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  const bool accumulate = out.beta != 0.0f;  // beta = 0 never reads C (it may hold NaN)
  if constexpr (kTransposed) {
    // acc[r][v]'s lane l is C[8v + l][r]. Groups of 4 rows are transposed in registers,
    // each C row getting 4 contiguous floats (two-thirds of a 64x10 product's time went
    // to one-float stores before); the rows left over (a 10-wide output's last 2) are
    // stored one float at a time. The swap needs whole vectors (m % 8 == 0), so every
    // lane is an output.
    constexpr int kGroups = kRows / 4;
    const __m128 beta = _mm_set1_ps(out.beta);
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        const __m256 t0 = _mm256_unpacklo_ps(acc[4 * g][v], acc[4 * g + 1][v]);
        const __m256 t1 = _mm256_unpackhi_ps(acc[4 * g][v], acc[4 * g + 1][v]);
        const __m256 t2 = _mm256_unpacklo_ps(acc[4 * g + 2][v], acc[4 * g + 3][v]);
        const __m256 t3 = _mm256_unpackhi_ps(acc[4 * g + 2][v], acc[4 * g + 3][v]);
        // u[q] holds C rows q (low half) and q + 4 (high half), 4 columns each.
        const __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                             _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
        float* c = out.c + kLanes * v * out.ldc + 4 * g;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
          __m128 lo = _mm256_castps256_ps128(u[q]), hi = _mm256_extractf128_ps(u[q], 1);
          float* row_lo = c + q * out.ldc;
          float* row_hi = c + (q + 4) * out.ldc;
          if (accumulate) {
            lo = _mm_fmadd_ps(beta, _mm_loadu_ps(row_lo), lo);
            hi = _mm_fmadd_ps(beta, _mm_loadu_ps(row_hi), hi);
          }
          _mm_storeu_ps(row_lo, lo);
          _mm_storeu_ps(row_hi, hi);
        }
      }
    }
    if constexpr (kRows % 4 != 0) {
      alignas(32) float lanes[kLanes];
#pragma GCC unroll 4
      for (int r = 4 * kGroups; r < kRows; ++r) {
        // Unrolled like every loop over acc: an index known only at run time would keep
        // the accumulators in memory for the whole tile.
#pragma GCC unroll 4
        for (int v = 0; v < kVectors; ++v) {
          _mm256_store_ps(lanes, acc[r][v]);
          float* c = out.c + kLanes * v * out.ldc + r;
          for (int64_t l = 0; l < kLanes; ++l) {
            c[l * out.ldc] = accumulate ? std::fma(out.beta, c[l * out.ldc], lanes[l]) : lanes[l];
          }
        }
      }
    }
    (void)columns;
  } else {
    const __m256 beta = _mm256_set1_ps(out.beta);
    const int64_t whole = std::min<int64_t>(kVectors, columns / kLanes);
    const __m256i tail = lane_mask(columns - kLanes * whole);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      float* c = out.c + r * out.ldc;
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        __m256 x = acc[r][v];
        if (v < whole) {
          if (accumulate) x = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c + kLanes * v), x);
          _mm256_storeu_ps(c + kLanes * v, x);
        } else if (v == whole && columns > kLanes * whole) {
          if (accumulate) x = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c + kLanes * v, tail), x);
          _mm256_maskstore_ps(c + kLanes * v, tail, x);
        }
      }
    }
  }
}

// The last rows of a column block (fewer than kRows): the tile with exactly `rows` rows.
template <int kRows, int kVectors, bool kTransposed>
void short_tile(int64_t rows, int64_t k, StridedMatrix a, const float* panel, int64_t panel_stride, Output out,
                int64_t columns) {
  if constexpr (kRows > 0) {
    if (rows == kRows) {
      tile<kRows, kVectors, kTransposed>(k, a, panel, panel_stride, out, columns);
    } else {
      short_tile<kRows - 1, kVectors, kTransposed>(rows, k, a, panel, panel_stride, out, columns);
    }
  }
}

// Every row of A against one block of the panel's columns (`columns` of them).
template <int kRows, int kVectors, bool kTransposed>
void column_block(int64_t m, int64_t k, StridedMatrix a, const float* panel, int64_t panel_stride, Output out,
                  int64_t columns) {
  const int64_t c_row_step = kTransposed ? 1 : out.ldc;
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) {
    tile<kRows, kVectors, kTransposed>(k, {a.data + i * a.row, a.row, a.col}, panel, panel_stride,
                                       {out.c + i * c_row_step, out.ldc, out.beta}, columns);
  }
  if (i < m) {
    short_tile<kRows - 1, kVectors, kTransposed>(m - i, k, {a.data + i * a.row, a.row, a.col}, panel,
                                                 panel_stride, {out.c + i * c_row_step, out.ldc, out.beta},
                                                 columns);
  }
}

// C[m x n] = A[m x k] * panel[k x n] (+ beta C): blocks of 24 columns (4-row tiles), then
// 16 (6 rows) or 8 (8 rows). Each shape keeps 8-12 accumulators, enough to cover the FMA
// latency on two pipes, with the panel's vectors and one broadcast in the other registers.
// The panel may be read up to the next multiple of 8 columns (padding or real memory).
template <bool kTransposed>
void product(int64_t m, int64_t n, int64_t k, StridedMatrix a, const float* panel, int64_t panel_stride,
             Output out) {
  const int64_t column_step = kTransposed ? out.ldc : 1;
  int64_t j = 0;
  int64_t vectors = (n + kLanes - 1) / kLanes;
  while (vectors > 0) {
    const Output block{out.c + j * column_step, out.ldc, out.beta};
    const int64_t left = n - j;
    if (vectors >= 3 && vectors != 4) {  // 4 vectors go as 2 + 2: 6-row tiles beat 3 + 1
      column_block<4, 3, kTransposed>(m, k, a, panel + j, panel_stride, block, std::min<int64_t>(left, 24));
      j += 24;
      vectors -= 3;
    } else if (vectors >= 2) {
      column_block<6, 2, kTransposed>(m, k, a, panel + j, panel_stride, block, std::min<int64_t>(left, 16));
      j += 16;
      vectors -= 2;
    } else {
      column_block<8, 1, kTransposed>(m, k, a, panel + j, panel_stride, block, left);
      j += 8;
      vectors -= 1;
    }
  }
}

// op(B) as k rows of `padded_n` floats, zeros past n. A per-thread buffer: the products this
// kernel takes run back to back (a training step), and a heap block per call would cost as
// much as a small product's packing.
const float* pack_panel(bool tb, int64_t n, int64_t k, const float* b, int64_t ldb, int64_t padded_n) {
  thread_local std::vector<float> buffer;
  const size_t size = size_t(k * padded_n);
  if (buffer.size() < size) buffer.resize(size);
  float* panel = buffer.data();
  if (!tb) {
    // Whole vectors, the last one a masked load (zeros past n): a narrow row is one or two
    // vectors, where a memcpy and a memset call per row cost more than the copy (9% of a
    // 64x10x128 product's time).
    const int64_t whole = n / kLanes;
    const __m256i tail = lane_mask(n - whole * kLanes);
    for (int64_t p = 0; p < k; ++p) {
      const float* row = b + p * ldb;
      float* out = panel + p * padded_n;
      for (int64_t v = 0; v < whole; ++v) _mm256_storeu_ps(out + v * kLanes, _mm256_loadu_ps(row + v * kLanes));
      if (whole * kLanes < n) {
        _mm256_storeu_ps(out + whole * kLanes, _mm256_maskload_ps(row + whole * kLanes, tail));
      }
    }
  } else {  // B stored n x k: row j of the storage is column j of the panel
    for (int64_t p = 0; p < k; ++p) std::fill(panel + p * padded_n + n, panel + (p + 1) * padded_n, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float* row = b + j * ldb;
      for (int64_t p = 0; p < k; ++p) panel[p * padded_n + j] = row[p];
    }
  }
  return panel;
}

void direct_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta C (0 when beta is 0, whatever C held)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  if (ta && n <= kSwapMaxColumns && m % kLanes == 0 && m * k <= kSwapMaxPanelFloats) {
    // C^T [n x m] = op(B)^T [n x k] * A_stored [k x m]: A's storage is the panel as it lies
    // (whole vectors of m), op(B)^T is read by strides.
    const StridedMatrix bt{b, tb ? ldb : 1, tb ? 1 : ldb};
    product<true>(n, m, k, bt, a, lda, {c, ldc, beta});
    return;
  }
  const int64_t padded_n = (n + kLanes - 1) / kLanes * kLanes;
  const float* panel = pack_panel(tb, n, k, b, ldb, padded_n);
  const StridedMatrix opa{a, ta ? 1 : lda, ta ? lda : 1};
  product<false>(m, n, k, opa, panel, padded_n, {c, ldc, beta});
}

}  // namespace

DirectGemmFn direct_gemm_avx2() { return &direct_gemm; }

}  // namespace strata::cpu_kernels::detail

#else

namespace strata::cpu_kernels::detail {
DirectGemmFn direct_gemm_avx2() { return nullptr; }
}  // namespace strata::cpu_kernels::detail

#endif
