// The direct float convolution: an NHWC convolution computed straight from the image, with
// no im2col buffer (an "implicit GEMM"), for conv2d and, at stride 1, its input gradient.
//
// Why: the im2col path writes each image's patches (K = kh*kw*c floats per output pixel,
// nine times the image for a 3x3 filter) and then OpenBLAS packs them again before its
// kernel runs, with a pass zeroing the output first (beta = 0). On the MNIST CNN's second
// layer (26x26x32 -> 24x24x64, 3x3) that GEMM ran at ~60 GFLOP/s on one Zen 3 core, and
// the input gradient's dy W^T GEMM (K = 64, a wide output) at ~50, plus col2im. Here the
// register tile reads its six output pixels' patches where they lie in the image (a
// broadcast per input channel) against a filter panel that stays in L1, and writes each
// output once: 80-94 GFLOP/s in a standalone loop on the same core (bench/README.md
// "Direct convolution").
//
// How: the filter is packed once per call into panels of 16 output channels, each
// kh*kw*c rows of 16 floats (zeros past o). A tile is 6 output pixels x 16 channels (12
// AVX2 accumulators); for each filter tap (ky, kx) it runs over the input channels, one
// broadcast per pixel and two panel loads per channel. Padding is made explicit: a band of
// output rows copies the zero-padded input rows it reads into a small buffer (skipped when
// the convolution reads inside the image, as VALID does). The input gradient at stride 1 is
// the same valid convolution of dy, zero-padded by kh-1-pad_top rows and kw-1-pad_left
// columns, with the filter flipped in both spatial axes and its channel axes swapped. The
// filter gradient's tile is 6 of its rows (taps x input channels) x 16 output channels,
// summed over the output pixels: per pixel six broadcasts of the input and two loads of dy.
//
// Numerics: every output element is one sum over the taps in (ky, kx, channel) order, one
// fused multiply-add per term from zero, whatever the tile, band or thread split: the
// result is the same at any thread count and batch split. Every filter gradient element is
// one sum over (image, output pixel) in order, whatever the thread split. It differs from the im2col path
// in the last bits (OpenBLAS sums in another order).
#pragma once

#include <cstdint>

namespace strata::cpu_kernels {

// One band of a valid (unpadded) strided convolution of one image: output pixels
// (r, x) for r < rows, x < out_w, all o channels, at out[(r * out_w + x) * o + j], from
// input pixel (r * stride_h + ky, x * stride_w + kx) at input[(row * in_w + col) * c].
struct DirectConvBand {
  const float* input;
  int64_t in_w;  // pixels from one input row to the next
  int64_t c;
  int64_t kh, kw;
  int64_t stride_h, stride_w;
  int64_t rows, out_w;
  int64_t o;
};

// Output channels per filter panel: two AVX2 vectors.
constexpr int64_t kDirectConvPanelWidth = 16;

// Floats of the packed filter for kh x kw taps, c input and o output channels.
int64_t direct_conv_packed_floats(int64_t kh, int64_t kw, int64_t c, int64_t o);

// Packs an HWIO filter [kh, kw, c, o] for the kernel. With `for_input_gradient` it packs
// the filter of the input gradient's convolution instead: taps flipped, input and output
// channels swapped ([kh, kw, o, c] with w'[ky][kx][j][i] = w[kh-1-ky][kw-1-kx][i][j]).
void pack_direct_conv_filter(const float* filter, int64_t kh, int64_t kw, int64_t c, int64_t o,
                             bool for_input_gradient, float* packed);

// Computes one band from a filter packed for (band.kh, band.kw, band.c, band.o).
using DirectConvFn = void (*)(const DirectConvBand& band, const float* packed, float* out);

// The filter gradient's tiles: 6 rows of the [kh*kw*c, o] gradient x 16 columns, numbered
// column panel by column panel.
constexpr int64_t kDirectConvGradRows = 6;
int64_t direct_conv_filter_grad_tiles(int64_t kh, int64_t kw, int64_t c, int64_t o);

// Adds one band's contribution to the filter gradient's tiles [tile_begin, tile_end):
// dw[(tap * c + i) * o + j] += sum over the band's output pixels of the pixel's input at
// tap and channel i times dy[pixel * o + j], in pixel order, `dy` being the band's rows of
// the output gradient. Bands added one after another in a fixed order give the same sum
// whoever adds which tiles.
using DirectConvFilterGradFn = void (*)(const DirectConvBand& band, const float* dy, int64_t tile_begin,
                                        int64_t tile_end, float* dw);

// The AVX2 + FMA kernels, or nullptr where they are not compiled in (not x86-64) or the
// CPU lacks AVX2 or FMA (checked once, as vec_math's Note [Runtime ISA dispatch]).
DirectConvFn direct_conv_kernel();
DirectConvFilterGradFn direct_conv_filter_grad_kernel();

namespace detail {
// The kernels themselves, unchecked (conv_direct_avx2.cc); callers go through the above.
DirectConvFn direct_conv_avx2();
DirectConvFilterGradFn direct_conv_filter_grad_avx2();
}  // namespace detail

}  // namespace strata::cpu_kernels
