// Checkpoint and CheckpointManager: bitwise round trips of a model with Adam state,
// metrics, step counters and a dataset iterator; restore by object path into a model built
// in a different order; all-or-nothing restore on every bad input; the manager's naming,
// retention, interval and index file; saving under MirroredStrategy.
#include <unistd.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include <strata/autograd/autograd.h>
#include <strata/core/random.h>
#include <strata/data/dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/checkpoint_file.h>
#include <strata/train/losses.h>
#include <strata/train/metrics.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>
#include "tests/temp_dir.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;
using nlohmann::json;
using Catch::Matchers::Contains;

namespace {

using strata::testing::TempDir;

std::string host_bytes(const Tensor& t) {
  std::string out(t.nbytes(), '\0');
  if (!out.empty()) strata::detail::copy_to_host(t, out.data());
  return out;
}

// Every variable a checkpoint covers, as raw bytes by path.
std::map<std::string, std::string> snapshot(const Checkpoint& ckpt) {
  std::map<std::string, std::string> out;
  for (const auto& [path, v] : ckpt.variables_by_path()) out[path] = host_bytes(v.value());
  return out;
}

autograd::VariableOptions step_options() {
  autograd::VariableOptions o;
  o.name = "step";
  o.trainable = false;
  return o;
}

nn::Sequential make_model(int64_t hidden = 6, DType dtype = kFloat32) {
  return nn::Sequential{nn::Conv2D(1, 2, 3, {.dtype = dtype}), nn::ReLU(), nn::Flatten(),
                        nn::Dense(8, hidden, {.dtype = dtype}),
                        nn::BatchNormalization(hidden, {.dtype = dtype}),
                        nn::Dense(hidden, 3, {.dtype = dtype})};
}

// A few Adam steps so that every slot, moving statistic and counter is non-trivial.
void train_steps(nn::Sequential& model, optim::Optimizer& opt, int steps, uint64_t seed) {
  for (int i = 0; i < steps; ++i) {
    Tensor x = random::normal({4, 4, 4, 1}, seed + uint64_t(i));
    Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 1}, {4});
    GradientTape tape;
    Tensor loss = mean(losses::sparse_categorical_crossentropy(y, model(x), true));
    opt.apply_gradients(tape.gradient(loss, model.trainable_variables()),
                        model.trainable_variables());
  }
}

