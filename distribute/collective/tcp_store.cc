#include <strata/distribute/collective/tcp_store.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <strata/core/error.h>

namespace strata::distribute {

namespace {

using Clock = std::chrono::steady_clock;

// Requests and replies are frames: u32 little-endian length, then the payload. A payload
// starts with an opcode (request) or a status (reply); strings are u32 length + bytes.
enum class Op : uint8_t { Set = 1, SetEphemeral, Get, Add, Check, Wait, Remove };
enum class Status : uint8_t { Ok = 0, Timeout = 1, Error = 2 };

// Frame caps, per request type: a set carries a key and a value; every other request
// carries keys only. Checked when a frame's first five bytes (length, opcode) arrive.
constexpr uint32_t kMaxSetFrame = uint32_t(1 + 4 + kMaxStoreKeyBytes + 4 + kMaxStoreValueBytes);
constexpr uint32_t kMaxKeysFrame = 1u << 20;
constexpr uint32_t kMaxFrame = kMaxSetFrame;  // the largest frame of either direction
// A connection's unread input never exceeds one largest frame with its length prefix.
constexpr size_t kMaxConnInput = 4 + size_t(kMaxFrame);

uint32_t store_frame_cap(uint8_t op) {
  switch (Op(op)) {
    case Op::Set:
    case Op::SetEphemeral: return kMaxSetFrame;
    case Op::Get:
    case Op::Add:
    case Op::Check:
    case Op::Wait:
    case Op::Remove: return kMaxKeysFrame;
  }
  return 0;  // not a request: refused at once
}

// The handshake (tcp_store.h): greeting = kStoreGreeting || server nonce; answer = client nonce
// || HMAC(secret, kStoreAuthLabel "client" || server nonce || client nonce); reply = status ||
// HMAC(secret, kStoreAuthLabel "server" || server nonce || client nonce).
constexpr std::string_view kStoreGreeting = "strata-store-auth-v1";
constexpr std::string_view kStoreAuthLabel = "strata-store-auth-v1 ";
constexpr size_t kStoreNonceBytes = 32;
constexpr size_t kStoreAnswerBytes = kStoreNonceBytes + 32;
// Connections still authenticating, at most: beyond that the oldest is dropped, so a flood
// of idle strangers neither exhausts descriptors nor keeps out a client that answers at once.
constexpr size_t kStoreMaxUnauthenticated = 64;
// Distinct refused addresses logged; one line says when later ones are not.
constexpr size_t kStoreMaxLoggedPeers = 256;

std::string store_auth_message(std::string_view role, std::string_view server_nonce, std::string_view client_nonce) {
  std::string m(kStoreAuthLabel);
  m += role;
  m += server_nonce;
  m += client_nonce;
  return m;
}

std::string store_digest_str(const Digest& d) { return std::string(reinterpret_cast<const char*>(d.data()), d.size()); }

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}
void put_i64(std::string& s, int64_t v) {
  const auto u = uint64_t(v);
  for (int i = 0; i < 8; ++i) s.push_back(char((u >> (8 * i)) & 0xff));
}
void put_str(std::string& s, const std::string& v) {
  put_u32(s, uint32_t(v.size()));
  s += v;
}
void put_keys(std::string& s, const std::vector<std::string>& keys) {
  put_u32(s, uint32_t(keys.size()));
  for (const auto& k : keys) put_str(s, k);
}
std::string frame(const std::string& payload) {
  std::string out;
  put_u32(out, uint32_t(payload.size()));
  return out + payload;
}

// Reads a payload; `ok` turns false (and stays) on a short or malformed payload.
struct Reader {
  const std::string& s;
  size_t pos = 0;
  bool ok = true;
  bool need(size_t n) {
    if (pos + n > s.size()) ok = false;
    return ok;
  }
  uint8_t u8() { return need(1) ? uint8_t(s[pos++]) : 0; }
  uint32_t u32() {
    if (!need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(s[pos + size_t(i)])) << (8 * i);
    pos += 4;
    return v;
  }
  int64_t i64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(s[pos + size_t(i)])) << (8 * i);
    pos += 8;
    return int64_t(v);
  }
  std::string str() {
    const uint32_t n = u32();
    if (!need(n)) return {};
    std::string v = s.substr(pos, n);
    pos += n;
    return v;
  }
  std::vector<std::string> keys() {
    const uint32_t n = u32();
    std::vector<std::string> out;
    for (uint32_t i = 0; i < n && ok; ++i) out.push_back(str());
    return out;
  }
};

