#include <strata/distribute/ps/rpc.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <strata/distribute/cluster_resolver.h>

#ifdef STRATA_HAS_ZMQ
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
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

// Header frame: {"h": user header, "t": [[dtype, shape], ...]}.
std::string encode_header(const RpcMessage& m) {
  nlohmann::json meta = nlohmann::json::array();
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const Tensor& t = m.tensors[i];
    STRATA_CHECK(t.defined(), "rpc: tensor ", i, " of a message is undefined");
    meta.push_back(nlohmann::json::array({dtype_name(t.dtype()), t.shape()}));
  }
  return nlohmann::json{{"h", m.header}, {"t", meta}}.dump();
}

zmq::message_t tensor_frame(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Device());
  host = host.contiguous();
  // Copied into the frame: the tensor (a variable's storage) may change right after.
  return zmq::message_t(host.raw_data(), host.nbytes());
}

// Decodes frames [first, end) as a header frame followed by tensor frames.
RpcMessage decode(std::vector<zmq::message_t>& parts, size_t first) {
  STRATA_CHECK(parts.size() > first, "rpc: message without a header frame");
  RpcMessage m;
  nlohmann::json all = nlohmann::json::parse(parts[first].to_string_view());
  m.header = all.at("h");
  const auto& meta = all.at("t");
  STRATA_CHECK(meta.is_array() && meta.size() == parts.size() - first - 1, "rpc: header lists ", meta.size(),
               " tensors but the message has ", parts.size() - first - 1, " tensor frames");
  for (size_t i = 0; i < meta.size(); ++i) {
    const DType dtype = dtype_from_name(meta[i].at(0).get<std::string>());
    const Shape shape = meta[i].at(1).get<Shape>();
    const auto& frame = parts[first + 1 + i];
    // The frame's size bounds the shape before anything is allocated from it.
    uint64_t bytes = dtype_size(dtype);
    const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
    for (int64_t d : shape) {
      STRATA_CHECK(d >= 0, "rpc: negative extent in tensor ", i);
      if (empty) continue;
      STRATA_CHECK(bytes <= frame.size() / uint64_t(d), "rpc: tensor ", i, " (", dtype_name(dtype), shape_str(shape),
                   ") does not fit its ", frame.size(), "-byte frame");
      bytes *= uint64_t(d);
    }
    if (empty) bytes = 0;
    STRATA_CHECK(frame.size() == bytes, "rpc: tensor ", i, " (", dtype_name(dtype), shape_str(shape), ") has ",
                 frame.size(), " bytes, expected ", bytes);
    Tensor t = Tensor::empty(shape, dtype, Device());  // host memory: the frame is copied in
    if (t.nbytes() > 0) std::memcpy(t.raw_data(), frame.data(), t.nbytes());
    m.tensors.push_back(std::move(t));
  }
  return m;
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

std::string bind_endpoint(const std::string& host, int port) {
  std::string h = host;
  if (h.empty() || h == "localhost") h = "127.0.0.1";
  const bool numeric = h.find_first_not_of("0123456789.") == std::string::npos || h.find(':') != std::string::npos;
  if (!numeric) h = "*";  // a host name: listen on every interface
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
      zmq::pollitem_t items[] = {{sock->handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(-1));
      } catch (const zmq::error_t&) {
        continue;  // EINTR
      }
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

RpcServer::RpcServer(std::string host, int port, std::string name) : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(port >= 0 && port < 65536, "RpcServer(", name, "): port ", port, " out of range");
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
  if (endpoint.find('[') != std::string::npos) s.sock->set(zmq::sockopt::ipv6, 1);
  try {
    s.sock->bind(endpoint);
  } catch (const zmq::error_t& e) {
    s.sock.reset();
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
  s.sock.reset();
  ::close(s.wake_fd);
  s.wake_fd = -1;
}

int RpcServer::port() const {
  STRATA_CHECK(impl_->started, "RpcServer(", impl_->name, ")::port: not started");
  return impl_->bound_port;
}

const std::string& RpcServer::name() const { return impl_->name; }

// ---------------------------------------------------------------------------- client

struct RpcClient::Impl {
  // Held for a whole call(): a reply taken by one caller's receive must not be one that
  // another caller is waiting for.
  std::mutex mu;
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> sock;
  uint64_t next_id = 1;

  zmq::socket_t& socket() {
    if (!sock) {
      sock = std::make_unique<zmq::socket_t>(context(), zmq::socket_type::dealer);
      sock->set(zmq::sockopt::linger, 0);
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

RpcClient::RpcClient(const std::string& address, std::string peer)
    : address_(address), peer_(std::move(peer)), impl_(std::make_unique<Impl>()) {
  impl_->endpoint = connect_endpoint(address);
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
}  // namespace

uint64_t RpcClient::send_locked(const std::string& method, const RpcMessage& request, double timeout_seconds) {
  zmq::socket_t& sock = impl_->socket();
  const uint64_t id = impl_->next_id++;
  std::vector<zmq::message_t> frames;
  frames.emplace_back(id_bytes(id));
  frames.emplace_back(method);
  frames.emplace_back(encode_header(request));
  for (const Tensor& t : request.tensors) frames.push_back(tensor_frame(t));
  sock.set(zmq::sockopt::sndtimeo, to_ms(timeout_seconds));
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    zmq::send_result_t sent;
    try {
      sent = sock.send(frames[i], flags);
    } catch (const zmq::error_t& e) {
      socket_failure(peer_, address_, "to", e);
    }
    if (!sent) {
      // Only the first frame can block (a multipart message is queued whole).
      throw RpcError(RpcStatus::Unavailable, peer_,
                     "rpc '" + method + "' to " + peer_ + " (" + address_ + "): not reachable within " +
                         std::to_string(timeout_seconds) + " s");
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

RpcMessage RpcClient::call(const std::string& method, const RpcMessage& request, double timeout_seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto start = Clock::now();
  const uint64_t id = send_locked(method, request, timeout_seconds);
  for (;;) {
    const double left = timeout_seconds - std::chrono::duration<double>(Clock::now() - start).count();
    std::optional<Reply> r = left > 0 ? receive_locked(left) : std::nullopt;
    if (!r) {
      throw RpcError(RpcStatus::DeadlineExceeded, peer_,
                     "rpc '" + method + "' to " + peer_ + " (" + address_ + "): no reply within " +
                         std::to_string(timeout_seconds) + " s");
    }
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
RpcServer::RpcServer(std::string, int, std::string name) { no_zmq("RpcServer(" + name + ")"); }
RpcServer::~RpcServer() = default;
void RpcServer::add_method(const std::string&, Handler, bool) { no_zmq("RpcServer::add_method"); }
void RpcServer::start() { no_zmq("RpcServer::start"); }
void RpcServer::stop() {}
int RpcServer::port() const { no_zmq("RpcServer::port"); }
const std::string& RpcServer::name() const { no_zmq("RpcServer::name"); }

struct RpcClient::Impl {};
RpcClient::RpcClient(const std::string& address, std::string peer) : address_(address), peer_(std::move(peer)) {
  no_zmq("RpcClient(" + peer_ + ")");
}
RpcClient::~RpcClient() = default;
RpcMessage RpcClient::call(const std::string&, const RpcMessage&, double) { no_zmq("RpcClient::call"); }
uint64_t RpcClient::send(const std::string&, const RpcMessage&, double) { no_zmq("RpcClient::send"); }
std::optional<RpcClient::Reply> RpcClient::receive(double) { no_zmq("RpcClient::receive"); }
uint64_t RpcClient::send_locked(const std::string&, const RpcMessage&, double) { no_zmq("RpcClient::send"); }
std::optional<RpcClient::Reply> RpcClient::receive_locked(double) { no_zmq("RpcClient::receive"); }
void RpcClient::reset() {}

#endif

}  // namespace strata::distribute::ps
