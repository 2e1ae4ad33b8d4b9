// The checkpoint state file decides "latest" (a stray ckpt-999999999999999999 does not win
// over newer checkpoints), a corrupt latest checkpoint is refused naming the newest
// intact one, and resuming with another optimizer is an error rather than a silent drop
// of the saved slots.
#include <unistd.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include <strata/autograd/autograd.h>
#include "tests/test_util.h"
#include "tests/train/weight_and_step.h"
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/checkpoint_file.h>
#include <strata/train/loss_scale_optimizer.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>

using namespace strata;
using namespace strata::train;
using Catch::Matchers::Contains;

namespace ckpt_state_test {

namespace fs = std::filesystem;

struct Dir {
  fs::path path;
  Dir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("strata_ckpt_state_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

using Run = strata::testing::WeightAndStep;

// Flips bytes in the middle of a checkpoint's data file (its CRC32C then fails).
void damage(const fs::path& prefix) {
  fs::path data = prefix.string() + ".safetensors";
  if (!fs::exists(data)) data = prefix.string() + ".alt.safetensors";
  std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  f.seekp(size - 4);
  const char junk[4] = {'\x5a', '\x5a', '\x5a', '\x5a'};
  f.write(junk, 4);
}

nn::Sequential tiny_model() { return nn::Sequential{nn::Dense(3, 2)}; }

void one_step(nn::Sequential& model, optim::Optimizer& opt) {
  autograd::GradientTape tape;
  Tensor loss = sum(square(model(ones({2, 3}))));
  opt.apply_gradients(tape.gradient(loss, model.trainable_variables()), model.trainable_variables());
}

}  // namespace ckpt_state_test

using namespace ckpt_state_test;

TEST_CASE("CheckpointManager: the state file decides latest, a stray newer-numbered file is ignored",
          "[train][checkpoint]") {
  Dir dir;
  Run run;
  CheckpointManager manager(run.ckpt, dir.path, /*max_to_keep=*/2, 0, run.step);
  run.at(10);
  manager.save();
  // A checkpoint file the manager never wrote (copied in, or left by another run).
  run.at(7);
  run.ckpt.save(dir.path / "ckpt-999999999999999999", 999999999999999999);
  run.at(20);
  manager.save();
  CHECK(manager.latest_checkpoint() == (dir.path / "ckpt-20").string());
  CHECK(manager.checkpoints() ==
        std::vector<std::string>{(dir.path / "ckpt-10").string(), (dir.path / "ckpt-20").string()});

  // A new manager (a resumed run) restores step 20, not the stray.
  Run resumed;
  CheckpointManager again(resumed.ckpt, dir.path, 2, 0, resumed.step);
  CHECK(again.restore_or_initialize() == (dir.path / "ckpt-20").string());
  CHECK(resumed.step.value().item<int64_t>() == 20);
  CHECK(again.last_checkpoint_step() == 20);

  // Retention counts and deletes only the manager's own checkpoints.
  resumed.at(30);
  again.save();
  CHECK(checkpoint_exists(dir.path / "ckpt-999999999999999999"));
  CHECK_FALSE(checkpoint_exists(dir.path / "ckpt-10"));
  const auto index = nlohmann::json::parse(std::ifstream(again.index_path()));
  CHECK(index["latest"] == "ckpt-30");
  CHECK(index["checkpoints"].size() == 2);

  // A state file that lists a checkpoint outside the directory is refused.
  std::ofstream(again.index_path()) << R"({"format": "strata.checkpoint_index", "version": 1,
      "latest": "x", "checkpoints": [{"name": "../ckpt-1", "step": 1}]})";
  CHECK_THROWS_WITH(again.latest_checkpoint(), Contains("../ckpt-1") && Contains("checkpoint"));
}

