// CPU kernels of NHWC convolution (im2col + one GEMM per chunk of images, the chunks split
// across the pool; float32 through the direct kernel of conv_direct.h where the CPU has it),
// its two backward ops, and max/average pooling with their gradients.
// Padding follows TensorFlow: SAME puts the extra row/column at the bottom/right; average
// pooling counts only the elements inside the input.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include <strata/core/dispatch.h>
#include <strata/core/ops.h>
#include <strata/kernels/cpu/conv_direct.h>
#include <strata/kernels/cpu/gemm.h>
#include <strata/kernels/cpu/loops.h>
#include <strata/kernels/cpu/scratch.h>

namespace strata::cpu_kernels {

namespace {

struct ConvGeometry {
  int64_t n, h, w, c;       // input
  int64_t kh, kw, o;        // filter
  int64_t oh, ow;           // output
  int64_t sh, sw, ph, pw;   // strides and leading pads
  int64_t patch() const { return kh * kw * c; }
  int64_t pixels() const { return oh * ow; }
};

ConvGeometry geometry(const Shape& x, const Shape& w, const OpAttrs& a, const char* op) {
  ConvGeometry g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = w[0], g.kw = w[1], g.o = w[3];
  g.sh = a.strides[0], g.sw = a.strides[1];
  const auto ah = conv_output_axis(g.h, g.kh, g.sh, a.padding, op);
  const auto aw = conv_output_axis(g.w, g.kw, g.sw, a.padding, op);
  g.oh = ah.out, g.ow = aw.out, g.ph = ah.pad_before, g.pw = aw.pad_before;
  return g;
}

// col[p, (kh,kw,c)] for the output pixels of one image.
template <typename T>
void im2col(const T* x, const ConvGeometry& g, T* col) {
  const int64_t row = g.patch();
  const int64_t span = g.kw * g.c;  // one filter row: kw pixels x c channels, contiguous in x
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      T* dst = col + (oy * g.ow + ox) * row;
      const int64_t ix0 = ox * g.sw - g.pw;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky;
        if (iy >= 0 && iy < g.h && ix0 >= 0 && ix0 + g.kw <= g.w) {
          // The whole filter row is inside the image: one contiguous run (a plain loop, as
          // runs are short: 3 elements for a one-channel image).
          const T* s = x + (iy * g.w + ix0) * g.c;
          T* d = dst + ky * span;
          for (int64_t j = 0; j < span; ++j) d[j] = s[j];
          continue;
        }
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = ox * g.sw - g.pw + kx;
          T* d = dst + (ky * g.kw + kx) * g.c;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
            std::memset(d, 0, size_t(g.c) * sizeof(T));
          } else {
            std::memcpy(d, x + (iy * g.w + ix) * g.c, size_t(g.c) * sizeof(T));
          }
        }
      }
    }
  }
}

// The adjoint of im2col: adds col's entries back into the image dx (zeroed by the caller).
template <typename T>
void col2im(const T* col, const ConvGeometry& g, T* dx) {
  const int64_t row = g.patch();
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const T* src = col + (oy * g.ow + ox) * row;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = ox * g.sw - g.pw + kx;
          if (ix < 0 || ix >= g.w) continue;
          const T* s = src + (ky * g.kw + kx) * g.c;
          T* d = dx + (iy * g.w + ix) * g.c;
          for (int64_t c = 0; c < g.c; ++c) d[c] += s[c];
        }
      }
    }
  }
}

double conv_cost_per_image(const ConvGeometry& g) {
  return 2.0 * double(g.pixels()) * double(g.patch()) * double(g.o) * 0.01;
}

// Images are lowered and multiplied a chunk at a time: one GEMM with M = images x pixels
// instead of one GEMM per image, which saves per-call and packing work for small images and
// small K (the first MNIST layer has K = 9). In NHWC the chunk's rows of the output (and of
// dy) are already contiguous, so no permutation is needed. The chunking depends only on the
// geometry, never on the thread count, so every result is the same at any number of threads.
struct Chunking {
  int64_t images;  // per chunk
  int64_t count;   // chunks
};

