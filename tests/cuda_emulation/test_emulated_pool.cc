// The pooling kernels (kernels/cuda/pool.cuh) on the emulated device against the CPU,
// bitwise in every float dtype: the op-info samples, and what they miss -- ties (the
// max-pool gradient goes to the first maximum in row-major window order), NaN, overlapping
// windows (the gradient gathers several windows in the CPU's order), strides larger than
// the window, asymmetric SAME padding (even windows, stride 2 on even extents), a window
// larger than the input, strided inputs and more elements than one emulated grid.
//
// matmul and the convolutions call cuBLASLt/cuDNN: they are not emulated (parity.h
// library_op) and are checked on a GPU (tests/cuda/test_cuda_blas_dnn.cc).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <strata/core/ops.h>
#include <strata/core/random.h>
#include "tests/cuda/parity.h"
#include "tests/cuda_emulation/emulated_runtime.h"

using namespace strata;
using strata::testing::mismatch;
using strata::testing::Tolerance;

namespace {

Tensor on_cpu(const Tensor& t) { return t.to(Device()); }
Tensor on_dev(const Tensor& t) { return t.to(cuda(0)); }

const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};

bool pool_op(OpId op) {
  return op == OpId::MaxPool2D || op == OpId::MaxPool2DGrad || op == OpId::AvgPool2D || op == OpId::AvgPool2DGrad;
}

struct Geo {
  Shape x;
  std::array<int64_t, 2> k, s;
  Padding p;
};

std::string str(const Geo& g) {
  std::string s = "x[";
  for (size_t i = 0; i < g.x.size(); ++i) s += (i ? "," : "") + std::to_string(g.x[i]);
  return s + "] window " + std::to_string(g.k[0]) + "," + std::to_string(g.k[1]) + " strides " +
         std::to_string(g.s[0]) + "," + std::to_string(g.s[1]) + (g.p == Padding::Same ? " SAME" : " VALID");
}

const std::vector<Geo>& geometries() {
  static const std::vector<Geo> g = {
      {{1, 6, 6, 2}, {3, 3}, {1, 1}, Padding::Same},   // overlapping windows, symmetric pads
      {{1, 6, 6, 2}, {3, 3}, {2, 2}, Padding::Same},   // overlap, asymmetric SAME (pad after 1)
      {{2, 5, 4, 3}, {2, 2}, {1, 1}, Padding::Same},   // even window: pad only after
      {{1, 7, 5, 2}, {2, 3}, {3, 2}, Padding::Valid},  // stride larger than the window: gaps
      {{1, 3, 3, 2}, {5, 5}, {1, 1}, Padding::Same},   // window larger than the input
      {{1, 5, 5, 1}, {1, 1}, {2, 2}, Padding::Same},   // 1x1 window, stride 2
      {{2, 9, 7, 5}, {3, 2}, {2, 1}, Padding::Same},   // 630 elements: more than one emulated grid
  };
  return g;
}

// The four pooling ops of x (NHWC) with upstream gradient dy, bitwise on both devices.
void check_all(const Tensor& x, const Tensor& xd, const Geo& g, const std::string& what) {
  INFO(what << " " << dtype_name(x.dtype()));
  const Tensor y = max_pool2d(x, g.k, g.s, g.p);
  CHECK(mismatch(on_cpu(max_pool2d(xd, g.k, g.s, g.p)), y, Tolerance{}) == "");
  CHECK(mismatch(on_cpu(avg_pool2d(xd, g.k, g.s, g.p)), avg_pool2d(x, g.k, g.s, g.p), Tolerance{}) == "");
  const Tensor dy = random::uniform(y.shape(), 77, -2.0, 2.0).cast(x.dtype());
  const Tensor dyd = on_dev(dy);
  CHECK(mismatch(on_cpu(max_pool2d_grad(xd, dyd, g.k, g.s, g.p)), max_pool2d_grad(x, dy, g.k, g.s, g.p),
                 Tolerance{}) == "");
  CHECK(mismatch(on_cpu(avg_pool2d_grad(x.shape(), dyd, g.k, g.s, g.p)),
                 avg_pool2d_grad(x.shape(), dy, g.k, g.s, g.p), Tolerance{}) == "");
}

}  // namespace

TEST_CASE("emulated CUDA: every op-info sample of the pooling ops matches the CPU", "[cuda-emulation]") {
  const cuda_testing::ParityReport r = cuda_testing::run_parity(cuda(0), /*emulated=*/true, pool_op);
  std::cout << "[cuda-emulation parity, pooling] " << r.summary() << "\n";
  for (const std::string& f : r.failures) FAIL_CHECK(f);
  CHECK(r.no_kernel.empty());
  CHECK(r.not_emulated.empty());
  for (const char* name : {"max_pool2d", "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad"}) {
    INFO(name);
    CHECK(r.per_op.count(name) == 1);
  }
}

