// Checkpoint and CheckpointManager.
//
// Checkpoint: saves and restores a set of named objects — modules, optimizers, metrics,
// single variables and opaque "extra state" such as a dataset iterator's position — by
// object path (tf.train.Checkpoint), through the safetensors + manifest files of
// train/checkpoint_file.h.
//
//   train::Checkpoint ckpt{{"model", model}, {"optimizer", opt}, {"step", step},
//                          {"train_iterator", train::iterator_state(it)}};
//   ckpt.save(dir / "ckpt-100", 100);
//   ckpt.restore(dir / "ckpt-100");
//
// Object paths (the tensor names in the file):
//   module variables    <name>/<structural path>            model/dense_1/kernel
//   metric state        <name>/<state>                      train_loss/total
//   a Variable          <name>                              step
//   optimizer counter   <name>/iterations                   optimizer/iterations
//   loss scale state    <name>/loss_scale, <name>/good_steps  (a LossScaleOptimizer)
//   optimizer slots     <variable path>/.OPTIMIZER_SLOT/<optimizer name>/<slot>
//                                       model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m
// Slots are saved for the variables reachable from a tracked module (as in TensorFlow,
// slots of untracked variables are not saved). Extra state is stored as JSON in the
// manifest's metadata under "extra".
//
// Variables are saved with var.impl().checkpoint_value() (the aggregate of a sync-on-read
// variable) and restored with var.impl().restore_checkpoint_value(), so a checkpoint
// restores under any strategy, replica count or device.
//
// restore() is all or nothing: it loads and verifies the whole file (checksums,
// structure), then checks that every live variable has a tensor of its exact shape and
// dtype and that every extra state is present and valid, and only then changes anything;
// each failure is a strata::Error naming the variable and the file. Afterwards the
// optimizers hold exactly the saved slots: slots missing from the file are dropped (they
// restart from zero, as they would have), slots in the file are created when missing.
// The manifest records each optimizer's kind ("Adam", "SGD"): restoring into another
// kind, or slots the program's optimizer does not have, is an error (not a silent drop).
#pragma once

#include <filesystem>
#include <functional>
#include <exception>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/autograd/variable.h>
#include <strata/data/dataset.h>
#include <strata/train/atomic_file.h>
#include <strata/train/metrics.h>
#include <strata/train/nn/module.h>
#include <strata/train/optimizer.h>

namespace strata::train {

// State saved as JSON beside the tensors: save() produces it; restore() receives exactly
// what save() produced. validate (optional) throws when a saved value cannot be restored;
// it runs before anything is changed. restore may still throw (then variables are
// untouched, since extra states are restored before any variable).
struct ExtraState {
  std::function<nlohmann::json()> save;
  std::function<void(const nlohmann::json&)> restore;
  std::function<void(const nlohmann::json&)> validate;
};

// Saves a dataset iterator's position (data::IteratorState) as extra state. The iterator
// must outlive the checkpoint.
ExtraState iterator_state(data::Iterator& iterator);

// Anything a Checkpoint can track.
class Trackable {
 public:
  Trackable(const nn::AnyModule& module) : object_(module) {}          // NOLINT
  Trackable(const optim::Optimizer& optimizer) : object_(optimizer) {} // NOLINT
  Trackable(const metrics::Metric& metric) : object_(metric) {}        // NOLINT
  Trackable(const Variable& variable) : object_(variable) {}           // NOLINT
  Trackable(ExtraState extra) : object_(std::move(extra)) {}           // NOLINT

  using Object = std::variant<nn::AnyModule, optim::Optimizer, metrics::Metric, Variable, ExtraState>;
  const Object& object() const { return object_; }

 private:
  Object object_;
};

struct RestoreStatus {
  std::filesystem::path prefix;
  std::optional<int64_t> step;      // the step recorded when it was saved
  std::vector<std::string> unused;  // tensors in the file that no tracked object claimed
};

// A checkpoint's contents taken at one moment (Checkpoint::snapshot): every tensor a save
// writes, by object path, and the manifest's metadata (step, objects, extra states).
struct CheckpointSnapshot {
  std::map<std::string, Tensor> tensors;
  nlohmann::json metadata;
  // Writes <prefix>.safetensors and <prefix>.manifest.json atomically (creating the
  // directory). `hooks`: test hooks for both atomic writes.
  void write(const std::filesystem::path& prefix, const AtomicWriteHooks& hooks = {}) const;
};

class Checkpoint {
 public:
  Checkpoint() = default;
  Checkpoint(std::initializer_list<std::pair<std::string, Trackable>> objects);

