// SharedMemoryGroup: the ranks of a multi-process group that run on one machine, joined
// by one POSIX shared-memory segment, so that all_reduce, reduce_scatter and all_gather
// move their bytes with memcpy instead of through the kernel's loopback TCP stack.
//
// Why: with workers on one machine (one process per core or NUMA node, the common
// single-host multi-process job), Gloo's TCP transport spends most of a small
// all-reduce's time in the kernel (send and receive copies, epoll, waking its loop
// thread and then the caller): a quarter of a 2-worker MLP step's CPU time. Here each
// rank copies its bytes into its slot of the segment once and reads its peers' slots
// directly; a rank waiting for a peer polls briefly, then sleeps on a futex in the
// segment.
//
// The algorithm, per round of at most chunk_bytes: each rank copies its chunk into its
// slot and publishes the round number ("arrived"); once every rank has arrived, each
// computes the whole reduction itself, ((slot 0 op slot 1) op slot 2) ..., in rank order,
// into its own buffer, and publishes that it has read the round ("done"). With 3 or more
// ranks and rounds of 64 KB or more, each rank instead folds one n-th of the round (the
// same combines, in the same order), publishes it ("reduced") and copies the others':
// every rank then reads about two rounds' bytes instead of one per rank. Every rank
// therefore gets the same bits, and the same bits as Gloo's direct exchange in
// gloo_communicator.cc, which folds in the same order. reduce_scatter's rounds stage a
// piece of every rank's part side by side in the slot, and each rank folds only the
// pieces of its own part (the same order); all_gather's rounds stage this rank's part and
// every rank copies the others'. Each rank has two slots used in alternate rounds, so a
// rank overwrites a slot only after every peer has read it, which it has almost always
// done by then.
//
// Joining is a rendezvous through the group's store: rank 0 creates the segment
// (shm_open with a random name, mode 0600, so only processes of the same user can open
// it), publishes its name and a random token, every rank opens it and checks the token,
// and rank 0 unlinks the name once all have opened it (nothing is left in /dev/shm, even
// if the job is killed later). Ranks on different machines, or in different IPC or PID
// namespaces (containers), fail to open it or to see each other's processes, and every
// rank then gets null from join() and the caller keeps using TCP; so does a group whose
// segment does not fit in /dev/shm (its pages are reserved at creation, never touched
// into a SIGBUS later).
//
// Failure: no wait is unbounded. A wait throws std::runtime_error when the call's deadline
// passes, when the peer it waits for has destroyed its group (closed its communicator)
// or its process has exited (checked through /proc while sleeping, with
// the process start time so that a reused pid is not mistaken for the peer), or when
// the group was aborted: abort() (any thread: a heartbeat that found a stalled peer, a
// rank whose collective failed) marks the segment so that every rank's waits throw.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace strata::distribute {

class TcpStore;

struct SharedMemoryGroupOptions {
  int rank = 0;
  int size = 1;
  TcpStore* store = nullptr;  // the group's rendezvous store
  std::string prefix;         // the group's store namespace (its keys go under prefix/shm/)
  double timeout_seconds = 300.0;  // bounds each wait of the join
  size_t chunk_bytes = size_t(1) << 20;  // bytes each rank stages per round (a multiple of 8)
};

class SharedMemoryGroup {
 public:
  using Clock = std::chrono::steady_clock;
  // out = a (op) b over n elements; out may alias a or b.
  using Combine = void (*)(void* out, const void* a, const void* b, size_t n);

  // Every rank of the group calls join (a rendezvous through the store). Returns the
  // group on every rank, or null on every rank, with the reason in *why_not, when some
  // rank cannot share a segment with the others. Store failures (a peer that never
  // comes) throw strata::Error.
  static std::unique_ptr<SharedMemoryGroup> join(const SharedMemoryGroupOptions& options, std::string* why_not);
  ~SharedMemoryGroup();
  SharedMemoryGroup(const SharedMemoryGroup&) = delete;
  SharedMemoryGroup& operator=(const SharedMemoryGroup&) = delete;

  // Reduces `data` (bytes, whole elements of element_size) in place across the ranks, in
  // rank order. Throws std::runtime_error (see above) by `deadline` at the latest.
  void all_reduce(void* data, size_t bytes, size_t element_size, Combine combine, Clock::time_point deadline);
  // `input` holds size() parts of part_bytes; `output` (part_bytes, not overlapping the
  // input) gets this rank's part reduced across the ranks: part rank() of rank 0's input,
  // combined with rank 1's, ... in rank order (the bits of all_reduce and of Gloo's direct
  // exchange). Each round stages a piece of every part, so a rank reads only its own.
  void reduce_scatter(const void* input, void* output, size_t part_bytes, size_t element_size, Combine combine,
                      Clock::time_point deadline);
  // `output` holds size() parts of part_bytes, this rank's already in place at rank() *
  // part_bytes; every other rank's part is copied into its place.
  void all_gather(void* output, size_t part_bytes, Clock::time_point deadline);
  // Fails every rank's current and later waits. Safe from any thread.
  void abort();

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  struct Header;
  struct RankState;
  SharedMemoryGroup(int rank, int size, size_t chunk_bytes, void* base, size_t mapped_bytes);
  Header& header() const;
  static RankState* state_in(void* base, int rank);  // rank's state in a mapped segment
  RankState& state(int rank) const;
  uint8_t* slot(int rank, uint64_t round) const;
  // A round: begin_round waits until this rank's slot for the next round is free again
  // (every peer has read the round before last) and returns the round; arrive publishes
  // that the slot is staged and waits for every peer's; finish publishes that this rank
  // has read them.
  uint64_t begin_round(const char* op, Clock::time_point deadline);
  void arrive(uint64_t round, Clock::time_point deadline);
  void finish(uint64_t round);
  void publish(uint64_t RankState::*field, uint64_t value);
  void wake_all();
  void wait_for_all(uint64_t RankState::*field, uint64_t target, Clock::time_point deadline);
  [[noreturn]] void fail_wait(const char* what, uint64_t target, const std::string& cause) const;

  int rank_;
  int size_;
  size_t chunk_bytes_;
  void* base_;
  size_t mapped_bytes_;
  uint64_t round_ = 0;  // rounds completed by this rank (the same on every rank between calls)
  const char* op_ = "all_reduce";  // the collective under way, for errors
  std::atomic<bool> aborted_here_{false};
};

}  // namespace strata::distribute
