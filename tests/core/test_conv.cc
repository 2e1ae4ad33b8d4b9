// NHWC convolution and pooling against naive float64 references with TensorFlow's
// SAME/VALID padding; the backward ops against adjoint identities.
#include <strata/kernels/cpu/conv_direct.h>

#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::testing::identical;

namespace {

// TensorFlow: SAME gives ceil(in/s) outputs with total pad max((out-1)*s + k - in, 0), the
// smaller half before.
struct Axis {
  int64_t out, pad;
};
Axis axis_geometry(int64_t in, int64_t k, int64_t s, Padding p) {
  if (p == Padding::Valid) return {(in - k) / s + 1, 0};
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + k - in, 0);
  return {out, total / 2};
}

Tensor reference_conv(const Tensor& x, const Tensor& w, std::array<int64_t, 2> s, Padding p) {
  const int64_t n = x.dim(0), h = x.dim(1), wd = x.dim(2), c = x.dim(3);
  const int64_t kh = w.dim(0), kw = w.dim(1), o = w.dim(3);
  const Axis ah = axis_geometry(h, kh, s[0], p), aw = axis_geometry(wd, kw, s[1], p);
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> out(size_t(n * ah.out * aw.out * o), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < ah.out; ++oy)
      for (int64_t ox = 0; ox < aw.out; ++ox)
        for (int64_t oc = 0; oc < o; ++oc) {
          double acc = 0;
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t iy = oy * s[0] - ah.pad + ky, ix = ox * s[1] - aw.pad + kx;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
              for (int64_t ic = 0; ic < c; ++ic) {
                acc += xv[size_t(((b * h + iy) * wd + ix) * c + ic)] * wv[size_t(((ky * kw + kx) * c + ic) * o + oc)];
              }
            }
          out[size_t(((b * ah.out + oy) * aw.out + ox) * o + oc)] = acc;
        }
  return Tensor::from_vector(out, {n, ah.out, aw.out, o}, kFloat64);
}

Tensor reference_pool(const Tensor& x, std::array<int64_t, 2> k, std::array<int64_t, 2> s, Padding p, bool is_max) {
  const int64_t n = x.dim(0), h = x.dim(1), wd = x.dim(2), c = x.dim(3);
  const Axis ah = axis_geometry(h, k[0], s[0], p), aw = axis_geometry(wd, k[1], s[1], p);
  const auto xv = x.to_vector<double>();
  std::vector<double> out;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < ah.out; ++oy)
      for (int64_t ox = 0; ox < aw.out; ++ox)
        for (int64_t ch = 0; ch < c; ++ch) {
          double acc = is_max ? -INFINITY : 0;
          int64_t count = 0;
          for (int64_t ky = 0; ky < k[0]; ++ky)
            for (int64_t kx = 0; kx < k[1]; ++kx) {
              const int64_t iy = oy * s[0] - ah.pad + ky, ix = ox * s[1] - aw.pad + kx;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;  // padding is ignored
              const double v = xv[size_t(((b * h + iy) * wd + ix) * c + ch)];
              acc = is_max ? std::max(acc, v) : acc + v;
              ++count;
            }
          out.push_back(is_max ? acc : acc / double(count));
        }
  return Tensor::from_vector(out, {n, ah.out, aw.out, c}, kFloat64);
}