// Bound on one chunk's im2col buffer: small enough to stay in the 2 MiB L2 next to OpenBLAS's
// packed panels (an 8 MiB bound made the MNIST CNN step ~15-20% slower: im2col and packing
// then miss the cache; 0.7-2.8 MiB measured the same). With it the CNN's second layer runs
// one image per GEMM (already M = 576), its first layer (K = 9) 16 images per GEMM.
constexpr int64_t kColBytes = int64_t(1) << 20;
constexpr int64_t kMinChunks = 4;  // enough chunks for the pool to share

Chunking chunking(const ConvGeometry& g, size_t elem_bytes) {
  if (g.n == 0) return {1, 0};
  const int64_t per_image = std::max<int64_t>(g.pixels() * g.patch() * int64_t(elem_bytes), 1);
  int64_t images = std::max<int64_t>(kColBytes / per_image, 1);
  images = std::min(images, (g.n + kMinChunks - 1) / kMinChunks);
  images = std::max<int64_t>(images, 1);
  return {images, (g.n + images - 1) / images};
}

// A valid convolution over a zero-padded input, for the direct kernels (conv_direct.h):
// conv2d and its filter gradient, or its input gradient at stride 1 (dy padded, the filter
// flipped).
struct PaddedConv {
  const float* input;       // n images of h x w x c, one after the other
  int64_t n, h, w, c;
  int64_t pad_top, pad_left;  // zeros before the image; after it as far as the taps read
  int64_t kh, kw, sh, sw;
  int64_t oh, ow, o;        // the output, n images of oh x ow x o
};

// Output pixels per band, about: 16 register tiles, so that a batch of one image still
// splits across the pool; each band pads only the input rows it reads.
constexpr int64_t kBandPixels = 96;

// How the output rows are cut into bands, and what a band's input is: the image itself
// when the taps read inside it (VALID, no padding), else a buffer of the padded rows.
class Bands {
 public:
  explicit Bands(const PaddedConv& g)
      : g_(g),
        rows_(std::min(g.oh, std::max<int64_t>(1, (kBandPixels + g.ow - 1) / g.ow))),
        span_w_((g.ow - 1) * g.sw + g.kw),
        inside_(g.pad_top == 0 && g.pad_left == 0 && span_w_ <= g.w && (g.oh - 1) * g.sh + g.kh <= g.h) {}

  int64_t rows() const { return rows_; }
  int64_t per_image() const { return (g_.oh + rows_ - 1) / rows_; }
  // Floats of the buffer `band` fills (at least 1).
  int64_t buffer_floats() const { return inside_ ? 1 : ((rows_ - 1) * g_.sh + g_.kh) * span_w_ * g_.c; }

  // Output rows [r0, r0 + rows()) of `image` (fewer in the last band).
  DirectConvBand band(int64_t image, int64_t r0, float* buffer) const {
    const int64_t r1 = std::min(g_.oh, r0 + rows_);
    const float* in = g_.input + image * g_.h * g_.w * g_.c;
    DirectConvBand band{in + r0 * g_.sh * g_.w * g_.c, g_.w, g_.c, g_.kh, g_.kw, g_.sh, g_.sw, r1 - r0, g_.ow, g_.o};
    if (inside_) return band;
    // The band's rows of the padded image: zeros outside the input.
    const int64_t first = r0 * g_.sh - g_.pad_top, count = (r1 - r0 - 1) * g_.sh + g_.kh;
    const int64_t col_begin = std::min(g_.pad_left, span_w_), col_end = std::min(g_.pad_left + g_.w, span_w_);
    for (int64_t t = 0; t < count; ++t) {
      float* row = buffer + t * span_w_ * g_.c;
      const int64_t iy = first + t;
      if (iy < 0 || iy >= g_.h || col_end <= col_begin) {
        std::memset(row, 0, size_t(span_w_ * g_.c) * sizeof(float));
        continue;
      }
      std::memset(row, 0, size_t(col_begin * g_.c) * sizeof(float));
      std::memcpy(row + col_begin * g_.c, in + (iy * g_.w + col_begin - g_.pad_left) * g_.c,
                  size_t((col_end - col_begin) * g_.c) * sizeof(float));
      std::memset(row + col_end * g_.c, 0, size_t((span_w_ - col_end) * g_.c) * sizeof(float));
    }
    band.input = buffer;
    band.in_w = span_w_;
    return band;
  }