TEST_CASE("CheckpointManager: a corrupt latest checkpoint is refused naming the newest intact one",
          "[train][checkpoint]") {
  Dir dir;
  Run run;
  CheckpointManager manager(run.ckpt, dir.path, /*max_to_keep=*/0, 0, run.step);
  for (int64_t s : {10, 20, 30}) {
    run.at(s);
    manager.save();
  }
  damage(dir.path / "ckpt-30");

  Run resumed;
  CheckpointManager again(resumed.ckpt, dir.path, 0, 0, resumed.step);
  const std::string intact = (dir.path / "ckpt-20").string();
  CHECK_THROWS_WITH(again.restore_or_initialize(),
                    Contains("ckpt-30") && Contains("newest intact checkpoint is " + intact) &&
                        Contains("--restore-checkpoint"));
  CHECK(resumed.step.value().item<int64_t>() == 0);  // nothing restored
  // Restoring the named one explicitly resumes from there.
  again.restore(intact);
  CHECK(resumed.step.value().item<int64_t>() == 20);
  REQUIRE_ALLCLOSE(resumed.w.value(), full({3}, 20.0));

  // When every checkpoint is damaged, the message says so.
  damage(dir.path / "ckpt-20");
  damage(dir.path / "ckpt-10");
  CHECK_THROWS_WITH(again.restore_or_initialize(), Contains("no older checkpoint"));
}

TEST_CASE("Checkpoint: restoring with another optimizer is an error, not a silent drop of slots",
          "[train][checkpoint]") {
  Dir dir;
  nn::set_global_seed(3);
  nn::Sequential model = tiny_model();
  optim::Optimizer adam = optim::Adam(0.01);
  one_step(model, adam);
  Checkpoint{{"model", model}, {"optimizer", adam}}.save(dir.path / "c", 1);

  nn::Sequential other = tiny_model();
  optim::Optimizer sgd = optim::SGD(0.01);
  CHECK_THROWS_WITH(Checkpoint({{"model", other}, {"optimizer", sgd}}).restore(dir.path / "c"),
                    Contains("Adam") && Contains("SGD") && Contains("optimizer"));
  // The same optimizer kind restores (and gets the slots).
  optim::Optimizer adam2 = optim::Adam(0.01);
  Checkpoint({{"model", other}, {"optimizer", adam2}}).restore(dir.path / "c");
  CHECK(adam2.find_slot(other.trainable_variables()[0], "m").has_value());

  // A checkpoint without the recorded kind (an older strata) is judged by its slot names.
  TensorCheckpoint old = load_tensors(dir.path / "c");
  nlohmann::json meta = old.metadata;
  meta.erase("optimizers");
  save_tensors(dir.path / "old", old.tensors, meta);
  CHECK_THROWS_WITH(Checkpoint({{"model", other}, {"optimizer", sgd}}).restore(dir.path / "old"),
                    Contains(".OPTIMIZER_SLOT/optimizer/m") && Contains("another optimizer"));

  // A LossScaleOptimizer's wrapped optimizer counts: AdamW (the same slot names) does not
  // take Adam's state.
  optim::Optimizer scaled_adam = optim::LossScaleOptimizer(optim::Adam(0.01));
  one_step(model, scaled_adam);
  Checkpoint{{"model", model}, {"optimizer", scaled_adam}}.save(dir.path / "scaled", 1);
  optim::Optimizer scaled_adamw = optim::LossScaleOptimizer(optim::AdamW(0.01));
  CHECK_THROWS_WITH(Checkpoint({{"model", other}, {"optimizer", scaled_adamw}}).restore(dir.path / "scaled"),
                    Contains("saved by the LossScaleOptimizer(Adam) optimizer but the program uses "
                             "LossScaleOptimizer(AdamW)"));
  optim::Optimizer scaled_adam2 = optim::LossScaleOptimizer(optim::Adam(0.01));
  Checkpoint({{"model", other}, {"optimizer", scaled_adam2}}).restore(dir.path / "scaled");
  CHECK(scaled_adam2.find_slot(other.trainable_variables()[0], "m").has_value());
  // One written before the wrapped optimizer was recorded names the wrapper only.
  TensorCheckpoint wrapper_only = load_tensors(dir.path / "scaled");
  nlohmann::json named = wrapper_only.metadata;
  named["optimizers"]["optimizer"] = "LossScaleOptimizer";
  save_tensors(dir.path / "scaled-old", wrapper_only.tensors, named);
  Checkpoint({{"model", other}, {"optimizer", scaled_adam2}}).restore(dir.path / "scaled-old");
}
