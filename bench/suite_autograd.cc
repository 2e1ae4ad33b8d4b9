// autograd suite: eager per-op overhead without and with a watching tape, and the cost of
// backward relative to forward for an MLP.
#include <cstdlib>

#include <strata/autograd/autograd.h>
#include "bench/bench.h"
#include <strata/core/ops.h>
#include <strata/core/random.h>

namespace strata::bench {

std::vector<Result> autograd_suite(const Options& o) {
  std::vector<Result> out;
  const int inner = o.quick ? 2000 : 100000;
  const int reps = o.quick ? 3 : 9;
  Tensor a = tensor({1.0f}), b = tensor({2.0f});
  // Baseline: the irreducible work of an eager op — allocate a 1-element result, add.
  Timing raw = time_it([&] {
    float* p = static_cast<float*>(std::aligned_alloc(64, 64));
    p[0] = a.data<float>()[0] + b.data<float>()[0];
    asm volatile("" : : "r"(p) : "memory");
    std::free(p);
  }, reps, inner);
  Timing plain = time_it([&] { add(a, b); }, reps, inner);
  Timing taped = time_it([&] {
    autograd::GradientTape tape;
    tape.watch(a);
    for (int i = 0; i < 100; ++i) add(a, b);
  }, reps, inner / 100);
  out.push_back({"autograd", "eager add, 1 element, no tape", plain.median_s * 1e6, "us/op", plain.spread(),
                 "malloc + scalar add", raw.median_s * 1e6, true});
  out.push_back({"autograd", "eager add, 1 element, watching tape", taped.median_s * 1e6 / 100, "us/op",
                 taped.spread(), "same op without a tape", plain.median_s * 1e6, true});

  // MLP 784-512-512-10, batch 128: forward vs forward+backward.
  const int64_t batch = o.quick ? 16 : 128;
  Tensor x = random::normal({batch, 784}, 1);
  Tensor w1 = random::normal({784, 512}, 2, 0, 0.05), w2 = random::normal({512, 512}, 3, 0, 0.05),
         w3 = random::normal({512, 10}, 4, 0, 0.05);
  Tensor labels = cast(arange(0, double(batch)) * 0.0, kInt64);
  auto forward = [&] {
    Tensor h = relu(matmul(x, w1));
    h = relu(matmul(h, w2));
    return mean(sparse_softmax_cross_entropy(matmul(h, w3), labels));
  };
  Timing fwd = time_it([&] { forward(); }, reps, o.quick ? 2 : 20);
  Timing both = time_it([&] {
    autograd::GradientTape tape;
    for (const Tensor* w : {&w1, &w2, &w3}) tape.watch(*w);
    Tensor loss = forward();
    tape.gradient(loss, std::vector<Tensor>{w1, w2, w3});
  }, reps, o.quick ? 2 : 20);
  const double backward = std::max(both.median_s - fwd.median_s, 1e-12);
  out.push_back({"autograd", "MLP backward / forward time", backward / fwd.median_s, "x", both.spread(),
                 "2x (backward does twice the forward FLOPs)", 2.0, true});
  return out;
}

}  // namespace strata::bench
