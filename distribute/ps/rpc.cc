#include <strata/distribute/ps/rpc.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <strata/distribute/cluster_resolver.h>
#include <strata/distribute/ps/rpc_codec.h>

#ifdef STRATA_HAS_ZMQ
#include <netdb.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <zmq.hpp>
#endif

namespace strata::distribute::ps {

const char* rpc_status_name(RpcStatus status) {
  switch (status) {
    case RpcStatus::DeadlineExceeded: return "deadline exceeded";
    case RpcStatus::Unavailable: return "unavailable";
    case RpcStatus::RemoteError: return "remote error";
    case RpcStatus::ProtocolError: return "protocol error";
  }
  return "?";
}

std::string connect_endpoint(const std::string& address) {
  const auto [host, port] = split_host_port(address, "rpc address");
  if (host.find(':') != std::string::npos) return "tcp://[" + host + "]:" + std::to_string(port);
  return "tcp://" + host + ":" + std::to_string(port);
}

#ifdef STRATA_HAS_ZMQ

bool rpc_available() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

// One context per process, never terminated: zmq_ctx_term at exit would wait for sockets
// that detached threads may still hold.
zmq::context_t& context() {
  static auto* ctx = new zmq::context_t(1);
  return *ctx;
}

int to_ms(double seconds) { return int(std::clamp(seconds * 1000.0, 1.0, 2.0e9)); }

// ---- authentication (rpc.h, docs/SECURITY.md)

}  // namespace

// Named (not file-local): RpcServer::Impl and RpcClient::Impl hold them, and a type with
// internal linkage in their members breaks unity builds (-Wsubobject-linkage).
namespace curve_detail {

using CurveKey = std::array<uint8_t, crypto_box_PUBLICKEYBYTES>;

// The job's CURVE keys, derived from its secret: whoever holds the secret can connect to
// any of the job's servers (it knows their public key) and be admitted (it has the client
// key); nobody else can do either. Curve25519 keys from a 32-byte seed: libsodium's
// crypto_box_seed_keypair, the key type ZeroMQ's CURVE uses.
struct PsCurveKeys {
  CurveKey server_public{}, server_secret{}, client_public{}, client_secret{};
  explicit PsCurveKeys(const JobSecret& secret) {
    const Digest server_seed = secret.mac("strata-ps-curve-server-v1");
    const Digest client_seed = secret.mac("strata-ps-curve-client-v1");
    ::crypto_box_seed_keypair(server_public.data(), server_secret.data(), server_seed.data());
    ::crypto_box_seed_keypair(client_public.data(), client_secret.data(), client_seed.data());
  }
};

}  // namespace curve_detail
using curve_detail::CurveKey;
using curve_detail::PsCurveKeys;

namespace {

void set_curve_key(zmq::socket_t& sock, int option, const CurveKey& key) {
  if (::zmq_setsockopt(sock.handle(), option, key.data(), key.size()) != 0) throw zmq::error_t();
}

// What to add to "not reachable": a process without a configured secret made its own,
// which no server of another process accepts.
std::string ps_secret_hint() {
  try {
    if (JobSecret::from_environment()) return {};
  } catch (const std::exception&) {
  }
  return std::string(" (this process has no job secret: a server in another process refuses it; give every process ") +
         "of the job the same " + kJobSecretEnv + " or " + kJobSecretFileEnv + ", as strata-launch does)";
}

// The ZAP handler (ZeroMQ RFC 27) of this process's context: ZeroMQ asks it to admit each
// CURVE client that completed the handshake with one of our servers. Each server
// registers a ZAP domain with the one client key it admits. Started before the first
// server binds, never stopped (like the context).
class PsZapHandler {
 public:
  static PsZapHandler& instance() {
    static auto* handler = new PsZapHandler();
    return *handler;
  }
  std::string add(const CurveKey& client_key, const std::string& server_name) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string domain = "strata-rpc-" + std::to_string(next_++);
    domains_[domain] = {client_key, server_name};
    return domain;
  }
  void remove(const std::string& domain) {
    std::lock_guard<std::mutex> lock(mu_);
    domains_.erase(domain);
  }