std::string keys_str(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  return out;
}

std::string seconds_str(double s) {
  std::ostringstream os;
  os << s << " s";
  return os.str();
}

// Clamped to ten years: a huge timeout means "practically forever", and an unclamped one
// would overflow the millisecond count and the deadline computed from it.
int64_t to_ms(double seconds) {
  constexpr double kMaxSeconds = 10.0 * 365 * 24 * 3600;
  const double s = seconds > 0.0 ? std::min(seconds, kMaxSeconds) : 0.0;  // NaN -> 0
  return int64_t(std::ceil(s * 1000.0));
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }
void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// "10.0.0.5" / "::1" for a socket address (the log's and bound_host()'s form).
std::string store_numeric_address(const sockaddr_storage& addr) {
  char host[NI_MAXHOST] = "?";
  const socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  ::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  return host;
}

// Milliseconds left until `deadline` for poll(), at least 0.
int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 1 << 30));
}

// The whole text as a decimal int64 (an optional sign, then digits), over int64's full
// range: a value `add` stored, INT64_MAX included, reads back.
bool parse_int64(const std::string& text, int64_t& out) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  if (begin == end || (*begin == '-' && text[0] == '+')) return false;
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end) return false;
  out = v;
  return true;
}

}  // namespace

// ---- server ----

struct TcpStoreServer::State {
  struct Conn {
    std::string in, out;
    bool busy = false;  // a parked request: later frames wait behind it
    bool closed = false;
    // Until `authenticated` the only frame read is the handshake answer to `nonce`, due by
    // `auth_deadline`. A refused connection is `closing`: its refusal is sent, then it is dropped.
    bool authenticated = false;
    bool closing = false;
    std::string nonce;
    Clock::time_point auth_deadline{};
    std::string peer = "?";  // the peer's address, for the refusal log
  };
  struct Pending {
    int fd;
    Op op;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };
  std::map<std::string, std::string> kv;
  std::map<std::string, int> owner;  // ephemeral key -> connection that set it
  std::map<int, Conn> conns;
  std::vector<Pending> pending;
  // Authentication (unset in serve_bytes_for_testing, which feeds process() directly).
  std::optional<JobSecret> secret;
  std::string name;  // "store 127.0.0.1:29500", for the log
  std::atomic<int64_t>* refused = nullptr;
  std::set<std::string> logged_peers;

  // Bytes a connection may read now: the rest of the handshake answer before it is
  // authenticated, then up to kMaxConnInput of unread input.
  static size_t read_allowance(const Conn& c) {
    if (c.closed || c.closing) return 0;
    const size_t cap = c.authenticated ? kMaxConnInput : 4 + kStoreAnswerBytes;
    return c.in.size() < cap ? cap - c.in.size() : 0;
  }

  // Refuses a connection (once): counted, logged once per address, closed after `out`.
  void refuse(Conn& c, const std::string& why) {
    if (c.closing) return;
    c.closing = true;
    c.in.clear();
    if (refused) ++*refused;
    if (logged_peers.size() < kStoreMaxLoggedPeers) {
      if (logged_peers.insert(c.peer).second)
        std::cerr << "strata: " << name << ": refused a connection from " << c.peer << ": " << why
                  << " (later refusals of this address are not logged)" << std::endl;
    } else if (logged_peers.size() == kStoreMaxLoggedPeers) {
      logged_peers.insert("");  // once
      std::cerr << "strata: " << name << ": refused connections from " << kStoreMaxLoggedPeers
                << " addresses; later refused addresses are not logged" << std::endl;
    }
  }

