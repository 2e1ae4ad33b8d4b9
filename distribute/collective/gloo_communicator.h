// GlooCommunicator: the Communicator of one worker process, running Gloo's CPU
// collectives over TCP between processes (or between threads, each with its own context).
//
// Every call fails within CommunicationOptions::timeout_seconds (plus up to a second
// spent asking the store which ranks are gone) with a strata::Error; nothing hangs.
// Rendezvous goes through a TcpStore (distribute/collective/tcp_store.h): each rank
// publishes its Gloo pair addresses under `prefix`, and a liveness key that the store
// drops when the rank's store connection closes. When a collective fails (a peer died
// or did not arrive within CommunicationOptions::timeout_seconds) the communicator asks
// the store which ranks are gone, so the strata::Error names them. After a failure the
// communicator is unusable: every later call throws (as an aborted NCCL communicator).
//
// Stall detection (with GlooCommunicatorOptions::heartbeat_store): every member runs a
// HeartbeatMonitor (distribute/collective/heartbeat.h, which defines "stall"). A peer
// whose process stops running is named within CommunicationOptions::stall_timeout_seconds
// of waiting for it: the monitor shuts this member's Gloo sockets down (Gloo has no call
// that cancels a collective in flight, so the blocked collective is woken by its
// connections closing) and the collective throws. A peer that runs but lags is waited
// for until timeout_seconds, and then named as behind. Failures caused by a peer — gone,
// stalled, behind — throw PeerFailure (distribute/collective/peer_failure.h), a
// strata::Error that names it, so launchers can tell the root cause from its echoes.
// Creating one sets SIGPIPE to SIG_IGN when it is at its default (Gloo writes to sockets
// without MSG_NOSIGNAL, so a dead peer would otherwise kill the process).
//
// dtypes: float32, float64, int32 and int64 are reduced natively; float16 and bfloat16
// are reduced in float32 and rounded back. broadcast and all_gather move bytes, so they
// take any dtype. Tensors must be contiguous and on the CPU. Mean is Sum divided by
// size() (integer division truncates, as TensorFlow's collective mean on integers).
//
// Built only with Gloo (STRATA_HAS_GLOO, CMake option STRATA_WITH_GLOO and libgloo-dev);
// without it make_gloo_communicator throws "built without Gloo".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <strata/distribute/collective/communicator.h>
#include <strata/distribute/collective/heartbeat.h>
#include <strata/distribute/collective/peer_failure.h>
#include <strata/distribute/collective/shared_memory_group.h>
#include <strata/distribute/job_secret.h>

namespace gloo {
class Context;
}

