// softmax, log_softmax, sparse_softmax_cross_entropy and layer_norm against float64
// references: every axis, large/inf/NaN logits, non-contiguous inputs, half dtypes, errors.
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::testing::identical;

namespace {

// Softmax along `axis` of a float64 copy, computed with the max subtracted.
Tensor reference_softmax(const Tensor& x, int64_t axis, bool log_space) {
  axis = normalize_axis(axis, x.ndim(), "ref");
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (d != axis) perm.push_back(d);
  }
  perm.push_back(axis);
  Tensor moved = x.permute(perm).contiguous();
  auto v = moved.to_vector<double>();
  const int64_t n = x.dim(axis);
  for (size_t r = 0; r + size_t(n) <= v.size(); r += size_t(n)) {
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, v[r + size_t(j)]);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(v[r + size_t(j)] - m);
    for (int64_t j = 0; j < n; ++j) {
      v[r + size_t(j)] = log_space ? v[r + size_t(j)] - m - std::log(s) : std::exp(v[r + size_t(j)] - m) / s;
    }
  }
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[size_t(perm[i])] = int64_t(i);
  return Tensor::from_vector(v, moved.shape(), kFloat64).permute(inverse).contiguous();
}

}  // namespace

TEST_CASE("nn: softmax and log_softmax along every axis", "[nn][softmax]") {
  Tensor x = testing::rand_tensor({3, 4, 5}, 101, -3, 3);
  for (int64_t axis : {0, 1, 2, -1, -2}) {
    for (bool log_space : {false, true}) {
      INFO("axis " << axis << " log " << log_space);
      Tensor y = log_space ? log_softmax(x, axis) : softmax(x, axis);
      CHECK(y.shape() == x.shape());
      CHECK(testing::allclose(y.cast(kFloat64), reference_softmax(x, axis, log_space), 1e-6, 1e-6));
      Tensor x64 = x.cast(kFloat64);
      Tensor y64 = log_space ? log_softmax(x64, axis) : softmax(x64, axis);
      CHECK(testing::allclose(y64, reference_softmax(x64, axis, log_space), 1e-13, 1e-13));
      for (const Tensor& v : testing::noncontiguous_variants(x)) {
        CHECK(identical(log_space ? log_softmax(v, axis) : softmax(v, axis), y));
      }
    }
  }
  // Rows sum to one.
  CHECK(testing::allclose(sum(softmax(x, 1), std::vector<int64_t>{1}), ones({3, 5}), 1e-6, 1e-6));
  // Rank 1, a single element, zero-size tensors.
  CHECK(softmax(tensor({5})).item<float>() == 1.0f);
  CHECK(log_softmax(tensor({5})).item<float>() == 0.0f);
  CHECK(softmax(zeros({0, 3})).shape() == Shape{0, 3});
  CHECK(softmax(zeros({3, 0}), 1).shape() == Shape{3, 0});
  // float16 / bfloat16 compute in float32.
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor h = x.cast(dt);
    CHECK(softmax(h).dtype() == dt);
    CHECK(testing::allclose(softmax(h).cast(kFloat32), softmax(h.cast(kFloat32)).cast(dt).cast(kFloat32), 1e-3, 1e-3));
  }
  REQUIRE_THROWS_WITH(softmax(Tensor::scalar(1)), Contains("softmax: expected rank >= 1, got a scalar"));
  REQUIRE_THROWS_WITH(softmax(x, 3), Contains("softmax: axis 3 is out of range for rank 3"));
  REQUIRE_THROWS_WITH(log_softmax(zeros({2}, kInt32)), Contains("log_softmax: expected a floating-point tensor, got int32"));
}

TEST_CASE("nn: softmax is stable for large logits and handles inf/NaN", "[nn][softmax][nan]") {
  Tensor big = tensor({1000, 1000, -1000});
  const auto s = softmax(big).to_vector<float>();
  CHECK(s[0] == Approx(0.5));
  CHECK(s[1] == Approx(0.5));
  CHECK(s[2] == 0.0f);
  CHECK(log_softmax(big).to_vector<float>()[0] == Approx(-std::log(2.0)));
  CHECK(log_softmax(big).to_vector<float>()[2] == Approx(-2000 - std::log(2.0)));
  // -inf logits get probability zero.
  const auto m = softmax(tensor({-INFINITY, 0, 0})).to_vector<float>();
  CHECK(m[0] == 0.0f);
  CHECK(m[1] == 0.5f);
  CHECK(log_softmax(tensor({-INFINITY, 0})).to_vector<float>()[0] == -INFINITY);
  // NaN anywhere in a row makes the whole row NaN (and leaves other rows alone).
  Tensor n = tensor({{1, NAN, 2}, {1, 2, 3}, {NAN, 0, 0}});
  const auto sn = softmax(n).to_vector<float>();
  for (int j : {0, 1, 2, 6, 7, 8}) CHECK(std::isnan(sn[size_t(j)]));
  CHECK(sn[5] == Approx(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0))));
  CHECK(std::isnan(log_softmax(n).to_vector<float>()[0]));
  // +inf: inf - inf is undefined, so the row is NaN (as in PyTorch and TensorFlow).
  CHECK(std::isnan(softmax(tensor({INFINITY, 0})).to_vector<float>()[0]));
}