 private:
  PaddedConv g_;
  int64_t rows_, span_w_;
  bool inside_;
};

// The multiply-adds of `pixels` output pixels, in the pool's cost unit (as conv_cost_per_image).
double direct_conv_cost(const PaddedConv& g, int64_t pixels) {
  return 2.0 * double(pixels) * double(g.kh * g.kw * g.c) * double(g.o) * 0.01;
}

// The bands of every image, split across the pool; each writes its own output rows.
void run_direct_conv(DirectConvFn kernel, const PaddedConv& g, const float* packed, float* out) {
  if (g.n == 0 || g.oh == 0 || g.ow == 0 || g.o == 0) return;  // an empty output (SAME on an empty image)
  const Bands bands(g);
  const int64_t per_image = bands.per_image();
  parallel_for(g.n * per_image, direct_conv_cost(g, bands.rows() * g.ow), [&](int64_t begin, int64_t end) {
    ScratchBuffer<float> buffer(bands.buffer_floats());
    for (int64_t item = begin; item < end; ++item) {
      const int64_t image = item / per_image, r0 = (item % per_image) * bands.rows();
      kernel(bands.band(image, r0, buffer.get()), packed, out + (image * g.oh + r0) * g.ow * g.o);
    }
  });
}

// The filter gradient (zeroed by the caller): its tiles split across the pool, each worker
// adding every band of every image, in order, to its own tiles. Split so, no worker's sums
// need adding to another's (the same bits at any thread count); the price, with padding,
// is that every worker pads every band itself: a copy of the input per worker, about one
// or two copied floats for every kh * kw * o multiply-adds.
void run_direct_conv_filter_grad(DirectConvFilterGradFn kernel, const PaddedConv& g, const float* dy, float* dw) {
  if (g.n == 0 || g.oh == 0 || g.ow == 0 || g.o == 0) return;  // no output pixel: dw stays zero
  const Bands bands(g);
  const int64_t tiles = direct_conv_filter_grad_tiles(g.kh, g.kw, g.c, g.o);
  const double cost_per_tile =
      2.0 * double(g.n * g.oh * g.ow) * double(kDirectConvGradRows * kDirectConvPanelWidth) * 0.01;
  parallel_for(tiles, cost_per_tile, [&](int64_t begin, int64_t end) {
    ScratchBuffer<float> buffer(bands.buffer_floats());
    for (int64_t image = 0; image < g.n; ++image) {
      for (int64_t r0 = 0; r0 < g.oh; r0 += bands.rows()) {
        kernel(bands.band(image, r0, buffer.get()), dy + (image * g.oh + r0) * g.ow * g.o, begin, end, dw);
      }
    }
  });
}

