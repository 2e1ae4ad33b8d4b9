// The direct convolution kernel (kernels/cpu/conv_direct.h) for AVX2 + FMA. Compiled with
// -mavx2 -mfma on x86-64 whatever the build's -march (core/CMakeLists.txt) and only called
// after the cpuid check in conv_direct.cc; like gemm_direct_avx2.cc it includes no header
// with inline functions shared with other translation units except the standard ones.
#include <strata/kernels/cpu/conv_direct.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <algorithm>

namespace strata::cpu_kernels::detail {

namespace {

constexpr int64_t kPixels = 6;  // output pixels per register tile
constexpr int64_t kWidth = kDirectConvPanelWidth;

// The first `count` (0..8) lanes set.
__m256i lane_mask(int64_t count) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), index);
}

// Stores one pixel's 16 (or the first `columns`) outputs.
inline void store(float* out, __m256 lo, __m256 hi, int64_t columns) {
  if (columns == kWidth) {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
  } else if (columns > 8) {
    _mm256_storeu_ps(out, lo);
    _mm256_maskstore_ps(out + 8, lane_mask(columns - 8), hi);
  } else {
    _mm256_maskstore_ps(out, lane_mask(columns), lo);
  }
}

// Six output pixels x 16 channels: `pixel[i]` is where pixel i's patch starts in the input,
// `panel` the packed filter's rows for these channels. A tail tile computes its missing
// pixels on copies of the last one and stores `pixels`. The twelve accumulators are named
// variables: as an array GCC kept them in registers but also stored them back on every turn
// of the channel loop (30 against 85 GFLOP/s in a standalone loop).
void tile(const DirectConvBand& b, const float* const pixel[kPixels], const float* panel, float* out,
          int64_t pixels, int64_t columns) {
  const int64_t o = b.o;
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
  __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  const float* w = panel;
  const int64_t c = b.c, taps = b.kh * b.kw;
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t offset = ((tap / b.kw) * b.in_w + tap % b.kw) * c;
    const float *p0 = pixel[0] + offset, *p1 = pixel[1] + offset, *p2 = pixel[2] + offset;
    const float *p3 = pixel[3] + offset, *p4 = pixel[4] + offset, *p5 = pixel[5] + offset;
#pragma GCC unroll 4
    for (int64_t i = 0; i < c; ++i) {
      const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
      w += kWidth;
      __m256 x = _mm256_broadcast_ss(p0 + i);
      a00 = _mm256_fmadd_ps(x, w0, a00);
      a01 = _mm256_fmadd_ps(x, w1, a01);
      x = _mm256_broadcast_ss(p1 + i);
      a10 = _mm256_fmadd_ps(x, w0, a10);
      a11 = _mm256_fmadd_ps(x, w1, a11);
      x = _mm256_broadcast_ss(p2 + i);
      a20 = _mm256_fmadd_ps(x, w0, a20);
      a21 = _mm256_fmadd_ps(x, w1, a21);
      x = _mm256_broadcast_ss(p3 + i);
      a30 = _mm256_fmadd_ps(x, w0, a30);
      a31 = _mm256_fmadd_ps(x, w1, a31);
      x = _mm256_broadcast_ss(p4 + i);
      a40 = _mm256_fmadd_ps(x, w0, a40);
      a41 = _mm256_fmadd_ps(x, w1, a41);
      x = _mm256_broadcast_ss(p5 + i);
      a50 = _mm256_fmadd_ps(x, w0, a50);
      a51 = _mm256_fmadd_ps(x, w1, a51);
    }
  }
  store(out, a00, a01, columns);
  if (pixels > 1) store(out + o, a10, a11, columns);
  if (pixels > 2) store(out + 2 * o, a20, a21, columns);
  if (pixels > 3) store(out + 3 * o, a30, a31, columns);
  if (pixels > 4) store(out + 4 * o, a40, a41, columns);
  if (pixels > 5) store(out + 5 * o, a50, a51, columns);
}

