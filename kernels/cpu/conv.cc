// CPU kernels of NHWC convolution (im2col + GEMM, split by batch across the pool), its two
// backward ops, and max/average pooling with their gradients. Padding follows TensorFlow:
// SAME puts the extra row/column at the bottom/right; average pooling counts only the
// elements inside the input.
#include <cblas.h>

#include <cstring>
#include <mutex>

#include "core/dispatch.h"
#include "core/ops.h"
#include "kernels/cpu/loops.h"

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

template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto TA = ta ? CblasTrans : CblasNoTrans;
  const auto TB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, TA, TB, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, TA, TB, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
  }
}

// col[p, (kh,kw,c)] for the output pixels of one image.
template <typename T>
void im2col(const T* x, const ConvGeometry& g, T* col) {
  const int64_t row = g.patch();
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      T* dst = col + (oy * g.ow + ox) * row;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky;
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
  parallel_for(g.n, conv_cost_per_image(g), [&](int64_t b, int64_t e) {
    std::vector<T> col(size_t(g.pixels() * g.patch()));
    for (int64_t i = b; i < e; ++i) {
      im2col(px + i * g.h * g.w * g.c, g, col.data());
      gemm<T>(false, false, g.pixels(), g.o, g.patch(), col.data(), g.patch(), pw, g.o, T(0),
              po + i * g.pixels() * g.o, g.o);
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
  parallel_for(g.n, conv_cost_per_image(g), [&](int64_t b, int64_t e) {
    std::vector<T> dcol(size_t(g.pixels() * g.patch()));
    for (int64_t i = b; i < e; ++i) {
      // dcol[P, K] = dy[P, O] @ W[K, O]^T
      gemm<T>(false, true, g.pixels(), g.patch(), g.o, ptr<T>(dy) + i * g.pixels() * g.o, g.o,
              ptr<T>(w), g.o, T(0), dcol.data(), g.patch());
      col2im(dcol.data(), g, pdx + i * g.h * g.w * g.c);
    }
  });
}

template <typename T>
void conv_backprop_filter(const Tensor& xt, const Tensor& dyt, const Tensor& dw, const OpAttrs& a) {
  const ConvGeometry g = geometry(xt.shape(), a.shape, a, "conv2d_backprop_filter");
  const Tensor x = contiguous_copy(xt), dy = contiguous_copy(dyt);
  T* pdw = ptr<T>(dw);
  std::memset(pdw, 0, dw.nbytes());
  if (g.patch() == 0 || g.o == 0) return;
  std::mutex merge;
  parallel_for(g.n, conv_cost_per_image(g), [&](int64_t b, int64_t e) {
    std::vector<T> col(size_t(g.pixels() * g.patch()));
    std::vector<T> partial(size_t(g.patch() * g.o), T(0));
    for (int64_t i = b; i < e; ++i) {
      im2col(ptr<T>(x) + i * g.h * g.w * g.c, g, col.data());
      // partial[K, O] += col[P, K]^T @ dy[P, O]
      gemm<T>(true, false, g.patch(), g.o, g.pixels(), col.data(), g.patch(),
              ptr<T>(dy) + i * g.pixels() * g.o, g.o, T(1), partial.data(), g.o);
    }
    std::lock_guard<std::mutex> lock(merge);
    for (size_t j = 0; j < partial.size(); ++j) pdw[j] += partial[j];
  });
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
  std::memset(pdx, 0, dx.nbytes());
  parallel_for(g.n, double(g.oh * g.ow * g.c * g.kh * g.kw), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      for_each_window(g, i, [&](int64_t ob, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
        for (int64_t c = 0; c < g.c; ++c) {
          int64_t best = -1;
          T bv = T(0);
          for (int64_t y = y0; y < y1; ++y) {
            for (int64_t xx = x0; xx < x1; ++xx) {
              const int64_t at = ((i * g.h + y) * g.w + xx) * g.c + c;
              if (best < 0 || px[at] > bv) {
                best = at;
                bv = px[at];
              }
            }
          }
          if (best >= 0) pdx[best] += pdy[ob + c];
        }
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
