// add_n: tf.math.add_n, the elementwise sum of same-shaped tensors.
#include "tests/test_util.h"

TEST_CASE("add_n sums tensors of one shape and dtype, without broadcasting") {
  using namespace strata;
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::from_vector(std::vector<float>{10, 20, 30, 40}, {2, 2});
  const Tensor c = Tensor::from_vector(std::vector<float>{100, 200, 300, 400}, {2, 2});
  REQUIRE(add_n({a, b, c}).to_vector<float>() == std::vector<float>{111, 222, 333, 444});
  REQUIRE(add_n({a}).to_vector<float>() == a.to_vector<float>());
  // Scalars (regularization losses) are the common case.
  REQUIRE(add_n({Tensor::scalar(0.5f), Tensor::scalar(0.25f)}).item<float>() == 0.75f);

  REQUIRE_THROWS_WITH(add_n({}), Catch::Contains("add_n") && Catch::Contains("at least one"));
  REQUIRE_THROWS_WITH(add_n({a, Tensor::from_vector(std::vector<float>{1, 2}, {2})}),
                      Catch::Contains("add_n: input 1") && Catch::Contains("does not broadcast"));
  REQUIRE_THROWS_WITH(add_n({a, cast(b, kFloat64)}), Catch::Contains("float64"));
  REQUIRE_THROWS_WITH(add_n({a, Tensor()}), Catch::Contains("input 1 is undefined"));
}
