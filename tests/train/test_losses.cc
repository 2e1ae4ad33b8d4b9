// Losses against hand-computed values and the examples in Keras's documentation, with
// every reduction; gradients by finite differences.
#include <cmath>

#include <strata/autograd/autograd.h>
#include <strata/core/random.h>
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"
#include <strata/train/losses.h>

using namespace strata;
using losses::Reduction;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape, kFloat64);
}
Tensor f32(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

double scalar(const Tensor& t) { return t.item<double>(); }

void check_grad(const std::function<Tensor(const Tensor&)>& loss, const Tensor& pred) {
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return loss(in[0]); }, {pred});
  INFO(r.message);
  CHECK(r.ok);
}

}  // namespace

TEST_CASE("sparse_categorical_crossentropy by hand", "[train][losses]") {
  Tensor logits = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  Tensor labels = Tensor::from_vector<int64_t>({2, 0}, {2});
  Tensor got = losses::sparse_categorical_crossentropy(labels, logits, true);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  REQUIRE_ALLCLOSE(got, f64({lse - 3, std::log(3.0)}, {2}), 1e-12, 1e-12);
  // Labels shaped [N, 1] and float labels are accepted, as in Keras.
  Tensor got2 = losses::sparse_categorical_crossentropy(f64({2, 0}, {2, 1}), logits, true);
  REQUIRE_ALLCLOSE(got2, got, 1e-12, 1e-12);

  // From probabilities: clipped to [1e-7, 1 - 1e-7], then renormalised.
  Tensor probs = f64({0.1, 0.2, 0.7, 0.5, 0.5, 0.0}, {2, 3});
  Tensor p_loss = losses::sparse_categorical_crossentropy(
      Tensor::from_vector<int64_t>({2, 2}, {2}), probs);
  REQUIRE_ALLCLOSE(p_loss, f64({-std::log(0.7), -std::log(1e-7 / (1.0 + 1e-7))}, {2}), 1e-12, 1e-12);

  // A class axis other than the last, and leading batch axes.
  Tensor l3 = random::normal({2, 3, 4}, 1, 0.0, 1.0, kFloat64);
  Tensor ids = Tensor::from_vector<int64_t>({0, 3, 1, 2, 2, 0}, {2, 3});
  Tensor by_rows = losses::sparse_categorical_crossentropy(ids, l3, true);
  CHECK(by_rows.shape() == Shape{2, 3});
  Tensor moved = losses::sparse_categorical_crossentropy(
      ids.transpose(0, 1), permute(l3, {1, 2, 0}), true, /*axis=*/1);
  REQUIRE_ALLCLOSE(moved, by_rows.transpose(0, 1), 1e-12, 1e-12);

  check_grad([&](const Tensor& p) { return losses::sparse_categorical_crossentropy(ids, p, true); },
             l3);
  check_grad([&](const Tensor& p) { return losses::sparse_categorical_crossentropy(labels, p); },
             f64({0.2, 0.3, 0.5, 0.6, 0.3, 0.1}, {2, 3}));

  CHECK_THROWS_AS(losses::sparse_categorical_crossentropy(Tensor::from_vector<int64_t>({3, 0}, {2}),
                                                          logits, true),
                  Error);
  CHECK_THROWS_AS(losses::sparse_categorical_crossentropy(Tensor::from_vector<int64_t>({1}, {1}),
                                                          logits, true),
                  Error);
}

TEST_CASE("SparseCategoricalCrossentropy: Keras documentation values", "[train][losses]") {
  Tensor y_true = Tensor::from_vector<int64_t>({1, 2}, {2});
  Tensor y_pred = f32({0.05f, 0.95f, 0.f, 0.1f, 0.8f, 0.1f}, {2, 3});
  CHECK(scalar(losses::SparseCategoricalCrossentropy()(y_true, y_pred)) == Approx(1.177).epsilon(1e-3));
  CHECK(scalar(losses::SparseCategoricalCrossentropy()(y_true, y_pred, f32({0.3f, 0.7f}, {2}))) ==
        Approx(0.814).epsilon(1e-3));
  CHECK(scalar(losses::SparseCategoricalCrossentropy(false, Reduction::Sum)(y_true, y_pred)) ==
        Approx(2.354).epsilon(1e-3));
  Tensor none = losses::SparseCategoricalCrossentropy(false, Reduction::None)(y_true, y_pred);
  REQUIRE_ALLCLOSE(none, f32({0.0513f, 2.303f}, {2}), 1e-3, 1e-4);
}

