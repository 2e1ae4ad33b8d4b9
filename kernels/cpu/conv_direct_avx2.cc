// The direct convolution kernel (kernels/cpu/conv_direct.h) for AVX2 + FMA. Compiled with
// -mavx2 -mfma on x86-64 whatever the build's -march (core/CMakeLists.txt) and only called
// after the cpuid check in conv_direct.cc; like gemm_direct_avx2.cc it includes no header
// with inline functions shared with other translation units except the standard ones and
// avx2_lanes.h.
#include <strata/kernels/cpu/conv_direct.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <strata/kernels/cpu/avx2_lanes.h>

#include <algorithm>

namespace strata::cpu_kernels::detail {

namespace {

constexpr int64_t kPixels = 6;  // output pixels per register tile
constexpr int64_t kWidth = kDirectConvPanelWidth;

// Stores one row's 16 (or the first `columns`) outputs.
inline void store_row(float* out, __m256 lo, __m256 hi, int64_t columns) {
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

// Loads what `store_row` stored.
inline void load_row(const float* at, __m256& lo, __m256& hi, int64_t columns) {
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

// The register tile both kernels use: six rows of 16 outputs (6 output pixels of a
// convolution, or 6 rows of a filter gradient), twelve AVX2 accumulators. They are named
// members, not an array: as an array GCC kept them in registers but also stored them back
// on every turn of the inner loop (30 against 85 GFLOP/s in a standalone loop).
struct Tile {
  static constexpr int64_t kRows = 6;
  __m256 r00 = _mm256_setzero_ps(), r01 = r00, r10 = r00, r11 = r00, r20 = r00, r21 = r00;
  __m256 r30 = r00, r31 = r00, r40 = r00, r41 = r00, r50 = r00, r51 = r00;

  // Row i += x[i] * (w0, w1): one broadcast of each row's scalar, two FMAs a row.
  __attribute__((always_inline)) inline void fma(const float* x0, const float* x1, const float* x2,
                                                 const float* x3, const float* x4, const float* x5, __m256 w0,
                                                 __m256 w1) {
    const float* const x[kRows] = {x0, x1, x2, x3, x4, x5};
    first_rows(kRows, [&](int64_t i, __m256& lo, __m256& hi) {
      const __m256 v = _mm256_broadcast_ss(x[i]);
      lo = _mm256_fmadd_ps(v, w0, lo);
      hi = _mm256_fmadd_ps(v, w1, hi);
    });
  }

  // The first `rows` rows from / to `at`, rows `stride` floats apart, `columns` of 16. The
  // rows past `rows` (a tail tile's copies of its last row) stay zero / are not stored.
  void load(const float* at, int64_t stride, int64_t rows, int64_t columns) {
    first_rows(rows, [&](int64_t i, __m256& lo, __m256& hi) { load_row(at + i * stride, lo, hi, columns); });
  }
  void store(float* at, int64_t stride, int64_t rows, int64_t columns) {
    first_rows(rows, [&](int64_t i, __m256& lo, __m256& hi) { store_row(at + i * stride, lo, hi, columns); });
  }

 private:
  // f(i, row i's two accumulators) for the first `rows` rows, by name (see above).
  template <typename F>
  __attribute__((always_inline)) inline void first_rows(int64_t rows, F f) {
    f(0, r00, r01);
    if (rows > 1) f(1, r10, r11);
    if (rows > 2) f(2, r20, r21);
    if (rows > 3) f(3, r30, r31);
    if (rows > 4) f(4, r40, r41);
    if (rows > 5) f(5, r50, r51);
  }
};

// Six output pixels x 16 channels: `pixel[i]` is where pixel i's patch starts in the input,
// `panel` the packed filter's rows for these channels. A tail tile computes its missing
// pixels on copies of the last one and stores `pixels`.
void tile(const DirectConvBand& b, const float* const pixel[kPixels], const float* panel, float* out,
          int64_t pixels, int64_t columns) {
  Tile t;
  const float* w = panel;
  const int64_t c = b.c, taps = b.kh * b.kw;
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t offset = ((tap / b.kw) * b.in_w + tap % b.kw) * c;
    const float *p0 = pixel[0] + offset, *p1 = pixel[1] + offset, *p2 = pixel[2] + offset;
    const float *p3 = pixel[3] + offset, *p4 = pixel[4] + offset, *p5 = pixel[5] + offset;
#pragma GCC unroll 4
    for (int64_t i = 0; i < c; ++i) {
      t.fma(p0 + i, p1 + i, p2 + i, p3 + i, p4 + i, p5 + i, _mm256_loadu_ps(w), _mm256_loadu_ps(w + 8));
      w += kWidth;
    }
  }
  t.store(out, b.o, pixels, columns);
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
  Tile t;
  t.load(dw, o, rows, columns);
  const int64_t o0 = offset[0], o1 = offset[1], o2 = offset[2], o3 = offset[3], o4 = offset[4], o5 = offset[5];
  const int64_t step = b.stride_w * b.c;  // from one output pixel's patch to the next's in a row
  const __m256i mask_lo = lane_mask(std::min<int64_t>(columns, 8)), mask_hi = lane_mask(std::max<int64_t>(columns - 8, 0));
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* x = b.input + r * b.stride_h * b.in_w * b.c;
    const float* g = dy + r * b.out_w * o;
    for (int64_t col = 0; col < b.out_w; ++col, x += step, g += o) {
      if constexpr (kPartial) {
        t.fma(x + o0, x + o1, x + o2, x + o3, x + o4, x + o5, _mm256_maskload_ps(g, mask_lo),
              _mm256_maskload_ps(g + 8, mask_hi));
      } else {
        t.fma(x + o0, x + o1, x + o2, x + o3, x + o4, x + o5, _mm256_loadu_ps(g), _mm256_loadu_ps(g + 8));
      }
    }
  }
  t.store(dw, o, rows, columns);
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