 private:
  struct Entry {
    CurveKey client_key;
    std::string server_name;
  };
  PsZapHandler() : sock_(context(), zmq::socket_type::rep) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind("inproc://zeromq.zap.01");
    std::thread([this] { loop(); }).detach();
  }
  void loop() {
    std::vector<zmq::message_t> request;
    for (;;) {
      request.clear();
      try {
        for (;;) {
          zmq::message_t part;
          if (!sock_.recv(part)) break;
          const bool more = part.more();
          request.push_back(std::move(part));
          if (!more) break;
        }
        if (request.size() < 2) continue;  // REP: an answer is owed only to a well-formed request
        const bool ok = admit(request);
        std::vector<zmq::message_t> reply;
        reply.emplace_back(std::string_view("1.0"));
        reply.emplace_back(request[1].data(), request[1].size());
        reply.emplace_back(std::string_view(ok ? "200" : "400"));
        reply.emplace_back(std::string_view(ok ? "OK" : "not this job's client key"));
        reply.emplace_back();
        reply.emplace_back();
        for (size_t i = 0; i < reply.size(); ++i)
          sock_.send(reply[i], i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      } catch (const zmq::error_t&) {
        // EINTR, or a malformed exchange: ZeroMQ fails that handshake; keep serving.
      }
    }
  }
  bool admit(const std::vector<zmq::message_t>& r) {
    // version, request id, domain, address, routing id, mechanism, credentials...
    if (r.size() < 7 || r[0].to_string_view() != "1.0" || r[5].to_string_view() != "CURVE") return false;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = domains_.find(r[2].to_string());
    if (it == domains_.end()) return false;
    const auto& key = it->second.client_key;
    if (r[6].size() == key.size() && ::sodium_memcmp(r[6].data(), key.data(), key.size()) == 0) return true;
    // A peer that knows a server key but not the client key: log its address once.
    if (logged_.size() < 256 && logged_.insert(r[3].to_string()).second)
      std::cerr << "strata: " << it->second.server_name << ": refused a connection from " << r[3].to_string_view()
                << ": not this job's client key (later refusals of this address are not logged)" << std::endl;
    return false;
  }

  zmq::socket_t sock_;
  std::mutex mu_;
  std::map<std::string, Entry> domains_;
  std::set<std::string> logged_;
  uint64_t next_ = 0;
};

// The header frame's encoding lives in rpc_codec.cc (pure, fuzzed).
std::string encode_header(const RpcMessage& m) { return encode_rpc_header(m); }

zmq::message_t tensor_frame(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Device());
  host = host.contiguous();
  // Copied into the frame: the tensor (a variable's storage) may change right after.
  return zmq::message_t(host.raw_data(), host.nbytes());
}

// Decodes frames [first, end) as a header frame followed by tensor frames.
RpcMessage decode(std::vector<zmq::message_t>& parts, size_t first) {
  STRATA_CHECK(parts.size() > first, "rpc: message without a header frame");
  std::vector<std::string_view> tensor_frames;
  for (size_t i = first + 1; i < parts.size(); ++i) tensor_frames.push_back(parts[i].to_string_view());
  return decode_rpc_message(parts[first].to_string_view(), tensor_frames);
}

std::string id_bytes(uint64_t id) { return std::string(reinterpret_cast<const char*>(&id), sizeof(id)); }

// Receives every frame of one multipart message without blocking; false when none waits.
bool recv_all(zmq::socket_t& sock, std::vector<zmq::message_t>& parts) {
  parts.clear();
  for (;;) {
    zmq::message_t part;
    const auto got = sock.recv(part, parts.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!got) return false;
    const bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) return true;
  }
}