  // Checks a connection's handshake answer once it has arrived whole.
  void authenticate(Conn& c) {
    if (c.authenticated || c.closing || c.in.size() < 4) return;
    Reader r{c.in};
    if (r.u32() != kStoreAnswerBytes) {
      refuse(c, "it did not answer the authentication challenge (not a strata store client)");
      return;
    }
    if (c.in.size() < 4 + kStoreAnswerBytes) return;
    const std::string client_nonce = c.in.substr(4, kStoreNonceBytes);
    const std::string tag = c.in.substr(4 + kStoreNonceBytes, kStoreAnswerBytes - kStoreNonceBytes);
    c.in.erase(0, 4 + kStoreAnswerBytes);
    if (!secret->verify(store_auth_message("client", c.nonce, client_nonce), tag)) {
      std::string payload(1, char(Status::Error));
      put_str(payload, "authentication failed: not this job's secret");
      c.out += frame(payload);
      refuse(c, "wrong proof of the job secret");
      return;
    }
    c.authenticated = true;
    std::string payload(1, char(Status::Ok));
    payload += store_digest_str(secret->mac(store_auth_message("server", c.nonce, client_nonce)));
    c.out += frame(payload);
  }

  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return kv.count(k) != 0; });
  }
  void reply(int fd, Status status, const std::string& body = {}) {
    std::string payload(1, char(status));
    payload += body;
    conns[fd].out += frame(payload);
  }
  void put(const std::string& key, std::string value, int ephemeral_owner) {
    kv[key] = std::move(value);
    if (ephemeral_owner >= 0) {
      owner[key] = ephemeral_owner;
    } else {
      owner.erase(key);
    }
  }

  // Handles one request; returns false on a malformed one (the connection is dropped).
  bool handle(int fd, const std::string& payload) {
    Reader r{payload};
    const auto op = Op(r.u8());
    std::string body;
    switch (op) {
      case Op::Set:
      case Op::SetEphemeral: {
        std::string key = r.str(), value = r.str();
        if (!r.ok) return false;
        put(key, std::move(value), op == Op::SetEphemeral ? fd : -1);
        reply(fd, Status::Ok);
        return true;
      }
      case Op::Get:
      case Op::Wait: {
        // The wait comes from the peer: clamped to [0, a year] (longer than any job waits),
        // so that the deadline cannot overflow the clock's nanoseconds (found by
        // fuzz/tcp_store_fuzz.cc).
        constexpr int64_t kMaxWaitMs = int64_t(365) * 24 * 3600 * 1000;
        const int64_t timeout_ms = std::clamp<int64_t>(r.i64(), 0, kMaxWaitMs);
        auto keys = op == Op::Get ? std::vector<std::string>{r.str()} : r.keys();
        if (!r.ok) return false;
        conns[fd].busy = true;
        pending.push_back({fd, op, std::move(keys), Clock::now() + std::chrono::milliseconds(timeout_ms)});
        return true;  // answered by resolve()
      }
      case Op::Add: {
        std::string key = r.str();
        const int64_t delta = r.i64();
        if (!r.ok) return false;
        int64_t value = 0;
        auto it = kv.find(key);
        if (it != kv.end() && !parse_int64(it->second, value)) {
          put_str(body, "key '" + key + "' holds a value that is not an integer");
          reply(fd, Status::Error, body);
          return true;
        }
        if (__builtin_add_overflow(value, delta, &value)) {
          put_str(body, "adding " + std::to_string(delta) + " to key '" + key + "' overflows 64-bit integers");
          reply(fd, Status::Error, body);
          return true;
        }
        put(key, std::to_string(value), -1);
        put_i64(body, value);
        reply(fd, Status::Ok, body);
        return true;
      }
      case Op::Check: {
        auto keys = r.keys();
        if (!r.ok) return false;
        body.push_back(char(has_all(keys) ? 1 : 0));
        reply(fd, Status::Ok, body);
        return true;
      }
      case Op::Remove: {
        std::string key = r.str();
        if (!r.ok) return false;
        const bool existed = kv.erase(key) != 0;
        owner.erase(key);
        body.push_back(char(existed ? 1 : 0));
        reply(fd, Status::Ok, body);
        return true;
      }
    }
    return false;
  }

  // Parses and handles the complete frames a connection has sent, in order.
  void process(int fd) {
    auto& c = conns[fd];
    while (!c.busy && !c.closed && c.in.size() >= 4) {
      Reader r{c.in};
      const uint32_t n = r.u32();
      // Capped by its type as soon as the opcode is in: an announced large frame is never
      // waited for (nor buffered).
      if (n > kMaxFrame || (c.in.size() >= 5 && n > store_frame_cap(uint8_t(c.in[4])))) {
        c.closed = true;
        return;
      }
      if (c.in.size() < 4 + size_t(n)) return;
      const std::string payload = c.in.substr(4, n);
      c.in.erase(0, 4 + size_t(n));
      if (!handle(fd, payload)) c.closed = true;
    }
  }

  // Answers parked requests whose keys arrived or whose deadline passed. Returns the
  // nearest remaining deadline.
  std::optional<Clock::time_point> resolve() {
    std::optional<Clock::time_point> next;
    const auto now = Clock::now();
    for (size_t i = 0; i < pending.size();) {
      auto& p = pending[i];
      const bool done = has_all(p.keys);
      if (done || now >= p.deadline) {
        std::string body;
        if (done) {
          if (p.op == Op::Get) put_str(body, kv[p.keys[0]]);
          reply(p.fd, Status::Ok, body);
        } else {
          std::vector<std::string> missing;
          for (const auto& k : p.keys)
            if (!kv.count(k)) missing.push_back(k);
          put_keys(body, missing);
          reply(p.fd, Status::Timeout, body);
        }
        const int fd = p.fd;
        pending.erase(pending.begin() + long(i));
        conns[fd].busy = false;
        process(fd);  // frames queued behind the parked request
        continue;
      }
      if (!next || p.deadline < *next) next = p.deadline;
      ++i;
    }
    return next;
  }

  void drop(int fd) {
    for (auto it = owner.begin(); it != owner.end();) {
      if (it->second == fd) {
        kv.erase(it->first);
        it = owner.erase(it);
      } else {
        ++it;
      }
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [&](const Pending& p) { return p.fd == fd; }),
                  pending.end());
    conns.erase(fd);
    ::close(fd);
  }
};

