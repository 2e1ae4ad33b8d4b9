// A small Orbit-style program against an installed strata (examples/consumer/CMakeLists.txt):
// a classifier on the built-in synthetic data under MirroredStrategy with two CPU
// replicas, trained through a Controller and evaluated; exits 1 unless it learned.
//
// It uses what a TensorFlow / Orbit user reaches for: StandardTrainer(dataset, options)
// with the Controller's global step, metric tensors as loop outputs, Keras regularizers
// with add_n and scale_regularization_loss, per-call `training`, loss options.
#include <cstdio>
#include <exception>

#include <strata/strata.h>

using namespace strata;

namespace {

constexpr int64_t kGlobalBatch = 64;

class Trainer final : public train::StandardTrainer {
 public:
  Trainer(distribute::DistributedDataset ds, nn::Sequential model, optim::Optimizer opt)
      : StandardTrainer(std::move(ds), {}), model_(std::move(model)), opt_(std::move(opt)) {}

 protected:
  void train_loop_begin() override { loss_.reset_state(); }
  void train_step(distribute::DistributedIterator& it) override {
    strategy().run(
        [&](const data::Batch& b) {
          autograd::GradientTape tape;
          Tensor logits = model_(b[0], {.training = true});
          Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, {.from_logits = true});
          Tensor loss = distribute::compute_average_loss(per_example, kGlobalBatch) +
                        distribute::scale_regularization_loss(add_n(model_.losses()));
          auto vars = model_.trainable_variables();
          opt_.apply_gradients(tape.gradient(loss, vars), vars);
          loss_.update_state(per_example);
        },
        next_batch(it));
  }
  train::Outputs train_loop_end() override { return {{"loss", loss_.result()}}; }

 private:
  nn::Sequential model_;
  optim::Optimizer opt_;
  metrics::Mean loss_{"loss"};
};

class Evaluator final : public train::StandardEvaluator {
 public:
  Evaluator(distribute::DistributedDataset ds, nn::Sequential model)
      : StandardEvaluator(std::move(ds)), model_(std::move(model)) {}

 protected:
  void eval_begin() override { accuracy_.reset_state(); }
  std::optional<train::Outputs> eval_step(distribute::DistributedIterator& it) override {
    auto batch = it.next();
    if (!batch) return std::nullopt;
    strategy().run([&](const data::Batch& b) { accuracy_.update_state(b[1], model_(b[0], {.training = false})); },
                   *batch);
    return train::Outputs{};
  }
  train::Outputs eval_end() override { return {{"accuracy", accuracy_.result()}}; }

 private:
  nn::Sequential model_;
  metrics::SparseCategoricalAccuracy accuracy_{"accuracy"};
};

}  // namespace

int main() try {
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  data::SyntheticOptions so{.num_examples = 2048, .num_classes = 4, .feature_shape = {16}, .seed = 3,
                            .separation = 1.0};
  auto all = data::make_synthetic_classification(so);
  auto scope = strategy.scope();  // variables (model, metrics, step) become mirrored / sync-on-read
  nn::Sequential model{nn::Dense(16, 32, {.kernel_regularizer = regularizers::L2(1e-4)}), nn::ReLU(),
                       nn::Dropout(0.1), nn::Dense(32, 4)};
  optim::Optimizer opt = optim::Adam(1e-2);
  Variable global_step = train::create_global_step();
  auto train_ds = data::Dataset::from_tensor_slices({all.features, all.labels})
                      .take(1536).shuffle(1536, 1).repeat().batch(kGlobalBatch);
  auto eval_ds = data::Dataset::from_tensor_slices({all.features, all.labels}).skip(1536).batch(kGlobalBatch);
  Trainer trainer(strategy.experimental_distribute_dataset(train_ds), model, opt);
  Evaluator evaluator(strategy.experimental_distribute_dataset(eval_ds), model);

  train::ControllerOptions co;
  co.trainer = &trainer;
  co.evaluator = &evaluator;
  co.global_step = global_step;
  co.steps_per_loop = 50;
  co.progress.verbosity = train::Verbosity::Quiet;
  train::Controller controller(co);
  const train::Outputs eval = controller.train_and_evaluate(/*train_steps=*/200);
  const double loss = controller.last_train_outputs().at("loss"), accuracy = eval.at("accuracy");
  std::printf("strata consumer: step %lld, train loss %.4f, eval accuracy %.4f (%d replicas)\n",
              static_cast<long long>(controller.global_step()), loss, accuracy, strategy.num_replicas_in_sync());
  if (controller.global_step() != 200 || !(accuracy >= 0.9)) {
    std::fprintf(stderr, "strata consumer: expected step 200 and accuracy >= 0.9\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "strata consumer: %s\n", e.what());
  return 1;
}
