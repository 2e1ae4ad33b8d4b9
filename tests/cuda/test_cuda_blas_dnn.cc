// matmul (cuBLASLt), the convolutions (cuDNN) and pooling (pool.cuh) on a real GPU
// against the CPU: every op-info sample, the TF32 switch, a 1024^3 product, the shapes the
// samples miss (folded and looped batches, misaligned and strided operands, asymmetric
// SAME padding on larger images, float64 through NCHW), side streams and concurrent
// threads. Skipped without a device (test_cuda_main.cc). The library calls cannot be
// emulated: this file is where their argument marshalling is checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include <strata/kernels/cuda/settings.h>
#include "tests/cuda/parity.h"

using namespace strata;
using strata::testing::mismatch;
using strata::testing::Tolerance;

namespace {

Tensor on_cpu(const Tensor& t) { return t.to(Device()); }
Tensor on_dev(const Tensor& t) { return t.to(cuda(0)); }

bool blas_dnn_op(OpId op) {
  switch (op) {
    case OpId::MatMul:
    case OpId::Conv2D:
    case OpId::Conv2DBackpropInput:
    case OpId::Conv2DBackpropFilter:
    case OpId::MaxPool2D:
    case OpId::MaxPool2DGrad:
    case OpId::AvgPool2D:
    case OpId::AvgPool2DGrad:
      return true;
    default:
      return false;
  }
}
bool library_only(OpId op) { return cuda_testing::library_op(op); }

const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};

// Uniform in [0, 1): sums without cancellation, so that a relative tolerance holds for
// every element whatever the summation order.
Tensor positive(const Shape& s, uint64_t seed, DType dt) { return random::uniform(s, seed, 0.0, 1.0).cast(dt); }

std::string max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return std::to_string(m);
}

}  // namespace

TEST_CASE("cuda: every op-info sample of matmul, the convolutions and pooling matches the CPU", "[cuda]") {
  const cuda_testing::ParityReport r = cuda_testing::run_parity(cuda(0), /*emulated=*/false, blas_dnn_op);
  std::cout << "[cuda parity, matmul/conv/pool] " << r.summary() << "\n";
  for (const std::string& f : r.failures) FAIL_CHECK(f);
  CHECK(r.no_kernel.empty());
  for (const char* name : {"matmul", "conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "max_pool2d",
                           "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad"}) {
    INFO(name);
    CHECK(r.per_op.count(name) == 1);
  }
  CHECK(r.unsupported.count("matmul int32") == 1);
  CHECK(r.unsupported.count("matmul int64") == 1);
}

TEST_CASE("cuda: integer matmul raises a clear error", "[cuda]") {
  for (DType dt : {kInt32, kInt64}) {
    const Tensor a = ones({2, 3}, dt, cuda(0)), b = ones({3, 4}, dt, cuda(0));
    CHECK_THROWS_WITH(matmul(a, b), Catch::Contains("matmul: no CUDA kernel for dtype") &&
                                        Catch::Contains("integer matmul is not supported on CUDA"));
  }
}

TEST_CASE("cuda: a 1024^3 float32 matmul matches the CPU at float32 tolerance", "[cuda]") {
  REQUIRE_FALSE(backends::cuda::allow_tf32());
  const Tensor a = positive({1024, 1024}, 1, kFloat32), b = positive({1024, 1024}, 2, kFloat32);
  const Tensor want = matmul(a, b);
  const Tensor got = on_cpu(matmul(on_dev(a), on_dev(b)));
  CHECK(mismatch(got, want, cuda_testing::cuda_tolerance(kFloat32)) == "");
  // Transposed operands take the other cuBLASLt layouts.
  CHECK(mismatch(on_cpu(matmul(on_dev(a), on_dev(b), true, true)), matmul(a, b, true, true),
                 cuda_testing::cuda_tolerance(kFloat32)) == "");
}

