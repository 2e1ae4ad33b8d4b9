// The small training job shared by the MultiWorkerMirroredStrategy tests and their
// worker helper (helpers/mwms_helper.cc): an MLP trained with SGD on fixed data for a few
// steps at a fixed global batch, so that a multi-worker run and a single-process run
// can be compared weight for weight.
#pragma once

#include <functional>
#include <vector>

#include <strata/distribute/strategy.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>
#include "tests/distribute/equivalence_helpers.h"

namespace strata::distribute::testing {

constexpr int64_t kMwmsFeatures = 12, kMwmsHidden = 16, kMwmsClasses = 4, kMwmsExamples = 64, kMwmsGlobalBatch = 16;

// 64 examples in 4 global batches of 16 (the same on every worker: each keeps its part).
inline data::Dataset mwms_dataset() {
  return classification_dataset(42, kMwmsExamples, kMwmsFeatures, kMwmsGlobalBatch, /*drop_remainder=*/true);
}

// Trains `epochs` epochs and returns the final weights (kernel, bias of both layers; and
// the normalization's gamma and beta with sync_batch_norm).
// init_seed seeds the initializers: workers given different seeds still start equal,
// because the strategy broadcasts worker 0's initial values. on_step(step) runs after
// each step (the helper uses it to kill a worker mid-training).
// sync_batch_norm: a synchronized BatchNormalization after the first layer (its
// statistics those of the global batch, over every replica of every worker).
inline std::vector<Tensor> mwms_train(Strategy& strategy, int epochs, uint64_t init_seed,
                                      const std::function<void(int)>& on_step, bool sync_batch_norm = false) {
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    if (sync_batch_norm) {
      nn::BatchNormalizationOptions bn;
      bn.synchronized = true;
      model = nn::Sequential{nn::Dense(kMwmsFeatures, kMwmsHidden, {.kernel_initializer = nn::glorot_uniform(init_seed)}),
                             nn::BatchNormalization(kMwmsHidden, bn), nn::ReLU(),
                             nn::Dense(kMwmsHidden, kMwmsClasses, {.kernel_initializer = nn::glorot_uniform(init_seed + 1)})};
    } else {
      model = classification_mlp(kMwmsFeatures, kMwmsHidden, kMwmsClasses, init_seed);
    }
    opt = optim::SGD(0.1, {.momentum = 0.9});
  }
  // The global batch is given: a worker's local parts are only its share of it.
  train_classifier(strategy, model, opt, mwms_dataset(), epochs, kMwmsGlobalBatch, on_step);
  return values_of(model.trainable_variables());
}

// Input pipeline p of 2 with unequal input: pipeline 0 holds 3 batches of 8 examples,
// pipeline 1 holds 2, so each epoch's last step has pipeline 0's batch only. Pipelines
// are workers' (InputReplicationMode::PerWorker, one replica each) or replicas'
// (PerReplica): the same training either way.
inline data::Dataset mwms_uneven_pipeline(const data::InputContext& ctx) {
  const int64_t p = ctx.input_pipeline_id();
  return classification_dataset(uint32_t(50 + p), p == 0 ? 24 : 16, kMwmsFeatures, 8);
}

// Trains `epochs` epochs over mwms_uneven_pipeline's input (a global batch of 16 given to
// the loss, so a replica without input adds nothing) and returns the final weights.
inline std::vector<Tensor> mwms_train_uneven(Strategy& strategy, InputReplicationMode mode, int epochs) {
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = classification_mlp(kMwmsFeatures, kMwmsHidden, kMwmsClasses, 1);
    opt = optim::SGD(0.1, {.momentum = 0.9});
  }
  const auto vars = model.trainable_variables();
  auto step = [&](const data::Batch& b) {
    autograd::GradientTape tape;
    Tensor logits = model(b[0]);
    Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
    auto grads = tape.gradient(compute_average_loss(per_example, 16), vars);
    opt.apply_gradients(grads, vars);
  };
  auto dist = strategy.distribute_datasets_from_function(mwms_uneven_pipeline,
                                                         {.experimental_replication_mode = mode});
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : dist) strategy.run(step, batch);
  }
  return values_of(vars);
}

}  // namespace strata::distribute::testing
