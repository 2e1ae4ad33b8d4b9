// DESIGN.md's north-star snippet ("What a user writes"), verbatim inside main(): it must
// keep compiling unchanged, so an API change that breaks it fails the build. It trains
// one epoch on MNIST from data/mnist (the IDX files; see README "Data"), under
// MirroredStrategy.
//
//   example_north_star        (run from a directory holding data/mnist)
#include <cstdio>
#include <exception>

// ---- the snippet, unchanged from DESIGN.md ----
#include <strata/strata.h>
using namespace strata;

int main() try {
auto strategy = distribute::MirroredStrategy();          // every GPU, else N CPU replicas
nn::Sequential model; optim::Adam opt(1e-3);
{
  auto scope = strategy.scope();                          // variables become mirrored
  model = nn::Sequential{nn::Flatten(), nn::Dense(784, 256), nn::ReLU(), nn::Dense(256, 10)};
  opt = optim::Adam(1e-3);
}
const int64_t global_batch = 64 * strategy.num_replicas_in_sync();
auto ds = data::mnist("data/mnist", data::Split::Train).shuffle(10000, /*seed=*/1)
              .batch(global_batch).prefetch(2);
auto dist_ds = strategy.experimental_distribute_dataset(ds);

auto step = [&](const data::Batch& b) {
  autograd::GradientTape tape;
  Tensor logits = model(b[0]);
  Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
  Tensor loss = distribute::compute_average_loss(per_example, global_batch);
  auto grads = tape.gradient(loss, model.trainable_variables());
  opt.apply_gradients(grads, model.trainable_variables());   // all-reduces across replicas
  return loss;
};
for (auto& batch : dist_ds) {
  auto per_replica = strategy.run(step, batch);
  Tensor loss = strategy.reduce(distribute::ReduceOp::Sum, per_replica);
}
// ---- end of the snippet ----
  std::printf("north star: one epoch on %lld replicas\n",
              static_cast<long long>(strategy.num_replicas_in_sync()));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_north_star: %s\n", e.what());
  return 1;
}
