// strata's half of the trajectory cross-check against TensorFlow
// (bench/compare/tf_trajectory.py runs both halves and compares them).
//
//   strata-compare-trajectory --init INIT.safetensors --batches BATCHES.safetensors
//       --optimizer sgd|adam --learning-rate LR [--epsilon E] [--strategy mirrored|default]
//       [--replicas 2] --out OUT.safetensors
//
// INIT holds an MLP's weights, "layer<i>/kernel" [in, out] and "layer<i>/bias" [out] for
// i = 0..L-1 (float32; ReLU between layers, logits out). BATCHES holds "x" [steps, global
// batch, features] (float32) and "y" [steps, global batch] (int64 class ids). The program
// trains the MLP on those batches in order, one step per batch, with the seeds' custom
// loop: strategy.run of a step that computes the per-example sparse categorical
// cross-entropy from logits, compute_average_loss by the global batch, tape.gradient and
// apply_gradients (which sums the replicas' gradients), then strategy.reduce(SUM) of the
// replicas' losses. Adam uses Keras's epsilon placement (optim::AdamOptions::keras_epsilon;
// --pytorch-epsilon: the default placement, a control that TensorFlow must disagree with).
// OUT receives "loss" [steps] (float32, each step's reduced loss before its update) and
// the final weights under INIT's names.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <strata/strata.h>
#include <strata/train/checkpoint_file.h>

using namespace strata;