struct ConvCase {
  Shape x, w;
  std::array<int64_t, 2> s;
  Padding p;
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {{1, 5, 5, 1}, {3, 3, 1, 1}, {1, 1}, Padding::Valid},
      {{1, 5, 5, 1}, {3, 3, 1, 1}, {1, 1}, Padding::Same},
      {{2, 7, 6, 3}, {3, 3, 3, 4}, {2, 2}, Padding::Same},   // odd input, stride 2: uneven padding
      {{2, 7, 6, 3}, {3, 3, 3, 4}, {2, 2}, Padding::Valid},
      {{2, 8, 8, 2}, {2, 2, 2, 3}, {2, 2}, Padding::Same},   // even kernel: pad only after
      {{1, 9, 7, 2}, {4, 3, 2, 2}, {3, 2}, Padding::Same},   // different strides per axis
      {{1, 9, 7, 2}, {4, 3, 2, 2}, {3, 2}, Padding::Valid},
      {{3, 4, 4, 5}, {1, 1, 5, 6}, {1, 1}, Padding::Valid},  // 1x1 convolution
      {{1, 2, 3, 1}, {5, 5, 1, 2}, {1, 1}, Padding::Same},   // kernel larger than the input
      {{1, 6, 6, 1}, {3, 3, 1, 1}, {4, 4}, Padding::Same},   // stride larger than the kernel
      {{2, 10, 10, 3}, {5, 5, 3, 8}, {1, 1}, Padding::Same},
      // Stride 1 VALID with many channels (the MNIST CNN's second layer's kind).
      {{1, 30, 30, 64}, {3, 3, 64, 8}, {1, 1}, Padding::Valid},
      {{2, 9, 8, 16}, {3, 3, 16, 5}, {1, 1}, Padding::Valid},
      {{1, 6, 7, 17}, {2, 4, 17, 3}, {1, 1}, Padding::Valid},  // uneven kernel
      {{2, 4, 5, 16}, {1, 1, 16, 4}, {1, 1}, Padding::Valid},  // 1x1
      {{1, 3, 3, 16}, {3, 3, 16, 2}, {1, 1}, Padding::Valid},  // one output pixel
  };
  return cases;
}

std::string conv_name(const ConvCase& c) {
  return shape_str(c.x) + " * " + shape_str(c.w) + " s" + std::to_string(c.s[0]) + "," +
         std::to_string(c.s[1]) + (c.p == Padding::Same ? " SAME" : " VALID");
}

}  // namespace

TEST_CASE("conv: conv_output_axis follows TensorFlow", "[conv]") {
  CHECK(conv_output_axis(5, 3, 1, Padding::Valid, "t").out == 3);
  CHECK(conv_output_axis(5, 3, 2, Padding::Valid, "t").out == 2);
  CHECK(conv_output_axis(5, 3, 1, Padding::Same, "t").out == 5);
  CHECK(conv_output_axis(5, 3, 1, Padding::Same, "t").pad_before == 1);
  CHECK(conv_output_axis(7, 3, 2, Padding::Same, "t").out == 4);
  CHECK(conv_output_axis(7, 3, 2, Padding::Same, "t").pad_before == 1);
  CHECK(conv_output_axis(8, 3, 2, Padding::Same, "t").pad_before == 0);  // total 1: after only
  CHECK(conv_output_axis(8, 2, 2, Padding::Same, "t").pad_before == 0);
  CHECK(conv_output_axis(2, 5, 1, Padding::Same, "t").pad_before == 2);
  // ceil(in / stride) without overflow: one output for a stride past the input.
  CHECK(conv_output_axis(5, 3, INT64_MAX, Padding::Same, "t").out == 1);
  CHECK(conv_output_axis(0, 3, 2, Padding::Same, "t").out == 0);
  REQUIRE_THROWS_WITH(conv_output_axis(2, 3, 1, Padding::Valid, "conv2d"),
                      Contains("conv2d: window 3 is larger than the input extent 2 with VALID padding"));
  REQUIRE_THROWS_WITH(conv_output_axis(5, 3, 0, Padding::Same, "conv2d"), Contains("conv2d: strides must be positive, got 0"));
  REQUIRE_THROWS_WITH(conv_output_axis(5, 0, 1, Padding::Same, "max_pool2d"),
                      Contains("max_pool2d: window/filter extent must be positive, got 0"));
}