// The numeric address a host name resolves to first (as the TcpStore server binds): a
// server given a name listens on that one interface, never on every interface.
std::string resolve_bind_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  STRATA_CHECK(gai == 0 && res != nullptr, "parameter server: cannot resolve the bind address '", host, "': ",
               gai == 0 ? "no address" : ::gai_strerror(gai));
  char text[NI_MAXHOST] = {0};
  const int rc = ::getnameinfo(res->ai_addr, res->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(res);
  STRATA_CHECK(rc == 0, "parameter server: cannot print the address '", host, "' resolves to: ", ::gai_strerror(rc));
  return text;
}

std::string bind_endpoint(const std::string& host, int port) {
  std::string h = host;
  if (h.empty() || h == "localhost") h = "127.0.0.1";
  const bool numeric = h.find_first_not_of("0123456789.") == std::string::npos || h.find(':') != std::string::npos;
  if (!numeric) h = resolve_bind_address(h);
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return "tcp://" + h + ":" + (port == 0 ? std::string("*") : std::to_string(port));
}

}  // namespace

// ---------------------------------------------------------------------------- server

struct RpcServer::Impl {
  std::string host;
  int requested_port = 0;
  int bound_port = 0;
  std::string name;
  std::optional<PsCurveKeys> keys;
  std::string zap_domain;
  // Handshake failures, reported by the socket's monitor (a PAIR socket on inproc).
  std::unique_ptr<zmq::socket_t> monitor;
  std::atomic<int64_t> refused{0};
  ~Impl() {
    if (!zap_domain.empty()) PsZapHandler::instance().remove(zap_domain);
  }
  std::map<std::string, std::pair<Handler, bool>> methods;
  std::unique_ptr<zmq::socket_t> sock;
  int wake_fd = -1;
  std::thread socket_thread, executor_thread;
  std::atomic<bool> stopping{false};
  bool started = false, stopped = false;

  struct Job {
    std::string identity, request_id, method;
    RpcMessage request;
  };
  struct Done {
    std::string identity, request_id;
    bool ok = true;
    std::string error;
    RpcMessage reply;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  std::deque<Done> outbox;

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof(one));
  }

  Done run(const Handler& handler, const Job& job) {
    Done d{job.identity, job.request_id, true, {}, {}};
    try {
      d.reply = handler(job.request);
    } catch (const std::exception& e) {
      d.ok = false;
      d.error = e.what();
    } catch (...) {
      d.ok = false;
      d.error = "unknown exception";
    }
    return d;
  }

  void reply(const Done& d) {
    try {
      std::vector<zmq::message_t> frames;
      frames.emplace_back(d.identity.data(), d.identity.size());
      frames.emplace_back(d.request_id.data(), d.request_id.size());
      frames.emplace_back(std::string_view(d.ok ? "ok" : "err"));
      if (d.ok) {
        frames.emplace_back(encode_header(d.reply));
        for (const Tensor& t : d.reply.tensors) frames.push_back(tensor_frame(t));
      } else {
        frames.emplace_back(encode_header(RpcMessage{nlohmann::json{{"error", d.error}}, {}}));
      }
      for (size_t i = 0; i < frames.size(); ++i) {
        const auto flags = zmq::send_flags::dontwait | (i + 1 < frames.size() ? zmq::send_flags::sndmore
                                                                              : zmq::send_flags::none);
        if (!sock->send(frames[i], flags)) return;  // peer gone or flooded: the caller's deadline handles it
      }
    } catch (const std::exception&) {
      // A reply that cannot be encoded or sent is dropped; the client times out.
    }
  }

  void socket_loop() {
    std::vector<zmq::message_t> parts;
    while (!stopping.load()) {
      zmq::pollitem_t items[] = {{sock->handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, wake_fd, ZMQ_POLLIN, 0},
                                 {monitor->handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 3, std::chrono::milliseconds(-1));
      } catch (const zmq::error_t&) {
        continue;  // EINTR
      }
      if (items[2].revents & ZMQ_POLLIN) note_refusals();
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t v = 0;
        [[maybe_unused]] auto n = ::read(wake_fd, &v, sizeof(v));
      }
      if (stopping.load()) break;
      std::deque<Done> ready;
      {
        std::lock_guard<std::mutex> lock(mu);
        ready.swap(outbox);
      }
      for (const Done& d : ready) reply(d);
      try {
        // Bounded batch per wake-up so that background replies are not starved.
        for (int k = 0; k < 64 && recv_all(*sock, parts); ++k) handle(parts);
      } catch (const std::exception&) {
        // A socket error on one message (its peer vanished mid-way): keep serving.
      }
    }
  }

  // Counts the failed handshakes the monitor reported; the first is logged (ZeroMQ's
  // monitor names our endpoint, not the peer's: the ZAP handler logs addresses).
  void note_refusals() {
    std::vector<zmq::message_t> event;
    try {
      while (recv_all(*monitor, event)) {
        if (event.empty() || event[0].size() < sizeof(uint16_t)) continue;
        uint16_t id = 0;
        std::memcpy(&id, event[0].data(), sizeof(id));
        if (!(id & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                    ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)))
          continue;
        if (refused.fetch_add(1) == 0)
          std::cerr << "strata: " << name << ": refused a connection that failed the CURVE handshake: the peer does "
                    << "not hold this job's secret (later refusals are not logged)" << std::endl;
      }
    } catch (const zmq::error_t&) {
    }
  }

  void handle(std::vector<zmq::message_t>& parts) {
    if (parts.size() < 4 || parts[1].size() != sizeof(uint64_t)) return;  // not ours: drop
    Job job;
    job.identity = parts[0].to_string();
    job.request_id = parts[1].to_string();
    job.method = parts[2].to_string();
    auto it = methods.find(job.method);
    if (it == methods.end()) {
      reply(Done{job.identity, job.request_id, false, name + ": unknown method '" + job.method + "'", {}});
      return;
    }
    try {
      job.request = decode(parts, 3);
    } catch (const std::exception& e) {
      reply(Done{job.identity, job.request_id, false, name + ": malformed request: " + e.what(), {}});
      return;
    }
    if (!it->second.second) {
      reply(run(it->second.first, job));
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    jobs.push_back(std::move(job));
    cv.notify_one();
  }

  void executor_loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping.load() || !jobs.empty(); });
        if (stopping.load()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      Done d = run(methods.at(job.method).first, job);
      {
        std::lock_guard<std::mutex> lock(mu);
        outbox.push_back(std::move(d));
      }
      wake();
    }
  }
};

