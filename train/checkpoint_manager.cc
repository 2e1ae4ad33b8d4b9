// CheckpointManager (declared in train/checkpoint.h).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <system_error>

#include <strata/core/error.h>
#include <strata/train/atomic_file.h>
#include <strata/train/checkpoint.h>
#include <strata/train/checkpoint_file.h>

namespace strata::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr const char* kManifestSuffix = ".manifest.json";
}

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
  if (step_counter_.defined())
    STRATA_CHECK(is_integral(step_counter_.dtype()) && step_counter_.shape().empty(),
                 "CheckpointManager: step_counter must be an integer scalar, got ",
                 dtype_name(step_counter_.dtype()), " ", shape_str(step_counter_.shape()));
  std::error_code ec;
  fs::create_directories(directory_, ec);
  STRATA_CHECK(!ec, "CheckpointManager: cannot create directory ", directory_, ": ", ec.message());
  const auto existing = scan();
  if (!existing.empty()) last_step_ = existing.back().first;
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::scan() const {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  const std::string lead = name_ + "-";
  for (fs::directory_iterator it(directory_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (is_atomic_temp_name(file)) continue;
    if (file.size() <= lead.size() + std::string(kManifestSuffix).size()) continue;
    if (file.compare(0, lead.size(), lead) != 0) continue;
    if (!file.ends_with(kManifestSuffix)) continue;
    const std::string digits =
        file.substr(lead.size(), file.size() - lead.size() - std::string(kManifestSuffix).size());
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    const int64_t step = std::stoll(digits);
    out.emplace_back(step, (directory_ / (lead + digits)).string());
  }
  STRATA_CHECK(!ec, "CheckpointManager: cannot list ", directory_, ": ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

void CheckpointManager::write_index(const std::vector<std::pair<int64_t, std::string>>& kept) const {
  json list = json::array();
  for (const auto& [step, prefix] : kept)
    list.push_back({{"name", fs::path(prefix).filename().string()}, {"step", step}});
  json index = {{"format", "strata.checkpoint_index"},
                {"version", 1},
                {"latest", kept.empty() ? json(nullptr)
                                        : json(fs::path(kept.back().second).filename().string())},
                {"checkpoints", list}};
  write_file_atomic(index_path(), index.dump(2) + "\n");
}

std::string CheckpointManager::save(std::optional<int64_t> step, bool force) {
  int64_t s;
  if (step) {
    s = *step;
  } else if (step_counter_.defined()) {
    s = step_counter_.value().item<int64_t>();
  } else {
    const auto existing = scan();
    s = existing.empty() ? 1 : existing.back().first + 1;
  }
  STRATA_CHECK(s >= 0, "CheckpointManager::save: the step must be >= 0, got ", s);
  if (!force && checkpoint_interval_ > 0 && last_step_ && s < *last_step_ + checkpoint_interval_)
    return "";
  const std::string prefix = (directory_ / (name_ + "-" + std::to_string(s))).string();
  checkpoint_.save(prefix, s);
  last_step_ = s;

  auto kept = scan();
  if (max_to_keep_ > 0) {
    // Delete the lowest steps beyond max_to_keep, never the checkpoint just written.
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
  write_index(kept);
  return prefix;
}

std::optional<std::string> CheckpointManager::latest_checkpoint() const {
  const auto all = scan();
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::string> out;
  for (const auto& [step, prefix] : scan()) out.push_back(prefix);
  return out;
}

RestoreStatus CheckpointManager::restore(const std::string& prefix) {
  RestoreStatus status = checkpoint_.restore(prefix);
  if (status.step) last_step_ = status.step;
  return status;
}

std::string CheckpointManager::restore_or_initialize() {
  if (auto latest = latest_checkpoint()) {
    restore(*latest);
    return *latest;
  }
  if (init_fn_) init_fn_();
  return "";
}

}  // namespace strata::train
