// IteratorState: the saved position of a dataset iterator, so that a checkpoint can resume
// input exactly where it stopped.
//
// A state is a flat vector of int64 words: a header (magic, version, the iteration key
// that seeds reshuffling) followed by one record per pipeline stage, outermost first.
// Each record starts with the stage's tag, so restoring into a pipeline of a different
// shape fails with a strata::Error instead of silently reading garbage. States hold
// positions, counters and seeds, never element data: stages that buffer elements
// (shuffle, prefetch, parallel map, unbatch, cache) re-derive them on restore by
// replaying their deterministic input from a recorded anchor (see data/dataset_node.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::data {

struct IteratorState {
  std::vector<int64_t> words;

  bool empty() const { return words.empty(); }
  // A printable form ("sdata1 <n> <w0> <w1> ...") for checkpoint manifests.
  std::string to_string() const;
  // Parses to_string()'s form; throws strata::Error on anything else.
  static IteratorState from_string(const std::string& text);
  friend bool operator==(const IteratorState&, const IteratorState&) = default;
};

namespace detail {

// The tag that opens each stage's record in a saved state.
enum class StageTag : int64_t {
  TensorSlices = 1,
  Range,
  Generator,
  Map,
  Filter,
  Batch,
  Unbatch,
  Shuffle,
  Repeat,
  Take,
  Skip,
  Shard,
  Zip,
  Enumerate,
  Cache,
  Prefetch,
  BinaryRecords,
  // distribute::DistributedDataset's stage that splits global batches between replicas
  // (distribute/replica_split_stage.h).
  ReplicaSplit,
  // distribute_datasets_from_function's stage that reads one pipeline per replica
  // (InputReplicationMode::PerReplica, distribute/replica_pipelines_stage.h).
  ReplicaPipelines,
  Last = ReplicaPipelines,
};
const char* stage_tag_name(StageTag tag);

// Appends a stage's record to a state.
class StateWriter {
 public:
  explicit StateWriter(std::vector<int64_t>& words) : words_(words) {}
  void stage(StageTag tag);
  void put(int64_t v) { words_.push_back(v); }
  void put_u64(uint64_t v) { words_.push_back(static_cast<int64_t>(v)); }
  // Appends an already-serialised nested state (e.g. an upstream anchor).
  void append(std::span<const int64_t> words) { words_.insert(words_.end(), words.begin(), words.end()); }

 private:
  std::vector<int64_t>& words_;
};

// Reads a state back, checking that each stage finds its own record.
class StateReader {
 public:
  explicit StateReader(std::span<const int64_t> words) : words_(words) {}
  // Throws unless the next word is `tag`'s marker.
  void stage(StageTag tag);
  // Whether the next word is `tag`'s marker (consumes nothing): for a stage that also
  // accepts the record an older version of it wrote.
  bool next_is(StageTag tag) const;
  // Reads one word; `what` names it in the error raised when the state is too short.
  int64_t get(const char* what);
  uint64_t get_u64(const char* what) { return static_cast<uint64_t>(get(what)); }
  // get() that also checks lo <= value <= hi.
  int64_t get_in(const char* what, int64_t lo, int64_t hi);
  bool done() const { return pos_ == words_.size(); }
  size_t position() const { return pos_; }

 private:
  std::span<const int64_t> words_;
  size_t pos_ = 0;
};

}  // namespace detail
}  // namespace strata::data