  // Tracks `object` under `name` (non-empty, no '/', unique in this checkpoint).
  Checkpoint& track(const std::string& name, Trackable object);

  // Every variable a save writes, by object path (sorted by path).
  std::map<std::string, Variable> variables_by_path() const;

  // Writes the checkpoint under `prefix` (creating its directory): <prefix>.safetensors
  // and <prefix>.manifest.json. `step` is recorded in the manifest.
  void save(const std::filesystem::path& prefix, std::optional<int64_t> step = std::nullopt) const;
  // The contents a save would write now. With own_copies every tensor is a host copy of
  // its own, so the snapshot keeps these values however the variables change later (what
  // an asynchronous save writes); without, tensors may share the variables' memory. Runs
  // the extra states' save functions and reads sync-on-read variables (a collective
  // under a multi-worker strategy, as save() is).
  CheckpointSnapshot snapshot(std::optional<int64_t> step, bool own_copies) const;
  // Restores every tracked object from `prefix`, all or nothing (see above).
  RestoreStatus restore(const std::filesystem::path& prefix) const;

  const std::vector<std::pair<std::string, Trackable>>& objects() const { return objects_; }

 private:
  std::vector<std::pair<std::string, Trackable>> objects_;
};

// CheckpointManager: numbered checkpoints of one Checkpoint in a directory
// (tf.train.CheckpointManager).
//
// Checkpoints are named <directory>/<checkpoint_name>-<step> ("ckpt-300"); the manager
// keeps the newest max_to_keep (by step; 0 keeps all) and deletes older ones.
//
// The state file <directory>/checkpoint (JSON, written atomically) decides which
// checkpoints exist and which is the latest, as TensorFlow's does: a file that merely
// looks like a checkpoint (a stray "ckpt-999999999999999999" copied in, or left by another
// run) is ignored and never deleted. A save first lists the new checkpoint in the state
// file, then commits its files, then drops the old ones from both; a listed checkpoint
// counts once its manifest is committed. So a crash at any point leaves the latest
// committed checkpoint the latest, and a manager over an existing directory, or another
// process watching it, sees every checkpoint. A directory without a state file (written
// by an older strata) falls back to the committed ckpt-<N> files it holds.
//
// restore_or_initialize() refuses a latest checkpoint that fails to load, and names the
// newest older checkpoint that loads intact (restore(prefix) resumes from it).
//
// Asynchronous saves (CheckpointOptions::enable_async_checkpoint, TensorFlow's
// experimental_enable_async_checkpoint; Orbit's Controller enable_async_checkpointing):
// save() takes a host copy of every value (Checkpoint::snapshot), which costs memory for
// one more copy of the state, and returns while a background thread writes the files,
// lists the checkpoint and drops old ones, in the order a synchronous save does, so a
// crash leaves the same states. One save is in flight at a time: the next save, sync(),
// restore(), any query of the checkpoints and the destructor wait for it first. A failed
// write is raised by sync() or by the next save (the destructor can only print it); its
// checkpoint is then not committed and the latest stays the previous one (unless only
// dropping older checkpoints failed). A manager is used from one thread at a time, as
// TensorFlow's CheckpointManager.
struct CheckpointOptions {
  bool enable_async_checkpoint = false;
  // Test hooks for the atomic writes of the checkpoint's two files (train/atomic_file.h).
  AtomicWriteHooks write_hooks;
};

class CheckpointManager {
 public:
  // checkpoint_interval > 0: save() without force skips steps fewer than this many after
  // the last saved (or latest existing) checkpoint. step_counter (an int64 scalar
  // variable) supplies the step when save() is not given one. init_fn runs when
  // restore_or_initialize() finds no checkpoint.
  CheckpointManager(Checkpoint checkpoint, std::filesystem::path directory, int max_to_keep,
                    int64_t checkpoint_interval = 0, Variable step_counter = Variable(),
                    std::function<void()> init_fn = {}, std::string checkpoint_name = "ckpt");