namespace strata::distribute {

class TcpStore;

struct GlooCommunicatorOptions {
  int rank = 0;
  int size = 1;
  // The job's rendezvous store; shared because the communicator's liveness key lives as
  // long as this client's connection.
  std::shared_ptr<TcpStore> store;
  // Namespace of this group's keys: unique per group on one store (reusing one is an
  // error detected at rendezvous).
  std::string prefix = "gloo";
  // This host's address as peers reach it; Gloo binds its sockets there. Empty: the
  // address of the machine's host name. Tests pass "127.0.0.1".
  std::string hostname;
  // timeout_seconds bounds the rendezvous and every collective; implementation Ring
  // forces the ring all-reduce at every size.
  CommunicationOptions comm;
  // all_reduce picks one of four algorithms by buffer size (allreduce_algorithm()):
  //  - "direct" up to direct_max_bytes, and from direct_again_bytes: every rank sends
  //    its buffer to every other in one round and sums what it receives locally, in
  //    rank order (so every rank computes bit-identical results), in 512 KB segments so
  //    that summing overlaps receiving, into a scratch buffer kept across calls. One
  //    message latency instead of Gloo's 2 log2(n) (bcube) or 2(n-1) (ring) dependent
  //    steps; each rank sends (n-1) x bytes: with 2 ranks as many as the ring, with more
  //    ranks more, which is why it is only for small buffers there. The scratch buffer
  //    holds at most 8 segments (4 MB) per peer and lives as long as the communicator.
  //  - "scatter_gather" below bcube_min_bytes: two rounds, a reduce-scatter (the direct
  //    exchange over one n-th of the buffer per peer: each rank reduces its own part, in
  //    rank order) and an all-gather (each rank sends its reduced part to every peer).
  //    The ring's bytes in 2 dependent steps instead of 2(n-1). With fewer elements than
  //    ranks it runs the direct exchange instead.
  //  - Gloo's "bcube" (recursive halving-doubling) below ring_min_bytes;
  //  - Gloo's pipelined, bandwidth-optimal "ring" from ring_min_bytes.
  // All of this only over TCP: when the ranks share this machine (comm.shared_memory),
  // all_reduce goes through shared memory instead, at every size ("shared_memory"), and
  // so do reduce_scatter and all_gather (ZeRO-1's collectives).
  // -1 (the defaults) picks by group size, from loopback measurements (strata-bench
  // collectives, bench/README.md): with 2 ranks direct up to 512 KB (above it Gloo's own
  // algorithms were faster: the direct exchange measured 0.78-0.94x at 1-4 MB and, with
  // twice the ring's summing, about 0.9x the ring at 32-64 MB), bcube below 4 MB, ring
  // from 4 MB, no scatter_gather (it measured 0.73-0.97x the faster of bcube and ring at
  // 1 MB); with more ranks direct up to 768 KB, scatter_gather below 4 MB, ring from 4 MB
  // (with 4 ranks scatter_gather measured 1.10-1.35x the faster of bcube and ring at
  // 2-3 MB, 0.96-1.16x at 1 MB, and the ring was faster than bcube from 3 MB; measured
  // with 4 ranks only). direct_again_bytes is off by default.
  int64_t direct_max_bytes = -1;
  int64_t direct_again_bytes = -1;
  int64_t bcube_min_bytes = -1;
  int64_t ring_min_bytes = -1;
  // A second client of the same store for the heartbeat thread (its timeout should be
  // comm.stall_timeout_seconds). Null: no heartbeats, so a stalled peer is only found at
  // comm.timeout_seconds, as a peer that did not arrive.
  std::shared_ptr<TcpStore> heartbeat_store;
  // How messages name the members ("worker 1 is gone"), and which member's process
  // hosts the store (-1: none of them), so that a store that stops answering names it.
  std::string member = "rank";
  int store_host_rank = -1;
  // Fault injection for tests: called on this rank after each connection attempt's mesh
  // connected, before the barrier that ends it, with the attempt's index (from 0). A
  // std::exception other than strata::Error thrown here fails this rank's attempt as a
  // refused connect would; a strata::Error fails the construction at once.
  std::function<void(int attempt)> connect_fault_for_testing;
  // For tests: the secret this rank proves to its peers over Gloo's pairs (unset: the
  // store client's), to play a stranger that took a peer's place.
  std::optional<JobSecret> pair_secret_for_testing;
};

// True when strata was built with Gloo.
bool gloo_available();

// Connects to the group (blocks until every rank has joined, up to the timeout).
// Throws strata::Error naming the ranks that did not join, or "built without Gloo".
//
// Gloo's TCP pairs trust whatever connects first to their listening ports, so every
// attempt ends with each rank proving the job secret to each peer over their pair (an
// HMAC of a fresh nonce from the authenticated store and the two ranks, in order): a pair
// that a stranger took fails the attempt, naming the rank whose place it took, and the
// next attempt connects afresh (docs/SECURITY.md).
//
// Gloo's full-mesh connect can fail on a loaded machine (a refused connect; the Gloo
// Debian ships has no retries): the group then connects again, every rank together, up
// to GlooCommunicator::kConnectAttempts times. Each rank publishes the outcome of every
// attempt in the store and the group retries when any rank failed, so no rank keeps a
// mesh that a peer has given up. Attempts before the last bound the pairs' handshake
// (not the wait for late ranks to publish their addresses) by kRetriedHandshakeSeconds.
std::unique_ptr<Communicator> make_gloo_communicator(const GlooCommunicatorOptions& options);

#ifdef STRATA_HAS_GLOO
class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(const GlooCommunicatorOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  void all_reduce(const Tensor& buffer, ReduceOp op) override;
  void broadcast(const Tensor& buffer, int root) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  void barrier() override;

  // "shared_memory", "direct", "scatter_gather", "bcube" or "ring": the algorithm
  // all_reduce uses for a buffer of `bytes` (GlooCommunicatorOptions::direct_max_bytes).
  // reduce_scatter runs the direct exchange on each rank's slice over TCP (the same bits
  // through shared memory); all_gather, Gloo's allgather over TCP.
  const char* allreduce_algorithm(int64_t bytes) const;
  // Whether the collectives go through shared memory, and if not although
  // comm.shared_memory asked for it, why (another machine, no /dev/shm, ...).
  bool uses_shared_memory() const { return shm_ != nullptr; }
  const std::string& shared_memory_unavailable() const { return shm_unavailable_; }
  // The connected Gloo context (for benchmarks that call Gloo directly).
  const std::shared_ptr<gloo::Context>& gloo_context() const { return context_; }
  // How many attempts connecting the mesh took (1 unless one failed somewhere).
  int connect_attempts() const { return connect_attempts_; }

  static constexpr int kConnectAttempts = 3;
  static constexpr double kRetriedHandshakeSeconds = 30.0;

 private:
  struct Call;
  // Connects the full mesh (see make_gloo_communicator): one attempt, then the group's
  // verdict on it.
  std::shared_ptr<gloo::Context> connect_mesh();
  std::shared_ptr<gloo::Context> connect_attempt(int attempt, double handshake_seconds);
  // out = a (op) b over n elements of one dtype.
  using Combine = void (*)(void* out, const void* a, const void* b, size_t n);
  void check_usable(const char* op) const;
  void reduce_raw(void* data, DType dtype, int64_t n, ReduceOp op, const Call& call);
  // The direct exchange (see direct_max_bytes): each peer p is sent send_bytes[p] bytes
  // (all `bytes` when send_bytes is null) from send_for[p] and sends this rank `bytes`;
  // `out` receives, element by element, the reduction in rank order of every rank's
  // contribution (this rank's is `local`). When `out` is also what is sent (all_reduce
  // in place), a segment is overwritten only after it has gone out to every peer.
  // Every wait ends by `deadline` (one for the whole call, however many waits it takes).
  using Deadline = std::chrono::steady_clock::time_point;
  Deadline deadline() const;  // now + CommunicationOptions::timeout_seconds
  void direct_reduce(const uint8_t* const* send_for, const size_t* send_bytes, const uint8_t* local, uint8_t* out,
                     size_t bytes, size_t element_size, Combine combine, Deadline deadline);
  // The scatter-gather all-reduce of n elements in place (see scatter_gather_min_bytes).
  void scatter_gather_reduce(uint8_t* data, int64_t n, size_t element_size, Combine combine);
  uint8_t* scratch(size_t bytes);
  template <typename Fn>
  void run(const Call& call, Fn&& fn);
  [[noreturn]] void fail_call(const Call& call, const std::string& cause);
  struct Diagnosis;
  Diagnosis diagnose();
  std::string gone_ranks(int* first_gone = nullptr, bool* store_unreachable = nullptr);
  // Shuts down this member's Gloo sockets so that a collective blocked on a stalled peer
  // returns (called by the heartbeat thread).
  void abort_connections();

  int rank_;
  int size_;
  GlooCommunicatorOptions options_;
  std::shared_ptr<gloo::Context> context_;
  int connect_attempts_ = 0;
  uint64_t calls_ = 0;
  // The direct exchange's receive buffer, kept across calls (no allocation or page
  // faults per call); grows to the largest window used.
  std::unique_ptr<uint8_t[]> scratch_;
  size_t scratch_bytes_ = 0;
  std::string broken_;  // why the communicator is unusable; empty while healthy
  std::optional<PeerFailure> broken_by_peer_;  // when a peer caused it
  std::unique_ptr<SharedMemoryGroup> shm_;  // every rank on this machine (comm.shared_memory)
  std::string shm_unavailable_;
  std::unique_ptr<HeartbeatMonitor> monitor_;  // with options_.heartbeat_store
};
#endif

}  // namespace strata::distribute