TcpStoreServer::TcpStoreServer(int port, const std::string& bind_host, TcpStoreServerOptions options)
    : state_(std::make_unique<State>()) {
  STRATA_CHECK(port >= 0 && port <= 65535, "TcpStoreServer: port must be in [0, 65535], got ", port);
  STRATA_CHECK(options.handshake_timeout_seconds > 0, "TcpStoreServer: handshake timeout must be positive, got ",
               options.handshake_timeout_seconds);
  STRATA_CHECK(!bind_host.empty(), "TcpStoreServer: empty bind address (give the address to listen on, e.g. 127.0.0.1)");
  state_->secret = options.secret ? *options.secret : JobSecret::current();
  handshake_timeout_ = options.handshake_timeout_seconds;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  const int gai = ::getaddrinfo(bind_host.c_str(), port_text.c_str(), &hints, &res);
  STRATA_CHECK(gai == 0, "TcpStoreServer: cannot resolve ", bind_host, ": ", ::gai_strerror(gai));
  std::string last_error = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  STRATA_CHECK(listen_fd_ >= 0, "TcpStoreServer: cannot listen on ", bind_host, ":", port, ": ", last_error);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  bound_host_ = store_numeric_address(addr);
  state_->name = "store " + bind_host + ":" + std::to_string(port_);
  state_->refused = &refused_;
  set_nonblocking(listen_fd_);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    fail("TcpStoreServer: pipe: ", std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

std::string TcpStoreServer::serve_bytes_for_testing(std::string_view input) {
  State state;
  // A descriptor number no socket uses: nothing here reads, writes or closes it.
  constexpr int kFd = 1 << 20;
  state.conns[kFd].in.assign(input.data(), input.size());
  state.process(kFd);
  // Parked requests are answered as at their deadline; each answer may release frames
  // queued behind it, which may park again.
  while (!state.pending.empty()) {
    for (auto& p : state.pending) p.deadline = Clock::time_point::min();
    state.resolve();
  }
  return state.conns[kFd].out;
}

void TcpStoreServer::stop() {
  if (!thread_.joinable()) return;
  const char byte = 1;
  [[maybe_unused]] auto n = ::write(wake_pipe_[1], &byte, 1);
  thread_.join();
  for (auto& [fd, c] : state_->conns) ::close(fd);
  state_->conns.clear();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
  listen_fd_ = wake_pipe_[0] = wake_pipe_[1] = -1;
}

void TcpStoreServer::serve() {
  State& s = *state_;
  std::optional<Clock::time_point> next_deadline;
  std::vector<pollfd> fds;
  std::vector<char> buf(1 << 16);
  const auto handshake = std::chrono::milliseconds(to_ms(handshake_timeout_));
  for (;;) {
    fds.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    // Wake for the nearest parked request's deadline or handshake deadline.
    std::optional<Clock::time_point> wake_at = next_deadline;
    for (auto& [fd, c] : s.conns) {
      // A connection at its input cap is not read (TCP pushes back on its sender).
      const short events = short((State::read_allowance(c) > 0 ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT));
      fds.push_back({fd, events, 0});
      if (!c.authenticated && (!wake_at || c.auth_deadline < *wake_at)) wake_at = c.auth_deadline;
    }
    const int timeout = wake_at ? ms_until(*wake_at) + 1 : -1;
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // stop()
    if (fds[1].revents & POLLIN) {
      for (;;) {
        sockaddr_storage peer{};
        socklen_t peer_len = sizeof(peer);
        const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        set_nodelay(fd);
        // Too many connections still authenticating: the oldest (the idlest) goes.
        size_t waiting = 0;
        State::Conn* oldest = nullptr;
        for (auto& [other_fd, other] : s.conns) {
          if (other.authenticated || other.closing) continue;
          ++waiting;
          if (!oldest || other.auth_deadline < oldest->auth_deadline) oldest = &other;
        }
        if (waiting >= kStoreMaxUnauthenticated && oldest) s.refuse(*oldest, "too many connections waiting to authenticate");
        auto& c = s.conns[fd];
        c.peer = store_numeric_address(peer);
        c.nonce = random_bytes(kStoreNonceBytes);
        c.auth_deadline = Clock::now() + handshake;
        c.out = frame(std::string(kStoreGreeting) + c.nonce);
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      auto it = s.conns.find(fd);
      if (it == s.conns.end() || !fds[i].revents) continue;
      auto& c = it->second;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
          const size_t allowed = State::read_allowance(c);
          if (allowed == 0) {
            // Not reading, and the peer is gone: nothing it sent can be answered.
            if (fds[i].revents & (POLLHUP | POLLERR)) c.closed = true;
            break;
          }
          const ssize_t n = ::recv(fd, buf.data(), std::min(allowed, buf.size()), 0);
          if (n > 0) {
            c.in.append(buf.data(), size_t(n));
            // Handled chunk by chunk, so that a frame over its cap is refused after the
            // chunk that announced it, not after everything the socket holds.
            if (!c.authenticated) s.authenticate(c);
            if (c.authenticated) s.process(fd);
            if (c.closed || c.closing) break;
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.closed = true;
          break;
        }
        if (!c.authenticated) {
          s.authenticate(c);
          if (c.closed && !c.authenticated) s.refuse(c, "it closed the connection without authenticating");
        }
        if (c.authenticated) s.process(fd);
      }
    }
    size_t buffered = 0;
    for (auto& [fd, c] : s.conns) buffered += c.in.size();
    if (buffered > peak_buffered_.load()) peak_buffered_.store(buffered);
    const auto now = Clock::now();
    for (auto& [fd, c] : s.conns)
      if (!c.authenticated && !c.closing && now >= c.auth_deadline)
        s.refuse(c, "it did not authenticate within " + seconds_str(handshake_timeout_));
    next_deadline = s.resolve();
    // Write what can be written now; the rest waits for POLLOUT. A refused connection gets
    // one attempt (its refusal is a few bytes) and is dropped.
    std::vector<int> dead;
    for (auto& [fd, c] : s.conns) {
      while (!c.closed && !c.out.empty()) {
        const ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) {
          c.out.erase(0, size_t(n));
        } else {
          if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.closed = true;
          break;
        }
      }
      if (c.closed || c.closing) dead.push_back(fd);
    }
    if (!dead.empty()) {
      for (int fd : dead) s.drop(fd);
      next_deadline = s.resolve();  // a dropped ephemeral key cannot satisfy anyone, but keep it exact
    }
  }
}

// ---- client ----

namespace {

// Sends all of `data` before `deadline`; false with errno-style text in `error` otherwise.
bool send_all(int fd, const std::string& data, Clock::time_point deadline, std::string& error) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      error = std::strerror(errno);
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_until(deadline)) == 0) {
      error = "timed out sending";
      return false;
    }
  }
  return true;
}