TEST_CASE("A SumOverBatchSize loss object is refused under a distribution strategy as in Keras", "[train][losses]") {
  Tensor y_true = Tensor::from_vector<int64_t>({1, 2}, {2});
  Tensor y_pred = f32({0.05f, 0.95f, 0.f, 0.1f, 0.8f, 0.1f}, {2, 3});
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  const losses::SparseCategoricalCrossentropy mean_loss;
  {
    auto scope = strategy.scope();
    CHECK_THROWS_WITH(mean_loss(y_true, y_pred), Catch::Contains("SumOverBatchSize") &&
                                                     Catch::Contains("compute_average_loss"));
    // Each replica would divide by its own part of the batch.
    CHECK_THROWS_WITH(strategy.run([&] { return mean_loss(y_true, y_pred); }), Catch::Contains("SumOverBatchSize"));
    CHECK(scalar(losses::SparseCategoricalCrossentropy(false, Reduction::Sum)(y_true, y_pred)) ==
          Approx(2.354).epsilon(1e-3));
  }
  CHECK(scalar(mean_loss(y_true, y_pred)) == Approx(1.177).epsilon(1e-3));
}

TEST_CASE("CategoricalCrossentropy: hand and Keras documentation values", "[train][losses]") {
  Tensor y_true = f32({0, 1, 0, 0, 0, 1}, {2, 3});
  Tensor y_pred = f32({0.05f, 0.95f, 0.f, 0.1f, 0.8f, 0.1f}, {2, 3});
  CHECK(scalar(losses::CategoricalCrossentropy()(y_true, y_pred)) == Approx(1.177).epsilon(1e-3));
  CHECK(scalar(losses::CategoricalCrossentropy()(y_true, y_pred, f32({0.3f, 0.7f}, {2}))) ==
        Approx(0.814).epsilon(1e-3));
  CHECK(scalar(losses::CategoricalCrossentropy(false, Reduction::Sum)(y_true, y_pred)) ==
        Approx(2.354).epsilon(1e-3));
  Tensor none = losses::CategoricalCrossentropy(false, Reduction::None)(y_true, y_pred);
  REQUIRE_ALLCLOSE(none, f32({0.0513f, 2.303f}, {2}), 1e-3, 1e-4);

  // Unnormalised probabilities are renormalised; logits go through log_softmax.
  Tensor soft = f64({0.25, 0.75}, {1, 2});
  Tensor loss = losses::categorical_crossentropy(soft, f64({1, 3}, {1, 2}));
  REQUIRE_ALLCLOSE(loss, f64({-(0.25 * std::log(0.25) + 0.75 * std::log(0.75))}, {1}), 1e-12, 1e-12);
  Tensor logits = f64({0.5, -1, 2}, {1, 3});
  Tensor from_logits = losses::categorical_crossentropy(f64({0, 0, 1}, {1, 3}), logits, true);
  const double lse = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0));
  REQUIRE_ALLCLOSE(from_logits, f64({lse - 2}, {1}), 1e-12, 1e-12);
  Tensor targets = f64({0.2, 0.3, 0.5, 1, 0, 0}, {2, 3});
  check_grad([&](const Tensor& p) { return losses::categorical_crossentropy(targets, p, true); },
             random::normal({2, 3}, 3, 0.0, 1.0, kFloat64));
  check_grad([&](const Tensor& p) { return losses::categorical_crossentropy(targets, p); },
             f64({0.2, 0.3, 0.5, 0.6, 0.3, 0.1}, {2, 3}));
  CHECK_THROWS_AS(losses::categorical_crossentropy(f64({1, 0}, {1, 2}), logits, true), Error);
}

TEST_CASE("BinaryCrossentropy: Keras documentation values", "[train][losses]") {
  Tensor y_true = f32({0, 1, 0, 0}, {2, 2});
  Tensor y_pred = f32({0.6f, 0.4f, 0.4f, 0.6f}, {2, 2});
  CHECK(scalar(losses::BinaryCrossentropy()(y_true, y_pred)) == Approx(0.815).epsilon(1e-3));
  CHECK(scalar(losses::BinaryCrossentropy()(y_true, y_pred, f32({1, 0}, {2}))) ==
        Approx(0.458).epsilon(2e-3));
  CHECK(scalar(losses::BinaryCrossentropy(false, Reduction::Sum)(y_true, y_pred)) ==
        Approx(1.630).epsilon(1e-3));
  Tensor none = losses::BinaryCrossentropy(false, Reduction::None)(y_true, y_pred);
  REQUIRE_ALLCLOSE(none, f32({0.916f, 0.714f}, {2}), 1e-3, 1e-3);
  // From logits (Keras's example): 0.865.
  Tensor logit_loss = losses::BinaryCrossentropy(true)(f32({0, 1, 0, 0}, {4}),
                                                       f32({-18.6f, 0.51f, 2.94f, -12.8f}, {4}));
  CHECK(scalar(logit_loss) == Approx(0.865).epsilon(1e-3));
  // By hand: from logits equals the probability form of sigmoid(x) (away from clipping).
  Tensor x = f64({-1.5, 0.2, 3.0, -0.7}, {2, 2});
  Tensor z = f64({1, 0, 1, 0.25}, {2, 2});
  Tensor a = losses::binary_crossentropy(z, x, true);
  Tensor manual = neg(mean(add(mul(z, log(sigmoid(x))), mul(1.0 - z, log(1.0 - sigmoid(x)))),
                           std::vector<int64_t>{-1}));
  REQUIRE_ALLCLOSE(a, manual, 1e-12, 1e-12);
  check_grad([&](const Tensor& p) { return losses::binary_crossentropy(z, p, true); }, x);
  check_grad([&](const Tensor& p) { return losses::binary_crossentropy(z, p); },
             f64({0.2, 0.9, 0.5, 0.35}, {2, 2}));
}