TEST_CASE("conv: conv2d matches a naive reference for SAME/VALID and strides", "[conv]") {
  uint64_t seed = 200;
  for (const auto& c : conv_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      INFO(conv_name(c) << " " << dtype_name(dt));
      Tensor x = testing::rand_tensor(c.x, seed++, -1, 1, dt);
      Tensor w = testing::rand_tensor(c.w, seed++, -1, 1, dt);
      Tensor y = conv2d(x, w, c.s, c.p);
      Tensor want = reference_conv(x, w, c.s, c.p);
      CHECK(y.shape() == want.shape());
      CHECK(y.dtype() == dt);
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      CHECK(testing::allclose(y.cast(kFloat64), want, tol, tol));
      // Non-contiguous input and filter.
      for (const Tensor& vx : testing::noncontiguous_variants(x)) {
        CHECK(identical(conv2d(vx, testing::strided_copy(w), c.s, c.p), y));
      }
    }
  }
  // float16/bfloat16 compute in float32.
  Tensor x = testing::rand_tensor({1, 5, 5, 2}, 300);
  Tensor w = testing::rand_tensor({3, 3, 2, 2}, 301);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor y = conv2d(x.cast(dt), w.cast(dt), {1, 1}, Padding::Same);
    CHECK(y.dtype() == dt);
    CHECK(testing::allclose(y.cast(kFloat32), conv2d(x.cast(dt).cast(kFloat32), w.cast(dt).cast(kFloat32), {1, 1}, Padding::Same),
                            1e-2, 1e-2));
  }
  // Zero batch and zero channels.
  CHECK(conv2d(zeros({0, 5, 5, 2}), w, {1, 1}, Padding::Same).shape() == Shape{0, 5, 5, 2});
  Tensor z = conv2d(zeros({1, 5, 5, 0}), zeros({3, 3, 0, 4}), {1, 1}, Padding::Valid);
  CHECK(z.shape() == Shape{1, 3, 3, 4});
  CHECK(sum(abs(z)).item<float>() == 0.0f);
  // Empty images (zero rows or columns) under SAME padding, and zero output channels: empty
  // outputs, and a zero filter gradient.
  for (DType dt : {kFloat32, kFloat64}) {
    for (const Shape& xs : {Shape{2, 0, 5, 2}, Shape{2, 5, 0, 2}}) {
      INFO(shape_str(xs) << " " << dtype_name(dt));
      const Tensor e = zeros(xs, dt), wd = w.cast(dt), dy = zeros({xs[0], xs[1], xs[2], 2}, dt);
      CHECK(conv2d(e, wd, {1, 1}, Padding::Same).shape() == Shape{xs[0], xs[1], xs[2], 2});
      CHECK(conv2d_backprop_input(xs, wd, dy, {1, 1}, Padding::Same).shape() == xs);
      Tensor dw = conv2d_backprop_filter(e, w.shape(), dy, {1, 1}, Padding::Same);
      CHECK(dw.shape() == w.shape());
      CHECK(sum(abs(dw)).cast(kFloat64).item<double>() == 0.0);
    }
  }
  CHECK(conv2d(x, zeros({3, 3, 2, 0}), {1, 1}, Padding::Same).shape() == Shape{1, 5, 5, 0});
  CHECK(conv2d_backprop_input(x.shape(), zeros({3, 3, 2, 0}), zeros({1, 5, 5, 0}), {1, 1}, Padding::Same).shape() ==
        x.shape());
}

TEST_CASE("conv: backprop ops are the adjoints of conv2d", "[conv][backprop]") {
  uint64_t seed = 400;
  for (const auto& c : conv_cases()) {
    INFO(conv_name(c));
    Tensor x = testing::rand_tensor(c.x, seed++, -1, 1, kFloat64);
    Tensor w = testing::rand_tensor(c.w, seed++, -1, 1, kFloat64);
    Tensor y = conv2d(x, w, c.s, c.p);
    Tensor dy = testing::rand_tensor(y.shape(), seed++, -1, 1, kFloat64);
    // <conv(x, w), dy> = <x, conv^T_x(dy)> = <w, conv^T_w(dy)>
    const double lhs = sum(y * dy).item<double>();
    Tensor dx = conv2d_backprop_input(x.shape(), w, dy, c.s, c.p);
    Tensor dw = conv2d_backprop_filter(x, w.shape(), dy, c.s, c.p);
    CHECK(dx.shape() == x.shape());
    CHECK(dw.shape() == w.shape());
    CHECK(sum(x * dx).item<double>() == Approx(lhs).epsilon(1e-10).margin(1e-12));
    CHECK(sum(w * dw).item<double>() == Approx(lhs).epsilon(1e-10).margin(1e-12));
    // The float32 paths agree with float64 and accept non-contiguous dy.
    Tensor dy32 = testing::transposed_copy(dy.cast(kFloat32));
    CHECK(testing::allclose(conv2d_backprop_input(x.shape(), w.cast(kFloat32), dy32, c.s, c.p).cast(kFloat64), dx, 1e-4, 1e-4));
    CHECK(testing::allclose(conv2d_backprop_filter(x.cast(kFloat32), w.shape(), dy32, c.s, c.p).cast(kFloat64), dw, 1e-4, 1e-4));
  }
  REQUIRE_THROWS_WITH(conv2d_backprop_input({1, 5, 5, 1}, zeros({3, 3, 1, 1}), zeros({1, 4, 4, 1}), {1, 1}, Padding::Valid),
                      Contains("conv2d_backprop_input: dy has shape [1,4,4,1], expected [1,3,3,1]"));
  REQUIRE_THROWS_WITH(conv2d_backprop_filter(zeros({1, 5, 5, 1}), {3, 3, 1, 1}, zeros({1, 5, 5, 1}), {1, 1}, Padding::Valid),
                      Contains("conv2d_backprop_filter: dy has shape [1,5,5,1], expected [1,3,3,1]"));
}

