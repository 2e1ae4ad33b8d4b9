// The small training job shared by the MultiWorkerMirroredStrategy tests and their
// worker helper (helpers/mwms_helper.cc): an MLP trained with SGD on fixed data for a few
// steps at a fixed global batch, so that a multi-worker run and a single-process run
// can be compared weight for weight.
#pragma once

#include <random>
#include <vector>

#include <strata/autograd/autograd.h>
#include <strata/data/dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include <strata/train/losses.h>
#include <strata/train/nn/activations.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/sequential.h>
#include <strata/train/sgd.h>

namespace strata::distribute::testing {

constexpr int64_t kMwmsFeatures = 12, kMwmsHidden = 16, kMwmsClasses = 4, kMwmsExamples = 64, kMwmsGlobalBatch = 16;

// 64 examples in 4 global batches of 16 (the same on every worker: each keeps its part).
inline data::Dataset mwms_dataset() {
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(kMwmsExamples * kMwmsFeatures));
  for (auto& v : x) v = normal(gen);
  std::vector<int64_t> y(static_cast<size_t>(kMwmsExamples));
  for (int64_t i = 0; i < kMwmsExamples; ++i) {
    float s = 0;
    for (int64_t f = 0; f < 3; ++f) s += x[size_t(i * kMwmsFeatures + f)];
    y[size_t(i)] = s > 1 ? 3 : s > 0 ? 2 : s > -1 ? 1 : 0;
  }
  return data::Dataset::from_tensor_slices(std::vector<Tensor>{Tensor::from_vector(x, {kMwmsExamples, kMwmsFeatures}),
                                                               Tensor::from_vector(y, {kMwmsExamples})})
      .batch(kMwmsGlobalBatch, /*drop_remainder=*/true);
}

// Trains `epochs` epochs and returns the final weights (kernel, bias of both layers).
// init_seed seeds the initializers: workers given different seeds still start equal,
// because the strategy broadcasts worker 0's initial values. on_step(step) runs after
// each step (the helper uses it to kill a worker mid-training).
template <typename OnStep>
std::vector<Tensor> mwms_train(Strategy& strategy, int epochs, uint64_t init_seed, OnStep&& on_step) {
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = nn::Sequential{
        nn::Dense(kMwmsFeatures, kMwmsHidden, {.kernel_initializer = nn::glorot_uniform(init_seed)}), nn::ReLU(),
        nn::Dense(kMwmsHidden, kMwmsClasses, {.kernel_initializer = nn::glorot_uniform(init_seed + 1)})};
    opt = optim::SGD(0.1, {.momentum = 0.9});
  }
  const auto vars = model.trainable_variables();
  auto step = [&](const data::Batch& b) {
    autograd::GradientTape tape;
    Tensor logits = model(b[0]);
    Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
    Tensor loss = compute_average_loss(per_example, kMwmsGlobalBatch);
    auto grads = tape.gradient(loss, vars);
    opt.apply_gradients(grads, vars);
    return loss;
  };
  auto dist = strategy.experimental_distribute_dataset(mwms_dataset());
  int steps = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : dist) {
      auto losses = strategy.run(step, batch);
      strategy.reduce(ReduceOp::Sum, losses);
      on_step(++steps);
    }
  }
  std::vector<Tensor> out;
  for (const Variable& v : vars) out.push_back(v.value().clone());
  return out;
}

}  // namespace strata::distribute::testing
