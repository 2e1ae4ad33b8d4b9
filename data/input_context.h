// InputContext and AutoShardPolicy: what a distributed input pipeline needs to know about
// its place in the job, as in tf.distribute.InputContext / tf.data AutoShardPolicy.
#pragma once

#include <cstdint>
#include <string>

namespace strata::data {

// How a distributed dataset splits its input across workers.
enum class AutoShardPolicy {
  Off,   // every worker reads the whole dataset
  Auto,  // File when the pipeline reads several files, otherwise Data
  File,  // each worker reads a disjoint subset of the input files
  Data,  // each worker reads everything and keeps every n-th element
};
const char* auto_shard_policy_name(AutoShardPolicy policy);
// "off" | "auto" | "file" | "data" (case-insensitive); throws strata::Error otherwise.
AutoShardPolicy auto_shard_policy_from_name(const std::string& name);

// Handed to a dataset function by Strategy::distribute_datasets_from_function: which
// input pipeline this is and how many replicas the global batch is split across.
class InputContext {
 public:
  // Throws unless 1 <= num_input_pipelines, 0 <= input_pipeline_id < num_input_pipelines
  // and num_replicas_in_sync >= 1.
  explicit InputContext(int64_t num_input_pipelines = 1, int64_t input_pipeline_id = 0,
                        int64_t num_replicas_in_sync = 1);

  int64_t num_input_pipelines() const { return num_input_pipelines_; }
  int64_t input_pipeline_id() const { return input_pipeline_id_; }
  int64_t num_replicas_in_sync() const { return num_replicas_in_sync_; }
  // global_batch_size / num_replicas_in_sync; throws when it does not divide evenly.
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const;

 private:
  int64_t num_input_pipelines_;
  int64_t input_pipeline_id_;
  int64_t num_replicas_in_sync_;
};

}  // namespace strata::data