void direct_conv(const DirectConvBand& b, const float* packed, float* out) {
  const int64_t total = b.rows * b.out_w;
  const int64_t panel_floats = b.kh * b.kw * b.c * kWidth;
  const int64_t panels = (b.o + kWidth - 1) / kWidth;
  // Panel-major: a panel (18 KB for the CNN's second layer) stays in cache while the tiles
  // sweep the band's input rows. (Splitting the taps into passes of <= 20 KB of panel, to
  // stay in L1 where a panel is larger, measured the same on the CNN's input gradient:
  // 36 KB panels, 63-74 against 69-76 GFLOP/s.)
  for (int64_t p = 0; p < panels; ++p) {
    const float* panel = packed + p * panel_floats;
    const int64_t columns = std::min(kWidth, b.o - p * kWidth);
    for (int64_t q = 0; q < total; q += kPixels) {
      const float* pixel[kPixels];
      for (int64_t i = 0; i < kPixels; ++i) {
        const int64_t at = std::min(q + i, total - 1);
        const int64_t r = at / b.out_w, x = at % b.out_w;
        pixel[i] = b.input + (r * b.stride_h * b.in_w + x * b.stride_w) * b.c;
      }
      tile(b, pixel, panel, out + q * b.o + p * kWidth, std::min(kPixels, total - q), columns);
    }
  }
}

// Loads what `store` stored.
inline void load(const float* at, __m256& lo, __m256& hi, int64_t columns) {
  if (columns == kWidth) {
    lo = _mm256_loadu_ps(at);
    hi = _mm256_loadu_ps(at + 8);
  } else if (columns > 8) {
    lo = _mm256_loadu_ps(at);
    hi = _mm256_maskload_ps(at + 8, lane_mask(columns - 8));
  } else {
    lo = _mm256_maskload_ps(at, lane_mask(columns));
    hi = _mm256_setzero_ps();
  }
}

