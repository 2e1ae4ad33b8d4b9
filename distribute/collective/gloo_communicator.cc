#include <strata/distribute/collective/gloo_communicator.h>

#include <strata/core/error.h>
#include <strata/distribute/collective/tcp_store.h>

#ifdef STRATA_HAS_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>
#endif

namespace strata::distribute {

#ifndef STRATA_HAS_GLOO

bool gloo_available() { return false; }

std::unique_ptr<Communicator> make_gloo_communicator(const GlooCommunicatorOptions& options) {
  fail("make_gloo_communicator: strata was built without Gloo (install libgloo-dev and configure with "
       "-DSTRATA_WITH_GLOO=ON), so rank ", options.rank, " of ", options.size,
       " cannot join a Gloo group");
}

#else

bool gloo_available() { return true; }

std::unique_ptr<Communicator> make_gloo_communicator(const GlooCommunicatorOptions& options) {
  return std::make_unique<GlooCommunicator>(options);
}

namespace {

using Millis = std::chrono::milliseconds;

Millis to_millis(double seconds) { return Millis(int64_t(std::ceil(seconds * 1000.0))); }

// What is left of a call's deadline for one more wait (at least 1 ms).
Millis time_left(std::chrono::steady_clock::time_point deadline) {
  return std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now()));
}

std::string seconds_str(double s) {
  std::ostringstream os;
  os << s << " s";
  return os.str();
}

std::string live_key(const std::string& prefix, int rank) { return HeartbeatMonitor::live_key(prefix, rank); }

// Same local address (family, address, port)?
bool same_socket_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(x.sin6_addr)) == 0;
  }
  return false;
}

// "1, 2 and 3"
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i)
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return out;
}

// Gloo's rendezvous store interface over TcpStore. Gloo keys its pair addresses by rank
// ("0", "1", ...); a timed-out wait is reported by rank rather than by key. Every wait
// gets the whole rendezvous timeout, whatever Gloo passes (its context's timeout, which
// during a retried connection attempt bounds only the pairs' handshake): a rank's process
// may start late.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(TcpStore& store, std::string prefix, int rank, int size, double timeout_seconds)
      : store_(store), prefix_(std::move(prefix)), rank_(rank), size_(size), timeout_(timeout_seconds) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    const std::string v = store_.get(prefix_ + key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys, const Millis&) override { wait(keys); }
  void wait(const std::vector<std::string>& keys) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    try {
      store_.wait(full, timeout_);
    } catch (const Error& e) {
      std::vector<std::string> missing;
      for (size_t i = 0; i < keys.size(); ++i)
        if (!store_.check({full[i]})) missing.push_back(keys[i]);
      if (missing.empty()) throw;
      std::string names;
      for (size_t i = 0; i < missing.size(); ++i) names += (i ? ", " : "") + missing[i];
      fail("gloo rendezvous: rank ", rank_, " of ", size_, " waited ", seconds_str(timeout_), " for rank(s) ",
           names, " to join group '", prefix_, "' at the store ", store_.address(),
           ": they never arrived (store key(s) '", prefix_, missing[0], "'", missing.size() > 1 ? ", ..." : "",
           " missing)");
    }
  }

 private:
  TcpStore& store_;
  std::string prefix_;
  int rank_, size_;
  double timeout_;
};

// Gloo's TCP transport writes to its sockets without MSG_NOSIGNAL, so a peer that dies
// mid-collective would kill this process with SIGPIPE instead of raising an error. Like
// Python (under which PyTorch's Gloo runs), ignore SIGPIPE — unless the program installed
// its own handler, which is left alone.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
        !(current.sa_flags & SA_SIGINFO))
      ::signal(SIGPIPE, SIG_IGN);
  });
}

template <typename T>
void divide(void* data, int64_t n, int size) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = T(p[i] / T(size));
}

void divide_by(void* data, DType dtype, int64_t n, int size) {
  switch (dtype) {
    case DType::Float32: return divide<float>(data, n, size);
    case DType::Float64: return divide<double>(data, n, size);
    case DType::Int32: return divide<int32_t>(data, n, size);
    case DType::Int64: return divide<int64_t>(data, n, size);
    default: fail("gloo: cannot divide dtype ", dtype);
  }
}

// Gloo's elementwise reduction for one dtype and op.
template <typename T>
gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
    case ReduceOp::Max: return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
    case ReduceOp::Min: return [](void* c, const void* a, const void* b, size_t n) { gloo::min<T>(c, a, b, n); };
  }
  fail("gloo: unknown reduce op");
}

// out = a (op) b, elementwise. A plain loop the compiler vectorises; a, b and out may
// alias. Max and Min are written as gloo::max and gloo::min are (std::max, std::min): a
// comparison with a NaN is false, so a NaN in `a` is kept and a NaN in `b` is dropped.
// The direct exchange folds the ranks in rank order with the running result as `a`, so
// a NaN reaches a max or min only from rank 0 (or a running result that already holds
// one); a NaN in a sum propagates from any rank.
template <typename T, ReduceOp kOp>
void combine(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kOp == ReduceOp::Max) {
      o[i] = x[i] < y[i] ? y[i] : x[i];
    } else if constexpr (kOp == ReduceOp::Min) {
      o[i] = y[i] < x[i] ? y[i] : x[i];
    } else {
      o[i] = T(x[i] + y[i]);
    }
  }
}

template <typename T>
void (*combine_fn(ReduceOp op))(void*, const void*, const void*, size_t) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return &combine<T, ReduceOp::Sum>;
    case ReduceOp::Max: return &combine<T, ReduceOp::Max>;
    case ReduceOp::Min: return &combine<T, ReduceOp::Min>;
  }
  fail("gloo: unknown reduce op");
}

