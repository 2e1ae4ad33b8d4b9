// Learning-rate schedules at their boundary steps (Keras semantics).
#include <cmath>
#include <numbers>

#include "tests/test_util.h"
#include <strata/train/schedules.h>

using namespace strata;
using namespace strata::optim;

TEST_CASE("Constant learning rate", "[train][schedules]") {
  LearningRate lr = 0.01;
  CHECK(lr.is_constant());
  CHECK(lr(0) == 0.01);
  CHECK(lr(1000000) == 0.01);
  CHECK_THROWS_AS(LearningRate(-0.1), Error);
  CHECK_THROWS_AS(LearningRate(NAN), Error);
  CHECK_THROWS_AS(lr(-1), Error);
}

TEST_CASE("PiecewiseConstantDecay: values switch after each boundary", "[train][schedules]") {
  PiecewiseConstantDecay s({100, 200}, {1.0, 0.5, 0.1});
  CHECK(s(0) == 1.0);
  CHECK(s(100) == 1.0);  // inclusive upper bound, as Keras
  CHECK(s(101) == 0.5);
  CHECK(s(200) == 0.5);
  CHECK(s(201) == 0.1);
  CHECK(s(1 << 30) == 0.1);
  CHECK_THROWS_AS(PiecewiseConstantDecay({100}, {1.0}), Error);
  CHECK_THROWS_AS(PiecewiseConstantDecay({200, 100}, {1, 2, 3}), Error);
  LearningRate lr = s;
  CHECK_FALSE(lr.is_constant());
  CHECK(lr(150) == 0.5);
}

TEST_CASE("PolynomialDecay: linear and power, clamped or cycling", "[train][schedules]") {
  PolynomialDecay linear(1.0, 100, 0.0);
  CHECK(linear(0) == 1.0);
  CHECK(linear(25) == Approx(0.75));
  CHECK(linear(100) == 0.0);
  CHECK(linear(150) == 0.0);  // held at the end value
  PolynomialDecay squared(0.1, 10, 0.01, 2.0);
  CHECK(squared(5) == Approx((0.1 - 0.01) * 0.25 + 0.01));
  CHECK(squared(10) == Approx(0.01));
  // Keras's default end rate.
  CHECK(PolynomialDecay(1.0, 10)(10) == Approx(0.0001));
  // cycle: the horizon becomes the next multiple of decay_steps.
  PolynomialDecay cyc(1.0, 10, 0.0, 1.0, true);
  CHECK(cyc(0) == 1.0);
  CHECK(cyc(10) == Approx(0.0));
  CHECK(cyc(15) == Approx(1.0 - 15.0 / 20.0));
  CHECK(cyc(20) == Approx(0.0));
  CHECK(cyc(21) == Approx(1.0 - 21.0 / 30.0));
  CHECK_THROWS_AS(PolynomialDecay(1.0, 0), Error);
}

TEST_CASE("CosineDecay: half a cosine down to alpha", "[train][schedules]") {
  CosineDecay s(2.0, 100, 0.1);
  CHECK(s(0) == Approx(2.0));
  CHECK(s(50) == Approx(2.0 * (0.9 * 0.5 + 0.1)));
  CHECK(s(25) == Approx(2.0 * (0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4)) + 0.1)));
  CHECK(s(100) == Approx(0.2));
  CHECK(s(1000) == Approx(0.2));
  CHECK_THROWS_AS(CosineDecay(1.0, -5), Error);
}

TEST_CASE("Warmup then polynomial decay, as BERT fine-tuning", "[train][schedules]") {
  // init 1e-4, 1000 training steps, 100 warmup steps, decay of the global step to 0.
  LearningRate lr = polynomial_decay_with_warmup(1e-4, 1000, 100);
  CHECK(lr(0) == 0.0);
  CHECK(lr(50) == Approx(0.5e-4));
  CHECK(lr(99) == Approx(0.99e-4));
  // From step 100 on, PolynomialDecay(1e-4, 1000, 0) of the global step.
  CHECK(lr(100) == Approx(1e-4 * 0.9));
  CHECK(lr(550) == Approx(1e-4 * 0.45));
  CHECK(lr(1000) == Approx(0.0).margin(1e-15));
  CHECK(lr(2000) == Approx(0.0).margin(1e-15));
  // A warmup over any schedule, with a power.
  WarmUp w(1.0, CosineDecay(1.0, 10), 4, 2.0);
  CHECK(w(2) == Approx(0.25));
  CHECK(w(4) == Approx(CosineDecay(1.0, 10)(4)));
  // No warmup at all.
  CHECK(WarmUp(1.0, LearningRate(0.5), 0)(0) == 0.5);
  CHECK_THROWS_AS(WarmUp(1.0, LearningRate(0.5), -1), Error);
  // A schedule returning a bad rate is caught when evaluated.
  LearningRate bad = [](int64_t step) { return step > 3 ? -1.0 : 1.0; };
  CHECK(bad(3) == 1.0);
  CHECK_THROWS_AS(bad(4), Error);
}