TEST_CASE("cuda: TF32 is off by default and, switched on, stays within the TF32 tolerance", "[cuda]") {
  const Tensor a = positive({1024, 1024}, 3, kFloat32), b = positive({1024, 1024}, 4, kFloat32);
  const Tensor want = matmul(a, b);
  const Tensor fp32 = on_cpu(matmul(on_dev(a), on_dev(b)));
  Tensor tf32;
  {
    backends::cuda::AllowTf32Guard on(true);
    CHECK(backends::cuda::allow_tf32());
    tf32 = on_cpu(matmul(on_dev(a), on_dev(b)));
    // Every matmul and convolution sample in float32 at the TF32 tolerance.
    const cuda_testing::ParityReport r = cuda_testing::run_parity(cuda(0), false, library_only, /*tf32=*/true);
    std::cout << "[cuda parity, TF32 on] " << r.summary() << "\n";
    for (const std::string& f : r.failures) FAIL_CHECK(f);
    // A convolution large enough for tensor cores.
    const Tensor x = positive({8, 32, 32, 64}, 5, kFloat32), w = positive({3, 3, 64, 64}, 6, kFloat32);
    CHECK(mismatch(on_cpu(conv2d(on_dev(x), on_dev(w), {1, 1}, Padding::Same)), conv2d(x, w, {1, 1}, Padding::Same),
                   cuda_testing::cuda_tolerance(kFloat32, true)) == "");
  }
  CHECK_FALSE(backends::cuda::allow_tf32());
  CHECK(mismatch(tf32, want, cuda_testing::cuda_tolerance(kFloat32, true)) == "");
  // The switch takes effect: TF32 rounds the inputs to 10 mantissa bits, so its result is
  // not float32's.
  INFO("max |TF32 - FP32| = " << max_abs_diff(tf32, fp32));
  CHECK(mismatch(tf32, fp32, Tolerance{}) != "");
}

TEST_CASE("cuda: matmul shapes the op-info samples miss", "[cuda]") {
  for (DType dt : kFloats) {
    INFO(dtype_name(dt));
    const Tolerance tol = cuda_testing::cuda_tolerance(dt);
    auto same = [&](const Tensor& a, const Tensor& b, bool ta, bool tb, auto view_a, auto view_b) {
      const Tensor want = matmul(view_a(a), view_b(b), ta, tb);
      const Tensor got = on_cpu(matmul(view_a(on_dev(a)), view_b(on_dev(b)), ta, tb));
      return mismatch(got, want, tol);
    };
    auto id = [](const Tensor& t) { return t; };
    // [B, m, k] @ [k, n]: folded into one GEMM with M = B * m.
    CHECK(same(positive({6, 40, 64}, 10, dt), positive({64, 24}, 11, dt), false, false, id, id) == "");
    // Transposed a: not folded, strided-batched with b's batch stride 0.
    CHECK(same(positive({6, 64, 40}, 12, dt), positive({64, 24}, 13, dt), true, false, id, id) == "");
    // [2, 1, m, k] @ [3, k, n]: batch dims that do not merge -> a loop of batched calls.
    CHECK(same(positive({2, 1, 17, 33}, 14, dt), positive({3, 33, 9}, 15, dt), false, false, id, id) == "");
    // a broadcast, b batched; both transposed.
    CHECK(same(positive({33, 17}, 16, dt), positive({4, 9, 33}, 17, dt), true, true, id, id) == "");
    // Operands at odd element offsets (misaligned for 16-byte loads) and with row strides
    // larger than a row (ld > cols), and a step-2 column slice (copied).
    auto rows_from_1 = [](const Tensor& t) { return slice(slice(t, 0, 1, t.dim(0)), 1, 3, t.dim(1)); };
    CHECK(same(positive({65, 70}, 18, dt), positive({68, 31}, 19, dt), false, false, rows_from_1,
               [](const Tensor& t) { return slice(slice(t, 0, 1, 68), 1, 0, 31, 2); }) == "");
    // Column-major views (transposes) passed without copies, batched.
    CHECK(same(positive({5, 24, 48}, 20, dt), positive({5, 16, 24}, 21, dt), false, false,
               [](const Tensor& t) { return transpose(t, {0, 2, 1}); },
               [](const Tensor& t) { return transpose(t, {0, 2, 1}); }) == "");
    // k == 0 gives zeros; an empty batch gives an empty result.
    CHECK(mismatch(on_cpu(matmul(zeros({3, 0}, dt, cuda(0)), zeros({0, 4}, dt, cuda(0)))), zeros({3, 4}, dt),
                   Tolerance{}) == "");
    CHECK(matmul(zeros({0, 3, 4}, dt, cuda(0)), zeros({4, 5}, dt, cuda(0))).shape() == Shape{0, 3, 5});
  }
}