// The direct exchange's slots (Gloo's own collectives use prefixes 0x01-0x08).
constexpr uint8_t kDirectSlotPrefix = 0x41;
// The all-gather round of the scatter-gather all-reduce (its first round uses the above).
constexpr uint8_t kScatterGatherSlotPrefix = 0x42;
// The pairs' proofs of the job secret when a mesh is connected (prove_pairs).
constexpr uint8_t kPairProofSlotPrefix = 0x43;
// Segments of the direct exchange: large enough that per-message costs (a wake-up of
// Gloo's loop thread and of this one) stay small against the bytes, small enough that
// summing one segment overlaps receiving the next ones. kDirectWindow segments per peer
// are in flight (the scratch buffer holds that many).
constexpr size_t kDirectSegment = size_t(512) << 10;
constexpr size_t kDirectWindow = 8;

}  // namespace

// What a collective is, for error messages. Put into words only when a call fails, so
// that a successful call builds no strings.
struct GlooCommunicator::Call {
  const char* op;
  int64_t numel = -1;  // -1: a call without data (barrier)
  DType dtype = DType::Float32;
  const char* reduce = nullptr;  // the reduce op's name, where there is one
  int root = -1;                 // broadcast's root
  bool per_rank = false;         // numel counts each rank's part (all_gather)
  std::string what() const {
    if (numel < 0) return "no data";
    std::ostringstream os;
    os << numel << " " << dtype_name(dtype) << " elements" << (per_rank ? " per rank" : "");
    if (reduce) os << ", " << reduce;
    if (root >= 0) os << ", root " << root;
    return os.str();
  }
};

GlooCommunicator::GlooCommunicator(const GlooCommunicatorOptions& options)
    : rank_(options.rank), size_(options.size), options_(options) {
  STRATA_CHECK(options.size >= 1, "gloo: group size must be >= 1, got ", options.size);
  STRATA_CHECK(options.rank >= 0 && options.rank < options.size, "gloo: rank ", options.rank,
               " is out of range for a group of ", options.size);
  STRATA_CHECK(options.store != nullptr, "gloo: rank ", options.rank, ": no rendezvous store given");
  STRATA_CHECK(options.comm.timeout_seconds > 0, "gloo: timeout_seconds must be positive, got ",
               options.comm.timeout_seconds);
  STRATA_CHECK(!options.prefix.empty(), "gloo: the store prefix must not be empty");
  TcpStore& store = *options.store;
  const std::string& prefix = options.prefix;
  ignore_sigpipe_once();

  // A second group on the same prefix would read the first one's stale addresses and hang
  // in connect: count the joiners instead.
  const int64_t joined = store.add(prefix + "/joined", 1);
  STRATA_CHECK(joined <= size_, "gloo: store prefix '", prefix, "' at ", store.address(),
               " was already used by another group (", joined, " joins for a group of ", size_,
               "): give each group its own prefix");
  store.set_ephemeral(live_key(prefix, rank_), "1");
  if (options.heartbeat_store && size_ > 1) {
    STRATA_CHECK(options.comm.stall_timeout_seconds > 0, "gloo: stall_timeout_seconds must be positive, got ",
                 options.comm.stall_timeout_seconds);
    HeartbeatOptions h;
    h.store = options.heartbeat_store;
    h.prefix = prefix;
    h.rank = rank_;
    h.size = size_;
    h.member = options.member;
    h.stall_timeout_seconds = options.comm.stall_timeout_seconds;
    h.store_host_rank = options.store_host_rank;
    h.on_stall = [this] { abort_connections(); };
    // Before the mesh connects: every member's first record then exists when it is done.
    monitor_ = std::make_unique<HeartbeatMonitor>(std::move(h));
  }

  context_ = connect_mesh();
  if (size_ > 1 && options.comm.shared_memory &&
      options.comm.implementation == CommunicationImplementation::Auto) {
    SharedMemoryGroupOptions shm;
    shm.rank = rank_;
    shm.size = size_;
    shm.store = &store;
    shm.prefix = prefix;
    shm.timeout_seconds = options.comm.timeout_seconds;
    shm_ = SharedMemoryGroup::join(shm, &shm_unavailable_);
  }
}

