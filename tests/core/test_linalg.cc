// matmul: 2-D, batched with broadcast batch dimensions, 1-D operands (NumPy rules),
// transpose flags, every strided layout, every dtype, zero-size shapes, errors, and
// agreement between one and two threads.
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::testing::identical;

namespace {

// NumPy matmul in float64 for operands of rank >= 2 (after optional transposes).
Tensor reference_matmul(Tensor a, Tensor b, bool ta = false, bool tb = false) {
  if (ta) a = a.transpose(-1, -2);
  if (tb) b = b.transpose(-1, -2);
  const int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  REQUIRE(b.dim(-2) == k);
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "reference");
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {m, k});
  sb.insert(sb.end(), {k, n});
  const auto va = a.broadcast_to(sa).to_vector<double>();
  const auto vb = b.broadcast_to(sb).to_vector<double>();
  const int64_t nb = numel_of(batch);
  std::vector<double> out(size_t(nb * m * n), 0.0);
  for (int64_t q = 0; q < nb; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += va[size_t((q * m + i) * k + p)] * vb[size_t((q * k + p) * n + j)];
        out[size_t((q * m + i) * n + j)] = s;
      }
  Shape so = batch;
  so.insert(so.end(), {m, n});
  return Tensor::from_vector(out, so, kFloat64);
}

}  // namespace

TEST_CASE("linalg: 2-D matmul against a float64 reference, all transpose flags", "[linalg]") {
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1}, {2, 3, 4}, {5, 1, 7}, {1, 9, 1},
                                                     {17, 33, 9}, {64, 64, 64}, {3, 130, 2}};
  for (auto [m, k, n] : sizes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (DType dt : {kFloat32, kFloat64}) {
          INFO(m << "x" << k << "x" << n << " ta=" << ta << " tb=" << tb << " " << dtype_name(dt));
          Tensor a = testing::rand_tensor(ta ? Shape{k, m} : Shape{m, k}, uint64_t(m * 100 + k), -1, 1, dt);
          Tensor b = testing::rand_tensor(tb ? Shape{n, k} : Shape{k, n}, uint64_t(n * 100 + k + 7), -1, 1, dt);
          Tensor c = matmul(a, b, ta, tb);
          CHECK(c.shape() == Shape{m, n});
          CHECK(c.dtype() == dt);
          const double tol = dt == kFloat32 ? 1e-5 : 1e-13;
          CHECK(testing::allclose(c.cast(kFloat64), reference_matmul(a, b, ta, tb), tol, tol));
        }
      }
    }
  }
}