TEST_CASE("conv: conv2d gives the same values at 1 and 2 threads", "[conv][threads]") {
  Tensor x = testing::rand_tensor({16, 28, 28, 8}, 500);
  Tensor w = testing::rand_tensor({3, 3, 8, 16}, 501);
  Tensor one, two;
  {
    testing::ThreadCountGuard g(1);
    one = conv2d(x, w, {1, 1}, Padding::Same);
  }
  {
    testing::ThreadCountGuard g(2);
    two = conv2d(x, w, {1, 1}, Padding::Same);
  }
  CHECK(identical(one, two));
}

TEST_CASE("conv: backprop ops give the same values at 1 and 2 threads over many chunks", "[conv][threads]") {
  // 24 images of ~0.6 MB of im2col each: one image per GEMM chunk, 24 chunks over 8 filter
  // gradient lanes (3 per lane), so both the chunking and the lane sums are exercised.
  Tensor x = testing::rand_tensor({24, 32, 32, 16}, 510);
  Tensor w = testing::rand_tensor({3, 3, 16, 16}, 511);
  Tensor dy = testing::rand_tensor({24, 32, 32, 16}, 512);
  Tensor dx[2], dw[2];
  for (int t : {1, 2}) {
    testing::ThreadCountGuard g(t);
    dx[t - 1] = conv2d_backprop_input(x.shape(), w, dy, {1, 1}, Padding::Same);
    dw[t - 1] = conv2d_backprop_filter(x, w.shape(), dy, {1, 1}, Padding::Same);
  }
  CHECK(identical(dx[0], dx[1]));
  CHECK(identical(dw[0], dw[1]));
  {
    // VALID too.
    Tensor dyv = testing::rand_tensor({24, 30, 30, 16}, 513);
    Tensor dxv[2];
    for (int t : {1, 2}) {
      testing::ThreadCountGuard g(t);
      dxv[t - 1] = conv2d_backprop_input(x.shape(), w, dyv, {1, 1}, Padding::Valid);
    }
    CHECK(identical(dxv[0], dxv[1]));
    Tensor dxv64 = conv2d_backprop_input(x.shape(), w.cast(kFloat64), dyv.cast(kFloat64), {1, 1}, Padding::Valid);
    CHECK(testing::allclose(dxv[0].cast(kFloat64), dxv64, 1e-5, 1e-5));
  }
  // And the chunked float32 sums agree with float64.
  Tensor dw64 = conv2d_backprop_filter(x.cast(kFloat64), w.shape(), dy.cast(kFloat64), {1, 1}, Padding::Same);
  CHECK(testing::allclose(dw[0].cast(kFloat64), dw64, 1e-4, 1e-3));
  Tensor dx64 = conv2d_backprop_input(x.shape(), w.cast(kFloat64), dy.cast(kFloat64), {1, 1}, Padding::Same);
  CHECK(testing::allclose(dx[0].cast(kFloat64), dx64, 1e-5, 1e-5));
}