namespace {
// What `from` proves to `to` over their pair in the attempt with this nonce.
std::string pair_proof_message(const std::string& nonce, const std::string& group, int from, int to) {
  return strata::detail::concat("strata-gloo-pair-v1 ", nonce, '\0', group, '\0', from, ' ', to);
}

// Every rank sends each peer its proof of the job secret over their pair and checks the
// peer's (see make_gloo_communicator): throws std::runtime_error, failing the attempt,
// when a peer's proof is wrong or does not come within `seconds`.
//
// Each peer's proof travels in buffers of its own, and every send and receive is waited
// for, failed or not, before any buffer is freed: Gloo's I/O thread may still complete an
// operation on a buffer whose wait has given up (one pair's failure fails a buffer shared
// by every pair at once, while the other pairs' proofs are still arriving), and the
// buffer's destructor orders itself after that late completion only through a reference
// count ThreadSanitizer cannot see in Debian's uninstrumented libgloo.
void prove_pairs(gloo::Context& context, const JobSecret& secret, const std::string& nonce, const std::string& group,
                 const std::string& member, double seconds) {
  const int rank = context.rank, size = context.size;
  constexpr size_t kProof = std::tuple_size_v<Digest>;
  std::vector<uint8_t> sent(kProof * size_t(size)), received(kProof * size_t(size));
  const uint64_t slot = gloo::Slot::build(kPairProofSlotPrefix, 0);
  const auto peers = size_t(size);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> inbound(peers), outbound(peers);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const Digest proof = secret.mac(pair_proof_message(nonce, group, rank, p));
    std::memcpy(sent.data() + kProof * size_t(p), proof.data(), kProof);
    inbound[size_t(p)] = context.createUnboundBuffer(received.data() + kProof * size_t(p), kProof);
    outbound[size_t(p)] = context.createUnboundBuffer(sent.data() + kProof * size_t(p), kProof);
  }
  for (int p = 0; p < size; ++p)
    if (p != rank) inbound[size_t(p)]->recv(p, slot);
  for (int p = 0; p < size; ++p)
    if (p != rank) outbound[size_t(p)]->send(p, slot);
  const auto deadline = std::chrono::steady_clock::now() + to_millis(seconds);
  std::string first_error;
  const auto settle = [&](const std::function<bool()>& wait, const char* what) {
    try {
      if (!wait() && first_error.empty()) first_error = strata::detail::concat("the ", what, " was aborted");
    } catch (const std::exception& e) {
      if (first_error.empty()) first_error = e.what();
    }
  };
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    settle([&] { return inbound[size_t(p)]->waitRecv(time_left(deadline)); }, "receive");
    settle([&] { return outbound[size_t(p)]->waitSend(time_left(deadline)); }, "send");
  }
  if (!first_error.empty())
    throw std::runtime_error(strata::detail::concat("proving the job secret over the pairs: ", first_error));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const std::string_view proof(reinterpret_cast<const char*>(received.data() + kProof * size_t(p)), kProof);
    if (!secret.verify(pair_proof_message(nonce, group, p, rank), proof)) {
      const std::string why = strata::detail::concat(
          "the connection in ", member, " ", p, "'s place did not prove the job secret (another process reached this "
          "rank's Gloo port first, or ", member, " ", p, " has another secret)");
      std::cerr << strata::detail::concat("strata: gloo: ", member, " ", rank, ": ", why, "\n") << std::flush;
      throw std::runtime_error(why);
    }
  }
}
}  // namespace

// One attempt at the full mesh, under its own store keys. connectFullMesh can return on
// one rank while a peer is still finishing its side of the handshake; a rank that then
// left at once (a group that never calls a collective) would break the peer's connect. A
// barrier makes the attempt end together. Tag 0 is never used by a collective (their tags
// count from 1).
std::shared_ptr<gloo::Context> GlooCommunicator::connect_attempt(int attempt, double handshake_seconds) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  context->setTimeout(to_millis(handshake_seconds));
  gloo::transport::tcp::attr attr;
  attr.hostname = options_.hostname;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  const std::string mesh = options_.prefix + "/mesh/" + std::to_string(attempt) + "/";
  // The attempt's nonce for the pairs' proofs, through the authenticated store.
  if (rank_ == 0 && size_ > 1) options_.store->set(mesh + "nonce", random_bytes(32));
  GlooStore gstore(*options_.store, mesh, rank_, size_, options_.comm.timeout_seconds);
  context->connectFullMesh(gstore, device);
  if (options_.connect_fault_for_testing) options_.connect_fault_for_testing(attempt);
  if (size_ > 1) {
    prove_pairs(*context, options_.pair_secret_for_testing ? *options_.pair_secret_for_testing : options_.store->secret(),
                options_.store->get(mesh + "nonce", options_.comm.timeout_seconds), options_.prefix, options_.member,
                handshake_seconds);
    gloo::BarrierOptions opts(context);
    opts.setTag(0);
    opts.setTimeout(to_millis(handshake_seconds));
    gloo::barrier(opts);
  }
  // Collectives pass their own timeouts; anything else Gloo times gets the whole one.
  context->setTimeout(to_millis(options_.comm.timeout_seconds));
  return context;
}

// Every rank publishes whether its attempt connected; all keep the mesh only when every
// one did (a rank whose own side succeeded while a peer's failed must not keep pairs the
// peer has closed). Waiting for the verdicts is bounded: a rank whose attempt is still
// running finishes it within its handshake bound, or it is named.
std::shared_ptr<gloo::Context> GlooCommunicator::connect_mesh() {
  TcpStore& store = *options_.store;
  const std::string& prefix = options_.prefix;
  const double timeout = options_.comm.timeout_seconds;
  for (int attempt = 0;; ++attempt) {
    connect_attempts_ = attempt + 1;
    const bool last = attempt + 1 == kConnectAttempts;
    std::shared_ptr<gloo::Context> context;
    std::string error;
    try {
      context = connect_attempt(attempt, last ? timeout : std::min(timeout, kRetriedHandshakeSeconds));
    } catch (const Error&) {
      throw;  // not the handshake: a rank that never joined, an unreachable store
    } catch (const std::exception& e) {  // gloo::EnforceNotMet, gloo::IoException, ...
      error = e.what();
    }
    if (size_ == 1) return context;
    const std::string verdicts = prefix + "/mesh/" + std::to_string(attempt) + "/connected/";
    static const std::string kFailed = "failed: ";  // a verdict: "connected", or this and why
    store.set(verdicts + std::to_string(rank_), error.empty() ? "connected" : kFailed + error);
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(verdicts + std::to_string(r));
    try {
      store.wait(keys, timeout);
    } catch (const Error&) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r)
        if (!store.check({keys[size_t(r)]})) missing.push_back(r);
      const std::string gone = gone_ranks();
      fail("gloo: ", options_.member, " ", rank_, " of ", size_, " could not connect group '", prefix, "': ",
           options_.member, "(s) ", rank_list(missing), " did not finish connection attempt ", attempt + 1,
           " within ", seconds_str(timeout), gone.empty() ? "" : " (" + gone + ")",
           error.empty() ? "" : "; here: " + error);
    }
    std::string failed;  // "rank 2: connect ...: Connection refused; ..."
    for (int r = 0; r < size_; ++r) {
      const std::string verdict = r == rank_ ? std::string() : store.get(keys[size_t(r)], timeout);
      const std::string why = r == rank_ ? error : verdict.starts_with(kFailed) ? verdict.substr(kFailed.size()) : "";
      if (!why.empty()) failed += (failed.empty() ? "" : "; ") + options_.member + " " + std::to_string(r) + ": " + why;
    }
    if (failed.empty()) return context;
    context.reset();  // closes this rank's pairs before the group's next attempt
    if (last) {
      const std::string gone = gone_ranks();
      fail("gloo: ", options_.member, " ", rank_, " of ", size_, " could not connect group '", prefix, "' in ",
           kConnectAttempts, " attempts", gone.empty() ? "" : ": " + gone, "; the last failed on ", failed);
    }
  }
}

