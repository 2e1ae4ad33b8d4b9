// The fused optimizer ops (core/ops.h: sgd_update, adam_update, all_finite) and the paths
// of train/ built on them: argument errors, gradients that alias what is written, results
// bitwise equal to the op-by-op formula in float32 and float64, float16/bfloat16
// parameters, all_finite on every kind of non-finite value, and clipping by global norm
// without per-gradient host reads.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include <strata/autograd/autograd.h>
#include <strata/autograd/gradient_registry.h>
#include <strata/core/random.h>
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/clip.h>
#include <strata/train/loss_scale_optimizer.h>
#include <strata/train/sgd.h>

using namespace strata;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bitwise equality of two tensors' elements (same dtype and shape).
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

Variable make_var(const Tensor& initial, const std::string& name = "w") {
  autograd::VariableOptions o;
  o.name = name;
  return Variable(initial, o);
}

// The op-by-op updates (what train/sgd.cc and train/adam.cc computed before the fused ops).
void sgd_reference(const Tensor& param, const Tensor& grad, const Tensor& buf, const optim::SGDOptions& o,
                   double lr) {
  Tensor d = grad;
  if (o.weight_decay != 0.0) d = d + param * o.weight_decay;
  if (o.momentum != 0.0) {
    buf.copy_(buf * o.momentum + d);
    d = o.nesterov ? d + buf * o.momentum : buf;
  }
  param.copy_(param - d * lr);
}

void adam_reference(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const optim::AdamOptions& o, bool decoupled, double lr, int64_t step) {
  Tensor g = grad;
  if (o.weight_decay != 0.0) {
    if (decoupled)
      param.copy_(param * (1.0 - lr * o.weight_decay));
    else
      g = g + param * o.weight_decay;
  }
  m.copy_(m * o.beta1 + g * (1.0 - o.beta1));
  v.copy_(v * o.beta2 + g * g * (1.0 - o.beta2));
  const double t = double(step);
  const double step_size = lr / (1.0 - std::pow(o.beta1, t));
  const Tensor denom = sqrt(v) / std::sqrt(1.0 - std::pow(o.beta2, t)) + o.epsilon;
  param.copy_(param - (m / denom) * step_size);
}

}  // namespace