RpcServer::RpcServer(std::string host, int port, std::string name, std::optional<JobSecret> secret)
    : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(port >= 0 && port < 65536, "RpcServer(", name, "): port ", port, " out of range");
  impl_->keys.emplace(secret ? *secret : JobSecret::current());
  impl_->host = std::move(host);
  impl_->requested_port = port;
  impl_->name = std::move(name);
}

RpcServer::~RpcServer() { stop(); }

void RpcServer::add_method(const std::string& method, Handler handler, bool background) {
  STRATA_CHECK(!impl_->started, "RpcServer(", impl_->name, ")::add_method: the server is already started");
  STRATA_CHECK(handler != nullptr, "RpcServer(", impl_->name, ")::add_method: empty handler for '", method, "'");
  STRATA_CHECK(impl_->methods.emplace(method, std::make_pair(std::move(handler), background)).second, "RpcServer(",
               impl_->name, ")::add_method: method '", method, "' is registered twice");
}

void RpcServer::start() {
  Impl& s = *impl_;
  STRATA_CHECK(!s.started, "RpcServer(", s.name, ")::start: already started");
  const std::string endpoint = bind_endpoint(s.host, s.requested_port);
  s.sock = std::make_unique<zmq::socket_t>(context(), zmq::socket_type::router);
  s.sock->set(zmq::sockopt::linger, 0);
  // CURVE server with the job's key; clients are admitted by the ZAP handler (which must
  // exist before the socket binds) under this server's domain. A peer that has not
  // finished its handshake after 10 s is dropped (ZeroMQ's own default: 30 s).
  s.zap_domain = PsZapHandler::instance().add(s.keys->client_public, s.name);
  s.sock->set(zmq::sockopt::curve_server, true);
  set_curve_key(*s.sock, ZMQ_CURVE_SECRETKEY, s.keys->server_secret);
  s.sock->set(zmq::sockopt::zap_domain, s.zap_domain);
  s.sock->set(zmq::sockopt::handshake_ivl, 10000);
  static std::atomic<uint64_t> monitors{0};
  const std::string monitor_endpoint = "inproc://strata-rpc-monitor-" + std::to_string(monitors++);
  if (::zmq_socket_monitor(s.sock->handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) {
    s.sock.reset();
    fail("RpcServer(", s.name, "): cannot monitor its socket: ", ::zmq_strerror(::zmq_errno()));
  }
  s.monitor = std::make_unique<zmq::socket_t>(context(), zmq::socket_type::pair);
  s.monitor->set(zmq::sockopt::linger, 0);
  s.monitor->connect(monitor_endpoint);
  if (endpoint.find('[') != std::string::npos) s.sock->set(zmq::sockopt::ipv6, 1);
  try {
    s.sock->bind(endpoint);
  } catch (const zmq::error_t& e) {
    s.sock.reset();
    s.monitor.reset();
    fail("RpcServer(", s.name, "): cannot listen on ", endpoint, ": ", e.what());
  }
  const std::string last = s.sock->get(zmq::sockopt::last_endpoint);
  s.bound_port = std::stoi(last.substr(last.rfind(':') + 1));
  s.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  STRATA_CHECK(s.wake_fd >= 0, "RpcServer(", s.name, "): eventfd failed: ", std::strerror(errno));
  s.started = true;
  // The socket was created here; the socket thread is its only user from now on (thread
  // creation is the memory barrier ZeroMQ asks for when a socket changes threads).
  s.socket_thread = std::thread([&s] { s.socket_loop(); });
  const bool any_background =
      std::any_of(s.methods.begin(), s.methods.end(), [](const auto& m) { return m.second.second; });
  if (any_background) s.executor_thread = std::thread([&s] { s.executor_loop(); });
}

void RpcServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.stopping.store(true);
  s.wake();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.cv.notify_all();
  }
  if (s.socket_thread.joinable()) s.socket_thread.join();
  if (s.executor_thread.joinable()) s.executor_thread.join();
  ::zmq_socket_monitor(s.sock->handle(), nullptr, 0);
  s.sock.reset();
  s.monitor.reset();
  ::close(s.wake_fd);
  s.wake_fd = -1;
}

