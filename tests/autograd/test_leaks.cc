// Long tape + gradient loops keep the CPU allocator's live bytes flat: a tape frees what
// it saved once gradient() ran (or when it dies), and nothing accumulates across steps.
#include <strata/core/allocator.h>
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;
using strata::testing::rand64;

namespace {

// One SGD step of a 2-layer MLP with softmax cross-entropy on fixed data.
double train_step(const Variable& w1, const Variable& b1, const Variable& w2, const Tensor& x,
                  const Tensor& labels) {
  GradientTape tape;
  Tensor h = relu(matmul(x, w1.read()) + b1.read());
  Tensor logits = matmul(h, w2.read());
  Tensor loss = mean(sparse_softmax_cross_entropy(logits, labels));
  std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable>{w1, b1, w2});
  w1.assign_sub(g[0] * 0.05f);
  b1.assign_sub(g[1] * 0.05f);
  w2.assign_sub(g[2] * 0.05f);
  return loss.item<double>();
}

}  // namespace

TEST_CASE("leaks: 10,000 tape + gradient steps keep live bytes flat", "[leaks]") {
  Variable w1(random::normal({4, 16}, 1, 0.0, 0.5), strata::testing::var_options("w1"));
  Variable b1(zeros({16}), strata::testing::var_options("b1"));
  Variable w2(random::normal({16, 3}, 2, 0.0, 0.5), strata::testing::var_options("w2"));
  Tensor x = random::normal({8, 4}, 3);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1});
  double first_loss = 0, last_loss = 0;
  int64_t live_at_100 = 0;
  for (int step = 1; step <= 10000; ++step) {
    const double loss = train_step(w1, b1, w2, x, labels);
    if (step == 1) first_loss = loss;
    if (step == 100) live_at_100 = cpu_allocator_stats().live_bytes;
    last_loss = loss;
  }
  const int64_t live_at_10000 = cpu_allocator_stats().live_bytes;
  INFO("live bytes after step 100: " << live_at_100 << ", after step 10000: " << live_at_10000);
  REQUIRE(live_at_10000 == live_at_100);
  REQUIRE(last_loss < first_loss);  // the steps really trained
}

TEST_CASE("leaks: persistent tapes, nested tapes and custom gradients free their memory", "[leaks]") {
  Tensor x = rand64({16}, 5);
  auto loop = [&](int steps) {
    for (int i = 0; i < steps; ++i) {
      GradientTape outer(/*persistent=*/true);
      outer.watch(x);
      Tensor first;
      {
        GradientTape inner;
        inner.watch(x);
        Tensor y = custom_gradient({x}, [](const std::vector<Tensor>& xs) {
          Tensor x0 = xs[0];
          return CustomResult{tanh(x0), [x0](const Tensor& g) {
                                return std::vector<Tensor>{g * (1.0 - square(tanh(x0)))};
                              }};
        });
        first = inner.gradient(sum(y * y), x);
      }
      Tensor second = outer.gradient(sum(first), x);
      Tensor again = outer.gradient(sum(first * first), x);
      outer.reset();
      REQUIRE(outer.num_recorded_ops() == 0);
    }
  };
  loop(50);
  const int64_t before = cpu_allocator_stats().live_bytes;
  loop(1000);
  REQUIRE(cpu_allocator_stats().live_bytes == before);
}

TEST_CASE("leaks: a tape destroyed without gradient() frees what it saved", "[leaks]") {
  Tensor x = rand64({64, 64}, 6);
  const int64_t before = cpu_allocator_stats().live_bytes;
  {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    Tensor y = exp(tanh(matmul(x, x)));  // saves inputs and outputs
    REQUIRE(cpu_allocator_stats().live_bytes > before);
  }
  REQUIRE(cpu_allocator_stats().live_bytes == before);
}

TEST_CASE("leaks: a tape keeps only the tensors its gradients need", "[leaks]") {
  // add needs neither input nor output for its gradient: a large temporary consumed by an
  // add under a tape is freed as soon as the caller drops it.
  Tensor x = rand64({256, 256}, 7);
  GradientTape tape;
  tape.watch(x);
  const int64_t before = cpu_allocator_stats().live_bytes;
  Tensor y;
  {
    Tensor big = rand64({256, 256}, 8);
    y = x + big;
  }
  REQUIRE(cpu_allocator_stats().live_bytes - before == int64_t(y.nbytes()));
  // exp keeps its output (the gradient is g * exp(x)), which y's caller also holds.
  Tensor e = exp(y);
  const int64_t with_e = cpu_allocator_stats().live_bytes;
  y = Tensor();
  e = Tensor();
  REQUIRE(cpu_allocator_stats().live_bytes == with_e - int64_t(x.nbytes()));  // y freed, e kept
  Tensor g = tape.gradient(sum(exp(x) * 0.0 + 1.0), x);
  REQUIRE(g.defined());
}