TEST_CASE("MeanSquaredError and Huber: Keras documentation values", "[train][losses]") {
  Tensor y_true = f32({0, 1, 0, 0}, {2, 2});
  Tensor mse_pred = f32({1, 1, 1, 0}, {2, 2});
  CHECK(scalar(losses::MeanSquaredError()(y_true, mse_pred)) == Approx(0.5));
  CHECK(scalar(losses::MeanSquaredError()(y_true, mse_pred, f32({0.7f, 0.3f}, {2}))) == Approx(0.25));
  CHECK(scalar(losses::MeanSquaredError(Reduction::Sum)(y_true, mse_pred)) == Approx(1.0));
  Tensor mse_none = losses::MeanSquaredError(Reduction::None)(y_true, mse_pred);
  REQUIRE_ALLCLOSE(mse_none, f32({0.5f, 0.5f}, {2}));

  Tensor h_pred = f32({0.6f, 0.4f, 0.4f, 0.6f}, {2, 2});
  CHECK(scalar(losses::Huber()(y_true, h_pred)) == Approx(0.155).epsilon(1e-3));
  CHECK(scalar(losses::Huber()(y_true, h_pred, f32({1, 0}, {2}))) == Approx(0.09).epsilon(1e-3));
  CHECK(scalar(losses::Huber(1.0, Reduction::Sum)(y_true, h_pred)) == Approx(0.31).epsilon(1e-3));
  Tensor h_none = losses::Huber(1.0, Reduction::None)(y_true, h_pred);
  REQUIRE_ALLCLOSE(h_none, f32({0.18f, 0.13f}, {2}), 1e-3, 1e-3);
  // Linear branch: |e| = 3 > delta = 2 -> 2 * 3 - 0.5 * 4 = 4; quadratic: e = 1 -> 0.5.
  Tensor h2 = losses::huber(f64({0, 0}, {1, 2}), f64({3, -1}, {1, 2}), 2.0);
  REQUIRE_ALLCLOSE(h2, f64({(4 + 0.5) / 2}, {1}), 1e-12, 1e-12);
  Tensor t = random::normal({3, 4}, 2, 0.0, 1.0, kFloat64);
  check_grad([&](const Tensor& p) { return losses::mean_squared_error(t, p); },
             random::normal({3, 4}, 3, 0.0, 1.0, kFloat64));
  check_grad([&](const Tensor& p) { return losses::huber(t, p, 0.5); },
             random::normal({3, 4}, 4, 0.0, 1.0, kFloat64));
  CHECK_THROWS_AS(losses::huber(t, t, 0.0), Error);
  CHECK_THROWS_AS(losses::mean_squared_error(t, random::normal({4, 3}, 1, 0.0, 1.0, kFloat64)), Error);
}

TEST_CASE("Reductions: NONE, SUM, SUM_OVER_BATCH_SIZE with weights", "[train][losses]") {
  Tensor per = f64({1, 2, 3, 4}, {4});
  Tensor w = f64({1, 0, 0.5, 2}, {4});
  REQUIRE_ALLCLOSE(losses::compute_weighted_loss(per, w, Reduction::None), f64({1, 0, 1.5, 8}, {4}));
  CHECK(scalar(losses::compute_weighted_loss(per, w, Reduction::Sum)) == Approx(10.5));
  // Divides by the number of elements, not by the sum of the weights (Keras).
  CHECK(scalar(losses::compute_weighted_loss(per, w, Reduction::SumOverBatchSize)) == Approx(10.5 / 4));
  CHECK(scalar(losses::compute_weighted_loss(per, Tensor(), Reduction::SumOverBatchSize)) ==
        Approx(2.5));
  // Weights [N, 1] against losses [N]; a scalar weight broadcasts.
  CHECK(scalar(losses::compute_weighted_loss(per, w.reshape({4, 1}), Reduction::Sum)) == Approx(10.5));
  CHECK(scalar(losses::compute_weighted_loss(per, f64({2}, {}), Reduction::Sum)) == Approx(20));
  // An empty batch reduces to 0.
  CHECK(scalar(losses::compute_weighted_loss(zeros({0}, kFloat64), Tensor(),
                                             Reduction::SumOverBatchSize)) == 0.0);
  CHECK_THROWS_AS(losses::compute_weighted_loss(per, f64({1, 2}, {2}), Reduction::Sum), Error);
  CHECK(std::string(losses::reduction_name(Reduction::SumOverBatchSize)) == "sum_over_batch_size");
}