GlooCommunicator::~GlooCommunicator() {
  monitor_.reset();  // its thread may touch context_
}

const char* GlooCommunicator::allreduce_algorithm(int64_t bytes) const {
  if (options_.comm.implementation == CommunicationImplementation::Ring) return "ring";
  if (shm_) return "shared_memory";
  const int64_t direct_max = options_.direct_max_bytes >= 0 ? options_.direct_max_bytes
                             : size_ <= 2                    ? int64_t(512) << 10
                                                             : int64_t(768) << 10;
  const int64_t direct_again =
      options_.direct_again_bytes >= 0 ? options_.direct_again_bytes : std::numeric_limits<int64_t>::max();
  if (bytes <= direct_max || bytes >= direct_again) return "direct";
  const int64_t ring_min = options_.ring_min_bytes >= 0 ? options_.ring_min_bytes : int64_t(4) << 20;
  const int64_t bcube_min = options_.bcube_min_bytes >= 0 ? options_.bcube_min_bytes
                            : size_ <= 2                   ? 0
                                                           : ring_min;
  if (bytes < bcube_min) return "scatter_gather";
  return bytes < ring_min ? "bcube" : "ring";
}

void GlooCommunicator::check_usable(const char* op) const {
  std::string why = broken_;
  std::optional<PeerFailure> peer = broken_by_peer_;
  if (why.empty() && monitor_) {
    // A stall found after the last collective returned: its sockets are shut down.
    if (auto v = monitor_->verdict()) {
      why = v->describe(options_.member, options_.comm.stall_timeout_seconds);
      peer = PeerFailure(why, options_.member, v->rank, PeerFailureCause::Stalled);
    }
  }
  if (why.empty()) return;
  const std::string message = strata::detail::concat("gloo ", op, ": ", options_.member, " ", rank_, " of ", size_,
                                             ": the communicator is unusable after an earlier failure: ", why);
  if (peer) throw peer->with_message(message);
  throw Error(message);
}

// Members whose store liveness key is gone, i.e. whose process closed its store
// connection. A member that died a moment ago may still look alive to the store, so look
// a few times. Sets *first_gone (the lowest gone rank) and *store_unreachable when given.
std::string GlooCommunicator::gone_ranks(int* first_gone, bool* store_unreachable) {
  int unused_rank;
  bool unused_flag;
  if (!first_gone) first_gone = &unused_rank;
  if (!store_unreachable) store_unreachable = &unused_flag;
  *first_gone = -1;
  *store_unreachable = false;
  const std::string& member = options_.member;
  if (!options_.store) return {};
  try {
    const auto deadline =
        std::chrono::steady_clock::now() + std::min(Millis(1000), to_millis(options_.comm.timeout_seconds));
    for (;;) {
      std::vector<int> gone;
      for (int r = 0; r < size_; ++r)
        if (r != rank_ && !options_.store->check({live_key(options_.prefix, r)})) gone.push_back(r);
      if (!gone.empty()) *first_gone = gone[0];
      if (gone.size() == 1)
        return member + " " + std::to_string(gone[0]) + " is gone (its process left the rendezvous store)";
      if (!gone.empty())
        return member + "s " + rank_list(gone) + " are gone (their processes left the rendezvous store)";
      if (std::chrono::steady_clock::now() >= deadline) return {};
      std::this_thread::sleep_for(Millis(50));
    }
  } catch (const Error& e) {
    *store_unreachable = true;
    const std::string host = options_.store_host_rank >= 0
                                 ? member + " " + std::to_string(options_.store_host_rank)
                                 : std::string("the chief, rank 0");
    return "the rendezvous store is unreachable, so its host (" + host + ") is probably gone: " + e.what();
  }
}

// Why a collective failed, as far as this member can tell.
struct GlooCommunicator::Diagnosis {
  std::string text;
  int rank = -1;  // the peer at fault, when one is
  PeerFailureCause cause = PeerFailureCause::Gone;
};