int RpcServer::port() const {
  STRATA_CHECK(impl_->started, "RpcServer(", impl_->name, ")::port: not started");
  return impl_->bound_port;
}

int64_t RpcServer::refused_connections() const { return impl_->refused.load(); }

const std::string& RpcServer::name() const { return impl_->name; }

// ---------------------------------------------------------------------------- client

struct RpcClient::Impl {
  // Held for a whole call(): a reply taken by one caller's receive must not be one that
  // another caller is waiting for.
  std::mutex mu;
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> sock;
  uint64_t next_id = 1;
  std::optional<PsCurveKeys> keys;

  zmq::socket_t& socket() {
    if (!sock) {
      sock = std::make_unique<zmq::socket_t>(context(), zmq::socket_type::dealer);
      sock->set(zmq::sockopt::linger, 0);
      // CURVE client: the job's server key, and the job's client keypair (rpc.h).
      set_curve_key(*sock, ZMQ_CURVE_SERVERKEY, keys->server_public);
      set_curve_key(*sock, ZMQ_CURVE_PUBLICKEY, keys->client_public);
      set_curve_key(*sock, ZMQ_CURVE_SECRETKEY, keys->client_secret);
      // Queue requests only to a connected peer: a dead server makes send() time out
      // instead of silently queueing for a successor.
      sock->set(zmq::sockopt::immediate, 1);
      sock->set(zmq::sockopt::reconnect_ivl, 50);
      sock->set(zmq::sockopt::reconnect_ivl_max, 500);
      if (endpoint.find('[') != std::string::npos) sock->set(zmq::sockopt::ipv6, 1);
      sock->connect(endpoint);
    }
    return *sock;
  }
};

