// Mixed-precision policies: names and the global policy, and the casting rules per layer
// (variables float32, outputs in the compute dtype, variable gradients float32 and close
// to the float32 model's, normalisation statistics, softmax and losses in float32).
#include <strata/autograd/autograd.h>
#include <strata/core/random.h>
#include "tests/test_util.h"
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>
#include <strata/train/policy.h>

using namespace strata;
using autograd::GradientTape;
using mixed_precision::Policy;
using mixed_precision::PolicyScope;

TEST_CASE("Policy names, dtypes and the global policy", "[train][mixed_precision]") {
  CHECK(Policy().name() == "float32");
  const Policy mixed16("mixed_float16");
  CHECK(mixed16.compute_dtype() == kFloat16);
  CHECK(mixed16.variable_dtype() == kFloat32);
  CHECK(mixed16.is_mixed());
  const Policy mixedbf("mixed_bfloat16");
  CHECK(mixedbf.compute_dtype() == kBFloat16);
  CHECK(mixedbf.variable_dtype() == kFloat32);
  const Policy f64(kFloat64);
  CHECK(f64.name() == "float64");
  CHECK(f64.compute_dtype() == kFloat64);
  CHECK_FALSE(f64.is_mixed());
  CHECK(Policy("bfloat16").variable_dtype() == kBFloat16);
  CHECK(Policy("float64") == Policy(kFloat64));
  CHECK_THROWS_AS(Policy("mixed_float64"), Error);
  CHECK_THROWS_AS(Policy(""), Error);
  CHECK_THROWS_AS(Policy(kInt32), Error);

  CHECK(mixed_precision::global_policy().name() == "float32");
  {
    PolicyScope scope("mixed_bfloat16");
    CHECK(mixed_precision::global_policy() == mixedbf);
    {
      PolicyScope inner(kFloat64);
      CHECK(mixed_precision::global_policy().name() == "float64");
    }
    CHECK(mixed_precision::global_policy() == mixedbf);
  }
  CHECK(mixed_precision::global_policy().name() == "float32");
}