TEST_CASE("linalg: non-contiguous operands equal their contiguous copies", "[linalg][strided]") {
  Tensor a = testing::rand_tensor({6, 5}, 81);
  Tensor b = testing::rand_tensor({5, 7}, 82);
  const Tensor want = matmul(a, b);
  std::vector<Tensor> as = testing::noncontiguous_variants(a);
  std::vector<Tensor> bs = testing::noncontiguous_variants(b);
  as.push_back(testing::rand_tensor({8, 6}, 89).slice(0, 0, 5).transpose());  // column-major, pitch 6
  as.push_back(testing::rand_tensor({6, 10}, 83).slice(1, 0, 5));  // rows with a wider pitch
  for (size_t i = 0; i < as.size(); ++i) {
    for (size_t j = 0; j < bs.size(); ++j) {
      INFO("variant " << i << "," << j);
      const Tensor& va = as[i];
      Tensor expected = matmul(va.contiguous(), b);
      CHECK(testing::allclose(matmul(va, bs[j]), expected, 1e-6, 1e-6));
      CHECK(testing::allclose(matmul(va, b), expected, 1e-6, 1e-6));
    }
  }
  CHECK(testing::allclose(matmul(as[0], bs[0]), want, 1e-6, 1e-6));
  // Transposed views with transpose flags: (b^T)^T a^T-style combinations.
  // X^T Y^T with X = a^T, Y = b^T (transposed views handed to BLAS as they are).
  CHECK(testing::allclose(matmul(a.transpose(), b.transpose(), true, true), want, 1e-6, 1e-6));
  CHECK(testing::allclose(matmul(b.transpose(), a.transpose()), want.transpose().contiguous(), 1e-6, 1e-6));
  CHECK(testing::allclose(matmul(a.transpose(), b, true, false), want, 1e-6, 1e-6));
  CHECK(testing::allclose(matmul(a, b.transpose(), false, true), want, 1e-6, 1e-6));
  // Broadcast (stride-0) operands.
  Tensor row = testing::rand_tensor({5}, 84);
  Tensor rows = row.broadcast_to({6, 5});
  CHECK(testing::allclose(matmul(rows, b), matmul(rows.contiguous(), b), 1e-6, 1e-6));
  Tensor col = testing::rand_tensor({5, 1}, 85).broadcast_to({5, 7});
  CHECK(testing::allclose(matmul(a, col), matmul(a, col.contiguous()), 1e-6, 1e-6));
  // Batched operands that are permuted views.
  Tensor x = testing::rand_tensor({4, 3, 5}, 86);
  Tensor y = testing::rand_tensor({5, 4, 2}, 87);
  Tensor yp = y.permute({1, 0, 2});  // [4,5,2], non-contiguous batch stride
  CHECK(testing::allclose(matmul(x, yp), matmul(x, yp.contiguous()), 1e-6, 1e-6));
  Tensor xp = testing::rand_tensor({3, 4, 5}, 88).permute({1, 0, 2});
  CHECK(testing::allclose(matmul(xp, yp), matmul(xp.contiguous(), yp.contiguous()), 1e-6, 1e-6));
}

TEST_CASE("linalg: batched matmul broadcasts batch dimensions", "[linalg][batched]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 4}, {6, 4, 2}}, {{6, 3, 4}, {4, 2}},
      {{1, 3, 4}, {7, 4, 2}}, {{2, 2, 1, 4}, {2, 1, 4, 3}}, {{0, 3, 4}, {4, 5}}, {{2, 0, 4}, {2, 4, 3}},
  };
  for (const auto& [sa, sb] : cases) {
    INFO(shape_str(sa) << " @ " << shape_str(sb));
    Tensor a = testing::rand_tensor(sa, 91);
    Tensor b = testing::rand_tensor(sb, 92);
    Tensor c = matmul(a, b);
    Tensor want = reference_matmul(a, b);
    CHECK(c.shape() == want.shape());
    CHECK(testing::allclose(c.cast(kFloat64), want, 1e-5, 1e-5));
    // Transpose flags apply to the last two axes only.
    Tensor at = a.transpose(-1, -2).contiguous();
    Tensor bt = b.transpose(-1, -2).contiguous();
    CHECK(testing::allclose(matmul(at, bt, true, true).cast(kFloat64), want, 1e-5, 1e-5));
  }
}

TEST_CASE("linalg: 1-D operands follow NumPy", "[linalg]") {
  Tensor v = tensor({1, 2, 3});
  Tensor m = tensor({{1, 0}, {0, 1}, {1, 1}});
  CHECK(matmul(v, m).shape() == Shape{2});
  CHECK(matmul(v, m).to_vector<float>() == std::vector<float>{4, 5});
  CHECK(matmul(m.transpose(), v).shape() == Shape{2});
  CHECK(matmul(m.transpose(), v).to_vector<float>() == std::vector<float>{4, 5});
  CHECK(matmul(v, v).ndim() == 0);
  CHECK(matmul(v, v).item<float>() == 14);
  Tensor batch = testing::rand_tensor({4, 2, 3}, 93);
  CHECK(matmul(batch, v).shape() == Shape{4, 2});
  CHECK(testing::allclose(matmul(batch, v), matmul(batch, v.reshape({3, 1})).squeeze(-1), 1e-6, 1e-6));
  CHECK(matmul(v, testing::rand_tensor({4, 3, 2}, 94)).shape() == Shape{4, 2});
  CHECK(identical(matmul(testing::strided_copy(v), m), matmul(v, m)));
}

