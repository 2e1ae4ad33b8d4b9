// Shared pieces of the Controller / resume / fit tests: a temporary directory, a small
// deterministic training job (MLP + Adam + a sync-on-read loss metric on synthetic data,
// with its Checkpoint and CheckpointManager) buildable under any strategy, a counting
// trainer for the loop arithmetic, bit-exact snapshots of a checkpoint's variables, and
// a TensorBoard event-file decoder.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <strata/autograd/tape.h>
#include <strata/data/synthetic.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/make_strategy.h>
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/controller.h>
#include <strata/train/losses.h>
#include <strata/train/metrics.h>
#include <strata/train/nn/nn.h>
#include "tests/temp_dir.h"

namespace strata::testing::orbit {

namespace fs = std::filesystem;

using strata::testing::TempDir;

inline std::unique_ptr<distribute::Strategy> make(const std::string& name, int replicas = 0) {
  distribute::StrategyOptions o;
  o.replicas = replicas;
  return distribute::make_strategy(name, o);
}

// Every variable of a checkpoint, by object path, as float64 values (exact for the
// float32 / int64 / float64 variables used here, so equality is bitwise equality).
using Snapshot = std::map<std::string, std::vector<double>>;

inline Snapshot snapshot(const train::Checkpoint& ckpt) {
  Snapshot s;
  for (const auto& [path, v] : ckpt.variables_by_path()) s[path] = v.impl().checkpoint_value().to_vector<double>();
  return s;
}

// FNV-1a over the float64 images of a snapshot (order: by path).
inline uint64_t digest(const Snapshot& s) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& [path, values] : s) {
    mix(path.data(), path.size());
    mix(values.data(), values.size() * sizeof(double));
  }
  return h;
}

// The first difference between two snapshots, or "" when they are bitwise equal.
inline std::string first_difference(const Snapshot& a, const Snapshot& b) {
  for (const auto& [path, values] : a) {
    auto it = b.find(path);
    if (it == b.end()) return "missing " + path;
    if (it->second.size() != values.size()) return "size of " + path;
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::memcmp(&values[i], &it->second[i], sizeof(double)) != 0) {
        return path + "[" + std::to_string(i) + "]: " + std::to_string(values[i]) + " vs " +
               std::to_string(it->second[i]);
      }
    }
  }
  if (a.size() != b.size()) return "different variable sets";
  return "";
}

struct JobOptions {
  int64_t features = 16, classes = 4, hidden = 32;
  int64_t train_examples = 512, eval_examples = 96, global_batch = 32;
  uint64_t seed = 7;         // data, shuffling
  uint64_t init_seed = 11;   // weights (a resumed job may start from other weights)
  bool increment_in_step = false;  // advance the global step inside strategy.run
  int max_to_keep = 3;
  int64_t checkpoint_interval = 0;
};

// A StandardTrainer like strata-train's, with a checkpointed sync-on-read loss metric
// that accumulates over the whole run (so its state is part of the exact-resume check).
class JobTrainer final : public train::StandardTrainer {
 public:
  JobTrainer(distribute::Strategy& s, distribute::DistributedDataset ds, Variable step, nn::Sequential model,
             optim::Optimizer opt, metrics::Mean loss, int64_t global_batch, bool increment_in_step)
      : StandardTrainer(s, std::move(ds), std::move(step)),
        model_(std::move(model)),
        opt_(std::move(opt)),
        loss_(std::move(loss)),
        global_batch_(global_batch),
        increment_in_step_(increment_in_step) {}
  int64_t examples_per_step() const override { return global_batch_; }

 protected:
  void train_step(distribute::DistributedIterator& it) override {
    auto batch = next_batch(it);
    strategy().run(
        [&](const data::Batch& b) {
          autograd::GradientTape tape;
          Tensor logits = model_(b[0]);
          Tensor per_example = losses::sparse_categorical_crossentropy(b[1], logits, /*from_logits=*/true);
          Tensor loss = distribute::compute_average_loss(per_example, global_batch_);
          auto vars = model_.trainable_variables();
          auto grads = tape.gradient(loss, vars);
          opt_.apply_gradients(grads, vars);
          loss_.update_state(per_example);
          if (increment_in_step_) global_step().assign_add(Tensor::scalar(int64_t(1), kInt64));
        },
        batch);
    if (train::summary::should_record()) train::summary::scalar("inner/step_loss", loss_.result().item<double>());
  }
  train::Outputs train_loop_end() override { return {{"loss", loss_.result().item<double>()}}; }

