// The dataset stage through which experimental_distribute_dataset hands global batches to
// a worker's replicas (TensorFlow's rebatching), with a position that can be saved.
//
// Each input element (a batch) is split along axis 0 into `total_parts` parts, one per
// replica of the job, with split_batch's sizes (below); B, the full batch size those sizes
// are computed from, is the largest batch this iterator has seen, and is saved with its
// position, so a job resumed at its last, shorter batch splits it as the uninterrupted job
// did. Each output element is `local_parts` parts, flattened: part r's
// components are [r*k, (r+1)*k), each placed on devices[r] when `fetch`.
//
//  - Keep (one process; Data auto-sharding across workers): every input batch yields one
//    output element, parts [first_part, first_part + local_parts) of it.
//  - Rebatch (File or Off auto-sharding): each worker reads batches of its own, every part
//    of them is queued, and each output element takes the next `local_parts` parts, so
//    one batch read feeds total_parts / local_parts steps (total_parts is a multiple of
//    local_parts: replicas in sync are workers times replicas per worker).
//
// The saved record holds B and, in Rebatch mode when parts of a batch are still queued, the
// input's state before that batch and how many of its parts were taken (parts are queued
// from one batch at a time: a batch holds total_parts >= local_parts of them), so restore
// re-reads that batch instead of saving tensors. A record saved in Keep mode restores in
// either mode and under any replica count; one with queued parts only where total_parts is
// the same. The record of the plain map this stage replaced (strata before 2026-11-28) is
// accepted too, with B learned again.
#pragma once

#include <vector>

#include <strata/core/device.h>
#include <strata/data/dataset.h>

namespace strata::distribute {

struct ReplicaSplitOptions {
  enum class Mode { Keep, Rebatch };
  Mode mode = Mode::Keep;
  int total_parts = 1;  // replicas in sync over the whole job
  int first_part = 0;   // Keep: this worker's first replica's part
  int local_parts = 1;  // this worker's replicas: parts per output element
  std::vector<Device> devices;  // one per local replica
  bool fetch = true;            // copy each part to its replica's device
};

// The examples each replica gets of a batch of `batch` rows when full batches have
// `full_batch` rows (TensorFlow's rebatching: the first full_batch % replicas replicas get
// one example more than the others, and a shorter batch fills the replicas in order up to
// those sizes; distributed_dataset.h has examples). Sums to `batch`.
std::vector<int64_t> split_sizes(int64_t batch, int64_t full_batch, int replicas);
// Splits every component of a batch along axis 0 with those sizes (views, no copies).
std::vector<data::Batch> split_batch(const data::Batch& batch, int replicas, int64_t full_batch = 0);

// `input` split between replicas as above (throws strata::Error on inconsistent options).
data::Dataset split_between_replicas(const data::Dataset& input, ReplicaSplitOptions options);

}  // namespace strata::distribute