template <typename T>
void conv_forward(const Tensor& xt, const Tensor& wt, const Tensor& out, const OpAttrs& a) {
  const ConvGeometry g = geometry(xt.shape(), wt.shape(), a, "conv2d");
  const Tensor x = contiguous_copy(xt), w = contiguous_copy(wt);
  const T* px = ptr<T>(x);
  const T* pw = ptr<T>(w);
  T* po = ptr<T>(out);
  if (g.patch() == 0) {
    std::memset(po, 0, out.nbytes());
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (const DirectConvFn kernel = direct_conv_kernel()) {
      ScratchBuffer<float> packed(direct_conv_packed_floats(g.kh, g.kw, g.c, g.o));
      pack_direct_conv_filter(pw, g.kh, g.kw, g.c, g.o, false, packed.get());
      run_direct_conv(kernel, {px, g.n, g.h, g.w, g.c, g.ph, g.pw, g.kh, g.kw, g.sh, g.sw, g.oh, g.ow, g.o},
                      packed.get(), po);
      return;
    }
  }
  const Chunking ch = chunking(g, sizeof(T));
  parallel_for(ch.count, conv_cost_per_image(g) * double(ch.images), [&](int64_t b, int64_t e) {
    ScratchBuffer<T> col(ch.images * g.pixels() * g.patch());  // fully written
    for (int64_t c = b; c < e; ++c) {
      const int64_t i0 = c * ch.images, i1 = std::min(g.n, i0 + ch.images);
      for (int64_t i = i0; i < i1; ++i) {
        im2col(px + i * g.h * g.w * g.c, g, col.get() + (i - i0) * g.pixels() * g.patch());
      }
      // out[chunk pixels, O] = col[chunk pixels, K] @ W[K, O]
      gemm(false, false, (i1 - i0) * g.pixels(), g.o, g.patch(), col.get(), g.patch(), pw, g.o,
           T(0), po + i0 * g.pixels() * g.o, g.o);
    }
  });
}

template <typename T>
void conv_backprop_input(const Tensor& wt, const Tensor& dyt, const Tensor& dx, const OpAttrs& a) {
  const ConvGeometry g = geometry(a.shape, wt.shape(), a, "conv2d_backprop_input");
  const Tensor w = contiguous_copy(wt), dy = contiguous_copy(dyt);
  T* pdx = ptr<T>(dx);
  if constexpr (std::is_same_v<T, float>) {
    // At stride 1 the input gradient is a valid convolution of dy padded by the taps that
    // reach past its edges, with the filter flipped and its channels swapped
    // (conv_direct.h); it writes every element of dx.
    const DirectConvFn kernel = direct_conv_kernel();
    if (kernel != nullptr && g.sh == 1 && g.sw == 1 && g.patch() > 0 && g.o > 0 && g.ph < g.kh && g.pw < g.kw) {
      ScratchBuffer<float> packed(direct_conv_packed_floats(g.kh, g.kw, g.o, g.c));
      pack_direct_conv_filter(ptr<float>(w), g.kh, g.kw, g.c, g.o, true, packed.get());
      run_direct_conv(kernel,
                      {ptr<float>(dy), g.n, g.oh, g.ow, g.o, g.kh - 1 - g.ph, g.kw - 1 - g.pw, g.kh, g.kw, 1, 1,
                       g.h, g.w, g.c},
                      packed.get(), pdx);
      return;
    }
  }
  std::memset(pdx, 0, dx.nbytes());
  if (g.patch() == 0 || g.o == 0) return;
  const Chunking ch = chunking(g, sizeof(T));
  parallel_for(ch.count, conv_cost_per_image(g) * double(ch.images), [&](int64_t b, int64_t e) {
    ScratchBuffer<T> dcol(ch.images * g.pixels() * g.patch());  // fully written
    for (int64_t c = b; c < e; ++c) {
      const int64_t i0 = c * ch.images, i1 = std::min(g.n, i0 + ch.images);
      // dcol[chunk pixels, K] = dy[chunk pixels, O] @ W[K, O]^T
      gemm(false, true, (i1 - i0) * g.pixels(), g.patch(), g.o,
           ptr<T>(dy) + i0 * g.pixels() * g.o, g.o, ptr<T>(w), g.o, T(0), dcol.get(), g.patch());
      for (int64_t i = i0; i < i1; ++i) {
        col2im(dcol.get() + (i - i0) * g.pixels() * g.patch(), g, pdx + i * g.h * g.w * g.c);
      }
    }
  });
}

// The filter gradient sums over every image. Chunk c accumulates into lane c % kLanes and the
// lanes are added in order at the end: a fixed summation order whatever the thread count,
// with scratch bounded by kLanes filters.
constexpr int64_t kLanes = 8;

