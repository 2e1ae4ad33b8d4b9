#include <strata/data/input_context.h>

#include <algorithm>
#include <cctype>

#include <strata/core/error.h>

namespace strata::data {

const char* auto_shard_policy_name(AutoShardPolicy policy) {
  switch (policy) {
    case AutoShardPolicy::Off: return "off";
    case AutoShardPolicy::Auto: return "auto";
    case AutoShardPolicy::File: return "file";
    case AutoShardPolicy::Data: return "data";
  }
  return "unknown";
}

AutoShardPolicy auto_shard_policy_from_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "off") return AutoShardPolicy::Off;
  if (lower == "auto") return AutoShardPolicy::Auto;
  if (lower == "file") return AutoShardPolicy::File;
  if (lower == "data") return AutoShardPolicy::Data;
  fail("auto_shard_policy_from_name: unknown policy '", name, "' (expected off, auto, file or data)");
}

InputContext::InputContext(int64_t num_input_pipelines, int64_t input_pipeline_id,
                           int64_t num_replicas_in_sync)
    : num_input_pipelines_(num_input_pipelines),
      input_pipeline_id_(input_pipeline_id),
      num_replicas_in_sync_(num_replicas_in_sync) {
  STRATA_CHECK(num_input_pipelines >= 1, "InputContext: num_input_pipelines must be >= 1, got ",
               num_input_pipelines);
  STRATA_CHECK(input_pipeline_id >= 0 && input_pipeline_id < num_input_pipelines,
               "InputContext: input_pipeline_id ", input_pipeline_id, " outside [0, ",
               num_input_pipelines, ")");
  STRATA_CHECK(num_replicas_in_sync >= 1, "InputContext: num_replicas_in_sync must be >= 1, got ",
               num_replicas_in_sync);
}

int64_t InputContext::get_per_replica_batch_size(int64_t global_batch_size) const {
  STRATA_CHECK(global_batch_size >= 0, "InputContext::get_per_replica_batch_size: global batch ",
               "size must be >= 0, got ", global_batch_size);
  STRATA_CHECK(global_batch_size % num_replicas_in_sync_ == 0,
               "InputContext::get_per_replica_batch_size: global batch size ", global_batch_size,
               " is not divisible by num_replicas_in_sync ", num_replicas_in_sync_);
  return global_batch_size / num_replicas_in_sync_;
}

}  // namespace strata::data
