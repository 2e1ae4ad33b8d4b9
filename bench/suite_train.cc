// train suite: steps/s of the MLP 784-512-512-10 (batch 128) and the MNIST CNN (batch 64)
// under Default, Mirrored(1..cores), Mirrored(2) reducing gradients only after backward
// (overlap_gradient_reduction off) and CentralStorage(2), each next to the Default
// strategy measured in the same run. (bench/compare/ runs the same workloads in PyTorch.)
#include "bench/bench.h"
#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/stream.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>

#include <thread>

namespace strata::bench {

nn::Sequential make_model(bool cnn) {
  if (!cnn) return nn::Sequential{nn::Dense(784, 512), nn::ReLU(), nn::Dense(512, 512), nn::ReLU(), nn::Dense(512, 10)};
  return nn::Sequential{nn::Conv2D(1, 32, 3), nn::ReLU(), nn::Conv2D(32, 64, 3), nn::ReLU(), nn::MaxPool2D(2),
                        nn::Flatten(), nn::Dense(12 * 12 * 64, 128), nn::ReLU(), nn::Dense(128, 10)};
}

double steps_per_second(distribute::Strategy& strategy, bool cnn, int64_t batch, int steps, int reps) {
  nn::Sequential model;
  optim::SGD opt(0.01);
  {
    auto scope = strategy.scope();
    model = make_model(cnn);
    opt = optim::SGD(0.01);
  }
  Shape xs = cnn ? Shape{batch, 28, 28, 1} : Shape{batch, 784};
  Tensor x = random::normal(xs, 1);
  Tensor y = cast(floor(random::uniform({batch}, 2, 0.0, 10.0)), kInt64);
  auto dist = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices({x, y}).batch(batch));
  auto it = dist.make_iterator();
  const auto per_replica_batch = *it.next();
  auto step = [&](const data::Batch& b) {
    autograd::GradientTape tape;
    Tensor loss = distribute::compute_average_loss(
        losses::sparse_categorical_crossentropy(b[1], model(b[0]), true), batch);
    opt.apply_gradients(tape.gradient(loss, model.trainable_variables()), model.trainable_variables());
    return loss;
  };
  Timing t = time_it([&] {
    for (int s = 0; s < steps; ++s) strategy.run(step, per_replica_batch);
    for (const Device& d : strategy.devices()) synchronize(d);  // asynchronous devices (CUDA)
  }, reps, 1, 1);
  return double(steps) / t.median_s;
}

std::vector<Result> train_suite(const Options& o) {
  std::vector<Result> out;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  for (bool cnn : {false, true}) {
    const int64_t batch = cnn ? 64 : 128;
    const int steps = o.quick ? 2 : (cnn ? 10 : 50);
    const int reps = o.quick ? 1 : 5;
    const std::string model = cnn ? "CNN b64" : "MLP 784-512-512-10 b128";
    const double base = steps_per_second(distribute::DefaultStrategy::instance(), cnn, batch, steps, reps);
    out.push_back({"train", model + " default", base, "steps/s", 0, "(itself)", base});
    for (int n = 1; n <= std::max(2, cores); ++n) {
      distribute::MirroredStrategy m(distribute::MirroredStrategy::cpu_devices(n));
      const double v = steps_per_second(m, cnn, batch, steps, reps);
      out.push_back({"train", model + " mirrored(" + std::to_string(n) + ")", v, "steps/s", 0, "default strategy", base});
    }
    {
      // The gradient reduction after backward, as before issue 18 (the overlap's effect).
      distribute::CommunicationOptions after_backward;
      after_backward.overlap_gradient_reduction = false;
      distribute::MirroredStrategy m(distribute::MirroredStrategy::cpu_devices(2), distribute::CrossDeviceOps::Default,
                                     after_backward);
      const double v = steps_per_second(m, cnn, batch, steps, reps);
      out.push_back({"train", model + " mirrored(2) no overlap", v, "steps/s", 0, "default strategy", base});
    }
    distribute::CentralStorageStrategy cs(distribute::MirroredStrategy::cpu_devices(2));
    const double v = steps_per_second(cs, cnn, batch, steps, reps);
    out.push_back({"train", model + " central_storage(2)", v, "steps/s", 0, "default strategy", base});
  }
  return out;
}

}  // namespace strata::bench