GlooCommunicator::Diagnosis GlooCommunicator::diagnose() {
  const std::string& member = options_.member;
  const double stall = options_.comm.stall_timeout_seconds;
  // 1. This member's heartbeat thread found a stalled peer (and woke this call).
  if (monitor_) {
    if (auto v = monitor_->verdict()) return {v->describe(member, stall), v->rank, PeerFailureCause::Stalled};
  }
  // 2. Another member found one and shut its connections down, which woke this call.
  if (monitor_ && options_.store) {
    if (auto v = HeartbeatMonitor::published_verdict(*options_.store, options_.prefix); v && v->rank != rank_)
      return {v->describe(member, stall) + " (found by another " + member + ")", v->rank, PeerFailureCause::Stalled};
  }
  // 3. Peers whose processes are gone.
  int first_gone = -1;
  bool unreachable = false;
  std::string gone = gone_ranks(&first_gone, &unreachable);
  if (first_gone >= 0) return {gone, first_gone, PeerFailureCause::Gone};
  if (unreachable) return {gone, options_.store_host_rank, PeerFailureCause::Gone};
  // 4. Peers that are alive but behind (their heartbeats say where they are).
  std::vector<int> behind;
  int64_t behind_at = -1;
  if (monitor_ && options_.store) {
    const auto progress = HeartbeatMonitor::peer_progress(*options_.store, options_.prefix, size_);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || progress[size_t(r)] < 0 || progress[size_t(r)] >= int64_t(calls_)) continue;
      if (behind.empty()) behind_at = progress[size_t(r)];
      behind.push_back(r);
    }
  }
  if (!behind.empty()) {
    std::ostringstream os;
    os << member << (behind.size() > 1 ? "s " : " ") << rank_list(behind) << (behind.size() > 1 ? " are" : " is")
       << " alive (heartbeats go on) but did not reach collective #" << calls_ << " within "
       << seconds_str(options_.comm.timeout_seconds) << " (" << member << " " << behind[0] << " is at #" << behind_at
       << "): a step that slow, or one that hangs in its own code";
    return {os.str(), behind[0], PeerFailureCause::Behind};
  }
  return {"every other " + member + " is still connected to the store" +
              std::string(monitor_ ? " and has reached this collective" : "") +
              ", so a peer is slow or stuck (did every " + member +
              " call the same collectives in the same order?)",
          -1, PeerFailureCause::Gone};
}

void GlooCommunicator::fail_call(const Call& call, const std::string& cause) {
  const Diagnosis d = diagnose();
  std::ostringstream os;
  os << "gloo " << call.op << " failed on " << options_.member << " " << rank_ << " of " << size_ << " (collective #"
     << calls_ << ", " << call.what() << ", timeout " << seconds_str(options_.comm.timeout_seconds);
  if (monitor_) os << ", stall timeout " << seconds_str(options_.comm.stall_timeout_seconds);
  os << "): " << d.text << "; gloo said: " << cause;
  broken_ = os.str();
  if (shm_) shm_->abort();  // releases the peers waiting in shared memory
  if (d.rank >= 0) {
    broken_by_peer_ = PeerFailure(broken_, options_.member, d.rank, d.cause);
    throw *broken_by_peer_;
  }
  throw Error(broken_);
}

// Gloo cannot cancel a collective in flight; closing its connections makes the blocked
// call fail at once ("connection closed"). The sockets are found by their local
// addresses (each pair's own) and shut down, not closed: Gloo still owns and closes the
// descriptors, so none can be reused under it.
void GlooCommunicator::abort_connections() {
  if (shm_) shm_->abort();
  if (!context_) return;
  std::vector<sockaddr_storage> mine;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto& pair = context_->getPair(r);
    if (!pair) continue;
    if (const auto* a = dynamic_cast<const gloo::transport::tcp::Address*>(&pair->address()))
      mine.push_back(a->getSockaddr());
  }
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  const int own = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    for (const auto& m : mine) {
      if (same_socket_address(local, m)) {
        ::shutdown(int(fd), SHUT_RDWR);
        break;
      }
    }
  }
  ::closedir(dir);
}

template <typename Fn>
void GlooCommunicator::run(const Call& call, Fn&& fn) {
  ++calls_;
  // The heartbeat thread judges peers only while this member waits in a collective.
  struct Waiting {
    HeartbeatMonitor* monitor;
    ~Waiting() {
      if (monitor) monitor->leave();
    }
  } waiting{monitor_.get()};
  if (monitor_) monitor_->enter(int64_t(calls_));
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // gloo::EnforceNotMet, gloo::IoException, ...
    fail_call(call, e.what());
  }
}

