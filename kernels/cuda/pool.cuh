// CUDA kernels of NHWC max and average pooling and their gradients: hand-written rather
// than cuDNN, because cuDNN cannot reproduce the CPU's semantics (kernels/cpu/conv.cc):
// TensorFlow's asymmetric SAME padding (the extra row/column at the bottom/right: cuDNN
// pads symmetrically), an average over only the window's elements inside the input (with
// explicit padding cuDNN would count the padded ones), and the max-pool gradient going to
// the first maximum of a window in row-major order (cuDNN's tie-breaking is unspecified).
// Pooling is memory-bound: one thread per output (or input) element, channels innermost so
// that neighbouring threads read neighbouring channels. Inputs may be strided (no copies).
//
// Every result is bitwise the CPU's, in every float dtype (float16/bfloat16 computed in
// float32 and rounded once, as the CPU does):
// - max_pool2d: the window scanned in row-major order from -inf, taking v when v > best or
//   v is NaN (a NaN in the window gives NaN);
// - avg_pool2d: the window's in-bounds elements summed in row-major order, times
//   1 / (their count) -- TensorFlow's divisor for SAME padding;
// - max_pool2d_grad: a first pass records each window's arg-max (the first element, then
//   strictly greater ones: the first maximum in row-major order wins, NaN never displaces
//   it, as on the CPU) as a pixel index; a second pass gives each input element the sum of
//   dy over the windows whose arg-max it is, in the windows' row-major order (the order in
//   which the CPU's scatter adds them). Gathering instead of scattering needs no atomics
//   and is deterministic;
// - avg_pool2d_grad: each input element gathers dy * (1 / count) over the windows covering
//   it, in the same order as the CPU's scatter.
// The .cu file is compiled without FMA contraction (--fmad=false), as the CPU is
// (-ffp-contract=off), so `acc += dy * inv` rounds twice on both sides.
#pragma once

#include <strata/core/ops.h>
#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda_kernels {

struct PoolGeom {
  int64_t n, h, w, c;     // input
  int64_t kh, kw;         // window
  int64_t oh, ow;         // output
  int64_t sh, sw, ph, pw; // strides and leading pads
};

// An NHWC operand with element strides.
template <typename T>
struct Nhwc {
  T* p;
  int64_t sn, sh, sw, sc;
  __device__ __forceinline__ T& at(int64_t n, int64_t y, int64_t x, int64_t c) const {
    return p[n * sn + y * sh + x * sw + c * sc];
  }
};

// ---- device code ----

namespace pool_detail {

// The in-bounds rows [y0, y1) and columns [x0, x1) of output pixel (oy, ox)'s window.
struct Window {
  int64_t y0, y1, x0, x1;
};
__device__ __forceinline__ Window window_of(const PoolGeom& g, int64_t oy, int64_t ox) {
  const int64_t ys = oy * g.sh - g.ph, xs = ox * g.sw - g.pw;
  Window w;
  w.y0 = ys > 0 ? ys : 0;
  w.y1 = ys + g.kh < g.h ? ys + g.kh : g.h;
  w.x0 = xs > 0 ? xs : 0;
  w.x1 = xs + g.kw < g.w ? xs + g.kw : g.w;
  return w;
}

// The output rows whose windows contain input row `y`: [lo, hi] (empty when lo > hi).
__device__ __forceinline__ void covering(int64_t y, int64_t k, int64_t s, int64_t pad, int64_t out, int64_t& lo,
                                         int64_t& hi) {
  const int64_t t = y + pad - k + 1;  // o * s >= t
  lo = t <= 0 ? 0 : (t + s - 1) / s;
  hi = (y + pad) / s;  // o * s <= y + pad
  if (hi > out - 1) hi = out - 1;
}

// Splits a linear NHWC index (channels innermost) over [n, rows, cols, c].
__device__ __forceinline__ void split(int64_t i, int64_t rows, int64_t cols, int64_t c, int64_t& in, int64_t& iy,
                                      int64_t& ix, int64_t& ic) {
  ic = i % c;
  i /= c;
  ix = i % cols;
  i /= cols;
  iy = i % rows;
  in = i / rows;
}

}  // namespace pool_detail