TEST_CASE("conv: the direct float32 kernels match float64 at channel and pixel tails, bands, strides and padding",
          "[conv][direct]") {
  // Where the CPU has AVX2 and FMA, float32 convolutions run the direct kernels
  // (kernels/cpu/conv_direct.h): output channels in panels of 16 (tails of 1, 4 and 4 below),
  // output pixels in tiles of 6 and bands of ~96 pixels (padded band by band), the filter
  // gradient in tiles of 6 rows summed band after band. Elsewhere this checks im2col.
  INFO("direct kernels: " << (cpu_kernels::direct_conv_kernel() != nullptr ? "yes" : "no (im2col path)"));
  const std::vector<ConvCase> cases = {
      {{2, 20, 13, 7}, {3, 3, 7, 20}, {1, 1}, Padding::Same},    // 3 bands, o = 16 + 4
      {{1, 17, 19, 3}, {3, 5, 3, 33}, {2, 1}, Padding::Same},    // strides per axis, o = 32 + 1
      {{3, 26, 26, 32}, {3, 3, 32, 64}, {1, 1}, Padding::Valid}, // the MNIST CNN's second layer
      {{1, 12, 12, 16}, {5, 5, 16, 16}, {1, 1}, Padding::Same},  // one whole panel, wide padding
      {{2, 11, 9, 6}, {2, 2, 6, 17}, {2, 2}, Padding::Valid},    // 6-row tiles across taps, o = 16 + 1
      {{2, 28, 28, 1}, {3, 3, 1, 32}, {1, 1}, Padding::Valid},   // one input channel (the first layer)
  };
  uint64_t seed = 900;
  for (const auto& c : cases) {
    INFO(conv_name(c));
    Tensor x = testing::rand_tensor(c.x, seed++, -1, 1, kFloat64);
    Tensor w = testing::rand_tensor(c.w, seed++, -1, 1, kFloat64);
    Tensor y = reference_conv(x, w, c.s, c.p);
    Tensor dy = testing::rand_tensor(y.shape(), seed++, -1, 1, kFloat64);
    Tensor dx = conv2d_backprop_input(x.shape(), w, dy, c.s, c.p);
    Tensor dw = conv2d_backprop_filter(x, w.shape(), dy, c.s, c.p);
    const Tensor x32 = x.cast(kFloat32), w32 = w.cast(kFloat32), dy32 = dy.cast(kFloat32);
    Tensor got[2][3];
    for (int t : {1, 2}) {
      testing::ThreadCountGuard g(t);
      got[t - 1][0] = conv2d(x32, w32, c.s, c.p);
      got[t - 1][1] = conv2d_backprop_input(x.shape(), w32, dy32, c.s, c.p);
      got[t - 1][2] = conv2d_backprop_filter(x32, w.shape(), dy32, c.s, c.p);
    }
    // Sums of up to ~2000 float products of values in [-1, 1].
    CHECK(testing::allclose(got[0][0].cast(kFloat64), y, 1e-4, 1e-4));
    CHECK(testing::allclose(got[0][1].cast(kFloat64), dx, 1e-4, 1e-4));
    CHECK(testing::allclose(got[0][2].cast(kFloat64), dw, 1e-4, 1e-3));
    for (int k = 0; k < 3; ++k) CHECK(identical(got[0][k], got[1][k]));
  }
}