RpcClient::RpcClient(const std::string& address, std::string peer, std::optional<JobSecret> secret)
    : address_(address), peer_(std::move(peer)), impl_(std::make_unique<Impl>()) {
  impl_->endpoint = connect_endpoint(address);
  impl_->keys.emplace(secret ? *secret : JobSecret::current());
}

RpcClient::~RpcClient() = default;

uint64_t RpcClient::send(const std::string& method, const RpcMessage& request, double timeout_seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return send_locked(method, request, timeout_seconds);
}

namespace {
// ZeroMQ reports socket failures as zmq::error_t: callers see RpcError naming the peer.
[[noreturn]] void socket_failure(const std::string& peer, const std::string& address, const char* what,
                                 const zmq::error_t& e) {
  throw RpcError(RpcStatus::Unavailable, peer, std::string("rpc ") + what + " " + peer + " (" + address + "): " + e.what());
}

// How often a call with an `abandon` flag looks at it while it waits (RpcClient::call).
constexpr double kRpcAbandonCheckSeconds = 0.1;

bool rpc_abandoned(const std::atomic<bool>* abandon) { return abandon && abandon->load(); }

[[noreturn]] void throw_rpc_abandoned(const std::string& peer, const std::string& address, const std::string& method) {
  throw RpcError(RpcStatus::Unavailable, peer,
                 "rpc '" + method + "' to " + peer + " (" + address + "): abandoned: the peer was found dead");
}
}  // namespace

uint64_t RpcClient::send_locked(const std::string& method, const RpcMessage& request, double timeout_seconds,
                                const std::atomic<bool>* abandon) {
  zmq::socket_t& sock = impl_->socket();
  const uint64_t id = impl_->next_id++;
  std::vector<zmq::message_t> frames;
  frames.emplace_back(id_bytes(id));
  frames.emplace_back(method);
  frames.emplace_back(encode_header(request));
  for (const Tensor& t : request.tensors) frames.push_back(tensor_frame(t));
  const auto deadline = Clock::now() + std::chrono::milliseconds(to_ms(timeout_seconds));
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    for (;;) {
      // Only the first frame can block (a multipart message is queued whole); with
      // `abandon` it blocks in short slices, retried (a frame that was not sent was not
      // queued) until the deadline unless the flag is set meanwhile.
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      sock.set(zmq::sockopt::sndtimeo, to_ms(abandon ? std::min(left, kRpcAbandonCheckSeconds) : left));
      zmq::send_result_t sent;
      try {
        sent = sock.send(frames[i], flags);
      } catch (const zmq::error_t& e) {
        socket_failure(peer_, address_, "to", e);
      }
      if (sent) break;
      if (rpc_abandoned(abandon)) throw_rpc_abandoned(peer_, address_, method);
      if (Clock::now() >= deadline) {
        throw RpcError(RpcStatus::Unavailable, peer_,
                       "rpc '" + method + "' to " + peer_ + " (" + address_ + "): not reachable within " +
                           std::to_string(timeout_seconds) + " s" + ps_secret_hint());
      }
    }
  }
  return id;
}

std::optional<RpcClient::Reply> RpcClient::receive(double timeout_seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return receive_locked(timeout_seconds);
}