TEST_CASE("emulated CUDA: pooling is bitwise the CPU's, ties and NaN included", "[cuda-emulation]") {
  const int64_t launches_before = cuda_emulation::launches();
  for (const Geo& g : geometries()) {
    for (DType dt : kFloats) {
      // Distinct values, then heavy ties (three levels); a constant input and NaN in two
      // dtypes only (the emulator is slow under TSan).
      const Tensor u = random::uniform(g.x, 5, -3.0, 3.0);
      const Tensor ties = floor(random::uniform(g.x, 6, 0.0, 3.0));
      for (const auto& [name, x32] : {std::pair{"distinct", u}, std::pair{"ties", ties}}) {
        const Tensor x = x32.cast(dt);
        check_all(x, on_dev(x), g, str(g) + " " + name);
      }
      if (dt != kFloat32 && dt != kFloat16) continue;
      const Tensor constant = full(g.x, 1.5, dt);
      check_all(constant, on_dev(constant), g, str(g) + " constant");
      // NaN at the first element of some windows and inside others.
      std::vector<double> v = ties.to_vector<double>();
      for (size_t i = 0; i < v.size(); i += 7) v[i] = std::numeric_limits<double>::quiet_NaN();
      const Tensor xn = Tensor::from_vector(v, g.x, dt);
      check_all(xn, on_dev(xn), g, str(g) + " NaN");
    }
  }
  CHECK(cuda_emulation::launches() > launches_before);
}

TEST_CASE("emulated CUDA: pooling reads strided inputs in place", "[cuda-emulation]") {
  const Geo g{{2, 5, 6, 3}, {3, 3}, {2, 2}, Padding::Same};
  for (DType dt : kFloats) {
    // NHWC views of an NCHW tensor and of a sliced one, on both devices.
    const Tensor nchw = floor(random::uniform({2, 3, 5, 6}, 8, 0.0, 4.0)).cast(dt);
    const Tensor x = permute(nchw, {0, 2, 3, 1});
    const Tensor xd = permute(on_dev(nchw), {0, 2, 3, 1});
    REQUIRE(!xd.is_contiguous());
    check_all(x, xd, g, "permuted from NCHW");
    const Tensor wide = random::uniform({2, 5, 12, 3}, 9, -1.0, 1.0).cast(dt);
    check_all(slice(wide, 2, 0, 12, 2), slice(on_dev(wide), 2, 0, 12, 2), g, "step-2 slice along W");
    // dy strided too.
    const Tensor xc = x.contiguous();
    const Tensor y = max_pool2d(xc, g.k, g.s, g.p);
    const Tensor dyt = random::uniform({y.dim(0), y.dim(2), y.dim(1), y.dim(3)}, 10).cast(dt);
    const Tensor dy = permute(dyt, {0, 2, 1, 3});
    const Tensor dyd = permute(on_dev(dyt), {0, 2, 1, 3});
    CHECK(mismatch(on_cpu(max_pool2d_grad(on_dev(xc), dyd, g.k, g.s, g.p)), max_pool2d_grad(xc, dy, g.k, g.s, g.p),
                   Tolerance{}) == "");
    CHECK(mismatch(on_cpu(avg_pool2d_grad(xc.shape(), dyd, g.k, g.s, g.p)),
                   avg_pool2d_grad(xc.shape(), dy, g.k, g.s, g.p), Tolerance{}) == "");
  }
}

TEST_CASE("emulated CUDA: pooling of empty tensors and integer dtypes", "[cuda-emulation]") {
  const Tensor empty = zeros({0, 4, 4, 2}, kFloat32, cuda(0));
  CHECK(max_pool2d(empty, {2, 2}, {2, 2}, Padding::Valid).shape() == Shape{0, 2, 2, 2});
  CHECK(avg_pool2d_grad({0, 4, 4, 2}, zeros({0, 2, 2, 2}, kFloat32, cuda(0)), {2, 2}, {2, 2}, Padding::Valid)
            .shape() == Shape{0, 4, 4, 2});
  // The front-end refuses integer inputs on every device.
  CHECK_THROWS_AS(max_pool2d(zeros({1, 4, 4, 1}, kInt32, cuda(0)), {2, 2}, {2, 2}, Padding::Valid), Error);
}
