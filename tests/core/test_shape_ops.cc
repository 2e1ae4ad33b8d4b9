// Shape and indexing ops: reshape/permute/slice/broadcast_to/expand_dims/squeeze/flatten
// (views), concat/stack/split/pad/gather/scatter_add/one_hot/embedding (copies), with
// non-contiguous inputs, zero-size pieces, every dtype and their error messages.
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::testing::identical;

TEST_CASE("shape: reshape infers one -1 extent and checks the element count", "[shape]") {
  Tensor x = arange(0, 24);
  CHECK(x.reshape({2, -1, 4}).shape() == Shape{2, 3, 4});
  CHECK(x.reshape({-1}).shape() == Shape{24});
  CHECK(x.reshape({4, 6}).to_vector<float>() == x.to_vector<float>());
  CHECK(reshape(x, {1, 24, 1}).shape() == Shape{1, 24, 1});
  REQUIRE_THROWS_WITH(x.reshape({5, 5}), Contains("reshape: cannot reshape [24] (24 elements) to [5,5] (25 elements)"));
  REQUIRE_THROWS_WITH(x.reshape({-1, -1}), Contains("reshape: more than one -1 in target shape [-1,-1]"));
  REQUIRE_THROWS_WITH(x.reshape({7, -1}), Contains("reshape: cannot reshape [24] (24 elements) to [7,-1]"));
  REQUIRE_THROWS_WITH(x.reshape({-2, -12}), Contains("reshape: negative extent in target shape [-2,-12]"));
  // A reshape of a transposed view reads the logical order.
  Tensor t = x.reshape({4, 6}).transpose();
  CHECK(t.reshape({24}).to_vector<float>() == t.contiguous().to_vector<float>());
  CHECK(identical(t.reshape({3, 8}), t.contiguous().reshape({3, 8})));
}

TEST_CASE("shape: permute/transpose", "[shape]") {
  Tensor x = arange(0, 24).reshape({2, 3, 4});
  Tensor p = permute(x, {1, 2, 0});
  CHECK(p.shape() == Shape{3, 4, 2});
  // p[i,j,k] = x[k,i,j]
  const auto pv = p.contiguous().to_vector<float>();
  const auto xv = x.to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 2; ++k) REQUIRE(pv[size_t((i * 4 + j) * 2 + k)] == xv[size_t((k * 3 + i) * 4 + j)]);
  CHECK(identical(transpose(x, {1, 2, 0}), p));
  CHECK(x.transpose().shape() == Shape{4, 3, 2});
  CHECK(identical(x.transpose().transpose(), x));
  CHECK(Tensor::scalar(1).transpose().ndim() == 0);
  REQUIRE_THROWS_WITH(permute(x, {0, 1}), Contains("transpose: permutation of length 2 for a tensor of rank 3 (shape [2,3,4])"));
  REQUIRE_THROWS_WITH(permute(x, {0, 1, 1}), Contains("transpose: axis 1 repeated in permutation"));
  REQUIRE_THROWS_WITH(permute(x, {0, 1, 3}), Contains("transpose: axis 3 is out of range for rank 3"));
}

TEST_CASE("shape: slice", "[shape]") {
  Tensor x = arange(0, 10);
  CHECK(x.slice(0, 2, 5).to_vector<float>() == std::vector<float>{2, 3, 4});
  CHECK(x.slice(0, -3, 10).to_vector<float>() == std::vector<float>{7, 8, 9});
  CHECK(x.slice(0, 1, -1, 3).to_vector<float>() == std::vector<float>{1, 4, 7});
  CHECK(x.slice(0, 0, 100, 4).to_vector<float>() == std::vector<float>{0, 4, 8});
  CHECK(x.slice(0, 8, 2).numel() == 0);
  CHECK(x.slice(0, -100, 2).to_vector<float>() == std::vector<float>{0, 1});
  // Slicing a slice composes offsets and strides.
  Tensor m = arange(0, 30).reshape({5, 6});
  Tensor s = m.slice(1, 1, 6, 2).slice(0, 1, 5, 2).slice(1, 1, 3);
  CHECK(s.shape() == Shape{2, 2});
  CHECK(s.to_vector<float>() == std::vector<float>{9, 11, 21, 23});
  REQUIRE_THROWS_WITH(x.slice(0, 0, 5, 0), Contains("slice: step must be positive, got 0"));
  REQUIRE_THROWS_WITH(x.slice(1, 0, 5), Contains("slice: axis 1 is out of range for rank 1"));
  REQUIRE_THROWS_WITH(Tensor::scalar(1).slice(0, 0, 1), Contains("slice: cannot slice a rank-0 tensor"));
}