// Six rows of the filter gradient (taps x input channels, each at `offset[r]` from a
// pixel's patch start) x 16 output channels, plus this band's pixels. A tail tile repeats
// its last row and stores `rows`. The partial sums go through dw between bands: a float
// round trip, so the sum over all pixels is the same as in one pass. In the last panel of
// an output narrower than a multiple of 16 (kPartial) dy is read through masks: a plain
// 16-wide load of the band's last pixel would read past dy's end.
template <bool kPartial>
void grad_tile(const DirectConvBand& b, const float* dy, const int64_t offset[kDirectConvGradRows], float* dw,
               int64_t rows, int64_t columns) {
  const int64_t o = b.o;
  __m256 a00, a01, a10 = _mm256_setzero_ps(), a11 = a10, a20 = a10, a21 = a10;
  __m256 a30 = a10, a31 = a10, a40 = a10, a41 = a10, a50 = a10, a51 = a10;
  load(dw, a00, a01, columns);
  if (rows > 1) load(dw + o, a10, a11, columns);
  if (rows > 2) load(dw + 2 * o, a20, a21, columns);
  if (rows > 3) load(dw + 3 * o, a30, a31, columns);
  if (rows > 4) load(dw + 4 * o, a40, a41, columns);
  if (rows > 5) load(dw + 5 * o, a50, a51, columns);
  const int64_t o0 = offset[0], o1 = offset[1], o2 = offset[2], o3 = offset[3], o4 = offset[4], o5 = offset[5];
  const int64_t step = b.stride_w * b.c;  // from one output pixel's patch to the next's in a row
  const __m256i mask_lo = lane_mask(std::min<int64_t>(columns, 8)), mask_hi = lane_mask(std::max<int64_t>(columns - 8, 0));
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* x = b.input + r * b.stride_h * b.in_w * b.c;
    const float* g = dy + r * b.out_w * o;
    for (int64_t col = 0; col < b.out_w; ++col, x += step, g += o) {
      __m256 g0, g1;
      if constexpr (kPartial) {
        g0 = _mm256_maskload_ps(g, mask_lo);
        g1 = _mm256_maskload_ps(g + 8, mask_hi);
      } else {
        g0 = _mm256_loadu_ps(g);
        g1 = _mm256_loadu_ps(g + 8);
      }
      __m256 v = _mm256_broadcast_ss(x + o0);
      a00 = _mm256_fmadd_ps(v, g0, a00);
      a01 = _mm256_fmadd_ps(v, g1, a01);
      v = _mm256_broadcast_ss(x + o1);
      a10 = _mm256_fmadd_ps(v, g0, a10);
      a11 = _mm256_fmadd_ps(v, g1, a11);
      v = _mm256_broadcast_ss(x + o2);
      a20 = _mm256_fmadd_ps(v, g0, a20);
      a21 = _mm256_fmadd_ps(v, g1, a21);
      v = _mm256_broadcast_ss(x + o3);
      a30 = _mm256_fmadd_ps(v, g0, a30);
      a31 = _mm256_fmadd_ps(v, g1, a31);
      v = _mm256_broadcast_ss(x + o4);
      a40 = _mm256_fmadd_ps(v, g0, a40);
      a41 = _mm256_fmadd_ps(v, g1, a41);
      v = _mm256_broadcast_ss(x + o5);
      a50 = _mm256_fmadd_ps(v, g0, a50);
      a51 = _mm256_fmadd_ps(v, g1, a51);
    }
  }
  store(dw, a00, a01, columns);
  if (rows > 1) store(dw + o, a10, a11, columns);
  if (rows > 2) store(dw + 2 * o, a20, a21, columns);
  if (rows > 3) store(dw + 3 * o, a30, a31, columns);
  if (rows > 4) store(dw + 4 * o, a40, a41, columns);
  if (rows > 5) store(dw + 5 * o, a50, a51, columns);
}

void direct_conv_filter_grad(const DirectConvBand& b, const float* dy, int64_t tile_begin, int64_t tile_end,
                             float* dw) {
  // dy's 16-column strip of a panel is read by every row tile of that panel: tiles are
  // numbered panel by panel.
  const int64_t total_rows = b.kh * b.kw * b.c;
  const int64_t row_tiles = (total_rows + kDirectConvGradRows - 1) / kDirectConvGradRows;
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const int64_t panel = t / row_tiles, first = (t % row_tiles) * kDirectConvGradRows;
    const int64_t rows = std::min(kDirectConvGradRows, total_rows - first);
    int64_t offset[kDirectConvGradRows];
    for (int64_t r = 0; r < kDirectConvGradRows; ++r) {
      const int64_t row = std::min(first + r, total_rows - 1);
      const int64_t tap = row / b.c, channel = row % b.c;
      offset[r] = ((tap / b.kw) * b.in_w + tap % b.kw) * b.c + channel;
    }
    const int64_t columns = std::min(kWidth, b.o - panel * kWidth);
    float* out = dw + first * b.o + panel * kWidth;
    if (columns == kWidth) {
      grad_tile<false>(b, dy + panel * kWidth, offset, out, rows, columns);
    } else {
      grad_tile<true>(b, dy + panel * kWidth, offset, out, rows, columns);
    }
  }
}

}  // namespace

DirectConvFn direct_conv_avx2() { return &direct_conv; }
DirectConvFilterGradFn direct_conv_filter_grad_avx2() { return &direct_conv_filter_grad; }

}  // namespace strata::cpu_kernels::detail

#else

namespace strata::cpu_kernels::detail {
DirectConvFn direct_conv_avx2() { return nullptr; }
DirectConvFilterGradFn direct_conv_filter_grad_avx2() { return nullptr; }
}  // namespace strata::cpu_kernels::detail

#endif