fs::path data_file(const fs::path& prefix) {
  for (const char* suffix : {".safetensors", ".alt.safetensors"}) {
    fs::path p(prefix.string() + suffix);
    if (fs::exists(p)) return p;
  }
  FAIL("no data file for " << prefix);
  return {};
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("Checkpoint: model + Adam + metric + step round trip bitwise", "[train][checkpoint]") {
  TempDir dir;
  nn::set_global_seed(1);
  nn::Sequential model = make_model();
  optim::Optimizer opt = optim::Adam(0.01);
  metrics::Mean train_loss("train_loss");
  Variable step(Tensor::scalar(0, kInt64), step_options());
  train_steps(model, opt, 3, 10);
  train_loss.update_state(Tensor::from_vector<float>({1.5f, 2.5f}));
  step.assign(Tensor::scalar(3, kInt64));

  Checkpoint ckpt{{"model", model}, {"optimizer", opt}, {"train_loss", train_loss}, {"step", step}};
  const auto paths = ckpt.variables_by_path();
  CHECK(paths.count("model/conv2d/kernel"));
  CHECK(paths.count("model/batch_normalization/moving_variance"));
  CHECK(paths.count("model/dense_1/bias/.OPTIMIZER_SLOT/optimizer/v"));
  CHECK(paths.count("optimizer/iterations"));
  CHECK(paths.count("train_loss/count"));
  CHECK(paths.count("step"));
  const auto saved = snapshot(ckpt);
  ckpt.save(dir.path / "ckpt-3", 3);
  CHECK(fs::exists(dir.path / "ckpt-3.manifest.json"));

  // The files hold exactly these tensors under their object paths.
  TensorCheckpoint raw = load_tensors(dir.path / "ckpt-3");
  CHECK(raw.step == 3);
  CHECK(raw.tensors.size() == saved.size());
  for (const auto& [path, bytes] : saved) CHECK(host_bytes(raw.tensors.at(path)) == bytes);

  // Train further, then restore: everything comes back bit for bit.
  train_steps(model, opt, 2, 20);
  train_loss.update_state(Tensor::from_vector<float>({9.f}));
  step.assign(Tensor::scalar(5, kInt64));
  CHECK(snapshot(ckpt) != saved);
  RestoreStatus status = ckpt.restore(dir.path / "ckpt-3");
  CHECK(status.step == 3);
  CHECK(status.unused.empty());
  CHECK(snapshot(ckpt) == saved);
  CHECK(opt.iterations_value() == 3);
  CHECK(train_loss.result().item<double>() == 2.0);

  // A fresh model and optimizer (no slots yet) restore to the same state, and the next
  // step is identical to the original's next step.
  nn::set_global_seed(99);
  nn::Sequential model2 = make_model();
  optim::Optimizer opt2 = optim::Adam(0.01);
  metrics::Mean loss2("x");
  Variable step2(Tensor::scalar(0, kInt64), step_options());
  Checkpoint ckpt2{{"model", model2}, {"optimizer", opt2}, {"train_loss", loss2}, {"step", step2}};
  ckpt2.restore(dir.path / "ckpt-3");
  CHECK(snapshot(ckpt2) == saved);
  train_steps(model, opt, 1, 30);
  train_steps(model2, opt2, 1, 30);
  CHECK(snapshot(ckpt2) == snapshot(ckpt));
}

namespace {

// Two towers registered in either order, with layers created in either order.
class TowersImpl : public nn::Module {
 public:
  explicit TowersImpl(bool reversed) : nn::Module("towers") {
    nn::Dense a, b;
    if (reversed) {
      b = nn::Dense(3, 2);
      a = nn::Dense(3, 2);
      register_module("b", b.ptr());
      register_module("a", a.ptr());
    } else {
      a = nn::Dense(3, 2);
      b = nn::Dense(3, 2);
      register_module("a", a.ptr());
      register_module("b", b.ptr());
    }
  }
};

}  // namespace

TEST_CASE("Checkpoint: restore by object path into layers created in another order",
          "[train][checkpoint]") {
  TempDir dir;
  nn::set_global_seed(3);
  nn::Dense first(3, 4), second(4, 2);
  nn::Sequential model{first, nn::ReLU(), second};
  nn::AnyModule towers(std::make_shared<TowersImpl>(false));
  Checkpoint ckpt{{"model", model}, {"towers", towers}};
  ckpt.save(dir.path / "c");

  nn::set_global_seed(4);
  nn::Dense second2(4, 2);  // created first this time
  nn::Dense first2(3, 4);
  nn::Sequential model2{first2, nn::ReLU(), second2};
  nn::AnyModule towers2(std::make_shared<TowersImpl>(true));
  Checkpoint ckpt2{{"towers", towers2}, {"model", model2}};  // tracked in another order too
  CHECK(snapshot(ckpt2) != snapshot(ckpt));
  ckpt2.restore(dir.path / "c");
  CHECK(snapshot(ckpt2) == snapshot(ckpt));
  CHECK(host_bytes(first2->kernel().value()) == host_bytes(first->kernel().value()));
  CHECK(host_bytes(second2->bias().value()) == host_bytes(second->bias().value()));
}

TEST_CASE("Checkpoint: restore is all or nothing on every bad input", "[train][checkpoint]") {
  TempDir dir;
  nn::set_global_seed(5);
  nn::Sequential model = make_model();
  optim::Optimizer opt = optim::Adam(0.01);
  train_steps(model, opt, 2, 40);
  Checkpoint ckpt{{"model", model}, {"optimizer", opt}};
  const fs::path good = dir.path / "good";
  ckpt.save(good, 2);

  // The live state the failed restores must leave untouched: different from the file.
  train_steps(model, opt, 1, 50);
  const auto before = snapshot(ckpt);
  const auto slots_before = opt.all_slots().size();
  auto unchanged = [&] {
    CHECK(snapshot(ckpt) == before);
    CHECK(opt.all_slots().size() == slots_before);
  };

  SECTION("a missing variable") {
    nn::Sequential smaller{nn::Conv2D(1, 2, 3), nn::ReLU(), nn::Flatten(), nn::Dense(8, 6)};
    Checkpoint partial{{"model", smaller}};
    partial.save(dir.path / "partial");
    CHECK_THROWS_WITH(ckpt.restore(dir.path / "partial"),
                      Contains("missing variable 'model/batch_normalization/") &&
                          Contains("partial.manifest.json"));
    unchanged();
  }
  SECTION("a missing optimizer slot") {
    // Drop one of two slot tensors by saving through the file API directly.
    auto raw = load_tensors(good);
    raw.tensors.erase("model/dense/kernel/.OPTIMIZER_SLOT/optimizer/v");
    save_tensors(dir.path / "oneslot", raw.tensors, raw.metadata);
    CHECK_THROWS_WITH(ckpt.restore(dir.path / "oneslot"),
                      Contains("model/dense/kernel/.OPTIMIZER_SLOT/optimizer/v") &&
                          Contains("oneslot.manifest.json"));
    unchanged();
  }
  SECTION("a shape mismatch") {
    nn::Sequential wider = make_model(/*hidden=*/7);
    Checkpoint other{{"model", wider}, {"optimizer", optim::Optimizer(optim::Adam(0.01))}};
    other.save(dir.path / "wider");
    // The first mismatch in path order is reported.
    CHECK_THROWS_WITH(ckpt.restore(dir.path / "wider"),
                      Contains("'model/batch_normalization/beta' has shape [7]") &&
                          Contains("[6] in the program") && Contains("wider.manifest.json"));
    unchanged();
  }
  SECTION("a dtype mismatch") {
    nn::Sequential f64 = make_model(6, kFloat64);
    Checkpoint other{{"model", f64}};
    other.save(dir.path / "f64");
    CHECK_THROWS_WITH(ckpt.restore(dir.path / "f64"),
                      Contains("'model/batch_normalization/beta' has dtype float64") &&
                          Contains("f64.manifest.json"));
    unchanged();
  }
  SECTION("a truncated data file") {
    const fs::path data = data_file(good);
    const std::string bytes = read_bytes(data);
    write_bytes(data, bytes.substr(0, bytes.size() - 7));
    CHECK_THROWS_WITH(ckpt.restore(good), Contains("good"));
    unchanged();
  }
  SECTION("a corrupt byte in the data") {
    const fs::path data = data_file(good);
    std::string bytes = read_bytes(data);
    bytes[bytes.size() - 3] ^= 0x40;
    write_bytes(data, bytes);
    CHECK_THROWS_WITH(ckpt.restore(good), Contains("good"));
    unchanged();
  }
  SECTION("a corrupt or missing manifest") {
    const fs::path manifest = checkpoint_manifest_path(good);
    write_bytes(manifest, "{\"format\": ");
    CHECK_THROWS_WITH(ckpt.restore(good), Contains("good.manifest.json"));
    unchanged();
    fs::remove(manifest);
    CHECK_THROWS_WITH(ckpt.restore(good), Contains("good"));
    unchanged();
  }
  SECTION("missing or invalid extra state") {
    bool restored = false;
    ExtraState extra{[] { return json{{"pos", 1}}; }, [&](const json&) { restored = true; },
                     [](const json& j) {
                       STRATA_CHECK(j.is_object() && j.contains("pos"), "bad extra state");
                     }};
    Checkpoint with_extra{{"model", model}, {"optimizer", opt}, {"input", extra}};
    CHECK_THROWS_WITH(with_extra.restore(good), Contains("extra state 'input'") &&
                                                    Contains("good.manifest.json"));
    unchanged();
    // Present but refused by validate.
    auto raw = load_tensors(good);
    raw.metadata["extra"] = {{"input", 5}};
    save_tensors(dir.path / "badextra", raw.tensors, raw.metadata);
    CHECK_THROWS_WITH(with_extra.restore(dir.path / "badextra"), Contains("bad extra state"));
    CHECK_FALSE(restored);
    unchanged();
    // A restore function that throws also leaves every variable alone.
    ExtraState throwing{[] { return json(1); }, [](const json&) { strata::fail("no way"); }, {}};
    Checkpoint with_throwing{{"model", model}, {"optimizer", opt}, {"input", throwing}};
    raw.metadata["extra"] = {{"input", 1}};
    save_tensors(dir.path / "throws", raw.tensors, raw.metadata);
    CHECK_THROWS_WITH(with_throwing.restore(dir.path / "throws"), Contains("no way"));
    unchanged();
  }
  SECTION("the intact checkpoint restores") {
    ckpt.restore(good);
    CHECK(snapshot(ckpt) != before);
    CHECK(opt.iterations_value() == 2);
  }
}

TEST_CASE("Checkpoint: optimizer slots follow the checkpoint", "[train][checkpoint]") {
  TempDir dir;
  nn::Dense dense(2, 2);
  optim::Optimizer opt = optim::SGD(0.1, {.momentum = 0.9});
  Checkpoint ckpt{{"model", dense}, {"optimizer", opt}};
  ckpt.save(dir.path / "before");  // no slots yet
  std::vector<Tensor> grads{ones({2, 2}), ones({2})};
  opt.apply_gradients(grads, dense.trainable_variables());
  CHECK(opt.all_slots().size() == 2);
  ckpt.save(dir.path / "after");
  // Restoring the slot-less checkpoint drops the slots: momentum restarts from zero.
  ckpt.restore(dir.path / "before");
  CHECK(opt.all_slots().empty());
  CHECK(opt.iterations_value() == 0);
  ckpt.restore(dir.path / "after");
  CHECK(opt.all_slots().size() == 2);
  REQUIRE_ALLCLOSE(opt.find_slot(dense->kernel(), "momentum")->value(), ones({2, 2}));
  // Slots of variables no tracked module owns are not saved (as in TensorFlow).
  Variable loose(zeros({3}));
  opt.apply_gradients({ones({3})}, {loose});
  CHECK_FALSE(ckpt.variables_by_path().count("loose"));
  CHECK(ckpt.variables_by_path().size() == 2 + 2 + 1);
  // Misuse of track().
  CHECK_THROWS_AS(ckpt.track("model", dense), Error);
  CHECK_THROWS_AS(ckpt.track("a/b", dense), Error);
  CHECK_THROWS_AS(ckpt.track("", dense), Error);
  CHECK_THROWS_AS(ckpt.track("empty", nn::Dense()), Error);
}

TEST_CASE("Checkpoint: the optimizer slots of a variable tracked directly are saved and restored",
          "[train][checkpoint]") {
  TempDir dir;
  Variable w(full({3}, 1.0));
  optim::Optimizer opt = optim::Adam(0.1);
  opt.apply_gradients({tensor({1, -2, 3})}, {w});
  Checkpoint{{"w", w}, {"optimizer", opt}}.save(dir.path / "c");
  const auto m = opt.find_slot(w, "m")->value().to_vector<float>();
  const auto v = opt.find_slot(w, "v")->value().to_vector<float>();
  // Another program: its Adam state for w comes from the checkpoint (TensorFlow saves the
  // slots of every tracked variable), so its next step is the first program's.
  Variable w2(zeros({3}));
  optim::Optimizer opt2 = optim::Adam(0.1);
  Checkpoint{{"w", w2}, {"optimizer", opt2}}.restore(dir.path / "c");
  REQUIRE(opt2.find_slot(w2, "m").has_value());
  CHECK(opt2.find_slot(w2, "m")->value().to_vector<float>() == m);
  CHECK(opt2.find_slot(w2, "v")->value().to_vector<float>() == v);
  opt.apply_gradients({tensor({1, 1, 1})}, {w});
  opt2.apply_gradients({tensor({1, 1, 1})}, {w2});
  CHECK(w2.value().to_vector<float>() == w.value().to_vector<float>());
}

TEST_CASE("Checkpoint: dataset iterator position as extra state", "[train][checkpoint]") {
  TempDir dir;
  data::Dataset ds = data::Dataset::range(100).shuffle(20, 7).batch(10);
  data::Iterator it = ds.make_iterator();
  Variable w(zeros({1}));
  Checkpoint ckpt{{"w", w}, {"input", iterator_state(it)}};
  it.next();
  it.next();
  ckpt.save(dir.path / "c");
  const auto third = it.next()->at(0).to_vector<int64_t>();
  it.next();
  ckpt.restore(dir.path / "c");
  CHECK(it.next()->at(0).to_vector<int64_t>() == third);
  const json manifest = read_checkpoint_manifest(dir.path / "c");
  CHECK(manifest.dump().find("input") != std::string::npos);
}

TEST_CASE("CheckpointManager: naming, retention, interval, index", "[train][checkpoint]") {
  TempDir dir;
  Variable w(zeros({2}));
  Variable step(Tensor::scalar(0, kInt64), step_options());
  Checkpoint ckpt{{"w", w}, {"step", step}};
  CheckpointManager manager(ckpt, dir.path / "run", /*max_to_keep=*/2, /*checkpoint_interval=*/10,
                            step);
  CHECK_FALSE(manager.latest_checkpoint().has_value());
  CHECK(manager.restore_or_initialize().empty());

  auto at = [&](int64_t s) {
    step.assign(Tensor::scalar(double(s), kInt64));
    w.assign(full({2}, double(s)));
  };
  at(0);
  const std::string p0 = manager.save();
  CHECK(p0 == (dir.path / "run" / "ckpt-0").string());
  at(5);
  CHECK(manager.save().empty());  // within the interval
  CHECK(manager.save(std::nullopt, /*force=*/true) == (dir.path / "run" / "ckpt-5").string());
  at(12);
  CHECK(manager.save().empty());  // 12 < 5 + 10
  at(15);
  CHECK_FALSE(manager.save().empty());
  at(30);
  CHECK(manager.save(30) == (dir.path / "run" / "ckpt-30").string());
  // Only the newest two are kept.
  CHECK(manager.checkpoints() == std::vector<std::string>{(dir.path / "run" / "ckpt-15").string(),
                                                          (dir.path / "run" / "ckpt-30").string()});
  CHECK_FALSE(checkpoint_exists(dir.path / "run" / "ckpt-0"));
  CHECK_FALSE(fs::exists(dir.path / "run" / "ckpt-5.safetensors"));
  CHECK(manager.latest_checkpoint() == (dir.path / "run" / "ckpt-30").string());
  CHECK(manager.last_checkpoint_step() == 30);

  // The index file.
  json index = json::parse(read_bytes(manager.index_path()));
  CHECK(index["latest"] == "ckpt-30");
  REQUIRE(index["checkpoints"].size() == 2);
  CHECK(index["checkpoints"][0]["name"] == "ckpt-15");
  CHECK(index["checkpoints"][1]["step"] == 30);

  // A new manager over the directory resumes from the latest.
  at(99);
  bool initialised = false;
  CheckpointManager again(ckpt, dir.path / "run", 2, 10, step, [&] { initialised = true; });
  CHECK(again.restore_or_initialize() == (dir.path / "run" / "ckpt-30").string());
  CHECK_FALSE(initialised);
  CHECK(step.value().item<int64_t>() == 30);
  REQUIRE_ALLCLOSE(w.value(), full({2}, 30.0));

  // The state file decides: a checkpoint committed behind the manager's back (not listed)
  // is not the latest, and a stale temporary file is ignored. (A manager's own save lists
  // a checkpoint before committing it, so a crash cannot leave one unlisted.)
  at(40);
  ckpt.save(dir.path / "run" / "ckpt-40", 40);
  write_bytes(dir.path / "run" / ".ckpt-50.manifest.json.tmp-1-1", "garbage");
  CHECK(again.latest_checkpoint() == (dir.path / "run" / "ckpt-30").string());

  // Without a step counter or step, saves count up from the latest.
  CheckpointManager counting(Checkpoint{{"w", w}}, dir.path / "count", 0);
  CHECK(counting.save() == (dir.path / "count" / "ckpt-1").string());
  CHECK(counting.save() == (dir.path / "count" / "ckpt-2").string());
  CHECK(counting.checkpoints().size() == 2);  // max_to_keep 0 keeps all

  // An empty directory: init_fn runs.
  CheckpointManager empty(ckpt, dir.path / "empty", 1, 0, Variable(), [&] { initialised = true; });
  CHECK(empty.restore_or_initialize().empty());
  CHECK(initialised);

  CHECK_THROWS_AS(CheckpointManager(ckpt, dir.path / "x", -1), Error);
  CHECK_THROWS_AS(CheckpointManager(ckpt, dir.path / "x", 1, -5), Error);
  CHECK_THROWS_AS(CheckpointManager(ckpt, dir.path / "x", 1, 0, w), Error);  // not an int scalar
  CHECK_THROWS_AS(counting.save(-3), Error);
}

TEST_CASE("CheckpointManager: after resuming from an older checkpoint the new saves are the latest",
          "[train][checkpoint]") {
  // TensorFlow's CheckpointManager order: the latest is the last save, and max_to_keep
  // drops the oldest saves, so a run rolled back to step 100 does not resume at the
  // abandoned step 300 after a restart.
  TempDir dir;
  Variable w(zeros({1}));
  Variable step(Tensor::scalar(0, kInt64), step_options());
  Checkpoint ckpt{{"w", w}, {"step", step}};
  const auto at = [&](int64_t s) {
    step.assign(Tensor::scalar(double(s), kInt64));
    w.assign(full({1}, double(s)));
  };
  const auto path = [&](int64_t s) { return (dir.path / ("ckpt-" + std::to_string(s))).string(); };
  CheckpointManager manager(ckpt, dir.path, /*max_to_keep=*/3, 0, step);
  for (int64_t s : {100, 200, 300}) {
    at(s);
    manager.save();
  }
  manager.restore(path(100));
  at(110);
  manager.save();
  CHECK(manager.latest_checkpoint() == path(110));
  CHECK(manager.checkpoints() == std::vector<std::string>{path(200), path(300), path(110)});
  CHECK_FALSE(checkpoint_exists(path(100)));
  at(120);
  manager.save();
  CHECK(manager.checkpoints() == std::vector<std::string>{path(300), path(110), path(120)});
  // A restart resumes from the last save.
  at(0);
  CheckpointManager restarted(ckpt, dir.path, 3, 0, step);
  CHECK(restarted.restore_or_initialize() == path(120));
  CHECK(step.value().item<int64_t>() == 120);
  CHECK(json::parse(read_bytes(restarted.index_path()))["latest"] == "ckpt-120");

  // A save under the name of an abandoned checkpoint (step 300 again) that fails before
  // its files are written leaves the old files there: they must not become the latest.
  step.assign(Tensor::scalar(300.0, kInt64));
  w.assign(full({1}, 999.0));
  CheckpointOptions failing;
  failing.write_hooks.before_rename = [](const fs::path&, const fs::path&) { throw std::runtime_error("disk full"); };
  CHECK_THROWS_WITH(restarted.save(std::nullopt, false, failing), Catch::Contains("disk full"));
  CHECK(restarted.latest_checkpoint() == path(120));
  CHECK(restarted.checkpoints() == std::vector<std::string>{path(110), path(120)});
  CheckpointManager after_failure(ckpt, dir.path, 3, 0, step);
  CHECK(after_failure.restore_or_initialize() == path(120));
  CHECK(w.value().item<float>() == 120.0f);
  // The next save removes the files the failed one left listed.
  at(130);
  after_failure.save();
  CHECK(after_failure.checkpoints() == std::vector<std::string>{path(110), path(120), path(130)});
  CHECK_FALSE(checkpoint_exists(path(300)));
}

TEST_CASE("Checkpoint saved under MirroredStrategy restores into a plain model",
          "[train][checkpoint][distribute]") {
  TempDir dir;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  nn::Sequential model;
  optim::Optimizer opt;
  metrics::Mean loss_metric;
  {
    auto scope = strategy.scope();
    nn::set_global_seed(8);
    model = make_model();
    opt = optim::Adam(0.01);
    loss_metric = metrics::Mean("loss");
  }
  Tensor x = random::normal({8, 4, 4, 1}, 3);
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 1, 0, 2, 2, 1}, {8});
  strategy.run([&] {
    auto* ctx = distribute::get_replica_context();
    const int64_t r = ctx->replica_id_in_sync_group();
    GradientTape tape;
    Tensor per_example = losses::sparse_categorical_crossentropy(
        y.slice(0, 4 * r, 4 * r + 4).to(ctx->device()),
        model(x.slice(0, 4 * r, 4 * r + 4).to(ctx->device())), true);
    Tensor loss = distribute::compute_average_loss(per_example, 8);
    opt.apply_gradients(tape.gradient(loss, model.trainable_variables()),
                        model.trainable_variables());
    loss_metric.update_state(Tensor::scalar(double(r + 1)));
  });
  Checkpoint ckpt{{"model", model}, {"optimizer", opt}, {"loss", loss_metric}};
  ckpt.save(dir.path / "mirrored");

  nn::set_global_seed(9);
  nn::Sequential plain = make_model();
  optim::Optimizer plain_opt = optim::Adam(0.01);
  metrics::Mean plain_metric("loss");
  Checkpoint plain_ckpt{{"model", plain}, {"optimizer", plain_opt}, {"loss", plain_metric}};
  plain_ckpt.restore(dir.path / "mirrored");
  auto a = model.variables(), b = plain.variables();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name());
    // Mirrored weights: the first component; BatchNorm's sync-on-read (MEAN) statistics:
    // the replicas' mean.
    CHECK(host_bytes(a[i].impl().checkpoint_value()) == host_bytes(b[i].value()));
  }
  CHECK(plain_opt.iterations_value() == 1);
  CHECK(plain_metric.result().item<double>() == 1.5);  // (1 + 2) / 2 replicas' counts
}