template <typename T>
void conv_backprop_filter(const Tensor& xt, const Tensor& dyt, const Tensor& dw, const OpAttrs& a) {
  const ConvGeometry g = geometry(xt.shape(), a.shape, a, "conv2d_backprop_filter");
  const Tensor x = contiguous_copy(xt), dy = contiguous_copy(dyt);
  T* pdw = ptr<T>(dw);
  std::memset(pdw, 0, dw.nbytes());
  if (g.patch() == 0 || g.o == 0 || g.n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (const DirectConvFilterGradFn kernel = direct_conv_filter_grad_kernel()) {
      run_direct_conv_filter_grad(
          kernel, {ptr<float>(x), g.n, g.h, g.w, g.c, g.ph, g.pw, g.kh, g.kw, g.sh, g.sw, g.oh, g.ow, g.o},
          ptr<float>(dy), pdw);
      return;
    }
  }
  const Chunking ch = chunking(g, sizeof(T));
  const int64_t lanes = std::min(kLanes, ch.count);
  const int64_t filter = g.patch() * g.o;
  // Lane 0 accumulates straight into dw.
  ScratchBuffer<T> partial_buffer((lanes - 1) * filter);
  T* partial = partial_buffer.get();
  std::fill(partial, partial + (lanes - 1) * filter, T(0));
  const double cost =
      conv_cost_per_image(g) * double(ch.images) * double((ch.count + lanes - 1) / lanes);
  parallel_for(lanes, cost, [&](int64_t b, int64_t e) {
    ScratchBuffer<T> col(ch.images * g.pixels() * g.patch());  // fully written
    for (int64_t lane = b; lane < e; ++lane) {
      T* acc = lane == 0 ? pdw : partial + (lane - 1) * filter;
      for (int64_t c = lane; c < ch.count; c += lanes) {
        const int64_t i0 = c * ch.images, i1 = std::min(g.n, i0 + ch.images);
        for (int64_t i = i0; i < i1; ++i) {
          im2col(ptr<T>(x) + i * g.h * g.w * g.c, g, col.get() + (i - i0) * g.pixels() * g.patch());
        }
        // acc[K, O] += col[chunk pixels, K]^T @ dy[chunk pixels, O]
        gemm(true, false, g.patch(), g.o, (i1 - i0) * g.pixels(), col.get(), g.patch(),
             ptr<T>(dy) + i0 * g.pixels() * g.o, g.o, T(1), acc, g.o);
      }
    }
  });
  for (int64_t lane = 1; lane < lanes; ++lane) {
    const T* src = partial + (lane - 1) * filter;
    for (int64_t j = 0; j < filter; ++j) pdw[j] += src[j];
  }
}

struct PoolGeometry {
  int64_t n, h, w, c, kh, kw, oh, ow, sh, sw, ph, pw;
};

PoolGeometry pool_geometry(const Shape& x, const OpAttrs& a, const char* op) {
  PoolGeometry g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = a.window[0], g.kw = a.window[1], g.sh = a.strides[0], g.sw = a.strides[1];
  const auto ah = conv_output_axis(g.h, g.kh, g.sh, a.padding, op);
  const auto aw = conv_output_axis(g.w, g.kw, g.sw, a.padding, op);
  g.oh = ah.out, g.ow = aw.out, g.ph = ah.pad_before, g.pw = aw.pad_before;
  return g;
}

// Calls fn(out_index_base, in_pixel_base, count_of_valid) for every output pixel and
// every valid input pixel of its window; `begin_pixel`/`end_pixel` bracket each window.
template <typename Fn>
void for_each_window(const PoolGeometry& g, int64_t image, Fn fn) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t y0 = std::max<int64_t>(oy * g.sh - g.ph, 0);
      const int64_t y1 = std::min<int64_t>(oy * g.sh - g.ph + g.kh, g.h);
      const int64_t x0 = std::max<int64_t>(ox * g.sw - g.pw, 0);
      const int64_t x1 = std::min<int64_t>(ox * g.sw - g.pw + g.kw, g.w);
      fn(((image * g.oh + oy) * g.ow + ox) * g.c, y0, y1, x0, x1);
    }
  }
}