 private:
  nn::Sequential model_;
  optim::Optimizer opt_;
  metrics::Mean loss_;
  int64_t global_batch_;
  bool increment_in_step_;
};

class JobEvaluator final : public train::StandardEvaluator {
 public:
  JobEvaluator(distribute::Strategy& s, distribute::DistributedDataset ds, nn::Sequential model)
      : StandardEvaluator(s, std::move(ds)), model_(std::move(model)) {}
  int evaluations = 0;

 protected:
  void eval_begin() override { loss_ = correct_ = count_ = 0; }
  std::optional<train::Outputs> eval_step(distribute::DistributedIterator& it) override {
    auto batch = it.next();
    if (!batch) return std::nullopt;
    auto per_replica = strategy().run(
        [&](const data::Batch& b) {
          Tensor logits = model_(b[0]);
          Tensor loss = sum(losses::sparse_categorical_crossentropy(b[1], logits, true));
          Tensor correct = sum(cast(equal(argmax(logits, -1), cast(b[1], kInt64)), kFloat32));
          return stack({loss, correct, full({}, double(b[1].dim(0)))});
        },
        *batch);
    auto v = strategy().reduce(distribute::ReduceOp::Sum, per_replica).to_vector<double>();
    return train::Outputs{{"loss", v[0]}, {"correct", v[1]}, {"count", v[2]}};
  }
  void eval_reduce(const train::Outputs& o) override {
    loss_ += o.at("loss"), correct_ += o.at("correct"), count_ += o.at("count");
  }
  train::Outputs eval_end() override {
    ++evaluations;
    return {{"loss", count_ ? loss_ / count_ : 0.0}, {"accuracy", count_ ? correct_ / count_ : 0.0},
            {"examples", count_}};
  }

 private:
  nn::Sequential model_;
  double loss_ = 0, correct_ = 0, count_ = 0;
};

// Everything a training run owns, built under one strategy. `dir` empty: no manager.
struct Job {
  std::unique_ptr<distribute::Strategy> strategy;
  nn::Sequential model;
  optim::Optimizer opt;
  Variable step;
  metrics::Mean train_loss;
  std::unique_ptr<distribute::DistributedDataset> train_ds, eval_ds;
  std::unique_ptr<JobTrainer> trainer;
  std::unique_ptr<JobEvaluator> evaluator;
  train::Checkpoint checkpoint;
  std::unique_ptr<train::CheckpointManager> manager;

  Job(const std::string& strategy_name, int replicas, const fs::path& dir, const JobOptions& o = {})
      : strategy(make(strategy_name, replicas)) {
    {
      auto scope = strategy->scope();
      nn::set_global_seed(o.init_seed);
      model = nn::Sequential{nn::Dense(o.features, o.hidden), nn::ReLU(), nn::Dense(o.hidden, o.classes)};
      opt = optim::Adam(1e-2);
      step = train::create_global_step();
      train_loss = metrics::Mean("train_loss");
    }
    data::SyntheticOptions so;
    so.num_examples = o.train_examples + o.eval_examples;
    so.num_classes = o.classes;
    so.feature_shape = {o.features};
    so.seed = o.seed;
    so.separation = 0.5;
    data::LabeledArrays all = data::make_synthetic_classification(so);
    data::LabeledArrays tr = all.slice(0, o.train_examples), ev = all.slice(o.train_examples, all.size());
    train_ds = std::make_unique<distribute::DistributedDataset>(strategy->experimental_distribute_dataset(
        tr.dataset().shuffle(tr.size(), o.seed).repeat().batch(o.global_batch, true).prefetch(2)));
    eval_ds = std::make_unique<distribute::DistributedDataset>(
        strategy->experimental_distribute_dataset(ev.dataset().batch(o.global_batch)));
    trainer = std::make_unique<JobTrainer>(*strategy, *train_ds, step, model, opt, train_loss, o.global_batch,
                                           o.increment_in_step);
    evaluator = std::make_unique<JobEvaluator>(*strategy, *eval_ds, model);
    checkpoint = train::Checkpoint{{"model", model},
                                   {"optimizer", opt},
                                   {"global_step", step},
                                   {"train_loss", train_loss},
                                   {"train_input", trainer->input_state()}};
    if (!dir.empty()) {
      manager = std::make_unique<train::CheckpointManager>(checkpoint, dir, o.max_to_keep, o.checkpoint_interval);
    }
  }