namespace {

struct MlpWeights {
  std::vector<Tensor> kernels, biases;
};

MlpWeights read_mlp(const train::SafetensorsContents& init, const std::string& file) {
  MlpWeights w;
  for (size_t i = 0;; ++i) {
    const std::string k = "layer" + std::to_string(i) + "/kernel", b = "layer" + std::to_string(i) + "/bias";
    const auto kit = init.tensors.find(k), bit = init.tensors.find(b);
    if (kit == init.tensors.end()) break;
    STRATA_CHECK(bit != init.tensors.end(), file, ": ", k, " has no ", b);
    STRATA_CHECK(kit->second.ndim() == 2 && bit->second.ndim() == 1 && bit->second.dim(0) == kit->second.dim(1) &&
                     (i == 0 || kit->second.dim(0) == w.kernels.back().dim(1)),
                 file, ": layer ", i, " has kernel ", shape_str(kit->second.shape()), " and bias ",
                 shape_str(bit->second.shape()), "; expected [in, out] and [out] chaining from the previous layer");
    STRATA_CHECK(kit->second.dtype() == kFloat32 && bit->second.dtype() == kFloat32, file, ": layer ", i,
                 " must be float32");
    w.kernels.push_back(kit->second);
    w.biases.push_back(bit->second);
  }
  STRATA_CHECK(!w.kernels.empty(), file, ": no layer0/kernel");
  STRATA_CHECK(w.kernels.size() * 2 == init.tensors.size(), file, ": holds tensors other than layer<i>/kernel|bias");
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata's half of bench/compare/tf_trajectory.py: train an MLP from given weights on given batches"};
  std::string init_path, batches_path, out_path, optimizer_name = "sgd", strategy_name = "mirrored";
  double learning_rate = 0.1, epsilon = 1e-7;
  int replicas = 2;
  bool pytorch_epsilon = false;
  app.add_option("--init", init_path, "initial weights (safetensors)")->required();
  app.add_option("--batches", batches_path, "x [steps, batch, features], y [steps, batch] (safetensors)")->required();
  app.add_option("--out", out_path, "per-step losses and final weights (safetensors)")->required();
  app.add_option("--optimizer", optimizer_name, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--learning-rate", learning_rate)->check(CLI::PositiveNumber);
  app.add_option("--epsilon", epsilon, "Adam's epsilon, Keras's placement")->check(CLI::NonNegativeNumber);
  app.add_flag("--pytorch-epsilon", pytorch_epsilon,
               "Adam with PyTorch's epsilon placement instead (a control: TensorFlow then disagrees)");
  app.add_option("--strategy", strategy_name)->check(CLI::IsMember({"mirrored", "default"}));
  app.add_option("--replicas", replicas, "mirrored: replicas on logical CPU devices")->check(CLI::Range(1, 16));
  CLI11_PARSE(app, argc, argv);

  try {
    const train::SafetensorsContents init = train::read_safetensors(init_path);
    const MlpWeights weights = read_mlp(init, init_path);
    const train::SafetensorsContents batches = train::read_safetensors(batches_path);
    const auto xit = batches.tensors.find("x"), yit = batches.tensors.find("y");
    STRATA_CHECK(xit != batches.tensors.end() && yit != batches.tensors.end(), batches_path, ": needs x and y");
    const Tensor& x = xit->second;
    const Tensor& y = yit->second;
    STRATA_CHECK(x.ndim() == 3 && y.ndim() == 2 && x.dim(0) == y.dim(0) && x.dim(1) == y.dim(1) &&
                     x.dim(2) == weights.kernels.front().dim(0) && x.dtype() == kFloat32,
                 batches_path, ": expected float32 x [steps, batch, ", weights.kernels.front().dim(0),
                 "] and y [steps, batch], got x ", shape_str(x.shape()), " ", x.dtype(), " and y ", shape_str(y.shape()));
    const int64_t steps = x.dim(0), global_batch = x.dim(1);

    distribute::StrategyOptions so;
    if (strategy_name == "mirrored") so.replicas = replicas;
    std::unique_ptr<distribute::Strategy> strategy = distribute::make_strategy(strategy_name, so);

    nn::Sequential model;
    optim::Optimizer optimizer;
    {
      auto scope = strategy->scope();
      for (size_t i = 0; i < weights.kernels.size(); ++i) {
        if (i > 0) model.add(nn::ReLU());
        model.add(nn::Dense(weights.kernels[i].dim(0), weights.kernels[i].dim(1)));
      }
      optimizer = optimizer_name == "sgd"
                      ? optim::Optimizer(optim::SGD(learning_rate))
                      : optim::Optimizer(optim::Adam(learning_rate, {.epsilon = epsilon, .keras_epsilon = !pytorch_epsilon}));
    }
    const std::vector<Variable> variables = model.trainable_variables();
    for (size_t i = 0; i < weights.kernels.size(); ++i) {
      variables[2 * i].assign(weights.kernels[i]);
      variables[2 * i + 1].assign(weights.biases[i]);
    }

    // One global batch per step, in the file's order; the strategy splits each across the
    // replicas as TensorFlow's distributed dataset does (first rows to replica 0).
    const data::Dataset ds =
        data::Dataset::from_tensor_slices({x.reshape({steps * global_batch, x.dim(2)}), y.reshape({steps * global_batch})})
            .batch(global_batch);
    std::vector<float> losses;
    for (auto& batch : strategy->experimental_distribute_dataset(ds)) {
      auto per_replica = strategy->run(
          [&](const data::Batch& b) {
            autograd::GradientTape tape;
            Tensor logits = model(b[0]);
            Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
            Tensor loss = distribute::compute_average_loss(per_example, global_batch);
            optimizer.apply_gradients(tape.gradient(loss, variables), variables);
            return loss;
          },
          batch);
      losses.push_back(strategy->reduce(distribute::ReduceOp::Sum, per_replica).item<float>());
    }
    STRATA_CHECK(int64_t(losses.size()) == steps, "ran ", losses.size(), " steps, expected ", steps);

    std::map<std::string, Tensor> out{{"loss", Tensor::from_vector(losses)}};
    for (size_t i = 0; i < weights.kernels.size(); ++i) {
      out["layer" + std::to_string(i) + "/kernel"] = variables[2 * i].value();
      out["layer" + std::to_string(i) + "/bias"] = variables[2 * i + 1].value();
    }
    train::write_safetensors(out_path, out, {{"strategy", strategy->name()}, {"optimizer", optimizer_name}});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-compare-trajectory: %s\n", e.what());
    return 1;
  }
}