bool recv_exact(int fd, char* dst, size_t size, Clock::time_point deadline, std::string& error) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, dst + got, size - got, 0);
    if (n > 0) {
      got += size_t(n);
      continue;
    }
    if (n == 0) {
      error = "the server closed the connection";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      error = std::strerror(errno);
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    const int left = ms_until(deadline);
    if (left == 0 || ::poll(&p, 1, left) == 0) {
      error = "no reply before the deadline";
      return false;
    }
  }
  return true;
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, double timeout_seconds, std::optional<JobSecret> secret)
    : timeout_seconds_(timeout_seconds), secret_(secret ? std::move(*secret) : JobSecret::current()) {
  STRATA_CHECK(port >= 1 && port <= 65535, "TcpStore: port must be in [1, 65535], got ", port);
  STRATA_CHECK(timeout_seconds > 0, "TcpStore: timeout must be positive, got ", timeout_seconds);
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  const auto deadline = Clock::now() + std::chrono::milliseconds(to_ms(timeout_seconds));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string last_error = "no attempt";
  const std::string port_text = std::to_string(port);
  // Retry: the chief may open its server after other workers start connecting.
  while (fd_ < 0) {
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    }
    for (addrinfo* a = gai == 0 ? res : nullptr; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, ms_until(deadline)) == 1) {
          int err = 0;
          socklen_t len = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        } else {
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        set_nodelay(fd);
        fd_ = fd;
      } else {
        last_error = std::strerror(errno);
        ::close(fd);
      }
    }
    if (res) ::freeaddrinfo(res);
    if (fd_ >= 0) break;
    if (Clock::now() + std::chrono::milliseconds(50) >= deadline) {
      fail("TcpStore: could not connect to the store at ", address_, " within ", seconds_str(timeout_seconds),
           ": ", last_error, " (is the chief running and listening there?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  authenticate(secret_, timeout_seconds);
}

void TcpStore::authenticate(const JobSecret& secret, double timeout_seconds) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(to_ms(timeout_seconds));
  auto give_up = [&](const std::string& why) {
    ::close(fd_);
    fd_ = -1;
    fail("TcpStore: authenticating to the store at ", address_, " failed: ", why);
  };
  // Reads one frame of at most `cap` bytes.
  auto read_frame = [&](uint32_t cap, std::string& payload) {
    char header[4];
    std::string error;
    if (!recv_exact(fd_, header, 4, deadline, error)) give_up(error);
    const std::string h(header, 4);
    Reader r{h};
    const uint32_t n = r.u32();
    if (n == 0 || n > cap) give_up("unexpected handshake frame of " + std::to_string(n) + " bytes (not a strata store?)");
    payload.resize(n);
    if (!recv_exact(fd_, payload.data(), n, deadline, error)) give_up(error);
  };
  std::string greeting;
  read_frame(uint32_t(kStoreGreeting.size() + kStoreNonceBytes), greeting);
  if (greeting.size() != kStoreGreeting.size() + kStoreNonceBytes || greeting.compare(0, kStoreGreeting.size(), kStoreGreeting) != 0)
    give_up("the server's greeting is not a strata store's (protocol " + std::string(kStoreGreeting) + ")");
  const std::string server_nonce = greeting.substr(kStoreGreeting.size());
  const std::string client_nonce = random_bytes(kStoreNonceBytes);
  std::string error;
  if (!send_all(fd_, frame(client_nonce + store_digest_str(secret.mac(store_auth_message("client", server_nonce, client_nonce)))),
                deadline, error))
    give_up(error);
  std::string reply;
  read_frame(1024, reply);
  Reader r{reply};
  const auto status = Status(r.u8());
  if (status != Status::Ok) {
    give_up("the store refused this process's job secret: every process of a job needs the same secret, in " +
            std::string(kJobSecretEnv) + " or a file named by " + kJobSecretFileEnv +
            " (strata-launch sets it for its workers)");
  }
  // Mutual: the server proves it holds the secret too, so a stranger listening on the
  // store's address cannot pose as the store.
  if (reply.size() != 1 + 32 ||
      !secret.verify(store_auth_message("server", server_nonce, client_nonce), std::string_view(reply).substr(1)))
    give_up("the server did not prove it holds the job secret: it is not this job's store");
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::request(const std::string& payload, double timeout_seconds, const char* op,
                              const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_CHECK(fd_ >= 0, "TcpStore::", op, ": the connection to the store at ", address_,
               " was lost by an earlier call");
  // The server answers a waiting request at its own deadline; the margin only bounds a
  // server that stopped answering altogether.
  const auto deadline = Clock::now() + std::chrono::milliseconds(to_ms(timeout_seconds) + 2000);
  std::string error;
  std::string reply;
  char header[4];
  bool ok = send_all(fd_, frame(payload), deadline, error) && recv_exact(fd_, header, 4, deadline, error);
  if (ok) {
    const std::string h(header, 4);
    Reader r{h};
    const uint32_t n = r.u32();
    ok = n >= 1 && n <= kMaxFrame;
    if (!ok) error = "malformed reply";
    if (ok) {
      reply.resize(n);
      ok = recv_exact(fd_, reply.data(), n, deadline, error);
    }
  }
  if (!ok) {
    ::close(fd_);
    fd_ = -1;
    fail("TcpStore::", op, ": ", what, " at the store ", address_, " failed: ", error);
  }
  return reply;
}

namespace {
void check_store_key_value(const char* op, const std::string& key, const std::string& value) {
  STRATA_CHECK(key.size() <= kMaxStoreKeyBytes, "TcpStore::", op, ": key of ", key.size(), " bytes exceeds the ",
               kMaxStoreKeyBytes, "-byte limit");
  STRATA_CHECK(value.size() <= kMaxStoreValueBytes, "TcpStore::", op, ": value of ", value.size(),
               " bytes for key '", key.substr(0, 200), "' exceeds the store's ", kMaxStoreValueBytes, "-byte limit");
}
}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  check_store_key_value("set", key, value);
  std::string p(1, char(Op::Set));
  put_str(p, key);
  put_str(p, value);
  request(p, timeout_seconds_, "set", "setting key '" + key + "'");
}