namespace {

// Runs `layer` on x, returns (output, gradients of sum(output * w) for its trainable
// variables and for x).
struct Run {
  Tensor y;
  std::vector<Tensor> var_grads;
  Tensor x_grad;
};
Run run(const nn::AnyModule& layer, const Tensor& x) {
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Run r;
  r.y = layer(x);
  Tensor w = cast(random::normal(r.y.shape(), 9), r.y.dtype());
  Tensor target = sum(cast(mul(r.y, w), kFloat32));
  r.var_grads = tape.gradient(target, layer.trainable_variables());
  r.x_grad = tape.gradient(target, x);
  return r;
}

// Largest |a - b| relative to max |b| (a, b as float64).
double rel_error(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double err = 0, scale = 1e-6;
  for (size_t i = 0; i < va.size(); ++i) {
    err = std::max(err, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return err / scale;
}

// Builds the same layer under `policy` and under float32 (same seed), and checks the
// mixed-precision casting rules against the float32 one.
void check_layer(const std::string& what, const std::function<nn::AnyModule()>& build, const Tensor& x,
                 const std::string& policy) {
  INFO(what << " under " << policy);
  const Policy p(policy);
  const double tol = p.compute_dtype() == kBFloat16 ? 4e-2 : 5e-3;
  nn::AnyModule mixed, ref;
  {
    PolicyScope scope(p);
    nn::set_global_seed(11);
    mixed = build();
  }
  nn::set_global_seed(11);
  ref = build();
  CHECK(mixed.dtype_policy() == p);
  for (const Variable& v : mixed.variables()) CHECK(v.dtype() == kFloat32);
  Run m = run(mixed, x), r = run(ref, x);
  CHECK(m.y.dtype() == p.compute_dtype());
  CHECK(r.y.dtype() == kFloat32);
  CHECK(rel_error(m.y, r.y) < tol);
  REQUIRE(m.var_grads.size() == r.var_grads.size());
  for (size_t i = 0; i < m.var_grads.size(); ++i) {
    INFO("variable " << i);
    CHECK(m.var_grads[i].dtype() == kFloat32);
    CHECK(rel_error(m.var_grads[i], r.var_grads[i]) < 2 * tol);
  }
  // The input gradient returns through the input cast, to the input's dtype.
  CHECK(m.x_grad.dtype() == x.dtype());
  CHECK(rel_error(m.x_grad, r.x_grad) < 2 * tol);
}

}  // namespace

TEST_CASE("Layers under mixed policies: float32 variables, compute-dtype outputs, float32 gradients",
          "[train][mixed_precision][layers]") {
  const Tensor x2 = random::normal({6, 5}, 1);
  const Tensor img = random::normal({2, 6, 6, 3}, 2);
  for (const std::string policy : {"mixed_bfloat16", "mixed_float16"}) {
    check_layer("Dense", [] { return nn::Dense(5, 4); }, x2, policy);
    check_layer("Conv2D", [] { return nn::Conv2D(3, 4, 3, {.padding = Padding::Same}); }, img, policy);
    check_layer("BatchNormalization", [] { return nn::BatchNormalization(5, {.momentum = 0.5}); }, x2, policy);
    check_layer("LayerNormalization", [] { return nn::LayerNormalization(5); }, x2, policy);
    check_layer("Sequential", [] {
      return nn::Sequential{nn::Conv2D(3, 4, 3), nn::ReLU(), nn::MaxPool2D(2), nn::Flatten(), nn::Dense(16, 3),
                            nn::Softmax()};
    }, img, policy);
  }
}

TEST_CASE("Mixed policies: per-layer policies and what stays float32", "[train][mixed_precision][layers]") {
  PolicyScope scope("mixed_bfloat16");
  const Tensor x = random::normal({4, 5}, 3);

  // A layer given a policy keeps it under any global policy.
  nn::Dense head(5, 3, {.dtype = "float32"});
  CHECK(head->dtype_policy().name() == "float32");
  CHECK(head(cast(x, kBFloat16)).dtype() == kFloat32);
  nn::Dense f64(5, 3, {.dtype = kFloat64});
  CHECK(f64->kernel().dtype() == kFloat64);
  CHECK(f64(x).dtype() == kFloat64);

  // Parameter-free layers keep their input's dtype unless given a policy.
  nn::ReLU relu;
  CHECK(relu->dtype_policy().name() == "mixed_bfloat16");
  CHECK(relu(x).dtype() == kFloat32);
  CHECK(relu(cast(x, kBFloat16)).dtype() == kBFloat16);
  nn::Softmax softmax;
  softmax.set_dtype_policy("float32");  // Keras's advice for an output softmax
  const Tensor probs = softmax(cast(x, kBFloat16));
  CHECK(probs.dtype() == kFloat32);
  // Softmax computes in float32 even on a bfloat16 input: its bfloat16 result is the
  // float32 softmax rounded once.
  nn::Softmax half_softmax;
  const Tensor xb = cast(x, kBFloat16);
  REQUIRE_ALLCLOSE(half_softmax(xb), cast(softmax(cast(xb, kFloat32)), kBFloat16), 0, 0);

  // A policy whose variable dtype differs from existing variables is refused.
  nn::Dense dense(5, 3);
  CHECK(dense->kernel().dtype() == kFloat32);
  CHECK_THROWS_AS(dense.set_dtype_policy(kFloat64), Error);
  dense.set_dtype_policy("mixed_float16");  // same variable dtype: allowed
  CHECK(dense(x).dtype() == kFloat16);

  // Embedding never casts its ids (float ids past 256 are not bfloat16-exact) and returns
  // its rows in the compute dtype.
  nn::Embedding emb(1000, 4);
  CHECK(emb->embeddings().dtype() == kFloat32);
  const Tensor ids = Tensor::from_vector<float>({999.f, 257.f}, {2});
  const Tensor rows = emb(ids);
  CHECK(rows.dtype() == kBFloat16);
  const Tensor table = emb->embeddings().value();
  REQUIRE_ALLCLOSE(rows, cast(stack({table.slice(0, 999, 1000).squeeze(0), table.slice(0, 257, 258).squeeze(0)}),
                              kBFloat16), 0, 0);
}

TEST_CASE("Mixed policies: BatchNormalization statistics and losses run in float32",
          "[train][mixed_precision][layers]") {
  PolicyScope scope("mixed_float16");
  // Values whose float16 sum of squares overflows (> 65504): float32 statistics survive.
  const Tensor x = random::normal({64, 3}, 4, 0.0, 60.0);
  const Tensor xh = cast(x, kFloat16);
  nn::BatchNormalization bn(3, {.momentum = 0.0});  // moving stats = the last batch's
  const Tensor y = bn(xh);
  CHECK(y.dtype() == kFloat16);
  CHECK(bn->moving_mean().dtype() == kFloat32);
  CHECK(bn->moving_variance().dtype() == kFloat32);
  const Tensor x32 = cast(xh, kFloat32);
  const Tensor mu = mean(x32, std::vector<int64_t>{0});
  const Tensor var = mean(square(sub(x32, mu)), std::vector<int64_t>{0});
  REQUIRE_ALLCLOSE(bn->moving_mean().value(), mu, 1e-5, 1e-4);
  REQUIRE_ALLCLOSE(bn->moving_variance().value(), var, 1e-5, 1e-3);
  CHECK(min(cast(is_finite(y), kFloat32)).item<double>() == 1.0);

  // Losses promote half predictions to float32; the gradient returns in the half dtype.
  const Tensor logits = cast(random::normal({4, 5}, 5), kFloat16);
  const Tensor labels = Tensor::from_vector<int64_t>({0, 4, 2, 1}, {4});
  GradientTape tape;
  tape.watch(logits);
  const Tensor loss = losses::sparse_categorical_crossentropy(labels, logits, true);
  CHECK(loss.dtype() == kFloat32);
  REQUIRE_ALLCLOSE(loss, losses::sparse_categorical_crossentropy(labels, cast(logits, kFloat32), true), 1e-6,
                   1e-6);
  CHECK(tape.gradient(sum(loss), logits).dtype() == kFloat16);
  CHECK(losses::mean_squared_error(cast(logits, kFloat32), logits).dtype() == kFloat32);
  CHECK(losses::categorical_crossentropy(one_hot(labels, 5), logits, true).dtype() == kFloat32);
  CHECK(losses::binary_crossentropy(ones({4, 5}), logits, true).dtype() == kFloat32);
  CHECK(losses::huber(zeros({4, 5}), logits).dtype() == kFloat32);
}
