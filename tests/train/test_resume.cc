// Exact resumption: a checkpoint carries the global step, the model, the optimizer's
// slots and counter, a sync-on-read metric and the input iterator's position, so that
// 200 steps in one run and 100 + restart + 100 give bitwise-identical state on the CPU;
// and a checkpoint written under one strategy restores under another
// (Mirrored(4) -> Default -> CentralStorage(2) -> Mirrored(4)).
#include "tests/train/controller_test_util.h"

using namespace strata;
using namespace strata::testing::orbit;

namespace {

struct StrategyCase {
  const char* name;
  int replicas;
  bool increment_in_step;
};

// The global batches a fresh job reads first (the features, concatenated).
std::vector<Tensor> first_batches(int64_t n) {
  Job ref("default", 0, {});
  std::vector<Tensor> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(ref.next_features());
  return out;
}

void require_equal(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.to_vector<double>() == b.to_vector<double>());
}

// Every component of every distributed variable holds the checkpointed value.
void require_components_equal(Job& job) {
  for (const auto& [path, v] : job.checkpoint.variables_by_path()) {
    if (v.synchronization() == autograd::VariableSynchronization::OnRead) continue;  // per-replica by design
    const auto components = job.strategy->experimental_local_results(v);
    for (const Tensor& c : components) {
      INFO(path);
      REQUIRE(c.to_vector<double>() == components[0].to_vector<double>());
    }
  }
}

}  // namespace

TEST_CASE("Resume: 200 steps equal 100 + restart + 100, bitwise") {
  for (const StrategyCase sc : {StrategyCase{"default", 0, false}, StrategyCase{"mirrored", 2, true},
                                StrategyCase{"central_storage", 2, false}}) {
    INFO(sc.name);
    TempDir dir(std::string("resume_") + sc.name);
    JobOptions jo;
    jo.increment_in_step = sc.increment_in_step;

    Snapshot straight;
    train::Outputs straight_outputs;
    Tensor straight_next;
    {
      Job a(sc.name, sc.replicas, dir.path / "a", jo);
      train::Controller c(a.controller_options(10));
      c.train(200);
      straight = snapshot(a.checkpoint);
      straight_outputs = c.last_train_outputs();
      straight_next = a.next_features();
    }
    {
      Job b(sc.name, sc.replicas, dir.path / "b", jo);
      train::Controller c(b.controller_options(10));
      c.train(100);
      REQUIRE(c.last_checkpoint() == (dir.path / "b" / "ckpt-100").string());
    }  // everything of the first half is gone
    JobOptions other_init = jo;
    other_init.init_seed = 1234;  // different initial weights: the checkpoint must overwrite them
    Job b(sc.name, sc.replicas, dir.path / "b", other_init);
    REQUIRE_FALSE(first_difference(snapshot(b.checkpoint), straight).empty());
    train::Controller c(b.controller_options(10));
    REQUIRE(c.global_step() == 100);
    c.train(200);
    const Snapshot resumed = snapshot(b.checkpoint);
    REQUIRE(resumed.count("optimizer/iterations"));
    REQUIRE(resumed.count("train_loss/total"));
    REQUIRE(resumed.count("model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m"));
    REQUIRE(resumed.at("global_step") == std::vector<double>{200});
    REQUIRE(resumed.at("optimizer/iterations") == std::vector<double>{200});
    REQUIRE(first_difference(resumed, straight) == "");
    REQUIRE(c.last_train_outputs().at("loss") == straight_outputs.at("loss"));
    require_components_equal(b);
    require_equal(b.next_features(), straight_next);  // and the input continues identically
  }
}

TEST_CASE("Resume: a checkpoint restores under another strategy (Mirrored(4) -> Default -> CentralStorage(2) -> Mirrored(4))") {
  TempDir dir("cross_strategy");
  const fs::path ckpt = dir.path / "ckpt";
  const std::vector<Tensor> batches = first_batches(51);  // batches[i]: the (i+1)-th global batch

  Snapshot saved;
  {
    Job m4("mirrored", 4, ckpt);
    train::Controller c(m4.controller_options(10));
    c.train(30);
    saved = snapshot(m4.checkpoint);
    require_components_equal(m4);
  }
  {
    JobOptions jo;
    jo.init_seed = 5;
    Job d("default", 0, ckpt, jo);
    train::Controller c(d.controller_options(10));
    REQUIRE(c.global_step() == 30);
    REQUIRE(first_difference(snapshot(d.checkpoint), saved) == "");
    require_equal(d.next_features(), batches[30]);
    c.restore_checkpoint((ckpt / "ckpt-30").string());  // rewinds the input too
    c.train(40);
    saved = snapshot(d.checkpoint);
    REQUIRE(saved.at("global_step") == std::vector<double>{40});
  }
  {
    JobOptions jo;
    jo.init_seed = 6;
    Job cs("central_storage", 2, ckpt, jo);
    train::Controller c(cs.controller_options(10));
    REQUIRE(c.global_step() == 40);
    REQUIRE(first_difference(snapshot(cs.checkpoint), saved) == "");
    require_equal(cs.next_features(), batches[40]);
    c.restore_checkpoint((ckpt / "ckpt-40").string());
    c.train(50);
    saved = snapshot(cs.checkpoint);
  }
  {
    JobOptions jo;
    jo.init_seed = 8;
    Job m4("mirrored", 4, ckpt, jo);
    train::Controller c(m4.controller_options(10));
    REQUIRE(c.global_step() == 50);
    REQUIRE(first_difference(snapshot(m4.checkpoint), saved) == "");
    require_components_equal(m4);
    require_equal(m4.next_features(), batches[50]);
    // And training goes on under the new strategy.
    c.restore_checkpoint((ckpt / "ckpt-50").string());
    c.train(55);
    REQUIRE(c.global_step() == 55);
    require_components_equal(m4);
    REQUIRE(std::isfinite(c.last_train_outputs().at("loss")));
  }
}