template <typename T>
void max_pool(const Tensor& xt, const Tensor& out, const OpAttrs& a) {
  const PoolGeometry g = pool_geometry(xt.shape(), a, "max_pool2d");
  const Tensor x = contiguous_copy(xt);
  const T* px = ptr<T>(x);
  T* po = ptr<T>(out);
  parallel_for(g.n, double(g.oh * g.ow * g.c * g.kh * g.kw), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      for_each_window(g, i, [&](int64_t ob, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
        T* o = po + ob;
        for (int64_t c = 0; c < g.c; ++c) o[c] = -std::numeric_limits<T>::infinity();
        for (int64_t y = y0; y < y1; ++y) {
          for (int64_t xx = x0; xx < x1; ++xx) {
            const T* p = px + ((i * g.h + y) * g.w + xx) * g.c;
            for (int64_t c = 0; c < g.c; ++c) o[c] = (p[c] > o[c] || p[c] != p[c]) ? p[c] : o[c];
          }
        }
      });
    }
  });
}

template <typename T>
void max_pool_grad(const Tensor& xt, const Tensor& dyt, const Tensor& dx, const OpAttrs& a) {
  const PoolGeometry g = pool_geometry(xt.shape(), a, "max_pool2d_grad");
  const Tensor x = contiguous_copy(xt), dy = contiguous_copy(dyt);
  const T* px = ptr<T>(x);
  const T* pdy = ptr<T>(dy);
  T* pdx = ptr<T>(dx);
  // When the windows tile the input exactly (stride == window, no padding, the extents
  // divisible: MaxPool2D(2) on an even image), every input pixel lies in exactly one window,
  // so each window writes its whole block of dx (the gradient at the winner, 0 elsewhere)
  // and dx needs no zeroing pass first: one write per element instead of two.
  const bool tiled = g.sh == g.kh && g.sw == g.kw && g.ph == 0 && g.pw == 0 && g.oh * g.kh == g.h &&
                     g.ow * g.kw == g.w;
  if (!tiled) std::memset(pdx, 0, dx.nbytes());
  parallel_for(g.n, double(g.oh * g.ow * g.c * g.kh * g.kw), [&](int64_t b, int64_t e) {
    // Per window, the arg-max of every channel at once: the channel loop is innermost and
    // contiguous, and the winner is kept as a 32-bit position in the window so that the
    // compare-and-select vectorises (a per-channel scan through the window was branchy).
    std::vector<T> best_v(size_t(g.c));
    std::vector<int32_t> best_k(size_t(g.c));
    std::vector<int64_t> at(size_t(g.kh * g.kw));  // window position -> offset in x
    for (int64_t i = b; i < e; ++i) {
      for_each_window(g, i, [&](int64_t ob, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
        if (y0 >= y1 || x0 >= x1) return;
        int32_t npos = 0;
        for (int64_t y = y0; y < y1; ++y) {
          for (int64_t xx = x0; xx < x1; ++xx) at[size_t(npos++)] = ((i * g.h + y) * g.w + xx) * g.c;
        }
        T* __restrict bv = best_v.data();
        int32_t* __restrict bk = best_k.data();
        const T* __restrict first = px + at[0];
        for (int64_t c = 0; c < g.c; ++c) {
          bv[c] = first[c];
          bk[c] = 0;
        }
        for (int32_t k = 1; k < npos; ++k) {
          const T* __restrict p = px + at[size_t(k)];
          for (int64_t c = 0; c < g.c; ++c) {
            // Strictly greater: the first maximum in row-major window order wins.
            const T v = p[c];
            const bool take = v > bv[c];
            bv[c] = take ? v : bv[c];
            bk[c] = take ? k : bk[c];
          }
        }
        if (tiled) {
          // A select per element (a blend once vectorised), no scatter.
          const T* __restrict gy = pdy + ob;
          for (int32_t k = 0; k < npos; ++k) {
            T* __restrict d = pdx + at[size_t(k)];
            for (int64_t c = 0; c < g.c; ++c) d[c] = bk[c] == k ? gy[c] : T(0);
          }
          return;
        }
        for (int64_t c = 0; c < g.c; ++c) pdx[at[size_t(bk[c])] + c] += pdy[ob + c];
      });
    }
  });
}