TEST_CASE("sgd_update and adam_update: misuse raises naming the op, shapes and dtypes",
          "[train][optimizer_ops]") {
  const Tensor p = ones({3}), g = full({3}, 0.5), m = zeros({3}), v = zeros({3});
  const SgdAttrs sgd{};
  const AdamAttrs adam{};
  auto expect = [](const std::function<void()>& fn, std::vector<std::string> parts) {
    REQUIRE_THROWS_WITH(fn(), StartsWith(parts[0]));
    for (size_t i = 1; i < parts.size(); ++i) REQUIRE_THROWS_WITH(fn(), Contains(parts[i]));
  };
  // dtypes
  expect([&] { sgd_update(zeros({3}, kInt64), zeros({3}, kInt64), Tensor(), sgd); },
         {"sgd_update:", "int64[3]", "float32, float64, float16 or bfloat16"});
  expect([&] { sgd_update(p, zeros({3}, kFloat64), Tensor(), sgd); },
         {"sgd_update:", "gradient float64[3]", "parameter float32[3]", "same shape and dtype"});
  expect([&] { adam_update(p, g, zeros({3}, kFloat64), v, adam); },
         {"adam_update:", "m slot float64[3]", "parameter float32[3]"});
  // shapes
  expect([&] { sgd_update(p, full({4}, 0.5), Tensor(), sgd); },
         {"sgd_update:", "gradient float32[4]", "parameter float32[3]"});
  expect([&] { adam_update(p, g, m, zeros({3, 1}), adam); }, {"adam_update:", "v slot float32[3,1]", "[3]"});
  expect([&] { sgd_update(p, g, zeros({2}), SgdAttrs{.momentum = 0.9}); },
         {"sgd_update:", "momentum slot float32[2]"});
  // aliasing in-place targets
  expect([&] { adam_update(p, g, p, v, adam); }, {"adam_update:", "m float32[3]", "shares storage with the parameter"});
  expect([&] { adam_update(p, g, m, m, adam); }, {"adam_update:", "v float32[3]", "shares storage with the m"});
  const Tensor both = zeros({6});
  expect([&] { sgd_update(both.slice(0, 0, 3), g, both.slice(0, 3, 6), SgdAttrs{.momentum = 0.9}); },
         {"sgd_update:", "momentum", "shares storage with the parameter"});
  // a strided target
  expect([&] { sgd_update(zeros({3, 2}).transpose(), zeros({2, 3}), Tensor(), sgd); },
         {"sgd_update:", "parameter float32[2,3]", "not contiguous"});
  // missing pieces
  expect([&] { sgd_update(p, g, Tensor(), SgdAttrs{.momentum = 0.9}); },
         {"sgd_update:", "needs a momentum buffer"});
  expect([&] { sgd_update(p, Tensor(), Tensor(), sgd); }, {"sgd_update:", "gradient is an undefined tensor"});
  expect([&] { adam_update(p, g, m, Tensor(), adam); }, {"adam_update:", "v slot is an undefined tensor"});
  expect([&] { adam_update(p, g, m, v, AdamAttrs{.step = 0}); }, {"adam_update:", "step must be >= 1"});
  // Nothing was written by any refused call.
  CHECK(p.to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(m.to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(both.to_vector<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("sgd_update and adam_update: a gradient aliasing a target or strided is read before it is written",
          "[train][optimizer_ops]") {
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(dt);
    // The gradient is the parameter itself: p - p * lr, as the ops compute it.
    const Tensor p = cast(random::normal({1000}, 1), dt);
    const Tensor want = p - p * 0.1;
    sgd_update(p, p, Tensor(), SgdAttrs{.learning_rate = 0.1});
    CHECK(bitwise_equal(p, want));

    // The gradient is the momentum buffer.
    const Tensor q = cast(random::normal({1000}, 2), dt), buf = cast(random::normal({1000}, 3), dt);
    const Tensor q_ref = q.clone(), buf_ref = buf.clone();
    sgd_reference(q_ref, buf_ref.clone(), buf_ref, {.momentum = 0.9}, 0.05);
    sgd_update(q, buf, buf, SgdAttrs{.learning_rate = 0.05, .momentum = 0.9});
    CHECK(bitwise_equal(q, q_ref));
    CHECK(bitwise_equal(buf, buf_ref));

    // Broadcast and transposed views (the gradients of a sum and of a matmul operand).
    const Tensor r = zeros({4, 3}, dt);
    sgd_update(r, broadcast_to(scalar_like(r, 2.0), {4, 3}), Tensor(), SgdAttrs{.learning_rate = 0.5});
    CHECK(r.to_vector<double>() == std::vector<double>(12, -1.0));
    const Tensor gt = cast(random::normal({3, 4}, 4), dt);
    const Tensor s = zeros({4, 3}, dt);
    sgd_update(s, gt.transpose(), Tensor(), SgdAttrs{.learning_rate = 1.0});
    CHECK(bitwise_equal(s, zeros({4, 3}, dt) - contiguous(gt.transpose()) * 1.0));
  }
  // Empty parameters are a no-op.
  const Tensor e = zeros({0, 3});
  adam_update(e, zeros({0, 3}), zeros({0, 3}), zeros({0, 3}), AdamAttrs{});
  CHECK(e.numel() == 0);
}

TEST_CASE("SGD, Adam and AdamW equal the op-by-op formula bitwise (float32 Adam: up to the ops' approximate sqrt)",
          "[train][optimizer_ops]") {
  // Large enough that the update is split across the intra-op pool.
  const Shape shape{257, 301};
  const double lr = 0.03;
  const std::vector<optim::SGDOptions> sgd_cases{
      {}, {.momentum = 0.9}, {.momentum = 0.9, .nesterov = true}, {.momentum = 0.5, .weight_decay = 0.01},
      {.weight_decay = 0.1}, {.momentum = 0.9, .nesterov = true, .weight_decay = 1e-4}};
  for (DType dt : {kFloat32, kFloat64}) {
    for (size_t c = 0; c < sgd_cases.size(); ++c) {
      INFO(dt << " SGD case " << c);
      const auto& o = sgd_cases[c];
      const Tensor init = cast(random::normal(shape, 10 + c), dt);
      Variable w = make_var(init);
      optim::SGD opt(lr, o);
      const Tensor p_ref = init.clone(), buf_ref = zeros(shape, dt);
      for (int step = 0; step < 3; ++step) {
        const Tensor g = cast(random::normal(shape, 100 * c + step), dt);
        opt.apply_gradients({g}, {w});
        sgd_reference(p_ref, g, buf_ref, o, lr);
      }
      REQUIRE(bitwise_equal(w.value(), p_ref));
      if (o.momentum != 0.0) REQUIRE(bitwise_equal(opt.find_slot(w, "momentum")->value(), buf_ref));
    }
    const std::vector<std::pair<optim::AdamOptions, bool>> adam_cases{
        {{}, false},
        {{.beta1 = 0.8, .beta2 = 0.99, .epsilon = 1e-8}, false},
        {{.weight_decay = 0.01}, false},  // Adam's L2 form
        {{.weight_decay = 0.01}, true},   // AdamW
        {{.beta1 = 0.0, .weight_decay = 0.2}, true}};
    for (size_t c = 0; c < adam_cases.size(); ++c) {
      INFO(dt << " Adam case " << c);
      const auto& [o, decoupled] = adam_cases[c];
      const Tensor init = cast(random::normal(shape, 20 + c), dt);
      Variable w = make_var(init);
      optim::Optimizer opt = decoupled ? optim::Optimizer(optim::AdamW(
                                             lr, {.beta1 = o.beta1, .beta2 = o.beta2, .epsilon = o.epsilon,
                                                  .weight_decay = o.weight_decay}))
                                       : optim::Optimizer(optim::Adam(lr, o));
      const Tensor p_ref = init.clone(), m_ref = zeros(shape, dt), v_ref = zeros(shape, dt);
      for (int step = 1; step <= 3; ++step) {
        const Tensor g = cast(random::normal(shape, 200 * c + step), dt);
        opt.apply_gradients({g}, {w});
        adam_reference(p_ref, g, m_ref, v_ref, o, decoupled, lr, step);
      }
      // Bitwise in float64. In float32 the ops' sqrt is Eigen's vectorised approximation
      // (rsqrt and one Newton step, within a few ulp) where the fused loop takes the exact
      // sqrt: the parameter is close, and m and v are bitwise unless the parameter feeds
      // back into them (Adam's L2 weight decay).
      const bool exact = dt == kFloat64;
      const bool slots_exact = exact || decoupled || o.weight_decay == 0.0;
      const Tensor m = opt.find_slot(w, "m")->value(), v = opt.find_slot(w, "v")->value();
      if (exact) {
        REQUIRE(bitwise_equal(w.value(), p_ref));
      } else {
        REQUIRE_ALLCLOSE(w.value(), p_ref, 1e-6, 1e-7);
      }
      if (slots_exact) {
        REQUIRE(bitwise_equal(m, m_ref));
        REQUIRE(bitwise_equal(v, v_ref));
      } else {
        REQUIRE_ALLCLOSE(m, m_ref, 1e-6, 1e-7);
        REQUIRE_ALLCLOSE(v, v_ref, 1e-6, 1e-7);
      }
    }
  }
}

TEST_CASE("sgd_update and adam_update on float16 and bfloat16 compute in float32",
          "[train][optimizer_ops]") {
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO(dt);
    const Tensor p32 = random::normal({500}, 7), g32 = random::normal({500}, 8);
    // The float32 update of the half-precision values, rounded once.
    const Tensor p = cast(p32, dt), g = cast(g32, dt);
    const Tensor p_ref = cast(p, kFloat32), m_ref = zeros({500}), v_ref = zeros({500});
    adam_reference(p_ref, cast(g, kFloat32), m_ref, v_ref, {.weight_decay = 0.01}, true, 0.01, 1);
    const Tensor m = zeros({500}, dt), v = zeros({500}, dt);
    adam_update(p, g, m, v, AdamAttrs{.learning_rate = 0.01, .weight_decay = 0.01, .step = 1});
    REQUIRE(p.dtype() == dt);
    // Within one rounding of the float32 result (whose sqrt is the ops' approximation).
    const double tol = dt == kBFloat16 ? 8e-3 : 1e-3;
    REQUIRE_ALLCLOSE(cast(p, kFloat32), cast(cast(p_ref, dt), kFloat32), tol, 0);
    REQUIRE(bitwise_equal(m, cast(m_ref, dt)));
    REQUIRE(bitwise_equal(v, cast(v_ref, dt)));

    const Tensor q = cast(p32, dt), buf = zeros({500}, dt);
    const Tensor q_ref = cast(q, kFloat32), buf_ref = zeros({500});
    sgd_reference(q_ref, cast(g, kFloat32), buf_ref, {.momentum = 0.9, .nesterov = true}, 0.1);
    sgd_update(q, g, buf, SgdAttrs{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
    REQUIRE(bitwise_equal(q, cast(q_ref, dt)));
    REQUIRE(bitwise_equal(buf, cast(buf_ref, dt)));
  }
}

TEST_CASE("all_finite: inf, -inf and NaN anywhere, large finite values, every float dtype",
          "[train][optimizer_ops][all_finite]") {
  auto check = [](const std::vector<Tensor>& ts) {
    const Tensor r = all_finite(ts);
    REQUIRE(r.dtype() == kBool);
    REQUIRE(r.ndim() == 0);
    return r.item<bool>();
  };
  // No tensors, or only undefined ones: true.
  CHECK(check({}));
  CHECK(check({Tensor(), Tensor()}));
  CHECK(all_finite({}).device() == current_device());

  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dt);
    const Tensor base = cast(random::normal({1 << 18}, 5), dt);  // split across the pool
    CHECK(check({base}));
    for (double bad : {kInf, -kInf, kNaN}) {
      for (int64_t at : {int64_t(0), int64_t(1000), int64_t((1 << 18) - 1)}) {
        INFO("value " << bad << " at " << at);
        const Tensor t = base.clone();
        t.slice(0, at, at + 1).copy_(Tensor::scalar(bad, kFloat64));
        CHECK_FALSE(check({t}));
        CHECK_FALSE(check({ones({2}), Tensor(), base, t}));
        // A view that leaves the bad element out is finite.
        if (at == 0) CHECK(check({t.slice(0, 1, 1 << 18)}));
      }
    }
    // Strided: a transposed matrix with one NaN, and a rank-0 host scalar.
    const Tensor mat = cast(random::normal({64, 33}, 6), dt);
    CHECK(check({mat.transpose(), Tensor::scalar(1.0, dt)}));
    mat.slice(0, 63, 64).slice(1, 32, 33).copy_(Tensor::scalar(kNaN, kFloat64));
    CHECK_FALSE(check({mat.transpose()}));
    CHECK_FALSE(check({Tensor::scalar(kInf, dt)}));
    // Empty tensors are finite.
    CHECK(check({zeros({0, 4}, dt)}));
  }
  // The largest finite values: a plain sum (or sum of x * 0 after a square) would overflow.
  CHECK(check({full({100000}, 3e38, kFloat32), full({1000}, -3.4e38, kFloat32)}));
  CHECK(std::isinf(sum(square(full({10}, 3e38, kFloat32))).item<double>()));
  CHECK(check({full({1000}, 1.7e308, kFloat64)}));
  CHECK(check({full({1000}, 65504.0, kFloat16), full({10}, 3.3e38, kBFloat16)}));
  CHECK(check({full({3}, std::numeric_limits<double>::denorm_min(), kFloat64)}));
  // float16 overflow from a cast is caught.
  CHECK_FALSE(check({cast(full({4}, 70000.0), kFloat16)}));
  // Integer and bool tensors are always finite.
  CHECK(check({zeros({3}, kInt64), ones({2}, kBool), zeros({5}, kInt32)}));
  CHECK_FALSE(check({zeros({3}, kInt64), full({2}, kInf)}));
}

TEST_CASE("all_finite is not recorded and has no gradient", "[train][optimizer_ops][all_finite]") {
  Tensor x = tensor({1.0f, 2.0f});
  GradientTape tape;
  tape.watch(x);
  const Tensor y = x * 2.0;
  CHECK(all_finite({y}).item<bool>());
  REQUIRE(autograd::find_gradient(OpId::AllFinite) != nullptr);
  CHECK_FALSE(autograd::find_gradient(OpId::AllFinite)->differentiable);
  REQUIRE_ALLCLOSE(tape.gradient(sum(y), x), tensor({2.0f, 2.0f}));
}

TEST_CASE("LossScaleOptimizer applies steps with large finite gradients and skips non-finite ones",
          "[train][optimizer_ops][all_finite]") {
  // 3e38 + 3e38 overflows float32: the step must still be applied.
  Variable w = make_var(zeros({4}));
  optim::LossScaleOptimizer lso(optim::SGD(2e-38), /*dynamic=*/false, 1.0);
  lso.apply_gradients({full({4}, 3e38)}, {w});
  CHECK(lso.iterations_value() == 1);
  REQUIRE_ALLCLOSE(w.value(), full({4}, -6.0), 1e-5, 0);
  lso.apply_gradients({tensor({1.0f, NAN, 1.0f, 1.0f})}, {w});
  CHECK(lso.iterations_value() == 2);
  REQUIRE_ALLCLOSE(w.value(), full({4}, -6.0), 1e-5, 0);  // skipped
}

TEST_CASE("clip_gradients_by_global_norm keeps the norm on the device and matches clip_by_global_norm",
          "[train][optimizer_ops][clip]") {
  const Tensor a = random::normal({50, 3}, 1), b = cast(random::normal({7}, 2), kFloat64);
  const std::vector<Tensor> grads{a, Tensor(), b};
  Tensor norm;
  const auto clipped = optim::clip_gradients_by_global_norm(grads, 0.5, &norm);
  REQUIRE(norm.dtype() == kFloat64);
  REQUIRE(norm.ndim() == 0);
  const double want_norm = std::sqrt(sum(square(cast(a, kFloat64))).item<double>() +
                                     sum(square(b)).item<double>());
  CHECK(norm.item<double>() == want_norm);
  CHECK(optim::global_norm(grads) == want_norm);
  CHECK(optim::global_norm_tensor(grads).item<double>() == want_norm);
  // Each gradient scaled by the scale rounded to its dtype, as with a host scalar.
  const double scale = 0.5 / want_norm;
  REQUIRE(clipped.size() == 3);
  CHECK(bitwise_equal(clipped[0], a * scale));
  CHECK_FALSE(clipped[1].defined());
  CHECK(bitwise_equal(clipped[2], b * scale));
  const auto host = optim::clip_by_global_norm(grads, 0.5);
  CHECK(host.global_norm == want_norm);
  CHECK(bitwise_equal(host.gradients[0], clipped[0]));
  // Within the norm: unchanged values; no gradient at all: norm 0.
  const auto same = optim::clip_gradients_by_global_norm(grads, 1e6);
  CHECK(bitwise_equal(same[0], a));
  CHECK(optim::clip_by_global_norm({Tensor()}, 1.0).global_norm == 0.0);
  // A non-finite norm (an inf, or squares overflowing float64) makes every gradient NaN.
  const auto inf = optim::clip_gradients_by_global_norm({tensor({1.0f, INFINITY}), b}, 1.0);
  CHECK(std::isnan(inf[0].to_vector<float>()[0]));
  CHECK(std::isnan(inf[1].to_vector<double>()[0]));
  CHECK(std::isinf(optim::global_norm({full({2}, 1e200, kFloat64)})));
  CHECK_THROWS_WITH(optim::global_norm({zeros({2}, kInt32)}), Contains("expected floating tensors, got int32"));
}
