// CPU kernels of NHWC convolution (im2col + one GEMM per chunk of images, the chunks split
// across the pool), its two backward ops, and max/average pooling with their gradients.
// Padding follows TensorFlow: SAME puts the extra row/column at the bottom/right; average
// pooling counts only the elements inside the input.
#include <algorithm>
#include <cstring>
#include <vector>

#include <strata/core/dispatch.h>
#include <strata/core/ops.h>
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