void TcpStore::set_ephemeral(const std::string& key, const std::string& value) {
  check_store_key_value("set_ephemeral", key, value);
  std::string p(1, char(Op::SetEphemeral));
  put_str(p, key);
  put_str(p, value);
  request(p, timeout_seconds_, "set_ephemeral", "setting key '" + key + "'");
}

std::string TcpStore::get(const std::string& key) { return get(key, timeout_seconds_); }

std::string TcpStore::get(const std::string& key, double timeout_seconds) {
  STRATA_CHECK(timeout_seconds > 0, "TcpStore::get: timeout must be positive, got ", timeout_seconds);
  std::string p(1, char(Op::Get));
  put_i64(p, to_ms(timeout_seconds));
  put_str(p, key);
  const std::string reply = request(p, timeout_seconds, "get", "waiting for key '" + key + "'");
  Reader r{reply};
  const auto status = Status(r.u8());
  STRATA_CHECK(status != Status::Timeout, "TcpStore::get: timed out after ", seconds_str(timeout_seconds),
               " waiting for key '", key, "' at the store ", address_);
  std::string value = r.str();
  STRATA_CHECK(status == Status::Ok && r.ok, "TcpStore::get: malformed reply from ", address_);
  return value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string p(1, char(Op::Add));
  put_str(p, key);
  put_i64(p, delta);
  const std::string reply = request(p, timeout_seconds_, "add", "adding to key '" + key + "'");
  Reader r{reply};
  const auto status = Status(r.u8());
  if (status == Status::Error) fail("TcpStore::add: ", r.str(), " (store ", address_, ")");
  const int64_t value = r.i64();
  STRATA_CHECK(status == Status::Ok && r.ok, "TcpStore::add: malformed reply from ", address_);
  return value;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::string p(1, char(Op::Check));
  put_keys(p, keys);
  const std::string reply = request(p, timeout_seconds_, "check", "checking " + keys_str(keys));
  Reader r{reply};
  const auto status = Status(r.u8());
  const bool present = r.u8() != 0;
  STRATA_CHECK(status == Status::Ok && r.ok, "TcpStore::check: malformed reply from ", address_);
  return present;
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_seconds_); }