  // Saves <name>-<step> and returns its prefix, or "" when the interval says to skip. The
  // step is `step`, else the step counter's value, else one more than the latest
  // checkpoint's step (1 for the first).
  std::string save(std::optional<int64_t> step = std::nullopt, bool force = false,
                   const CheckpointOptions& options = {});
  // Waits for an asynchronous save in flight, if any, and raises its failure.
  void sync();
  // The step counter save() reads when given no step (see the constructor); the
  // Controller lends its global step to a manager built without one.
  const Variable& step_counter() const { return step_counter_; }
  void set_step_counter(Variable step_counter);
  // Waits for an asynchronous save in flight (a failure is printed to stderr).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;
  // The newest committed checkpoint that the state file lists (read each time): the one
  // saved last, as TensorFlow's CheckpointManager has it — after a restore of an older
  // checkpoint and further training, the new saves, not the abandoned higher steps.
  std::optional<std::string> latest_checkpoint() const;
  // Every committed checkpoint the state file lists, in the order they were saved (the
  // oldest save first; max_to_keep drops the oldest saves). Without a state file: by step.
  std::vector<std::string> checkpoints() const;
  // Restores the latest checkpoint and returns its prefix, or runs init_fn and returns "".
  // When the latest does not load (corrupt, truncated), the error names the newest older
  // checkpoint that loads intact.
  std::string restore_or_initialize();
  // Restores a given checkpoint prefix.
  RestoreStatus restore(const std::string& prefix);

  const std::filesystem::path& directory() const { return directory_; }
  std::filesystem::path index_path() const { return directory_ / "checkpoint"; }
  Checkpoint& checkpoint() { return checkpoint_; }
  // 0: save() without force always saves.
  int64_t checkpoint_interval() const { return checkpoint_interval_; }
  // The step of the last checkpoint saved or restored by this manager (or found at start).
  // (An asynchronous save counts once written: this waits for one in flight.)
  std::optional<int64_t> last_checkpoint_step() const;

 private:
  // (step, prefix) of every committed checkpoint the state file lists, in save order
  // (without a state file: every committed <name>-<N> in the directory, by step). Entries
  // marked pending (a save that never finished) are not checkpoints: their prefixes go to
  // `pending` when given.
  std::vector<std::pair<int64_t, std::string>> scan(std::vector<std::string>* pending = nullptr) const;
  // (step, prefix) of every <name>-<N> listed in the state file and not pending, committed
  // or not; the pending ones into `pending`. nullopt when there is no state file.
  std::optional<std::vector<std::pair<int64_t, std::string>>> read_index(std::vector<std::string>* pending) const;
  // Every committed <name>-<N> in the directory, sorted by step.
  std::vector<std::pair<int64_t, std::string>> scan_directory() const;
  // `kept` in order (`saving`, when listed, marked pending with `save_id`; those in `stale`
  // marked pending), then the other `stale` prefixes, marked pending.
  void write_index(const std::vector<std::pair<int64_t, std::string>>& kept, const std::string& latest,
                   const std::vector<std::string>& stale = {}, const std::string& saving = "",
                   const std::string& save_id = "") const;
  std::optional<int64_t> step_of(const std::string& name) const;

  Checkpoint checkpoint_;
  std::filesystem::path directory_;
  int max_to_keep_;
  int64_t checkpoint_interval_;
  Variable step_counter_;
  std::function<void()> init_fn_;
  std::string name_;
  mutable std::optional<int64_t> last_step_;

  // The file work of a save: list `prefix` in the state file as pending with a new save
  // id, commit the snapshot with that id in its metadata, drop the checkpoints beyond
  // max_to_keep and the files of earlier saves that never finished (`stale`), list what
  // is left. On the caller's thread or on the writer
  // thread of an asynchronous save.
  // *committed turns true once the checkpoint's manifest is committed (later steps may
  // still fail).
  void commit(std::vector<std::pair<int64_t, std::string>> kept, const std::string& prefix,
              std::vector<std::string> stale, const CheckpointSnapshot& snapshot, const AtomicWriteHooks& hooks,
              bool* committed) const;
  // Joins the writer of an asynchronous save, if any; a failure is kept in write_error_
  // and last_step_ goes back to what it was before that save.
  void wait_for_write() const;

  mutable std::thread writer_;
  mutable std::exception_ptr write_error_;
  mutable std::optional<int64_t> step_before_write_;
  bool write_committed_ = false;  // set by the writer; read after joining it
};

}  // namespace strata::train