TEST_CASE("cuda: convolutions on larger images, every padding case, every float dtype", "[cuda]") {
  struct Case {
    Shape x, w;
    std::array<int64_t, 2> s;
    Padding p;
  };
  const std::vector<Case> cases = {
      {{4, 16, 16, 8}, {3, 3, 8, 16}, {1, 1}, Padding::Same},   // symmetric pads
      {{4, 16, 16, 8}, {3, 3, 8, 16}, {2, 2}, Padding::Same},   // odd total: pad after only
      {{2, 15, 12, 3}, {4, 2, 3, 8}, {1, 1}, Padding::Same},    // even filter: asymmetric
      {{2, 15, 13, 4}, {5, 5, 4, 6}, {2, 3}, Padding::Valid},   // unused trailing rows
      {{3, 9, 9, 16}, {1, 1, 16, 32}, {2, 2}, Padding::Same},   // 1x1 stride 2
      {{2, 7, 9, 5}, {3, 3, 5, 4}, {3, 1}, Padding::Same},      // mixed strides, odd sizes
  };
  for (DType dt : kFloats) {
    const Tolerance tol = cuda_testing::cuda_tolerance(dt);
    for (const Case& c : cases) {
      INFO(dtype_name(dt) << " x" << shape_str(c.x) << " w" << shape_str(c.w) << " strides " << c.s[0] << ","
                          << c.s[1] << (c.p == Padding::Same ? " SAME" : " VALID"));
      const Tensor x = positive(c.x, 30, dt), w = positive(c.w, 31, dt);
      const Tensor y = conv2d(x, w, c.s, c.p);
      CHECK(mismatch(on_cpu(conv2d(on_dev(x), on_dev(w), c.s, c.p)), y, tol) == "");
      const Tensor dy = positive(y.shape(), 32, dt);
      CHECK(mismatch(on_cpu(conv2d_backprop_input(c.x, on_dev(w), on_dev(dy), c.s, c.p)),
                     conv2d_backprop_input(c.x, w, dy, c.s, c.p), tol) == "");
      CHECK(mismatch(on_cpu(conv2d_backprop_filter(on_dev(x), c.w, on_dev(dy), c.s, c.p)),
                     conv2d_backprop_filter(x, c.w, dy, c.s, c.p), tol) == "");
    }
  }
}

TEST_CASE("cuda: pooling on larger images is bitwise the CPU's, ties included", "[cuda]") {
  for (DType dt : kFloats) {
    for (auto [k, s, p] : {std::tuple{std::array<int64_t, 2>{3, 3}, std::array<int64_t, 2>{2, 2}, Padding::Same},
                           std::tuple{std::array<int64_t, 2>{2, 2}, std::array<int64_t, 2>{2, 2}, Padding::Valid},
                           std::tuple{std::array<int64_t, 2>{3, 3}, std::array<int64_t, 2>{1, 1}, Padding::Same}}) {
      INFO(dtype_name(dt) << " window " << k[0] << " stride " << s[0]);
      const Tensor x = floor(random::uniform({8, 32, 30, 16}, 40, 0.0, 4.0)).cast(dt);  // many ties
      const Tensor xd = on_dev(x);
      const Tensor y = max_pool2d(x, k, s, p);
      const Tensor dy = random::uniform(y.shape(), 41, -1.0, 1.0).cast(dt);
      CHECK(mismatch(on_cpu(max_pool2d(xd, k, s, p)), y, Tolerance{}) == "");
      CHECK(mismatch(on_cpu(avg_pool2d(xd, k, s, p)), avg_pool2d(x, k, s, p), Tolerance{}) == "");
      CHECK(mismatch(on_cpu(max_pool2d_grad(xd, on_dev(dy), k, s, p)), max_pool2d_grad(x, dy, k, s, p), Tolerance{}) ==
            "");
      CHECK(mismatch(on_cpu(avg_pool2d_grad(x.shape(), on_dev(dy), k, s, p)), avg_pool2d_grad(x.shape(), dy, k, s, p),
                     Tolerance{}) == "");
    }
  }
}

TEST_CASE("cuda: matmul and convolutions on a side stream and from concurrent threads", "[cuda]") {
  const Tensor a = positive({256, 192}, 50, kFloat32), b = positive({192, 128}, 51, kFloat32);
  const Tensor x = positive({4, 12, 12, 8}, 52, kFloat32), w = positive({3, 3, 8, 8}, 53, kFloat32);
  const Tensor want_mm = matmul(a, b), want_conv = conv2d(x, w, {2, 2}, Padding::Same);
  const Tolerance tol = cuda_testing::cuda_tolerance(kFloat32);
  {
    const Stream side = create_stream(cuda(0));
    const Tensor ad = on_dev(a), bd = on_dev(b), xd = on_dev(x), wd = on_dev(w);
    stream_wait(side, current_stream(cuda(0)));
    Tensor mm, cv;
    {
      StreamGuard g(side);
      mm = matmul(ad, bd);
      cv = conv2d(xd, wd, {2, 2}, Padding::Same);
    }
    synchronize(side);
    CHECK(mismatch(on_cpu(mm), want_mm, tol) == "");
    CHECK(mismatch(on_cpu(cv), want_conv, tol) == "");
  }
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < errors.size(); ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 10; ++i) {
          const std::string e1 = mismatch(on_cpu(matmul(on_dev(a), on_dev(b))), want_mm, tol);
          const std::string e2 = mismatch(on_cpu(conv2d(on_dev(x), on_dev(w), {2, 2}, Padding::Same)), want_conv, tol);
          if (!e1.empty() || !e2.empty()) {
            errors[t] = e1 + e2;
            return;
          }
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) CHECK(e == "");
}