template <typename T>
void avg_pool(const Tensor& xt, const Tensor& out, const OpAttrs& a) {
  const PoolGeometry g = pool_geometry(xt.shape(), a, "avg_pool2d");
  const Tensor x = contiguous_copy(xt);
  const T* px = ptr<T>(x);
  T* po = ptr<T>(out);
  parallel_for(g.n, double(g.oh * g.ow * g.c * g.kh * g.kw), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      for_each_window(g, i, [&](int64_t ob, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
        T* o = po + ob;
        for (int64_t c = 0; c < g.c; ++c) o[c] = T(0);
        for (int64_t y = y0; y < y1; ++y) {
          for (int64_t xx = x0; xx < x1; ++xx) {
            const T* p = px + ((i * g.h + y) * g.w + xx) * g.c;
            for (int64_t c = 0; c < g.c; ++c) o[c] += p[c];
          }
        }
        const T inv = T(1) / T((y1 - y0) * (x1 - x0));
        for (int64_t c = 0; c < g.c; ++c) o[c] *= inv;
      });
    }
  });
}

template <typename T>
void avg_pool_grad(const Tensor& dyt, const Tensor& dx, const OpAttrs& a) {
  const PoolGeometry g = pool_geometry(a.shape, a, "avg_pool2d_grad");
  const Tensor dy = contiguous_copy(dyt);
  const T* pdy = ptr<T>(dy);
  T* pdx = ptr<T>(dx);
  std::memset(pdx, 0, dx.nbytes());
  parallel_for(g.n, double(g.oh * g.ow * g.c * g.kh * g.kw), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      for_each_window(g, i, [&](int64_t ob, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
        const T inv = T(1) / T((y1 - y0) * (x1 - x0));
        for (int64_t y = y0; y < y1; ++y) {
          for (int64_t xx = x0; xx < x1; ++xx) {
            T* d = pdx + ((i * g.h + y) * g.w + xx) * g.c;
            for (int64_t c = 0; c < g.c; ++c) d[c] += pdy[ob + c] * inv;
          }
        }
      });
    }
  });
}

void dispatch_conv(std::span<const Tensor> in, std::span<const Tensor> out, OpId op, const OpAttrs& a) {
  visit_dtype(out[0].dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      switch (op) {
        case OpId::Conv2D: return conv_forward<T>(in[0], in[1], out[0], a);
        case OpId::Conv2DBackpropInput: return conv_backprop_input<T>(in[0], in[1], out[0], a);
        case OpId::Conv2DBackpropFilter: return conv_backprop_filter<T>(in[0], in[1], out[0], a);
        case OpId::MaxPool2D: return max_pool<T>(in[0], out[0], a);
        case OpId::MaxPool2DGrad: return max_pool_grad<T>(in[0], in[1], out[0], a);
        case OpId::AvgPool2D: return avg_pool<T>(in[0], out[0], a);
        case OpId::AvgPool2DGrad: return avg_pool_grad<T>(in[0], out[0], a);
        default: break;
      }
    }
    fail(op_name(op), ": no CPU kernel for dtype ", out[0].dtype());
  });
}

void conv_kernel(const KernelArgs& k) {
  if (is_half(k.out[0].dtype())) {
    with_float32_outputs(k.in, k.out, [&](std::span<const Tensor> in, std::span<const Tensor> out) {
      dispatch_conv(in, out, k.op, k.attrs);
    });
    return;
  }
  dispatch_conv(k.in, k.out, k.op, k.attrs);
}

}  // namespace

void register_conv_kernels() {
  for (OpId op : {OpId::Conv2D, OpId::Conv2DBackpropInput, OpId::Conv2DBackpropFilter,
                  OpId::MaxPool2D, OpId::MaxPool2DGrad, OpId::AvgPool2D, OpId::AvgPool2DGrad}) {
    register_kernel(op, DeviceType::CPU, conv_kernel);
  }
}

}  // namespace strata::cpu_kernels