namespace {

void check_cpu_contiguous(const Tensor& t, const char* op, const char* name) {
  STRATA_CHECK(t.defined(), "gloo ", op, ": ", name, " is an undefined tensor");
  STRATA_CHECK(t.device().is_cpu(), "gloo ", op, ": ", name, " is on ", t.device(),
               "; the Gloo backend works on CPU tensors");
  STRATA_CHECK(t.is_contiguous(), "gloo ", op, ": ", name, " of shape ", shape_str(t.shape()),
               " is not contiguous (collectives work in place on contiguous tensors)");
}

void check_reducible(const Tensor& t, const char* op) {
  const DType d = t.dtype();
  STRATA_CHECK(d != DType::Bool, "gloo ", op, ": cannot reduce a bool tensor (expected float32, float64, "
               "float16, bfloat16, int32 or int64)");
}

using CombineFn = void (*)(void*, const void*, const void*, size_t);

CombineFn combine_for(DType dtype, ReduceOp op, const char* opname) {
  switch (dtype) {
    case DType::Float32: return combine_fn<float>(op);
    case DType::Float64: return combine_fn<double>(op);
    case DType::Int32: return combine_fn<int32_t>(op);
    case DType::Int64: return combine_fn<int64_t>(op);
    default: fail("gloo ", opname, ": no native reduction for ", dtype);
  }
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

uint8_t* GlooCommunicator::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    scratch_.reset();  // the old one first: the two need not both fit
    scratch_bytes_ = 0;
    scratch_ = std::make_unique<uint8_t[]>(bytes);
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

GlooCommunicator::Deadline GlooCommunicator::deadline() const {
  return std::chrono::steady_clock::now() + to_millis(options_.comm.timeout_seconds);
}

void GlooCommunicator::direct_reduce(const uint8_t* const* send_for, const size_t* send_bytes, const uint8_t* local,
                                     uint8_t* out, size_t bytes, size_t element_size, Combine combine,
                                     Deadline deadline) {
  // Every message is cut into segments of the receiver's: seg(b) for a part of b bytes.
  const auto seg_of = [](size_t b) { return std::min(b, kDirectSegment); };  // a multiple of every element size
  const auto count_of = [&](size_t b) { return (b + seg_of(b) - 1) / seg_of(b); };
  const auto length_of = [&](size_t b, size_t k) { return std::min(seg_of(b), b - k * seg_of(b)); };
  const auto to = [&](int p) { return send_bytes ? send_bytes[p] : bytes; };
  const size_t seg = seg_of(bytes);
  const size_t segments = count_of(bytes);
  const size_t window = std::min(segments, kDirectWindow);
  const size_t slot_bytes = window * seg;  // per peer
  uint8_t* received = scratch(size_t(size_ - 1) * slot_bytes);
  const auto peer_slots = [&](int p) { return received + size_t(p < rank_ ? p : p - 1) * slot_bytes; };
  const uint64_t slot = gloo::Slot::build(kDirectSlotPrefix, uint32_t(calls_));
  const auto left = [&] { return time_left(deadline); };
  // One buffer per peer and direction: Gloo completes a buffer's operations with one
  // peer in order, so the k-th completed wait is segment k.
  const size_t ranks = static_cast<size_t>(size_);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> receiver(ranks), sender(ranks);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    receiver[size_t(p)] = context_->createUnboundBuffer(peer_slots(p), slot_bytes);
    sender[size_t(p)] = context_->createUnboundBuffer(const_cast<uint8_t*>(send_for[p]), to(p));
  }
  // Receives first, then every send: Gloo writes a send once the peer has announced a
  // receive for it, so at most `window` segments per peer are in flight.
  for (size_t k = 0; k < window; ++k)
    for (int p = 0; p < size_; ++p)
      if (p != rank_) receiver[size_t(p)]->recv(p, slot, k * seg, length_of(bytes, k));
  const size_t most_sent = send_bytes ? *std::max_element(send_bytes, send_bytes + size_) : bytes;
  for (size_t k = 0; k < count_of(most_sent); ++k)
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && k < count_of(to(p))) sender[size_t(p)]->send(p, slot, k * seg_of(to(p)), length_of(to(p), k));
  const bool out_is_local = out == local;
  // All-reduce in place sends `out` itself: a segment is overwritten only after it has
  // gone out to every peer (then every peer is sent `bytes`, segmented as received).
  bool out_is_sent = false;
  for (int p = 0; p < size_; ++p) out_is_sent |= p != rank_ && send_for[p] == out;
  for (size_t k = 0; k < segments; ++k) {
    const size_t offset = k * seg;
    const size_t in_slot = (k % window) * seg;
    const size_t n = length_of(bytes, k) / element_size;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (!receiver[size_t(p)]->waitRecv(left())) throw std::runtime_error("the receive was aborted");
      if (out_is_sent && !sender[size_t(p)]->waitSend(left())) throw std::runtime_error("the send was aborted");
    }
    // ((c0 op c1) op c2) ...: every rank combines in the same order, so every rank gets
    // the same bits (float addition is commutative but not associative).
    const auto part = [&](int q) -> uint8_t* {
      return q == rank_ ? const_cast<uint8_t*>(local) + offset : peer_slots(q) + in_slot;
    };
    uint8_t* o = out + offset;
    if (!out_is_local) {
      combine(o, part(0), part(1), n);
      for (int q = 2; q < size_; ++q) combine(o, o, part(q), n);
    } else if (rank_ == 0) {
      for (int q = 1; q < size_; ++q) combine(o, o, part(q), n);
    } else {
      // The ranks before this one are combined in peer 0's slot, then with this rank's
      // own values (in that order), then the ranks after it.
      uint8_t* before = part(0);
      for (int q = 1; q < rank_; ++q) combine(before, before, part(q), n);
      combine(o, before, o, n);
      for (int q = rank_ + 1; q < size_; ++q) combine(o, o, part(q), n);
    }
    if (k + window < segments)
      for (int p = 0; p < size_; ++p)
        if (p != rank_) receiver[size_t(p)]->recv(p, slot, in_slot, length_of(bytes, k + window));
  }
  if (!out_is_sent)
    for (int p = 0; p < size_; ++p)
      for (size_t k = 0; p != rank_ && k < count_of(to(p)); ++k)
        if (!sender[size_t(p)]->waitSend(left())) throw std::runtime_error("the send was aborted");
}

