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
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>

#include <strata/core/error.h>

namespace strata::distribute {

namespace {

using Clock = std::chrono::steady_clock;

// Requests and replies are frames: u32 little-endian length, then the payload. A payload
// starts with an opcode (request) or a status (reply); strings are u32 length + bytes.
enum class Op : uint8_t { Set = 1, SetEphemeral, Get, Add, Check, Wait, Remove };
enum class Status : uint8_t { Ok = 0, Timeout = 1, Error = 2 };
constexpr uint32_t kMaxFrame = 256u << 20;

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

int64_t to_ms(double seconds) { return int64_t(std::ceil(std::max(0.0, seconds) * 1000.0)); }

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }
void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Milliseconds left until `deadline` for poll(), at least 0.
int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 1 << 30));
}

bool parse_int64(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  size_t i = (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (i == text.size()) return false;
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    if (v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (text[i] - '0');
  }
  out = text[0] == '-' ? -v : v;
  return true;
}

}  // namespace

// ---- server ----

struct TcpStoreServer::State {
  struct Conn {
    std::string in, out;
    bool busy = false;  // a parked request: later frames wait behind it
    bool closed = false;
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
        const int64_t timeout_ms = r.i64();
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
        value += delta;
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
      if (n > kMaxFrame) {
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

TcpStoreServer::TcpStoreServer(int port, const std::string& bind_host) : state_(std::make_unique<State>()) {
  STRATA_CHECK(port >= 0 && port <= 65535, "TcpStoreServer: port must be in [0, 65535], got ", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  const int gai = ::getaddrinfo(bind_host.empty() ? nullptr : bind_host.c_str(), port_text.c_str(), &hints, &res);
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
  set_nonblocking(listen_fd_);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    fail("TcpStoreServer: pipe: ", std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

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
  for (;;) {
    fds.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, c] : s.conns) fds.push_back({fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    const int timeout = next_deadline ? ms_until(*next_deadline) + 1 : -1;
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // stop()
    if (fds[1].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        set_nodelay(fd);
        s.conns[fd];
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      auto it = s.conns.find(fd);
      if (it == s.conns.end() || !fds[i].revents) continue;
      auto& c = it->second;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
          const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
          if (n > 0) {
            c.in.append(buf.data(), size_t(n));
            continue;
          }
          if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.closed = true;
          if (n < 0 && errno == EINTR) continue;
          break;
        }
        s.process(fd);
      }
    }
    next_deadline = s.resolve();
    // Write what can be written now; the rest waits for POLLOUT.
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
      if (c.closed) dead.push_back(fd);
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

TcpStore::TcpStore(const std::string& host, int port, double timeout_seconds)
    : timeout_seconds_(timeout_seconds) {
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

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string p(1, char(Op::Set));
  put_str(p, key);
  put_str(p, value);
  request(p, timeout_seconds_, "set", "setting key '" + key + "'");
}

void TcpStore::set_ephemeral(const std::string& key, const std::string& value) {
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
