// The CPU kernels that mixed-precision layers run on float16/bfloat16 tensors: each op
// (forward, and its gradient through the tape) on half inputs matches the same op on the
// float32 values of those inputs, within the half format's rounding.
#include <functional>
#include <string>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include "tests/test_util.h"

using namespace strata;
using autograd::GradientTape;

namespace {

// Random values already representable in `dt`, returned as (half, float32) pairs.
std::pair<Tensor, Tensor> rounded(const Shape& shape, uint64_t seed, DType dt) {
  Tensor h = cast(random::normal(shape, seed), dt);
  return {h, cast(h, kFloat32)};
}

// f applied to half and float32 copies of the inputs; the outputs and d sum(f*w)/d inputs
// agree within tolerances scaled to the format (bf16 has 8 significant bits, f16 11).
void check_op(const std::string& name, DType dt, const std::vector<Shape>& shapes,
              const std::function<Tensor(const std::vector<Tensor>&)>& f, bool differentiable = true) {
  INFO(name << " in " << dtype_name(dt));
  const double tol = dt == kBFloat16 ? 3e-2 : 4e-3;
  std::vector<Tensor> half, full;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto [h, f32] = rounded(shapes[i], 100 + i, dt);
    half.push_back(h);
    full.push_back(f32);
  }
  GradientTape tape_h(/*persistent=*/true), tape_f(/*persistent=*/true);
  for (auto& t : half) tape_h.watch(t);
  for (auto& t : full) tape_f.watch(t);
  Tensor yh = f(half), yf = f(full);
  REQUIRE(yh.dtype() == dt);
  REQUIRE(yf.dtype() == kFloat32);
  REQUIRE_ALLCLOSE(cast(yh, kFloat32), yf, tol, tol);
  if (!differentiable) return;
  Tensor w = random::normal(yf.shape(), 7);
  auto gh = tape_h.gradient(sum(mul(yh, cast(w, dt))), half);
  auto gf = tape_f.gradient(sum(mul(yf, w)), full);
  for (size_t i = 0; i < half.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(gh[i].dtype() == dt);
    // Gradients sum many rounded terms: compare relative to their scale.
    auto vf = gf[i].to_vector<double>();
    double scale = 1e-3;
    for (double v : vf) scale = std::max(scale, std::abs(v));
    REQUIRE_ALLCLOSE(cast(gh[i], kFloat32), gf[i], tol, 2 * tol * scale);
  }
}

}  // namespace

TEST_CASE("Half-precision CPU kernels match float32", "[train][mixed_precision][half]") {
  for (DType dt : {kBFloat16, kFloat16}) {
    auto one = [](Tensor (*op)(const Tensor&)) {
      return [op](const std::vector<Tensor>& in) { return op(in[0]); };
    };
    check_op("matmul", dt, {{5, 7}, {7, 3}}, [](auto& in) { return matmul(in[0], in[1]); });
    check_op("matmul^T", dt, {{7, 5}, {3, 7}},
             [](auto& in) { return matmul(in[0], in[1], true, true); });
    check_op("add (bias broadcast)", dt, {{4, 6}, {6}}, [](auto& in) { return add(in[0], in[1]); });
    check_op("sub", dt, {{4, 6}, {4, 1}}, [](auto& in) { return sub(in[0], in[1]); });
    check_op("mul", dt, {{4, 6}, {1, 6}}, [](auto& in) { return mul(in[0], in[1]); });
    check_op("div", dt, {{4, 6}}, [](auto& in) { return div(in[0], square(in[0]) + 1.0); });
    check_op("relu", dt, {{3, 8}}, one(relu));
    check_op("tanh", dt, {{3, 8}}, one(tanh));
    check_op("sigmoid", dt, {{3, 8}}, one(sigmoid));
    check_op("exp", dt, {{3, 8}}, one(exp));
    check_op("square", dt, {{3, 8}}, one(square));
    check_op("gelu", dt, {{3, 8}}, [](auto& in) { return gelu(in[0]); });
    check_op("rsqrt", dt, {{3, 8}}, [](auto& in) { return rsqrt(square(in[0]) + 0.5); });
    check_op("sum", dt, {{6, 5}}, [](auto& in) { return sum(in[0], std::vector<int64_t>{0}); });
    check_op("mean", dt, {{6, 5}},
             [](auto& in) { return mean(in[0], std::vector<int64_t>{1}, true); });
    check_op("max", dt, {{6, 5}}, [](auto& in) { return max(in[0], std::vector<int64_t>{1}); });
    check_op("reshape/flatten", dt, {{2, 3, 4, 2}},
             [](auto& in) { return flatten(reshape(in[0], {2, 12, 2})); });
    check_op("transpose", dt, {{2, 3, 4}}, [](auto& in) { return permute(in[0], {2, 0, 1}); });
    check_op("softmax", dt, {{4, 10}}, [](auto& in) { return softmax(in[0]); });
    check_op("log_softmax", dt, {{4, 10}}, [](auto& in) { return log_softmax(in[0]); });
    check_op("layer_norm", dt, {{4, 6}, {6}, {6}},
             [](auto& in) { return layer_norm(in[0], in[1], in[2]); });
    check_op("conv2d valid", dt, {{2, 6, 6, 3}, {3, 3, 3, 4}},
             [](auto& in) { return conv2d(in[0], in[1]); });
    check_op("conv2d same strided", dt, {{2, 7, 7, 2}, {3, 3, 2, 3}},
             [](auto& in) { return conv2d(in[0], in[1], {2, 2}, Padding::Same); });
    check_op("max_pool2d", dt, {{2, 6, 6, 3}},
             [](auto& in) { return max_pool2d(in[0], {2, 2}, {2, 2}); });
    check_op("avg_pool2d", dt, {{2, 6, 6, 3}},
             [](auto& in) { return avg_pool2d(in[0], {2, 2}, {2, 2}); });
    check_op("cast to float32 and back", dt, {{3, 4}},
             [](auto& in) {
               return cast(mul(cast(in[0], kFloat32), cast(in[0], kFloat32)), in[0].dtype());
             });

    const Tensor labels = Tensor::from_vector<int64_t>({1, 0, 3, 2}, {4});
    check_op("sparse_softmax_cross_entropy", dt, {{4, 5}},
             [&](auto& in) { return sparse_softmax_cross_entropy(in[0], labels); });
    const Tensor ids = Tensor::from_vector<int64_t>({1, 0, 3, 3}, {2, 2});
    check_op("embedding", dt, {{5, 3}}, [&](auto& in) { return embedding(in[0], ids); });

    // Not differentiable, used by the finiteness check and accuracy metrics.
    auto [h, f] = rounded({4, 10}, 3, dt);
    REQUIRE(argmax(h, -1).to_vector<int64_t>() == argmax(f, -1).to_vector<int64_t>());
    Tensor with_inf = cast(Tensor::from_vector<float>({1.f, INFINITY, -2.f, NAN}, {4}), dt);
    REQUIRE(is_finite(with_inf).to_vector<bool>() == std::vector<bool>{true, false, true, false});
    // float16 overflows to inf past 65504; bfloat16 has float32's range.
    Tensor big = cast(Tensor::from_vector<float>({7e4f}, {1}), dt);
    REQUIRE(is_finite(big).item<bool>() == (dt == kBFloat16));
  }
}