void GlooCommunicator::scatter_gather_reduce(uint8_t* data, int64_t n, size_t element_size, Combine combine) {
  // One deadline for the whole call, both rounds.
  const Deadline deadline = this->deadline();
  // Part p of the buffer (p's share of the reduction): n / size elements, one more for
  // the first n % size parts.
  const size_t ranks = static_cast<size_t>(size_);
  std::vector<size_t> offset(ranks), length(ranks);
  std::vector<const uint8_t*> send_for(ranks);
  for (size_t p = 0, at = 0; p < ranks; ++p) {
    const int64_t elems = n / size_ + (int64_t(p) < n % size_ ? 1 : 0);
    offset[p] = at;
    length[p] = size_t(elems) * element_size;
    send_for[p] = data + at;
    at += length[p];
  }
  const size_t mine = size_t(rank_);
  uint8_t* own = data + offset[mine];
  // Round 1, a reduce-scatter: every peer is sent its part, and this rank's part is
  // reduced in place from every rank's (the direct exchange over one part per peer).
  direct_reduce(send_for.data(), length.data(), own, own, length[mine], element_size, combine, deadline);
  // Round 2, an all-gather: this rank's reduced part to every peer, theirs into place
  // (the parts this rank sent in round 1 are overwritten only after those sends
  // completed, and a peer's part arrives only once its receive is posted below).
  const uint64_t slot = gloo::Slot::build(kScatterGatherSlotPrefix, uint32_t(calls_));
  size_t total = 0;
  for (size_t l : length) total += l;
  auto buffer = context_->createUnboundBuffer(data, total);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) buffer->recv(p, slot, offset[size_t(p)], length[size_t(p)]);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) buffer->send(p, slot, offset[mine], length[mine]);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (!buffer->waitRecv(time_left(deadline))) throw std::runtime_error("the receive was aborted");
    if (!buffer->waitSend(time_left(deadline))) throw std::runtime_error("the send was aborted");
  }
}

void GlooCommunicator::reduce_raw(void* data, DType dtype, int64_t n, ReduceOp op, const Call& call) {
  if (size_ == 1 || n == 0) return;
  const size_t element_size = dtype_size(dtype);
  const int64_t bytes = n * int64_t(element_size);
  if (shm_) {
    const CombineFn combine = combine_for(dtype, op, call.op);
    const auto deadline = SharedMemoryGroup::Clock::now() + to_millis(options_.comm.timeout_seconds);
    run(call, [&] { shm_->all_reduce(data, size_t(bytes), element_size, combine, deadline); });
    return;
  }
  const char* algorithm = allreduce_algorithm(bytes);
  // scatter_gather needs a part for every rank; with fewer elements, the direct exchange.
  if (algorithm[0] == 's' && n >= size_) {
    const CombineFn combine = combine_for(dtype, op, call.op);
    run(call, [&] { scatter_gather_reduce(static_cast<uint8_t*>(data), n, element_size, combine); });
    return;
  }
  if (algorithm[0] == 'd' || algorithm[0] == 's') {
    const CombineFn combine = combine_for(dtype, op, call.op);
    auto* p = static_cast<uint8_t*>(data);
    const std::vector<const uint8_t*> send_for(size_t(size_), p);
    run(call, [&] { direct_reduce(send_for.data(), nullptr, p, p, size_t(bytes), element_size, combine, deadline()); });
    return;
  }
  const auto gloo_algorithm = algorithm[0] == 'r' ? gloo::AllreduceOptions::Algorithm::RING
                                                  : gloo::AllreduceOptions::Algorithm::BCUBE;
  const uint32_t tag = uint32_t(calls_ + 1);
  run(call, [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setAlgorithm(gloo_algorithm);
    opts.setTimeout(to_millis(options_.comm.timeout_seconds));
    opts.setTag(tag);
    visit_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                    std::is_same_v<T, int64_t>) {
        opts.setOutput(static_cast<T*>(data), size_t(n));
        opts.setReduceFunction(reduce_fn<T>(op));
      } else {
        fail("gloo ", call.op, ": no native reduction for ", dtype);
      }
    });
    gloo::allreduce(opts);
  });
}

void GlooCommunicator::all_reduce(const Tensor& buffer, ReduceOp op) {
  check_usable("all_reduce");
  check_cpu_contiguous(buffer, "all_reduce", "buffer");
  check_reducible(buffer, "all_reduce");
  const int64_t n = buffer.numel();
  const Call call{"all_reduce", n, buffer.dtype(), reduce_op_name(op)};
  if (is_half(buffer.dtype())) {
    // Reduced in float32 and rounded once at the end, as the CPU kernels compute halves.
    std::vector<float> wide(static_cast<size_t>(n));
    detail::convert_elements(buffer.raw_data(), buffer.dtype(), wide.data(), kFloat32, n);
    reduce_raw(wide.data(), kFloat32, n, op, call);
    if (op == ReduceOp::Mean) divide_by(wide.data(), kFloat32, n, size_);
    detail::convert_elements(wide.data(), kFloat32, buffer.raw_data(), buffer.dtype(), n);
    return;
  }
  reduce_raw(buffer.raw_data(), buffer.dtype(), n, op, call);
  if (op == ReduceOp::Mean) divide_by(buffer.raw_data(), buffer.dtype(), n, size_);
}

void GlooCommunicator::broadcast(const Tensor& buffer, int root) {
  check_usable("broadcast");
  check_cpu_contiguous(buffer, "broadcast", "buffer");
  STRATA_CHECK(root >= 0 && root < size_, "gloo broadcast: root ", root, " is out of range for a group of ",
               size_);
  const Call call{"broadcast", buffer.numel(), buffer.dtype(), nullptr, root};
  if (size_ == 1 || buffer.nbytes() == 0) return;
  const uint32_t tag = uint32_t(calls_ + 1);
  run(call, [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(buffer.raw_data()), buffer.nbytes());
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(to_millis(options_.comm.timeout_seconds));
    gloo::broadcast(opts);
  });
}

void GlooCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  check_usable("all_gather");
  check_cpu_contiguous(input, "all_gather", "input");
  check_cpu_contiguous(output, "all_gather", "output");
  STRATA_CHECK(input.dtype() == output.dtype(), "gloo all_gather: input dtype ", input.dtype(),
               " differs from output dtype ", output.dtype());
  Shape want = input.shape();
  if (want.empty()) {
    want = {size_};
  } else {
    want[0] *= size_;
  }
  STRATA_CHECK(output.shape() == want, "gloo all_gather: output has shape ", shape_str(output.shape()),
               ", expected ", shape_str(want), " (", size_, " ranks x input ", shape_str(input.shape()), ")");
  Call call{"all_gather", input.numel(), input.dtype()};
  call.per_rank = true;
  const size_t bytes = input.nbytes();
  if (bytes == 0) return;
  auto* out = static_cast<uint8_t*>(output.raw_data());
  auto* in = static_cast<const uint8_t*>(input.raw_data());
  uint8_t* slot = out + size_t(rank_) * bytes;
  // Place this rank's part first; a staging copy when the input overlaps the output
  // elsewhere than its own slot.
  if (in != slot) {
    if (overlaps(in, bytes, out, size_t(size_) * bytes)) {
      std::vector<uint8_t> staged(in, in + bytes);
      std::memcpy(slot, staged.data(), bytes);
    } else {
      std::memcpy(slot, in, bytes);
    }
  }
  if (size_ == 1) return;
  if (shm_) {
    run(call, [&] { shm_->all_gather(out, bytes, deadline()); });
    return;
  }
  const uint32_t tag = uint32_t(calls_ + 1);
  run(call, [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setOutput(out, bytes * size_t(size_));  // in place: this rank's slot is filled
    opts.setTag(tag);
    opts.setTimeout(to_millis(options_.comm.timeout_seconds));
    gloo::allgather(opts);
  });
}

void GlooCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  check_usable("reduce_scatter");
  check_cpu_contiguous(input, "reduce_scatter", "input");
  check_cpu_contiguous(output, "reduce_scatter", "output");
  check_reducible(input, "reduce_scatter");
  STRATA_CHECK(input.dtype() == output.dtype(), "gloo reduce_scatter: input dtype ", input.dtype(),
               " differs from output dtype ", output.dtype());
  STRATA_CHECK(input.ndim() >= 1 && input.dim(0) % size_ == 0, "gloo reduce_scatter: input of shape ",
               shape_str(input.shape()), " cannot be split into ", size_, " equal parts along axis 0");
  Shape want = input.shape();
  want[0] /= size_;
  STRATA_CHECK(output.shape() == want, "gloo reduce_scatter: output has shape ", shape_str(output.shape()),
               ", expected ", shape_str(want), " (input ", shape_str(input.shape()), " / ", size_, " ranks)");
  const int64_t n = input.numel();
  const Call call{"reduce_scatter", n, input.dtype(), reduce_op_name(op)};
  const int64_t part = n / size_;
  if (part == 0) return;
  const DType wide = is_half(input.dtype()) ? kFloat32 : input.dtype();
  const size_t element_size = dtype_size(wide);
  const size_t part_bytes = size_t(part) * element_size;
  // A real reduce-scatter: each rank sends every peer only that peer's slice and combines
  // the slices it receives for its own (the direct exchange, over one part per peer: the
  // bytes of the ring's reduce-scatter, in one round). The input is sent from where it
  // is; a copy is made only for halves (reduced in float32) or when the output overlaps
  // the input (it is written while the input still goes out).
  const uint8_t* src = static_cast<const uint8_t*>(input.raw_data());
  std::vector<uint8_t> staged;
  if (wide != input.dtype() || overlaps(src, input.nbytes(), output.raw_data(), output.nbytes())) {
    staged.resize(size_t(n) * element_size);
    detail::convert_elements(src, input.dtype(), staged.data(), wide, n);
    src = staged.data();
  }
  uint8_t* dst = static_cast<uint8_t*>(output.raw_data());
  std::vector<uint8_t> wide_out;
  if (wide != output.dtype()) {
    wide_out.resize(part_bytes);
    dst = wide_out.data();
  }
  const uint8_t* mine = src + size_t(rank_) * part_bytes;
  if (size_ == 1) {
    std::memcpy(dst, mine, part_bytes);
  } else {
    const CombineFn combine = combine_for(wide, op, "reduce_scatter");
    if (shm_) {
      run(call, [&] { shm_->reduce_scatter(src, dst, part_bytes, element_size, combine, deadline()); });
    } else {
      std::vector<const uint8_t*> send_for(static_cast<size_t>(size_));
      for (int p = 0; p < size_; ++p) send_for[size_t(p)] = src + size_t(p) * part_bytes;
      run(call,
          [&] { direct_reduce(send_for.data(), nullptr, mine, dst, part_bytes, element_size, combine, deadline()); });
    }
    if (op == ReduceOp::Mean) divide_by(dst, wide, part, size_);
  }
  if (dst != output.raw_data()) detail::convert_elements(dst, wide, output.raw_data(), output.dtype(), part);
}

void GlooCommunicator::barrier() {
  check_usable("barrier");
  if (size_ == 1) return;
  const uint32_t tag = uint32_t(calls_ + 1);
  run(Call{"barrier"}, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(to_millis(options_.comm.timeout_seconds));
    gloo::barrier(opts);
  });
}

#endif  // STRATA_HAS_GLOO

}  // namespace strata::distribute