  train::ControllerOptions controller_options(int64_t steps_per_loop = 10) const {
    train::ControllerOptions co;
    co.strategy = strategy.get();
    co.trainer = trainer.get();
    co.evaluator = evaluator.get();
    co.global_step = step;
    co.steps_per_loop = steps_per_loop;
    co.checkpoint_manager = manager.get();
    co.progress.verbosity = train::Verbosity::Quiet;
    return co;
  }
  int64_t step_value() const { return step.value().item<int64_t>(); }
  // The global batch the trainer will read next (concatenated replica parts), consuming it.
  Tensor next_features() {
    auto b = trainer->train_iterator().next();
    REQUIRE(b.has_value());
    std::vector<Tensor> parts;
    for (const auto& part : *b) parts.push_back(part[0].to(cpu()));
    return concat(parts, 0);
  }
};

// ---- TensorBoard event files: TFRecord framing + the Event/Summary fields we write ----

struct ScalarEvent {
  int64_t step;
  std::string tag;
  float value;
};

inline uint64_t read_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && pos < s.size(); shift += 7) {
    const uint8_t b = uint8_t(s[pos++]);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  FAIL("bad varint in an event record");
  return 0;
}

// Calls fn(field number, wire type, varint / fixed value, bytes) for each field.
template <typename Fn>
void for_each_field(const std::string& s, Fn&& fn) {
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = read_varint(s, pos);
    const int wire = int(key & 7);
    const uint32_t number = uint32_t(key >> 3);
    uint64_t scalar = 0;
    std::string bytes;
    if (wire == 0) {
      scalar = read_varint(s, pos);
    } else if (wire == 1) {
      REQUIRE(pos + 8 <= s.size());
      std::memcpy(&scalar, s.data() + pos, 8);
      pos += 8;
    } else if (wire == 2) {
      const uint64_t n = read_varint(s, pos);
      REQUIRE(pos + n <= s.size());
      bytes = s.substr(pos, n);
      pos += n;
    } else if (wire == 5) {
      uint32_t v = 0;
      REQUIRE(pos + 4 <= s.size());
      std::memcpy(&v, s.data() + pos, 4);
      scalar = v;
      pos += 4;
    } else {
      FAIL("unexpected wire type " << wire);
    }
    fn(number, wire, scalar, bytes);
  }
}

// Every scalar (simple_value) in the event files of `dir` (not recursive).
inline std::vector<ScalarEvent> read_scalars(const fs::path& dir) {
  std::vector<ScalarEvent> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), {});
    size_t pos = 0;
    while (pos + 12 <= file.size()) {
      uint64_t len = 0;
      std::memcpy(&len, file.data() + pos, 8);
      REQUIRE(pos + 12 + len + 4 <= file.size());
      const std::string record = file.substr(pos + 12, len);
      pos += 12 + len + 4;
      int64_t step = 0;
      std::vector<std::string> summaries;
      for_each_field(record, [&](uint32_t n, int wire, uint64_t v, const std::string& b) {
        if (n == 2 && wire == 0) step = int64_t(v);
        if (n == 5 && wire == 2) summaries.push_back(b);
      });
      for (const auto& summary : summaries) {
        for_each_field(summary, [&](uint32_t n, int wire, uint64_t, const std::string& value) {
          if (n != 1 || wire != 2) return;
          ScalarEvent e{step, "", 0.f};
          bool has_value = false;
          for_each_field(value, [&](uint32_t f, int w, uint64_t x, const std::string& bytes) {
            if (f == 1 && w == 2) e.tag = bytes;
            if (f == 2 && w == 5) {
              const uint32_t bits = uint32_t(x);
              std::memcpy(&e.value, &bits, 4);
              has_value = true;
            }
          });
          if (has_value) out.push_back(e);
        });
      }
    }
  }
  return out;
}

// The steps at which `tag` was written, in file order.
inline std::vector<int64_t> steps_of(const std::vector<ScalarEvent>& events, const std::string& tag) {
  std::vector<int64_t> steps;
  for (const auto& e : events)
    if (e.tag == tag) steps.push_back(e.step);
  return steps;
}

}  // namespace strata::testing::orbit
