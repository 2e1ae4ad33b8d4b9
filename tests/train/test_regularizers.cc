// Keras regularizers: L1 / L2 / L1L2 values, kernel_regularizer / bias_regularizer on Dense
// and Conv2D, Module::losses() over submodules, their gradients, and
// scale_regularization_loss dividing by the number of replicas as tf.nn does.
#include <cmath>

#include <strata/autograd/autograd.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include <strata/train/nn/nn.h>
#include <strata/train/regularizers.h>
#include "tests/test_util.h"

namespace strata_regularizers_test {

using namespace strata;

Tensor reg_weights() { return Tensor::from_vector(std::vector<float>{1, -2, 3, -4}, {2, 2}); }

nn::Initializer constant_init(const std::vector<float>& values) {
  return [values](const Shape& shape, DType dtype) { return cast(Tensor::from_vector(values, shape), dtype); };
}

}  // namespace strata_regularizers_test

TEST_CASE("regularizers: L1, L2 and L1L2 follow Keras's formulas and defaults") {
  using namespace strata;
  using namespace strata_regularizers_test;
  const Tensor w = reg_weights();  // sum |w| = 10, sum w^2 = 30
  REQUIRE(regularizers::L1(0.1)(w).item<double>() == Approx(1.0));
  REQUIRE(regularizers::L2(0.1)(w).item<double>() == Approx(3.0));
  REQUIRE(regularizers::L1L2(0.1, 0.01)(w).item<double>() == Approx(1.3));
  REQUIRE(regularizers::L1()(w).item<double>() == Approx(0.1));   // Keras: l1=0.01
  REQUIRE(regularizers::L2()(w).item<double>() == Approx(0.3));   // Keras: l2=0.01
  REQUIRE(regularizers::L1L2()(w).item<double>() == 0.0);         // Keras: both 0
  REQUIRE(regularizers::l1_l2()(w).item<double>() == Approx(0.4));  // tf.keras.regularizers.l1_l2: 0.01 each
  REQUIRE(regularizers::L2(0.1)(w).ndim() == 0);
  // float16 weights are penalised in float32 (no overflow of the sum of squares).
  REQUIRE(regularizers::L2(1.0)(full({100}, 100.0, kFloat16)).dtype() == kFloat32);
  REQUIRE(regularizers::L2(1.0)(full({100}, 100.0, kFloat16)).item<double>() == Approx(1e6));
  REQUIRE_THROWS_WITH(regularizers::L2(-1.0), Catch::Contains("regularizers::L2") && Catch::Contains("l2"));
  REQUIRE_THROWS_WITH(regularizers::L1(NAN), Catch::Contains("finite"));
  REQUIRE_THROWS_WITH(regularizers::L1(0.1)(ones({2}, kInt64)), Catch::Contains("floating"));
}

TEST_CASE("regularizers: Dense and Conv2D options register losses(), collected over submodules") {
  using namespace strata;
  using namespace strata_regularizers_test;
  nn::Dense dense(2, 2, {.kernel_initializer = constant_init({1, -2, 3, -4}),
                         .bias_initializer = constant_init({0.5f, -0.5f}),
                         .kernel_regularizer = regularizers::L2(0.1),
                         .bias_regularizer = regularizers::L1(1.0)});
  nn::Conv2D conv(1, 2, 1, {.kernel_regularizer = regularizers::L1(0.5)});
  nn::Dense plain(2, 2);
  nn::Sequential model{dense, nn::ReLU(), plain};
  REQUIRE(plain.losses().empty());
  std::vector<Tensor> losses = model.losses();
  REQUIRE(losses.size() == 2);
  REQUIRE(losses[0].item<double>() == Approx(3.0));  // 0.1 * 30
  REQUIRE(losses[1].item<double>() == Approx(1.0));  // |0.5| + |-0.5|
  REQUIRE(add_n(losses).item<double>() == Approx(4.0));
  // Recomputed from the current weights on every call, as Keras's `losses`.
  dense->kernel().assign(zeros({2, 2}));
  REQUIRE(model.losses()[0].item<double>() == 0.0);
  // Conv2D: 0.5 * sum |kernel|.
  REQUIRE(conv.losses().size() == 1);
  REQUIRE(conv.losses()[0].item<double>() ==
          Approx(0.5 * sum(abs(conv->kernel().value())).item<double>()));
  // A shared layer counts once.
  nn::Sequential twice{dense, dense};
  REQUIRE(twice.losses().size() == 2);
}

TEST_CASE("regularizers: the penalty's gradient reaches the weights through the tape") {
  using namespace strata;
  using namespace strata_regularizers_test;
  nn::Dense dense(2, 2, {.use_bias = false, .kernel_initializer = constant_init({1, -2, 3, -4}),
                         .kernel_regularizer = regularizers::L1L2(0.5, 0.25)});
  autograd::GradientTape tape;
  Tensor loss = add_n(dense.losses());
  Tensor grad = tape.gradient(loss, dense.trainable_variables())[0];
  // d/dw (0.5 |w| + 0.25 w^2) = 0.5 sign(w) + 0.5 w
  REQUIRE(grad.to_vector<float>() == std::vector<float>{1.0f, -1.5f, 2.0f, -2.5f});
}

TEST_CASE("regularizers: scale_regularization_loss divides the summed losses by the replica count") {
  using namespace strata;
  using namespace strata_regularizers_test;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  nn::Dense dense;
  {
    auto scope = strategy.scope();
    dense = nn::Dense(2, 2, {.kernel_initializer = constant_init({1, -2, 3, -4}),
                             .kernel_regularizer = regularizers::L2(0.1), .bias_regularizer = regularizers::L2(0.1)});
  }
  auto per_replica = strategy.run([&] { return distribute::scale_regularization_loss(add_n(dense.losses())); });
  // (3.0 + 0) / 2 on each replica; summed over the replicas: the full penalty once.
  REQUIRE(per_replica[0].item<double>() == Approx(1.5));
  REQUIRE(per_replica[1].item<double>() == Approx(1.5));
  REQUIRE(strategy.reduce(distribute::ReduceOp::Sum, per_replica).item<double>() == Approx(3.0));
}