TEST_CASE("linalg: zero-size dimensions", "[linalg]") {
  CHECK(matmul(zeros({0, 3}), zeros({3, 4})).shape() == Shape{0, 4});
  CHECK(matmul(zeros({2, 3}), zeros({3, 0})).shape() == Shape{2, 0});
  Tensor k0 = matmul(ones({2, 0}), ones({0, 3}));
  CHECK(k0.shape() == Shape{2, 3});
  CHECK(k0.to_vector<float>() == std::vector<float>(6, 0.0f));  // an empty sum is 0
  CHECK(matmul(ones({2, 0}, kInt32), ones({0, 2}, kInt32)).to_vector<int>() == std::vector<int>(4, 0));
  CHECK(matmul(zeros({0}), zeros({0})).item<float>() == 0.0f);
}

TEST_CASE("linalg: every dtype", "[linalg][dtype]") {
  Tensor a = tensor({{1, 2}, {3, 4}, {5, 6}});
  Tensor b = tensor({{1, -1, 2}, {0, 3, 1}});
  const std::vector<float> want = {1, 5, 4, 3, 9, 10, 5, 13, 16};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    INFO(dtype_name(dt));
    Tensor c = matmul(a.cast(dt), b.cast(dt));
    CHECK(c.dtype() == dt);
    CHECK(c.to_vector<float>() == want);
    CHECK(matmul(a.cast(dt).transpose(), a.cast(dt)).to_vector<float>() ==
          std::vector<float>{35, 44, 44, 56});
  }
  REQUIRE_THROWS_WITH(matmul(a, b.cast(kFloat64)), Contains("matmul: dtype mismatch: float32 @ float64"));
  REQUIRE_THROWS_WITH(matmul(a.cast(kInt32), b), Contains("matmul: dtype mismatch: int32 @ float32"));
  REQUIRE_THROWS_WITH(matmul(a.cast(kBool), b.cast(kBool)), Contains("matmul: bool operands are not supported"));
}

TEST_CASE("linalg: error messages name shapes", "[linalg][errors]") {
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}), zeros({4, 5})), Contains("matmul: inner dimensions differ: [2,3] @ [4,5]"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}), zeros({2, 5}), true, true),
                      Contains("matmul: inner dimensions differ: [2,3]^T @ [2,5]^T"));
  REQUIRE_THROWS_WITH(matmul(zeros({3}), zeros({4})), Contains("matmul: inner dimensions differ: [3] @ [4]"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})),
                      Contains("matmul: batch dimensions cannot be broadcast together: [2,2,3] @ [3,3,4]"));
  REQUIRE_THROWS_WITH(matmul(Tensor::scalar(1), zeros({2})), Contains("matmul: operands must have rank >= 1, got [] @ [2]"));
}

TEST_CASE("linalg: a large product is the same at 1 and 2 threads", "[linalg][threads]") {
  // Big enough for the pool to split them (rows of M, or batches) across two threads.
  Tensor a = testing::rand_tensor({600, 257}, 95);
  Tensor b = testing::rand_tensor({257, 301}, 96);
  Tensor bt = b.transpose().contiguous();
  Tensor one, two, one_t, two_t, one_b, two_b;
  Tensor ab = testing::rand_tensor({32, 64, 96}, 97), bb = testing::rand_tensor({96, 200}, 98);
  {
    testing::ThreadCountGuard g(1);
    one = matmul(a, b);
    one_t = matmul(a.transpose().contiguous(), bt, true, true);
    one_b = matmul(ab, bb);
  }
  {
    testing::ThreadCountGuard g(2);
    two = matmul(a, b);
    two_t = matmul(a.transpose().contiguous(), bt, true, true);
    two_b = matmul(ab, bb);
  }
  // Rows are split across threads, never the inner dimension, so the sums are identical.
  CHECK(identical(one, two));
  CHECK(identical(one_t, two_t));
  CHECK(identical(one_b, two_b));
  CHECK(testing::allclose(one.cast(kFloat64), reference_matmul(a, b), 1e-5, 1e-5));
  CHECK(testing::allclose(one_t, one, 1e-5, 1e-5));
}