TEST_CASE("nn: sparse_softmax_cross_entropy", "[nn][xent]") {
  Tensor logits = testing::rand_tensor({6, 5}, 102, -4, 4);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 4, 2, 2, 1, 3});
  Tensor loss = sparse_softmax_cross_entropy(logits, labels);
  CHECK(loss.shape() == Shape{6});
  CHECK(loss.dtype() == kFloat32);
  Tensor ref = reference_softmax(logits, 1, true);
  const auto rv = ref.to_vector<double>();
  const auto lv = loss.to_vector<float>();
  for (int i = 0; i < 6; ++i) CHECK(lv[size_t(i)] == Approx(-rv[size_t(i * 5 + labels.to_vector<int64_t>()[size_t(i)])]).epsilon(1e-6));
  CHECK(identical(sparse_softmax_cross_entropy(logits, labels.cast(kInt32)), loss));
  CHECK(identical(sparse_softmax_cross_entropy(testing::transposed_copy(logits), testing::strided_copy(labels)), loss));
  Tensor l64 = sparse_softmax_cross_entropy(logits.cast(kFloat64), labels);
  CHECK(l64.dtype() == kFloat64);
  CHECK(testing::allclose(l64, loss.cast(kFloat64), 1e-6, 1e-6));
  // Large logits do not overflow.
  Tensor big = tensor({{1000, 0}, {0, 1000}});
  Tensor lab = Tensor::from_vector(std::vector<int64_t>{0, 0});
  CHECK(sparse_softmax_cross_entropy(big, lab).to_vector<float>() == std::vector<float>{0, 1000});
  CHECK(sparse_softmax_cross_entropy(zeros({0, 3}), zeros({0}, kInt64)).shape() == Shape{0});
  CHECK(sparse_softmax_cross_entropy(logits.cast(kBFloat16), labels).dtype() == kBFloat16);

  REQUIRE_THROWS_WITH(sparse_softmax_cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 1, 5, 0, 0, 0})),
                      Contains("sparse_softmax_cross_entropy: label 5 at position 2 is out of range [0, 5)"));
  REQUIRE_THROWS_WITH(sparse_softmax_cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 1, -1, 0, 0, 0})),
                      Contains("label -1 at position 2 is out of range"));
  REQUIRE_THROWS_WITH(sparse_softmax_cross_entropy(logits, labels.slice(0, 0, 5)),
                      Contains("sparse_softmax_cross_entropy: labels shape [5] does not match logits [6,5] (expected [6])"));
  REQUIRE_THROWS_WITH(sparse_softmax_cross_entropy(logits.reshape({30}), labels),
                      Contains("sparse_softmax_cross_entropy: logits must be [N,K], got [30]"));
  REQUIRE_THROWS_WITH(sparse_softmax_cross_entropy(logits, labels.cast(kFloat32)),
                      Contains("sparse_softmax_cross_entropy: labels must be int32 or int64, got float32"));
}

TEST_CASE("nn: layer_norm over the last axis", "[nn][layer_norm]") {
  Tensor x = testing::rand_tensor({4, 3, 8}, 103, -2, 5);
  Tensor gamma = testing::rand_tensor({8}, 104, 0.5, 1.5);
  Tensor beta = testing::rand_tensor({8}, 105, -1, 1);
  Tensor y = layer_norm(x, gamma, beta, 1e-5);
  // Reference in float64.
  const auto xv = x.to_vector<double>(), gv = gamma.to_vector<double>(), bv = beta.to_vector<double>();
  std::vector<double> want(xv.size());
  for (size_t r = 0; r < xv.size(); r += 8) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < 8; ++j) mean += xv[r + j] / 8;
    for (size_t j = 0; j < 8; ++j) var += (xv[r + j] - mean) * (xv[r + j] - mean) / 8;
    for (size_t j = 0; j < 8; ++j) want[r + j] = (xv[r + j] - mean) / std::sqrt(var + 1e-5) * gv[j] + bv[j];
  }
  CHECK(testing::allclose(y.cast(kFloat64), Tensor::from_vector(want, x.shape(), kFloat64), 1e-5, 1e-5));
  for (const Tensor& v : testing::noncontiguous_variants(x)) {
    CHECK(identical(layer_norm(v, testing::strided_copy(gamma), beta, 1e-5), y));
  }
  // A constant row normalises to beta (variance 0, eps keeps it finite).
  Tensor c = layer_norm(full({2, 8}, 3.0), gamma, beta, 1e-5);
  CHECK(testing::allclose(c, beta.broadcast_to({2, 8}), 1e-6, 1e-6));
  CHECK(layer_norm(zeros({0, 8}), gamma, beta).shape() == Shape{0, 8});
  CHECK(layer_norm(x.cast(kFloat16), gamma.cast(kFloat16), beta.cast(kFloat16)).dtype() == kFloat16);
  REQUIRE_THROWS_WITH(layer_norm(x, zeros({7}), beta),
                      Contains("layer_norm: gamma [7] and beta [8] must both be [8] for input [4,3,8]"));
  REQUIRE_THROWS_WITH(layer_norm(x, gamma.cast(kFloat64), beta),
                      Contains("layer_norm: dtype mismatch: x float32, gamma float64, beta float32"));
  REQUIRE_THROWS_WITH(layer_norm(x, gamma, beta, -1), Contains("layer_norm: eps must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(layer_norm(x.cast(kInt32), gamma, beta), Contains("layer_norm: expected a floating-point tensor"));
}
