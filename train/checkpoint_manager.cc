// CheckpointManager (declared in train/checkpoint.h).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <system_error>
#include <utility>

#include <strata/core/error.h>
#include <strata/train/atomic_file.h>
#include <strata/train/checkpoint.h>
#include <strata/train/checkpoint_file.h>

namespace strata::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr const char* kManifestSuffix = ".manifest.json";

// True when the checkpoint's files load and verify (checksums, structure).
bool loads_intact(const std::string& prefix) {
  try {
    load_tensors(prefix);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A name for one save, written both in the state file's pending entry and in the
// checkpoint's manifest: a committed manifest carrying it is that save's, not older files
// under the same prefix.
std::string new_save_id() {
  std::random_device device;
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  char id[64];
  std::snprintf(id, sizeof id, "%08x%08x-%llx", device(), device(), static_cast<unsigned long long>(now));
  return id;
}

// The save id in the committed manifest of `prefix`; "" when there is none or it cannot
// be read.
std::string committed_save_id(const std::string& prefix) {
  if (!checkpoint_exists(prefix)) return "";
  json manifest;
  try {
    manifest = read_checkpoint_manifest(prefix);
  } catch (const Error&) {
    return "";  // unreadable: not that save's
  }
  const json metadata = manifest.value("metadata", json::object());
  const json id = metadata.is_object() ? metadata.value("save_id", json()) : json();
  return id.is_string() ? id.get<std::string>() : "";
}
}  // namespace

CheckpointManager::CheckpointManager(Checkpoint checkpoint, fs::path directory, int max_to_keep,
                                     int64_t checkpoint_interval, Variable step_counter,
                                     std::function<void()> init_fn, std::string checkpoint_name)
    : checkpoint_(std::move(checkpoint)),
      directory_(std::move(directory)),
      max_to_keep_(max_to_keep),
      checkpoint_interval_(checkpoint_interval),
      step_counter_(std::move(step_counter)),
      init_fn_(std::move(init_fn)),
      name_(std::move(checkpoint_name)) {
  STRATA_CHECK(!directory_.empty(), "CheckpointManager: empty directory");
  STRATA_CHECK(max_to_keep >= 0, "CheckpointManager: max_to_keep must be >= 0 (0 keeps all), got ",
               max_to_keep);
  STRATA_CHECK(checkpoint_interval >= 0, "CheckpointManager: checkpoint_interval must be >= 0, got ",
               checkpoint_interval);
  STRATA_CHECK(!name_.empty() && name_.find('/') == std::string::npos && name_ != "checkpoint",
               "CheckpointManager: invalid checkpoint name '", name_, "'");
  set_step_counter(step_counter_);
  std::error_code ec;
  fs::create_directories(directory_, ec);
  STRATA_CHECK(!ec, "CheckpointManager: cannot create directory ", directory_, ": ", ec.message());
  const auto existing = scan();
  if (!existing.empty()) last_step_ = existing.back().first;
}

void CheckpointManager::set_step_counter(Variable step_counter) {
  if (step_counter.defined())
    STRATA_CHECK(is_integral(step_counter.dtype()) && step_counter.shape().empty(),
                 "CheckpointManager: step_counter must be an integer scalar, got ", dtype_name(step_counter.dtype()),
                 " ", shape_str(step_counter.shape()));
  step_counter_ = std::move(step_counter);
}

// The step in a file or entry name "<name>-<digits>"; nullopt when it is not one.
std::optional<int64_t> CheckpointManager::step_of(const std::string& name) const {
  const std::string lead = name_ + "-";
  if (name.size() <= lead.size() || name.compare(0, lead.size(), lead) != 0) return std::nullopt;
  const std::string digits = name.substr(lead.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
    return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::scan_directory() const {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  const std::string suffix = kManifestSuffix;
  for (fs::directory_iterator it(directory_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (is_atomic_temp_name(file) || file.size() <= suffix.size() || !file.ends_with(suffix)) continue;
    const std::string name = file.substr(0, file.size() - suffix.size());
    if (auto step = step_of(name)) out.emplace_back(*step, (directory_ / name).string());
  }
  STRATA_CHECK(!ec, "CheckpointManager: cannot list ", directory_, ": ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::vector<std::pair<int64_t, std::string>>> CheckpointManager::read_index(
    std::vector<std::string>* pending) const {
  const fs::path path = index_path();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  STRATA_CHECK(in.good(), "CheckpointManager: cannot read the checkpoint state file ", path);
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    fail("CheckpointManager: the checkpoint state file ", path, " is not valid JSON (", e.what(),
         "); it decides which checkpoints exist: repair or remove it");
  }
  STRATA_CHECK(index.is_object() && index.value("format", "") == "strata.checkpoint_index" &&
                   index.contains("checkpoints") && index["checkpoints"].is_array(),
               "CheckpointManager: ", path, " is not a strata checkpoint state file (expected format "
               "\"strata.checkpoint_index\" with a \"checkpoints\" list)");
  std::vector<std::pair<int64_t, std::string>> out;
  for (const json& entry : index["checkpoints"]) {
    const std::string name = entry.is_object() && entry.contains("name") && entry["name"].is_string()
                                 ? entry["name"].get<std::string>()
                                 : std::string();
    // Names only, in this directory: an entry cannot point elsewhere ("../x").
    const std::optional<int64_t> step = step_of(name);
    STRATA_CHECK(step.has_value(), "CheckpointManager: ", path, ": entry ", entry.dump(),
                 " does not name a checkpoint '", name_, "-<step>' of this directory");
    // In the order they were saved (TensorFlow's CheckpointManager): the last is the
    // latest, even when its step is lower than an earlier one's (training resumed from an
    // older checkpoint). A name listed twice counts where it was last listed.
    const std::string prefix = (directory_ / name).string();
    std::erase_if(out, [&](const auto& entry) { return entry.second == prefix; });
    // A save listed before its files were written: it counts once its manifest is
    // committed (a crash before the state file was updated again loses nothing). Files of
    // the prefix that are not that save's (an abandoned run's older checkpoint under the
    // same name, when the save failed first) do not count.
    if (entry.is_object() && entry.value("pending", false)) {
      const json& id = entry.value("save_id", json());
      if (!id.is_string() || committed_save_id(prefix) != id.get<std::string>()) {
        if (pending) pending->push_back(prefix);
        continue;
      }
    }
    out.emplace_back(*step, prefix);
  }
  return out;
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::scan(std::vector<std::string>* pending) const {
  auto listed = read_index(pending);
  if (!listed) return scan_directory();
  std::vector<std::pair<int64_t, std::string>> out;
  for (auto& entry : *listed) {
    if (checkpoint_exists(entry.second)) out.push_back(std::move(entry));
  }
  return out;
}

void CheckpointManager::write_index(const std::vector<std::pair<int64_t, std::string>>& kept,
                                    const std::string& latest, const std::vector<std::string>& stale,
                                    const std::string& saving, const std::string& save_id) const {
  json list = json::array();
  auto is_stale = [&](const std::string& prefix) { return std::find(stale.begin(), stale.end(), prefix) != stale.end(); };
  for (const auto& [step, prefix] : kept) {
    json entry = {{"name", fs::path(prefix).filename().string()}, {"step", step}};
    if (prefix == saving) {
      entry["pending"] = true;
      entry["save_id"] = save_id;
    } else if (is_stale(prefix)) {
      entry["pending"] = true;
    }
    list.push_back(std::move(entry));
  }
  for (const std::string& prefix : stale) {
    if (std::any_of(kept.begin(), kept.end(), [&](const auto& entry) { return entry.second == prefix; })) continue;
    const std::string name = fs::path(prefix).filename().string();
    list.push_back({{"name", name}, {"step", step_of(name).value_or(0)}, {"pending", true}});
  }
  json index = {{"format", "strata.checkpoint_index"},
                {"version", 1},
                {"latest", latest.empty() ? json(nullptr) : json(fs::path(latest).filename().string())},
                {"checkpoints", list}};
  write_file_atomic(index_path(), index.dump(2) + "\n");
}

std::string CheckpointManager::save(std::optional<int64_t> step, bool force, const CheckpointOptions& options) {
  sync();  // one save at a time; a failed asynchronous save is raised here
  int64_t s;
  std::vector<std::string> stale;
  auto kept = scan(&stale);
  if (step) {
    s = *step;
  } else if (step_counter_.defined()) {
    s = step_counter_.value().item<int64_t>();
  } else {
    s = kept.empty() ? 1 : kept.back().first + 1;
  }
  STRATA_CHECK(s >= 0, "CheckpointManager::save: the step must be >= 0, got ", s);
  if (!force && checkpoint_interval_ > 0 && last_step_ && s < *last_step_ + checkpoint_interval_)
    return "";
  const std::string prefix = (directory_ / (name_ + "-" + std::to_string(s))).string();
  // The newest save goes last (save order), also when an older timeline has higher steps.
  std::erase_if(kept, [&](const auto& entry) { return entry.second == prefix; });
  kept.emplace_back(s, prefix);
  if (!options.enable_async_checkpoint) {
    bool committed = false;
    try {
      commit(std::move(kept), prefix, std::move(stale), checkpoint_.snapshot(s, /*own_copies=*/false),
             options.write_hooks, &committed);
    } catch (...) {
      if (committed) last_step_ = s;  // written; dropping older ones or the final listing failed
      throw;
    }
    last_step_ = s;
    return prefix;
  }
  // The values are taken now, on this thread (with any collective that takes); the files
  // are written behind the caller's back.
  auto snapshot = std::make_shared<const CheckpointSnapshot>(checkpoint_.snapshot(s, /*own_copies=*/true));
  write_committed_ = false;
  writer_ = std::thread([this, kept = std::move(kept), prefix, stale = std::move(stale), snapshot,
                         hooks = options.write_hooks]() mutable {
    try {
      commit(std::move(kept), prefix, std::move(stale), *snapshot, hooks, &write_committed_);
    } catch (...) {
      write_error_ = std::current_exception();
    }
  });
  // Only once the writer runs (starting a thread can fail, and then nothing was saved).
  step_before_write_ = last_step_;
  last_step_ = s;
  return prefix;
}

void CheckpointManager::commit(std::vector<std::pair<int64_t, std::string>> kept, const std::string& prefix,
                               std::vector<std::string> stale, const CheckpointSnapshot& snapshot,
                               const AtomicWriteHooks& hooks, bool* committed) const {
  // Listed as pending before it is written, so that files this save leaves behind if it
  // fails (or a crash) are known and removed by the next save, and never taken for a
  // checkpoint: the prefix may hold an abandoned run's older files (a run resumed from an
  // earlier step saves under the same names), which must not become the latest. It
  // counts once its manifest is committed carrying this save's id (read_index), so a crash
  // before the state file is rewritten below loses nothing.
  std::string previous;
  for (const auto& entry : kept)
    if (entry.second != prefix) previous = entry.second;  // kept is in save order
  std::erase(stale, prefix);  // written again now
  const std::string save_id = new_save_id();
  write_index(kept, previous, stale, prefix, save_id);
  CheckpointSnapshot stamped = snapshot;  // tensor handles: no copy of the values
  stamped.metadata["save_id"] = save_id;
  stamped.write(prefix, hooks);
  *committed = true;
  for (const std::string& p : stale) remove_checkpoint(p);
  if (max_to_keep_ > 0) {
    // Delete the oldest saves beyond max_to_keep, never the checkpoint just written.
    size_t excess = kept.size() > size_t(max_to_keep_) ? kept.size() - size_t(max_to_keep_) : 0;
    std::vector<std::pair<int64_t, std::string>> remaining;
    for (const auto& entry : kept) {
      if (excess > 0 && entry.second != prefix) {
        remove_checkpoint(entry.second);
        --excess;
      } else {
        remaining.push_back(entry);
      }
    }
    kept = std::move(remaining);
  }
  write_index(kept, prefix);
}

void CheckpointManager::wait_for_write() const {
  if (!writer_.joinable()) return;
  writer_.join();
  // A save that failed before its manifest was committed did not happen; one that failed
  // afterwards (dropping older checkpoints) did.
  if (write_error_ && !write_committed_) last_step_ = step_before_write_;
}

void CheckpointManager::sync() {
  wait_for_write();
  if (std::exception_ptr error = std::exchange(write_error_, nullptr)) std::rethrow_exception(error);
}

CheckpointManager::~CheckpointManager() {
  wait_for_write();
  if (!write_error_) return;
  try {
    std::rethrow_exception(write_error_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "CheckpointManager: an asynchronous save to %s failed: %s\n", directory_.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "CheckpointManager: an asynchronous save to %s failed\n", directory_.c_str());
  }
}

std::optional<int64_t> CheckpointManager::last_checkpoint_step() const {
  wait_for_write();
  return last_step_;
}

std::optional<std::string> CheckpointManager::latest_checkpoint() const {
  wait_for_write();
  const auto all = scan();
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  wait_for_write();
  std::vector<std::string> out;
  for (const auto& [step, prefix] : scan()) out.push_back(prefix);
  return out;
}

RestoreStatus CheckpointManager::restore(const std::string& prefix) {
  sync();
  RestoreStatus status = checkpoint_.restore(prefix);
  if (status.step) last_step_ = status.step;
  return status;
}

std::string CheckpointManager::restore_or_initialize() {
  sync();
  if (auto latest = latest_checkpoint()) {
    try {
      restore(*latest);
    } catch (const Error& e) {
      // Only a damaged file gets the hint: when the latest loads, the program and the
      // checkpoint disagree (another model), and older checkpoints would disagree too.
      if (loads_intact(*latest)) throw;
      std::string intact;
      int64_t intact_step = 0;
      const auto all = scan();
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (it->second != *latest && loads_intact(it->second)) {
          intact = it->second;
          intact_step = it->first;
          break;
        }
      }
      if (intact.empty()) {
        fail("CheckpointManager: the latest checkpoint ", *latest, " cannot be restored and no older checkpoint in ",
             directory_.string(), " loads intact: ", e.what());
      }
      fail("CheckpointManager: the latest checkpoint ", *latest, " cannot be restored: ", e.what(),
           ". The newest intact checkpoint is ", intact, " (step ", intact_step,
           "): restore it explicitly to resume from there (strata-train: --restore-checkpoint ", intact, ")");
    }
    return *latest;
  }
  if (init_fn_) init_fn_();
  return "";
}

}  // namespace strata::train