TEST_CASE("shape: broadcast_to, expand_dims, squeeze, flatten", "[shape]") {
  Tensor x = arange(0, 3).reshape({3, 1});
  Tensor b = x.broadcast_to({2, 3, 4});
  CHECK(b.shape() == Shape{2, 3, 4});
  CHECK(b.to_vector<float>()[5] == 1);
  CHECK(b.to_vector<float>()[23] == 2);
  CHECK(x.broadcast_to({3, 1}).impl_ptr() == x.impl_ptr());
  CHECK(Tensor::scalar(5).broadcast_to({2, 2}).to_vector<float>() == std::vector<float>(4, 5));
  CHECK(x.broadcast_to({3, 0}).shape() == Shape{3, 0});
  REQUIRE_THROWS_WITH(x.broadcast_to({3}), Contains("broadcast_to: cannot broadcast [3,1] to lower rank [3]"));
  REQUIRE_THROWS_WITH(x.broadcast_to({2, 4}), Contains("broadcast_to: cannot broadcast [3,1] to [2,4]"));

  CHECK(expand_dims(x, 0).shape() == Shape{1, 3, 1});
  CHECK(expand_dims(x, 2).shape() == Shape{3, 1, 1});
  CHECK(expand_dims(x, -1).shape() == Shape{3, 1, 1});
  REQUIRE_THROWS_WITH(expand_dims(x, 3), Contains("expand_dims: axis 3 is out of range for rank 3"));
  CHECK(squeeze(x, 1).shape() == Shape{3});
  CHECK(squeeze(x, -1).shares_storage(x));
  REQUIRE_THROWS_WITH(squeeze(x, 0), Contains("squeeze: axis 0 of shape [3,1] has extent 3, expected 1"));

  Tensor f = zeros({2, 3, 4});
  CHECK(flatten(f).shape() == Shape{2, 12});
  CHECK(flatten(f, 0).shape() == Shape{24});
  CHECK(flatten(f, 2).shape() == Shape{2, 3, 4});
  CHECK(flatten(f, -2).shape() == Shape{2, 12});
  CHECK(flatten(zeros({0, 3, 4})).shape() == Shape{0, 12});
  CHECK(flatten(zeros({2, 0, 4})).shape() == Shape{2, 0});
  Tensor t = arange(0, 24).reshape({2, 3, 4}).permute({0, 2, 1});
  CHECK(identical(flatten(t), flatten(t.contiguous())));
}

