// The dataset stage through which distribute_datasets_from_function feeds each replica
// from a pipeline of its own (InputReplicationMode::PerReplica).
//
// One input dataset per local replica. Each output element is one element of every input,
// flattened as split_between_replicas' are (replica r's components are [r*k, (r+1)*k)), each
// placed on devices[r] when `fetch`. The replicas' pipelines may end at different steps:
// a replica whose pipeline has ended gets an empty batch (axis 0 of extent 0) shaped like
// the first replica's that still has one, so every replica still runs the step, and the
// stage ends when every pipeline has ended. Every replica's elements must have the same
// number of components.
//
// The saved record holds every input's position and which inputs have ended; it restores
// only into the same number of replicas (each replica's position is its own).
#pragma once

#include <vector>

#include <strata/core/device.h>
#include <strata/data/dataset.h>

namespace strata::distribute {

// `inputs[r]` feeds local replica r on devices[r] (throws strata::Error unless there is one
// device per input, and at least one input).
data::Dataset combine_replica_pipelines(const std::vector<data::Dataset>& inputs, std::vector<Device> devices,
                                        bool fetch);

}  // namespace strata::distribute
