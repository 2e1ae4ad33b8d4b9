#include <strata/train/actions.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include <strata/core/error.h>
#include <strata/train/atomic_file.h>

namespace strata::train {

NewBestMetric::NewBestMetric(std::string metric, bool higher_is_better, std::filesystem::path filename)
    : metric_(std::move(metric)), higher_is_better_(higher_is_better), filename_(std::move(filename)) {
  STRATA_CHECK(!metric_.empty(), "NewBestMetric: the metric name is empty");
  if (filename_.empty()) return;
  // Orbit's JSONPersistedValue makes the file's directory up front.
  if (filename_.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(filename_.parent_path(), ec);
    STRATA_CHECK(!ec, "NewBestMetric: cannot create the directory ", filename_.parent_path().string(),
                 " of its file: ", ec.message());
  }
  if (!std::filesystem::exists(filename_)) return;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(filename_), nullptr, /*allow_exceptions=*/false);
  STRATA_CHECK(j.is_object() && j.contains("metric") && j.at("metric").is_string() && j.contains("best") &&
                   j.at("best").is_number(),
               "NewBestMetric: ", filename_.string(), " is not a best-metric file (expected {\"metric\": ..., "
               "\"best\": <number>}); remove it to start over");
  const std::string saved = j.at("metric").get<std::string>();
  STRATA_CHECK(saved == metric_, "NewBestMetric: ", filename_.string(), " holds the best value of '", saved,
               "', not of '", metric_, "'");
  best_ = j.at("best").get<double>();
}

double NewBestMetric::metric_value(const Outputs& outputs) const {
  const auto it = outputs.find(metric_);
  if (it == outputs.end()) {
    std::string names;
    for (const auto& [name, value] : outputs) names += (names.empty() ? "" : ", ") + name;
    fail("NewBestMetric: the outputs have no '", metric_, "' (they have: ", names.empty() ? "none" : names, ")");
  }
  return it->second;
}

bool NewBestMetric::test(const Outputs& outputs) const {
  const double value = metric_value(outputs);
  if (std::isnan(value)) return false;
  if (!best_) return true;
  return higher_is_better_ ? value > *best_ : value < *best_;
}

void NewBestMetric::commit(double value) {
  best_ = value;
  if (filename_.empty()) return;
  const nlohmann::json j = {{"metric", metric_}, {"best", value}, {"higher_is_better", higher_is_better_}};
  write_file_atomic(filename_, j.dump() + "\n");
}

bool NewBestMetric::operator()(const Outputs& outputs) {
  if (!test(outputs)) return false;
  commit(metric_value(outputs));
  return true;
}

}  // namespace strata::train