std::optional<RpcClient::Reply> RpcClient::receive_locked(double timeout_seconds) {
  zmq::socket_t& sock = impl_->socket();
  const auto deadline = Clock::now() + std::chrono::milliseconds(to_ms(timeout_seconds));
  std::vector<zmq::message_t> parts;
  for (;;) {
    bool got = false;
    try {
      got = recv_all(sock, parts);
    } catch (const zmq::error_t& e) {
      socket_failure(peer_, address_, "from", e);
    }
    if (got) {
      if (parts.size() < 3 || parts[0].size() != sizeof(uint64_t)) continue;  // malformed: drop
      Reply r;
      std::memcpy(&r.id, parts[0].data(), sizeof(uint64_t));
      r.ok = parts[1].to_string_view() == "ok";
      try {
        r.message = decode(parts, 2);
      } catch (const std::exception& e) {
        throw RpcError(RpcStatus::ProtocolError, peer_, "rpc reply from " + peer_ + ": " + e.what());
      }
      if (!r.ok) r.error = r.message.header.value("error", std::string("unknown error"));
      return r;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    zmq::pollitem_t items[] = {{sock.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(left));
    } catch (const zmq::error_t&) {
      // EINTR: poll again until the deadline.
    }
  }
}

RpcMessage RpcClient::call(const std::string& method, const RpcMessage& request, double timeout_seconds,
                           const std::atomic<bool>* abandon) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (rpc_abandoned(abandon)) throw_rpc_abandoned(peer_, address_, method);
  const auto start = Clock::now();
  const uint64_t id = send_locked(method, request, timeout_seconds, abandon);
  for (;;) {
    const double left = timeout_seconds - std::chrono::duration<double>(Clock::now() - start).count();
    if (left <= 0) {
      throw RpcError(RpcStatus::DeadlineExceeded, peer_,
                     "rpc '" + method + "' to " + peer_ + " (" + address_ + "): no reply within " +
                         std::to_string(timeout_seconds) + " s");
    }
    if (rpc_abandoned(abandon)) throw_rpc_abandoned(peer_, address_, method);
    // With `abandon`, wait in slices so that the flag is seen soon after it is set.
    std::optional<Reply> r = receive_locked(abandon ? std::min(left, kRpcAbandonCheckSeconds) : left);
    if (!r) continue;           // the slice or the deadline passed: checked above
    if (r->id != id) continue;  // a late reply to an abandoned request
    if (!r->ok) throw RpcError(RpcStatus::RemoteError, peer_, peer_ + ": " + r->error);
    return std::move(r->message);
  }
}

void RpcClient::reset() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sock.reset();
}

#else  // !STRATA_HAS_ZMQ

bool rpc_available() { return false; }

namespace {
[[noreturn]] void no_zmq(const std::string& what) {
  fail(what, ": strata was built without ZeroMQ (install libzmq3-dev and cppzmq-dev, see "
             "scripts/install-deps.sh, and reconfigure with -DSTRATA_WITH_ZMQ=ON)");
}
}  // namespace

struct RpcServer::Impl {
  std::string name;
};
RpcServer::RpcServer(std::string, int, std::string name, std::optional<JobSecret>) {
  no_zmq("RpcServer(" + name + ")");
}
RpcServer::~RpcServer() = default;
void RpcServer::add_method(const std::string&, Handler, bool) { no_zmq("RpcServer::add_method"); }
void RpcServer::start() { no_zmq("RpcServer::start"); }
void RpcServer::stop() {}
int RpcServer::port() const { no_zmq("RpcServer::port"); }
int64_t RpcServer::refused_connections() const { no_zmq("RpcServer::refused_connections"); }
const std::string& RpcServer::name() const { no_zmq("RpcServer::name"); }

struct RpcClient::Impl {};
RpcClient::RpcClient(const std::string& address, std::string peer, std::optional<JobSecret>)
    : address_(address), peer_(std::move(peer)) {
  no_zmq("RpcClient(" + peer_ + ")");
}
RpcClient::~RpcClient() = default;
RpcMessage RpcClient::call(const std::string&, const RpcMessage&, double, const std::atomic<bool>*) {
  no_zmq("RpcClient::call");
}
uint64_t RpcClient::send(const std::string&, const RpcMessage&, double) { no_zmq("RpcClient::send"); }
std::optional<RpcClient::Reply> RpcClient::receive(double) { no_zmq("RpcClient::receive"); }
uint64_t RpcClient::send_locked(const std::string&, const RpcMessage&, double, const std::atomic<bool>*) {
  no_zmq("RpcClient::send");
}
std::optional<RpcClient::Reply> RpcClient::receive_locked(double) { no_zmq("RpcClient::receive"); }
void RpcClient::reset() {}

#endif

}  // namespace strata::distribute::ps