TEST_CASE("conv: max and average pooling match naive references", "[conv][pool]") {
  struct PoolCase {
    Shape x;
    std::array<int64_t, 2> k, s;
    Padding p;
  };
  const std::vector<PoolCase> cases = {
      {{1, 4, 4, 1}, {2, 2}, {2, 2}, Padding::Valid}, {{2, 5, 5, 3}, {2, 2}, {2, 2}, Padding::Valid},
      {{2, 5, 5, 3}, {2, 2}, {2, 2}, Padding::Same},  {{1, 7, 6, 2}, {3, 3}, {2, 2}, Padding::Same},
      {{1, 7, 6, 2}, {3, 2}, {1, 2}, Padding::Valid}, {{1, 3, 3, 1}, {5, 5}, {1, 1}, Padding::Same},
      {{3, 6, 6, 4}, {3, 3}, {3, 3}, Padding::Valid}, {{1, 5, 5, 2}, {1, 1}, {2, 2}, Padding::Same},
  };
  uint64_t seed = 600;
  for (const auto& c : cases) {
    for (DType dt : {kFloat32, kFloat64}) {
      INFO(shape_str(c.x) << " k" << c.k[0] << "," << c.k[1] << " s" << c.s[0] << "," << c.s[1]
                          << (c.p == Padding::Same ? " SAME " : " VALID ") << dtype_name(dt));
      Tensor x = testing::rand_tensor(c.x, seed++, -1, 1, dt);
      Tensor mx = max_pool2d(x, c.k, c.s, c.p);
      Tensor av = avg_pool2d(x, c.k, c.s, c.p);
      CHECK(identical(mx.cast(kFloat64), reference_pool(x, c.k, c.s, c.p, true)));
      CHECK(testing::allclose(av.cast(kFloat64), reference_pool(x, c.k, c.s, c.p, false), 1e-6, 1e-6));
      for (const Tensor& v : testing::noncontiguous_variants(x)) {
        CHECK(identical(max_pool2d(v, c.k, c.s, c.p), mx));
        CHECK(identical(avg_pool2d(v, c.k, c.s, c.p), av));
      }
      // avg_pool2d_grad is the adjoint of avg_pool2d.
      Tensor dy = testing::rand_tensor(av.shape(), seed++, -1, 1, dt);
      Tensor dx = avg_pool2d_grad(x.shape(), dy, c.k, c.s, c.p);
      CHECK(dx.shape() == x.shape());
      CHECK(sum(x * dx).item<double>() == Approx(sum(av * dy).item<double>()).epsilon(1e-5).margin(1e-6));
      // max_pool2d_grad routes each dy to its window's maximum: also an adjoint, of the
      // (locally linear) map x -> max_pool(x).
      Tensor mdx = max_pool2d_grad(x, dy, c.k, c.s, c.p);
      CHECK(sum(x * mdx).item<double>() == Approx(sum(mx * dy).item<double>()).epsilon(1e-5).margin(1e-6));
    }
  }
  // Ties route the gradient to the first maximum only (TensorFlow's choice).
  Tensor flat = ones({1, 2, 2, 1});
  Tensor g = max_pool2d_grad(flat, ones({1, 1, 1, 1}), {2, 2}, {2, 2}, Padding::Valid);
  CHECK(g.to_vector<float>() == std::vector<float>{1, 0, 0, 0});
  // NaN propagates through max pooling.
  Tensor n = tensor({1, NAN, 3, 4}).reshape({1, 2, 2, 1});
  CHECK(std::isnan(max_pool2d(n, {2, 2}, {2, 2}).item<float>()));
  // float16 pooling.
  Tensor h = testing::rand_tensor({1, 4, 4, 2}, 700).cast(kFloat16);
  CHECK(max_pool2d(h, {2, 2}, {2, 2}).dtype() == kFloat16);
  CHECK(identical(max_pool2d(h, {2, 2}, {2, 2}).cast(kFloat32), max_pool2d(h.cast(kFloat32), {2, 2}, {2, 2})));
}

TEST_CASE("conv: max_pool2d_grad over exactly tiling windows writes every element", "[conv][pool]") {
  // stride == window, no padding, extents divisible: the kernel writes each window's block
  // (dy at the first maximum, 0 elsewhere) without zeroing dx first. Checked element by
  // element against a naive routing, over a recycled buffer full of stale values.
  struct TileCase {
    Shape x;
    std::array<int64_t, 2> k;
  };
  for (const TileCase& c : {TileCase{{3, 24, 24, 64}, {2, 2}}, TileCase{{2, 6, 9, 3}, {3, 3}},
                            TileCase{{1, 4, 6, 5}, {2, 3}}, TileCase{{2, 5, 5, 7}, {1, 1}}}) {
    for (DType dt : {kFloat32, kFloat64}) {
      INFO(shape_str(c.x) << " k" << c.k[0] << "," << c.k[1] << " " << dtype_name(dt));
      Tensor stale = full(c.x, 7.0, dt);
      Tensor x = testing::rand_tensor(c.x, 900, -1, 1, dt).cast(kFloat64);
      // Ties inside the first window of every channel: the first maximum takes the gradient.
      std::vector<double> xv = x.to_vector<double>();
      const int64_t H = c.x[1], W = c.x[2], C = c.x[3], kh = c.k[0], kw = c.k[1];
      for (int64_t ch = 0; ch < C; ++ch) {
        for (int64_t y = 0; y < kh; ++y) {
          for (int64_t xx = 0; xx < kw; ++xx) xv[size_t((y * W + xx) * C + ch)] = 2.0;
        }
      }
      x = Tensor::from_vector(xv, c.x, kFloat64).cast(dt);
      const Shape ys{c.x[0], H / kh, W / kw, C};
      Tensor dy = testing::rand_tensor(ys, 901, 1, 2, dt);
      stale = Tensor();  // its block goes back to the allocator, next in line for dx
      Tensor dx = max_pool2d_grad(x, dy, c.k, {c.k[0], c.k[1]}, Padding::Valid);
      const std::vector<double> got = dx.cast(kFloat64).to_vector<double>();
      const std::vector<double> dyv = dy.cast(kFloat64).to_vector<double>();
      std::vector<double> want(got.size(), 0.0);
      for (int64_t i = 0; i < c.x[0]; ++i) {
        for (int64_t oy = 0; oy < ys[1]; ++oy) {
          for (int64_t ox = 0; ox < ys[2]; ++ox) {
            for (int64_t ch = 0; ch < C; ++ch) {
              int64_t best = -1;
              for (int64_t y = oy * kh; y < (oy + 1) * kh; ++y) {
                for (int64_t xx = ox * kw; xx < (ox + 1) * kw; ++xx) {
                  const int64_t at = ((i * H + y) * W + xx) * C + ch;
                  if (best < 0 || xv[size_t(at)] > xv[size_t(best)]) best = at;
                }
              }
              want[size_t(best)] += dyv[size_t(((i * ys[1] + oy) * ys[2] + ox) * C + ch)];
            }
          }
        }
      }
      CHECK(got == want);
    }
  }
}