template <typename T>
__global__ void max_pool_kernel(PoolGeom g, int64_t total, Nhwc<const T> x, Nhwc<T> y) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, oy, ox, c;
    pool_detail::split(i, g.oh, g.ow, g.c, n, oy, ox, c);
    const pool_detail::Window w = pool_detail::window_of(g, oy, ox);
    C best = C(-INFINITY);
    for (int64_t yy = w.y0; yy < w.y1; ++yy) {
      for (int64_t xx = w.x0; xx < w.x1; ++xx) {
        const C v = load(x.at(n, yy, xx, c));
        best = (v > best || v != v) ? v : best;
      }
    }
    y.at(n, oy, ox, c) = store<T>(best);
  }
}

template <typename T>
__global__ void avg_pool_kernel(PoolGeom g, int64_t total, Nhwc<const T> x, Nhwc<T> y) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, oy, ox, c;
    pool_detail::split(i, g.oh, g.ow, g.c, n, oy, ox, c);
    const pool_detail::Window w = pool_detail::window_of(g, oy, ox);
    C s = C(0);
    for (int64_t yy = w.y0; yy < w.y1; ++yy) {
      for (int64_t xx = w.x0; xx < w.x1; ++xx) s += load(x.at(n, yy, xx, c));
    }
    const C inv = C(1) / C((w.y1 - w.y0) * (w.x1 - w.x0));
    y.at(n, oy, ox, c) = store<T>(s * inv);
  }
}

// arg[n, oy, ox, c] (contiguous): the pixel index y * W + x of the window's first maximum,
// -1 for an empty window.
template <typename T>
__global__ void max_pool_argmax_kernel(PoolGeom g, int64_t total, Nhwc<const T> x, int32_t* __restrict__ arg) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, oy, ox, c;
    pool_detail::split(i, g.oh, g.ow, g.c, n, oy, ox, c);
    const pool_detail::Window w = pool_detail::window_of(g, oy, ox);
    if (w.y0 >= w.y1 || w.x0 >= w.x1) {
      arg[i] = -1;
      continue;
    }
    C best = load(x.at(n, w.y0, w.x0, c));
    int64_t best_at = w.y0 * g.w + w.x0;
    for (int64_t yy = w.y0; yy < w.y1; ++yy) {
      for (int64_t xx = w.x0; xx < w.x1; ++xx) {
        const C v = load(x.at(n, yy, xx, c));
        if (v > best) {  // strictly greater: the first maximum wins
          best = v;
          best_at = yy * g.w + xx;
        }
      }
    }
    arg[i] = int32_t(best_at);
  }
}

// dx[n, y, x, c] = sum of dy over the windows whose arg-max is (y, x), in window order.
template <typename T>
__global__ void max_pool_grad_kernel(PoolGeom g, int64_t total, const int32_t* __restrict__ arg, Nhwc<const T> dy,
                                     Nhwc<T> dx) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, yy, xx, c;
    pool_detail::split(i, g.h, g.w, g.c, n, yy, xx, c);
    int64_t oy0, oy1, ox0, ox1;
    pool_detail::covering(yy, g.kh, g.sh, g.ph, g.oh, oy0, oy1);
    pool_detail::covering(xx, g.kw, g.sw, g.pw, g.ow, ox0, ox1);
    const int32_t me = int32_t(yy * g.w + xx);
    C acc = C(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        if (arg[((n * g.oh + oy) * g.ow + ox) * g.c + c] == me) acc += load(dy.at(n, oy, ox, c));
      }
    }
    dx.at(n, yy, xx, c) = store<T>(acc);
  }
}

// dx[n, y, x, c] = sum of dy / count over the windows covering (y, x), in window order.
template <typename T>
__global__ void avg_pool_grad_kernel(PoolGeom g, int64_t total, Nhwc<const T> dy, Nhwc<T> dx) {
  using C = compute_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, yy, xx, c;
    pool_detail::split(i, g.h, g.w, g.c, n, yy, xx, c);
    int64_t oy0, oy1, ox0, ox1;
    pool_detail::covering(yy, g.kh, g.sh, g.ph, g.oh, oy0, oy1);
    pool_detail::covering(xx, g.kw, g.sw, g.pw, g.ow, ox0, ox1);
    C acc = C(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const pool_detail::Window w = pool_detail::window_of(g, oy, ox);
        const C inv = C(1) / C((w.y1 - w.y0) * (w.x1 - w.x0));
        acc += load(dy.at(n, oy, ox, c)) * inv;
      }
    }
    dx.at(n, yy, xx, c) = store<T>(acc);
  }
}

