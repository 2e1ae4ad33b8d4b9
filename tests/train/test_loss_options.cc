// Loss option structs (designated initializers) give what the positional forms give.
#include <strata/train/losses.h>
#include "tests/test_util.h"

TEST_CASE("losses: option structs match the positional arguments") {
  using namespace strata;
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 2, 1});
  const Tensor logits = Tensor::from_vector(std::vector<float>{2, 1, 0.5f, 0.1f, 0.2f, 3, 1, 4, 0}, {3, 3});
  const Tensor one_hot = Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 0, 1, 0, 1, 0}, {3, 3});

  REQUIRE_ALLCLOSE(losses::sparse_categorical_crossentropy(labels, logits, {.from_logits = true}),
                   losses::sparse_categorical_crossentropy(labels, logits, true));
  REQUIRE_ALLCLOSE(losses::categorical_crossentropy(one_hot, logits, {.from_logits = true, .axis = -1}),
                   losses::categorical_crossentropy(one_hot, logits, true, -1));
  const Tensor targets = Tensor::from_vector(std::vector<float>{1, 0, 1}, {3, 1});
  const Tensor scores = Tensor::from_vector(std::vector<float>{0.3f, -1, 2}, {3, 1});
  REQUIRE_ALLCLOSE(losses::binary_crossentropy(targets, scores, {.from_logits = true}),
                   losses::binary_crossentropy(targets, scores, true));
  REQUIRE_THROWS_WITH(losses::binary_crossentropy(targets, scores, {.from_logits = true, .axis = 0}),
                      Catch::Contains("binary_crossentropy") && Catch::Contains("axis"));

  using losses::Reduction;
  losses::SparseCategoricalCrossentropy by_options({.from_logits = true, .reduction = Reduction::Sum});
  losses::SparseCategoricalCrossentropy positional(true, Reduction::Sum);
  REQUIRE(by_options.reduction() == Reduction::Sum);
  REQUIRE_ALLCLOSE(by_options(labels, logits), positional(labels, logits));
  REQUIRE_ALLCLOSE(losses::CategoricalCrossentropy({.from_logits = true})(one_hot, logits),
                   losses::CategoricalCrossentropy(true)(one_hot, logits));
  REQUIRE(losses::BinaryCrossentropy({.reduction = Reduction::None})(targets, scores).shape() == Shape{3});
  REQUIRE(losses::MeanSquaredError({.reduction = Reduction::Sum}).reduction() == Reduction::Sum);
  REQUIRE_THROWS_WITH(losses::MeanSquaredError({.from_logits = true}), Catch::Contains("from_logits"));
  REQUIRE_ALLCLOSE(losses::Huber({.delta = 0.5, .reduction = Reduction::None})(targets, scores),
                   losses::Huber(0.5, Reduction::None)(targets, scores));
}