TEST_CASE("conv: argument errors name the op and the shapes", "[conv][errors]") {
  Tensor x = zeros({1, 5, 5, 3});
  REQUIRE_THROWS_WITH(conv2d(x, zeros({3, 3, 2, 4})),
                      Contains("conv2d: input channels differ: input [1,5,5,3] has 3, filter [3,3,2,4] expects 2"));
  REQUIRE_THROWS_WITH(conv2d(zeros({5, 5, 3}), zeros({3, 3, 3, 4})),
                      Contains("conv2d: expected an NHWC tensor of rank 4, got [5,5,3]"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({3, 3, 3})), Contains("conv2d: filter must be HWIO of rank 4, got [3,3,3]"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({6, 3, 3, 1})),
                      Contains("conv2d: window 6 is larger than the input extent 5 with VALID padding"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({3, 3, 3, 1}, kFloat64)), Contains("conv2d: dtype mismatch: input float32, filter float64"));
  REQUIRE_THROWS_WITH(conv2d(x.cast(kInt32), zeros({3, 3, 3, 1}, kInt32)), Contains("conv2d: expected a floating-point tensor, got int32"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({3, 3, 3, 1}), {0, 1}), Contains("conv2d: strides must be positive, got 0"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {6, 1}, {1, 1}), Contains("max_pool2d: window 6 is larger than the input extent 5"));
  REQUIRE_THROWS_WITH(avg_pool2d(zeros({5, 5}), {2, 2}, {2, 2}), Contains("avg_pool2d: expected an NHWC tensor of rank 4, got [5,5]"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {0, 2}, {1, 1}), Contains("max_pool2d: window/filter extent must be positive, got 0"));
  REQUIRE_THROWS_WITH(max_pool2d_grad(x, zeros({1, 2, 2, 2}), {2, 2}, {2, 2}, Padding::Valid),
                      Contains("max_pool2d_grad: dy has shape [1,2,2,2] which does not match the pooled input"));
  REQUIRE_THROWS_WITH(conv2d_backprop_input({1, 5, 5, 3}, zeros({3, 3, 3, 1}, kFloat64), zeros({1, 3, 3, 1}), {1, 1}, Padding::Valid),
                      Contains("conv2d_backprop_input: dtype mismatch: filter float64, dy float32"));
  REQUIRE_THROWS_WITH(conv2d_backprop_filter(x, {3, 3, 3, 1}, zeros({1, 3, 3, 1}, kFloat64), {1, 1}, Padding::Valid),
                      Contains("conv2d_backprop_filter: dtype mismatch: input float32, dy float64"));
  REQUIRE_THROWS_WITH(max_pool2d_grad(x, zeros({1, 2, 2, 3}, kFloat64), {2, 2}, {2, 2}, Padding::Valid),
                      Contains("max_pool2d_grad: dtype mismatch: input float32, dy float64"));
  REQUIRE_THROWS_WITH(avg_pool2d_grad({1, 5, 5, 3}, zeros({1, 3, 3, 3}), {2, 2}, {2, 2}, Padding::Valid),
                      Contains("avg_pool2d_grad: dy has shape [1,3,3,3] which does not match input [1,5,5,3]"));
}