// ---- host launchers (KernelFn) ----

namespace pool_detail {

// The geometry of pooling an input of `x` (NHWC) as the CPU's pool_geometry computes it.
inline PoolGeom geometry(const Shape& x, const OpAttrs& a, const char* op) {
  PoolGeom g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = a.window[0], g.kw = a.window[1], g.sh = a.strides[0], g.sw = a.strides[1];
  const ConvAxis ah = conv_output_axis(g.h, g.kh, g.sh, a.padding, op);
  const ConvAxis aw = conv_output_axis(g.w, g.kw, g.sw, a.padding, op);
  g.oh = ah.out, g.ow = aw.out, g.ph = ah.pad_before, g.pw = aw.pad_before;
  return g;
}

template <typename T>
Nhwc<T> nhwc(const Tensor& t) {
  const Strides& s = t.strides();
  return {static_cast<T*>(t.raw_data()), s[0], s[1], s[2], s[3]};
}

}  // namespace pool_detail

inline void cuda_pool(const KernelArgs& k) {
  using namespace pool_detail;
  const char* op = op_name(k.op);
  const Tensor& out = k.out[0];
  if (out.numel() == 0) return;
  const Shape& in_shape = k.op == OpId::AvgPool2DGrad ? k.attrs.shape : k.in[0].shape();
  const PoolGeom g = geometry(in_shape, k.attrs, op);
  for (const Tensor& t : k.in) STRATA_CHECK(!on_host(t), op, ": the CUDA kernel got a host input");
  visit_device_dtype(out.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (!is_float_v<T>) {
      fail(op, ": no CUDA kernel for dtype ", out.dtype());
    } else {
      const int64_t total = out.numel();
      const auto [grid, block] = cuda_backend::elementwise_shape(total);
      switch (k.op) {
        case OpId::MaxPool2D:
          return cuda_backend::launch(op, max_pool_kernel<T>, grid, block, 0, k.stream, g, total,
                                      nhwc<const T>(k.in[0]), nhwc<T>(out));
        case OpId::AvgPool2D:
          return cuda_backend::launch(op, avg_pool_kernel<T>, grid, block, 0, k.stream, g, total,
                                      nhwc<const T>(k.in[0]), nhwc<T>(out));
        case OpId::AvgPool2DGrad:
          return cuda_backend::launch(op, avg_pool_grad_kernel<T>, grid, block, 0, k.stream, g, total,
                                      nhwc<const T>(k.in[0]), nhwc<T>(out));
        case OpId::MaxPool2DGrad: {
          STRATA_CHECK(g.h * g.w <= int64_t(INT32_MAX), op, ": the CUDA kernel indexes at most 2^31 - 1 pixels per "
                       "image, got ", g.h, "x", g.w);
          const int64_t windows = g.n * g.oh * g.ow * g.c;
          const Tensor arg = Tensor::empty({g.n, g.oh, g.ow, g.c}, kInt32, out.device());
          if (windows > 0) {
            const auto shape = cuda_backend::elementwise_shape(windows);
            cuda_backend::launch(op, max_pool_argmax_kernel<T>, shape.grid, shape.block, 0, k.stream, g, windows,
                                 nhwc<const T>(k.in[0]), static_cast<int32_t*>(arg.raw_data()));
          }
          return cuda_backend::launch(op, max_pool_grad_kernel<T>, grid, block, 0, k.stream, g, total,
                                      static_cast<const int32_t*>(arg.raw_data()), nhwc<const T>(k.in[1]),
                                      nhwc<T>(out));
        }
        default:
          break;
      }
      fail(op, ": not a pooling op with a CUDA kernel");
    }
  });
}

// Registers the family for DeviceType::CUDA (called by the backend's init, or by the
// emulation tests' registration).
inline void register_pool_kernels() {
  for (OpId op : {OpId::MaxPool2D, OpId::MaxPool2DGrad, OpId::AvgPool2D, OpId::AvgPool2DGrad}) {
    register_kernel(op, DeviceType::CUDA, cuda_pool);
  }
}

}  // namespace strata::cuda_kernels
