// InputOptions: how a distributed dataset feeds the replicas (tf.distribute.InputOptions).
#pragma once

#include <cstdint>

#include <strata/data/input_context.h>

namespace strata::distribute {

// How many input pipelines distribute_datasets_from_function builds
// (tf.distribute.InputReplicationMode).
enum class InputReplicationMode {
  // The function is called once per worker; that dataset's per-replica batches are handed
  // to the worker's replicas in turn.
  PerWorker,
  // The function is called once per replica, with the replica's id as the input pipeline
  // id of the job's num_replicas_in_sync pipelines; each replica reads only its own.
  PerReplica,
};
const char* input_replication_mode_name(InputReplicationMode mode);

struct InputOptions {
  // Copy each replica's part of the batch to that replica's device (in the prefetch
  // thread), as TensorFlow does for logical and physical devices alike; to a GPU the copy
  // is non-blocking on the device's input stream (distribute/device_fetch.h).
  bool experimental_fetch_to_device = true;
  // Batches prepared ahead per replica on a background thread (0: none).
  int64_t experimental_per_replica_buffer_size = 1;
  // How experimental_distribute_dataset splits the input across workers (multi-worker
  // strategies; TensorFlow keeps it in the dataset's options). See distributed_dataset.h.
  data::AutoShardPolicy auto_shard_policy = data::AutoShardPolicy::Auto;
  // distribute_datasets_from_function only (experimental_distribute_dataset refuses
  // PerReplica, as TensorFlow does).
  InputReplicationMode experimental_replication_mode = InputReplicationMode::PerWorker;
};

}  // namespace strata::distribute