void TcpStore::wait(const std::vector<std::string>& keys, double timeout_seconds) {
  STRATA_CHECK(timeout_seconds > 0, "TcpStore::wait: timeout must be positive, got ", timeout_seconds);
  if (keys.empty()) return;
  std::string p(1, char(Op::Wait));
  put_i64(p, to_ms(timeout_seconds));
  put_keys(p, keys);
  const std::string reply = request(p, timeout_seconds, "wait", "waiting for " + keys_str(keys));
  Reader r{reply};
  const auto status = Status(r.u8());
  if (status == Status::Timeout) {
    const auto missing = r.keys();
    fail("TcpStore::wait: timed out after ", seconds_str(timeout_seconds), " waiting for key(s) ",
         keys_str(keys), " at the store ", address_, " (still missing: ", keys_str(missing), ")");
  }
  STRATA_CHECK(status == Status::Ok && r.ok, "TcpStore::wait: malformed reply from ", address_);
}

bool TcpStore::remove(const std::string& key) {
  std::string p(1, char(Op::Remove));
  put_str(p, key);
  const std::string reply = request(p, timeout_seconds_, "remove", "removing key '" + key + "'");
  Reader r{reply};
  const auto status = Status(r.u8());
  const bool existed = r.u8() != 0;
  STRATA_CHECK(status == Status::Ok && r.ok, "TcpStore::remove: malformed reply from ", address_);
  return existed;
}

int find_free_port(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), "0", &hints, &res);
  STRATA_CHECK(gai == 0, "find_free_port: cannot resolve ", host, ": ", ::gai_strerror(gai));
  int port = 0;
  for (addrinfo* a = res; a && port == 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  STRATA_CHECK(port != 0, "find_free_port: cannot bind a socket on ", host, ": ", std::strerror(errno));
  return port;
}

}  // namespace strata::distribute