TEST_CASE("shape: concat and stack", "[shape][concat]") {
  Tensor a = tensor({{1, 2}, {3, 4}});
  Tensor b = tensor({{5, 6}});
  CHECK(concat({a, b}, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(concat({a, a}, 1).to_vector<float>() == std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(concat({a, a}, -1).shape() == Shape{2, 4});
  CHECK(identical(concat({a}, 0), a));
  // Zero-size pieces contribute nothing.
  CHECK(identical(concat({zeros({0, 2}), a, zeros({0, 2})}, 0), a));
  CHECK(concat({zeros({0, 2}), zeros({0, 2})}, 0).shape() == Shape{0, 2});
  CHECK(concat({zeros({3, 0}), zeros({3, 0})}, 0).shape() == Shape{6, 0});
  // Every dtype, and non-contiguous pieces.
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    INFO(dtype_name(dt));
    Tensor x = arange(0, 12, 1, dt == kBool ? kInt32 : dt).reshape({3, 4}).cast(dt);
    Tensor y = arange(12, 24, 1, dt == kBool ? kInt32 : dt).reshape({3, 4}).cast(dt);
    for (int64_t axis : {0, 1}) {
      Tensor want = concat({x, y}, axis);
      CHECK(want.dtype() == dt);
      CHECK(identical(concat({testing::transposed_copy(x), testing::strided_copy(y)}, axis), want));
    }
  }
  Tensor big = testing::rand_tensor({3, 5, 7}, 61);
  auto parts = split(big, std::vector<int64_t>{2, 0, 3}, 1);
  CHECK(identical(concat(parts, 1), big));

  CHECK(stack({tensor({1, 2}), tensor({3, 4})}).to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(stack({tensor({1, 2}), tensor({3, 4})}, 1).to_vector<float>() == std::vector<float>{1, 3, 2, 4});
  CHECK(stack({tensor({1, 2}), tensor({3, 4})}, -1).shape() == Shape{2, 2});
  CHECK(stack({Tensor::scalar(1), Tensor::scalar(2)}).to_vector<float>() == std::vector<float>{1, 2});
  CHECK(stack({a.transpose(), a}, 0).to_vector<float>() == std::vector<float>{1, 3, 2, 4, 1, 2, 3, 4});

  REQUIRE_THROWS_WITH(concat({}, 0), Contains("concat: expected at least one tensor"));
  REQUIRE_THROWS_WITH(concat({a, tensor({1, 2, 3})}, 0), Contains("concat: shapes [2,2] and [3] differ outside axis 0"));
  REQUIRE_THROWS_WITH(concat({a, zeros({2, 3})}, 0), Contains("concat: shapes [2,2] and [2,3] differ outside axis 0"));
  REQUIRE_THROWS_WITH(concat({a, a.cast(kInt32)}, 0), Contains("concat: dtype mismatch: input 0 is float32, input 1 is int32"));
  REQUIRE_THROWS_WITH(concat({Tensor::scalar(1)}, 0), Contains("concat: cannot concatenate rank-0 tensors (use stack)"));
  REQUIRE_THROWS_WITH(concat({a, a}, 2), Contains("concat: axis 2 is out of range for rank 2"));
  REQUIRE_THROWS_WITH(stack({a, b}), Contains("stack: shape mismatch: input 0 is [2,2], input 1 is [1,2]"));
  REQUIRE_THROWS_WITH(stack({}), Contains("stack: expected at least one tensor"));
}

TEST_CASE("shape: split", "[shape]") {
  Tensor x = arange(0, 10);
  auto p = split(x, std::vector<int64_t>{3, 0, 7}, 0);
  REQUIRE(p.size() == 3);
  CHECK(p[0].to_vector<float>() == std::vector<float>{0, 1, 2});
  CHECK(p[1].shape() == Shape{0});
  CHECK(p[2].to_vector<float>() == std::vector<float>{3, 4, 5, 6, 7, 8, 9});
  CHECK(p[2].shares_storage(x));
  auto q = split(arange(0, 12).reshape({3, 4}), int64_t(2), -1);
  REQUIRE(q.size() == 2);
  CHECK(q[1].to_vector<float>() == std::vector<float>{2, 3, 6, 7, 10, 11});
  REQUIRE_THROWS_WITH(split(x, std::vector<int64_t>{3, 3}, 0),
                      Contains("split: sizes add up to 6 but axis 0 of shape [10] has 10"));
  REQUIRE_THROWS_WITH(split(x, int64_t(3), 0), Contains("split: axis 0 of shape [10] does not split evenly into 3"));
  REQUIRE_THROWS_WITH(split(x, int64_t(0), 0), Contains("does not split evenly into 0"));
  REQUIRE_THROWS_WITH(split(x, std::vector<int64_t>{-1, 11}, 0), Contains("split: negative size -1"));
}

TEST_CASE("shape: pad", "[shape]") {
  Tensor x = tensor({{1, 2}, {3, 4}});
  Tensor p = pad(x, {{1, 0}, {0, 2}}, -1);
  CHECK(p.shape() == Shape{3, 4});
  CHECK(p.to_vector<float>() == std::vector<float>{-1, -1, -1, -1, 1, 2, -1, -1, 3, 4, -1, -1});
  CHECK(identical(pad(x, {{0, 0}, {0, 0}}), x));
  CHECK(identical(pad(x.transpose(), {{1, 1}, {1, 1}}), pad(x.transpose().contiguous(), {{1, 1}, {1, 1}})));
  CHECK(identical(pad(testing::strided_copy(x), {{2, 0}, {0, 1}}, 3), pad(x, {{2, 0}, {0, 1}}, 3)));
  CHECK(pad(zeros({0, 2}), {{1, 1}, {0, 0}}, 7).to_vector<float>() == std::vector<float>{7, 7, 7, 7});
  CHECK(pad(Tensor::from_vector(std::vector<int32_t>{5}), {{2, 1}}).to_vector<int>() == std::vector<int>{0, 0, 5, 0});
  CHECK(pad(Tensor::scalar(3), {}).item<float>() == 3);
  REQUIRE_THROWS_WITH(pad(x, {{1, 1}}), Contains("pad: 1 (before, after) pairs for a tensor of rank 2"));
  REQUIRE_THROWS_WITH(pad(x, {{0, 0}, {-1, 0}}), Contains("pad: negative padding on axis 1"));
}

TEST_CASE("shape: gather along any axis with any index shape", "[shape][gather]") {
  Tensor x = arange(0, 12).reshape({3, 4});
  Tensor i = Tensor::from_vector(std::vector<int64_t>{2, 0, 2});
  CHECK(gather(x, i, 0).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(gather(x, i, 1).to_vector<float>() == std::vector<float>{2, 0, 2, 6, 4, 6, 10, 8, 10});
  CHECK(gather(x, i, -1).shape() == Shape{3, 3});
  Tensor i2 = Tensor::from_vector(std::vector<int32_t>{1, 0, 3, 3}, {2, 2});
  Tensor g = gather(x, i2, 1);
  CHECK(g.shape() == Shape{3, 2, 2});
  CHECK(g.to_vector<float>() == std::vector<float>{1, 0, 3, 3, 5, 4, 7, 7, 9, 8, 11, 11});
  CHECK(gather(x, Tensor::scalar(1, kInt64), 0).to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  CHECK(gather(x, Tensor::scalar(1, kInt64), 0).shape() == Shape{4});
  CHECK(gather(x, zeros({0}, kInt64), 0).shape() == Shape{0, 4});
  // Non-contiguous data and indices.
  CHECK(identical(gather(x.transpose(), i, 1), gather(x.transpose().contiguous(), i, 1)));
  CHECK(identical(gather(x, testing::strided_copy(i), 1), gather(x, i, 1)));
  for (DType dt : {kFloat64, kFloat16, kInt32, kBool}) {
    CHECK(gather(x.cast(dt), i, 0).dtype() == dt);
    CHECK(gather(x.cast(dt), i, 0).to_vector<double>() == gather(x, i, 0).cast(dt).to_vector<double>());
  }
  REQUIRE_THROWS_WITH(gather(x, Tensor::from_vector(std::vector<int64_t>{0, 3}), 0),
                      Contains("gather: index 3 is out of range for axis 0 of extent 3"));
  REQUIRE_THROWS_WITH(gather(x, Tensor::from_vector(std::vector<int64_t>{-1}), 1),
                      Contains("gather: index -1 is out of range for axis 1 of extent 4"));
  REQUIRE_THROWS_WITH(gather(x, tensor({0}), 0), Contains("gather: indices must be int32 or int64, got float32"));
  REQUIRE_THROWS_WITH(gather(Tensor::scalar(1), i, 0), Contains("gather: cannot gather from a rank-0 tensor"));
}

TEST_CASE("shape: scatter_add is the adjoint of gather and accumulates duplicates", "[shape][gather]") {
  Tensor u = tensor({{1, 2}, {3, 4}, {5, 6}});
  Tensor i = Tensor::from_vector(std::vector<int64_t>{2, 0, 2});
  Tensor s = scatter_add(u, i, {4, 2}, 0);
  CHECK(s.to_vector<float>() == std::vector<float>{3, 4, 0, 0, 6, 8, 0, 0});
  Tensor s1 = scatter_add(u.transpose(), i, {2, 3}, 1);
  CHECK(s1.to_vector<float>() == std::vector<float>{3, 0, 6, 4, 0, 8});
  CHECK(scatter_add(Tensor::from_vector(std::vector<int32_t>{1, 1, 1}), i, {3}).to_vector<int>() ==
        std::vector<int>{1, 0, 2});
  // <gather(x, idx), y> == <x, scatter_add(y, idx)> for random tensors along every axis.
  Tensor x = testing::rand_tensor({4, 5, 6}, 62, -1, 1, kFloat64);
  for (int64_t axis = 0; axis < 3; ++axis) {
    const int64_t n = x.dim(axis);
    Tensor idx = cast(floor(testing::rand_tensor({3, 2}, 63 + uint64_t(axis), 0, double(n), kFloat64)), kInt64);
    Tensor g = gather(x, idx, axis);
    Tensor y = testing::rand_tensor(g.shape(), 70 + uint64_t(axis), -1, 1, kFloat64);
    const double lhs = sum(g * y).item<double>();
    const double rhs = sum(x * scatter_add(y, idx, x.shape(), axis)).item<double>();
    CHECK(lhs == Approx(rhs).epsilon(1e-12));
  }
  REQUIRE_THROWS_WITH(scatter_add(u, i, {4, 3}, 0),
                      Contains("scatter_add: updates have shape [3,2], expected [3,3] for indices [3] into [4,3] along axis 0"));
  REQUIRE_THROWS_WITH(scatter_add(u, Tensor::from_vector(std::vector<int64_t>{0, 1, 4}), {4, 2}, 0),
                      Contains("scatter_add: index 4 is out of range for axis 0 of extent 4"));
  REQUIRE_THROWS_WITH(scatter_add(u, tensor({0, 1, 2}), {4, 2}), Contains("scatter_add: indices must be int32 or int64"));
  REQUIRE_THROWS_WITH(scatter_add(zeros({3}, kBool), i, {3}), Contains("scatter_add: expected numeric updates, got bool"));
}

TEST_CASE("shape: one_hot and embedding", "[shape]") {
  Tensor i = Tensor::from_vector(std::vector<int64_t>{0, 2, -1, 3});
  Tensor o = one_hot(i, 3);
  CHECK(o.shape() == Shape{4, 3});
  CHECK(o.dtype() == kFloat32);
  // Out-of-range indices give all-zero rows, as in TensorFlow.
  CHECK(o.to_vector<float>() == std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0});
  CHECK(one_hot(i.reshape({2, 2}), 3, kInt32).shape() == Shape{2, 2, 3});
  CHECK(one_hot(i, 3, kBool).to_vector<bool>()[0]);
  CHECK(one_hot(Tensor::scalar(1, kInt32), 2).to_vector<float>() == std::vector<float>{0, 1});
  CHECK(one_hot(testing::strided_copy(i), 3).to_vector<float>() == o.to_vector<float>());
  CHECK(one_hot(i, 0).shape() == Shape{4, 0});
  REQUIRE_THROWS_WITH(one_hot(i, -1), Contains("one_hot: depth must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(one_hot(tensor({1}), 2), Contains("one_hot: indices must be int32 or int64, got float32"));

  Tensor table = arange(0, 12).reshape({4, 3});
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{3, 0, 3, 1}, {2, 2});
  Tensor e = embedding(table, ids);
  CHECK(e.shape() == Shape{2, 2, 3});
  CHECK(e.to_vector<float>() == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5});
  REQUIRE_THROWS_WITH(embedding(zeros({4}), ids), Contains("embedding: table must be rank 2 [V,D], got [4]"));
  REQUIRE_THROWS_WITH(embedding(table, Tensor::from_vector(std::vector<int64_t>{4})),
                      Contains("gather: index 4 is out of range for axis 0 of extent 4"));
}
