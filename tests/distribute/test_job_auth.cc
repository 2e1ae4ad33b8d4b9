// Job authentication (docs/SECURITY.md): the job secret, the TCP store's challenge-response
// and frame caps, the store's bind address, and the parameter servers' CURVE transport —
// each tried as a stranger on the network would.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/core/error.h>
#include <strata/distribute/collective/tcp_store.h>
#include <strata/distribute/job_secret.h>
#include <strata/distribute/ps/parameter_server.h>
#include <strata/distribute/ps/protocol.h>
#include <strata/distribute/ps/rpc.h>

using namespace strata;
using namespace strata::distribute;

namespace job_auth_test {

using Clock = std::chrono::steady_clock;

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A plain TCP connection to 127.0.0.1:port (a stranger's tool).
int raw_connect(int port, const char* host = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, host, &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends what it can; a server that closed the connection makes later sends fail (ignored).
void raw_send(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += size_t(n);
  }
}

// Reads until the peer closes the connection or `seconds` pass; true when it closed.
bool closed_by_peer(int fd, double seconds, std::string* received = nullptr) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
    if (n > 0 && received) received->append(buf, size_t(n));
  }
  return false;
}

std::string le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
  return s;
}

// Reads one length-prefixed frame (blocking, bounded by the server's own deadlines).
std::string read_frame(int fd) {
  auto read_n = [&](size_t n) {
    std::string out;
    char buf[4096];
    while (out.size() < n) {
      pollfd p{fd, POLLIN, 0};
      REQUIRE(::poll(&p, 1, 5000) == 1);
      const ssize_t got = ::recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
      REQUIRE(got > 0);
      out.append(buf, size_t(got));
    }
    return out;
  };
  const std::string h = read_n(4);
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(uint8_t(h[size_t(i)])) << (8 * i);
  REQUIRE(n < (1u << 20));
  return read_n(n);
}

// The store's handshake done by hand (the wire protocol of tcp_store.h), so that a test
// can then send frames no TcpStore client would.
void raw_authenticate(int fd, const JobSecret& secret) {
  const std::string greeting = read_frame(fd);
  const std::string prefix = "strata-store-auth-v1";
  REQUIRE(greeting.size() == prefix.size() + 32);
  REQUIRE(greeting.compare(0, prefix.size(), prefix) == 0);
  const std::string server_nonce = greeting.substr(prefix.size());
  const std::string client_nonce(32, 'c');
  const Digest tag = secret.mac("strata-store-auth-v1 client" + server_nonce + client_nonce);
  raw_send(fd, le32(64) + client_nonce + std::string(reinterpret_cast<const char*>(tag.data()), tag.size()));
  const std::string reply = read_frame(fd);
  REQUIRE(reply.size() == 33);
  REQUIRE(reply[0] == 0);  // Status::Ok
}

// An IPv4 address of this machine that is not loopback, if it has one.
std::optional<std::string> non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP))
      continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    found = text;
  }
  ::freeifaddrs(list);
  return found;
}

// The test cases stay inside the namespace too: in a unity batch, a using-directive would
// make these helpers collide with a neighbour's.

TEST_CASE("JobSecret: from STRATA_JOB_SECRET or a file, with clear errors", "[auth]") {
  const std::string text = "0123456789abcdef0123456789abcdef";
  {
    ScopedEnv env(kJobSecretEnv, text.c_str());
    ScopedEnv file(kJobSecretFileEnv, nullptr);
    REQUIRE(JobSecret::from_environment());
    CHECK(JobSecret::from_environment()->text() == text);
    CHECK(JobSecret::require("test").text() == text);
    CHECK(JobSecret::current().text() == text);
  }
  {
    ScopedEnv env(kJobSecretEnv, "short");
    CHECK_THROWS_WITH(JobSecret::from_environment(), Catch::Contains("STRATA_JOB_SECRET holds 5 bytes, expected at least 16"));
  }
  const auto path = std::filesystem::temp_directory_path() / ("strata_secret_" + std::to_string(::getpid()));
  {
    std::ofstream(path) << text << "\n";  // a trailing newline (echo, openssl rand) is not part of it
    ScopedEnv env(kJobSecretEnv, nullptr);
    ScopedEnv file(kJobSecretFileEnv, path.c_str());
    REQUIRE(JobSecret::from_environment());
    CHECK(JobSecret::from_environment()->text() == text);
  }
  std::filesystem::remove(path);
  {
    ScopedEnv env(kJobSecretEnv, nullptr);
    ScopedEnv file(kJobSecretFileEnv, path.c_str());
    CHECK_THROWS_WITH(JobSecret::from_environment(), Catch::Contains("cannot open the file"));
  }
  {
    ScopedEnv env(kJobSecretEnv, nullptr);
    ScopedEnv file(kJobSecretFileEnv, nullptr);
    CHECK_FALSE(JobSecret::from_environment());
    CHECK_THROWS_WITH(JobSecret::require("MultiWorkerMirroredStrategy with 2 workers"),
                      Catch::Contains("MultiWorkerMirroredStrategy with 2 workers: a job of several processes needs") &&
                          Catch::Contains("STRATA_JOB_SECRET") && Catch::Contains("STRATA_JOB_SECRET_FILE"));
    // Without one, a process uses its own random secret, the same on every call.
    CHECK(JobSecret::current().text() == JobSecret::current().text());
    CHECK(JobSecret::current().text().size() == 64);
  }
  CHECK_THROWS_WITH(JobSecret("too short"), Catch::Contains("too short, expected at least 16"));
}

TEST_CASE("JobSecret: generated secrets differ, and their MACs verify only with the same secret", "[auth]") {
  const JobSecret a = JobSecret::generate(), b = JobSecret::generate();
  CHECK(a.text() != b.text());
  CHECK(a.text().find_first_not_of("0123456789abcdef") == std::string::npos);
  const Digest tag = a.mac("message");
  const std::string tag_text(reinterpret_cast<const char*>(tag.data()), tag.size());
  CHECK(a.verify("message", tag_text));
  CHECK_FALSE(a.verify("messagf", tag_text));
  CHECK_FALSE(b.verify("message", tag_text));
  CHECK_FALSE(a.verify("message", tag_text.substr(1)));
  // RFC 4231, test case 1: it is HMAC-SHA256.
  const Digest rfc = JobSecret(std::string(20, '\x0b')).mac("Hi There");
  const Digest expected = {0xb0, 0x34, 0x4c, 0x61, 0xd8, 0xdb, 0x38, 0x53, 0x5c, 0xa8, 0xaf,
                           0xce, 0xaf, 0x0b, 0xf1, 0x2b, 0x88, 0x1d, 0xc2, 0x00, 0xc9, 0x83,
                           0x3d, 0xa7, 0x26, 0xe9, 0x37, 0x6c, 0x2e, 0x32, 0xcf, 0xf7};
  CHECK(rfc == expected);
}

TEST_CASE("TcpStore: strangers without the secret are refused and the job's clients keep working", "[auth][store]") {
  const JobSecret secret = JobSecret::generate();
  TcpStoreServer server(0, "127.0.0.1", {.secret = secret});
  TcpStore job("127.0.0.1", server.port(), 10.0, secret);
  job.set("liveness/0", "alive");

  // A raw client that skips the handshake and sends a Remove request: closed unanswered.
  const int raw = raw_connect(server.port());
  REQUIRE(raw >= 0);
  std::string remove = std::string(1, char(7)) + le32(10) + "liveness/0";
  raw_send(raw, le32(uint32_t(remove.size())) + remove);
  std::string got;
  CHECK(closed_by_peer(raw, 5.0, &got));
  CHECK(got.size() == 4 + 20 + 32);  // the greeting, and nothing else
  ::close(raw);

  // A TcpStore with another secret: refused, with a message saying what to do.
  CHECK_THROWS_WITH(TcpStore("127.0.0.1", server.port(), 5.0, JobSecret::generate()),
                    Catch::Contains("refused this process's job secret") && Catch::Contains("STRATA_JOB_SECRET"));
  CHECK(server.refused_connections() >= 2);

  // The job's own client never noticed.
  CHECK(job.get("liveness/0") == "alive");
  job.set("k", "v");
  TcpStore another("127.0.0.1", server.port(), 10.0, secret);
  CHECK(another.get("k") == "v");
}

TEST_CASE("TcpStore: the client authenticates the server too", "[auth][store]") {
  // An impostor on the store's address knows the protocol but not the secret.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  std::thread impostor([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    raw_send(fd, le32(52) + "strata-store-auth-v1" + std::string(32, 'n'));
    char answer[68];
    size_t got = 0;
    while (got < sizeof(answer)) {
      const ssize_t n = ::recv(fd, answer + got, sizeof(answer) - got, 0);
      if (n <= 0) break;
      got += size_t(n);
    }
    raw_send(fd, le32(33) + std::string(1, '\0') + std::string(32, 'x'));  // "Ok" with a made-up proof
    char drain[16];
    while (::recv(fd, drain, sizeof(drain), 0) > 0) {
    }
    ::close(fd);
  });
  CHECK_THROWS_WITH(TcpStore("127.0.0.1", port, 5.0, JobSecret::generate()),
                    Catch::Contains("did not prove it holds the job secret"));
  impostor.join();
  ::close(listener);
}

TEST_CASE("TcpStore: an idle stranger neither blocks the server nor stays connected", "[auth][store]") {
  const JobSecret secret = JobSecret::generate();
  TcpStoreServer server(0, "127.0.0.1", {.secret = secret, .handshake_timeout_seconds = 2.0});
  const int idle = raw_connect(server.port());
  REQUIRE(idle >= 0);
  // While it sits there, the job's clients connect and are served.
  TcpStore a("127.0.0.1", server.port(), 10.0, secret);
  TcpStore b("127.0.0.1", server.port(), 10.0, secret);
  a.set("k", "v");
  CHECK(b.get("k") == "v");
  // ... and the server drops it at the handshake deadline, counting it once.
  CHECK(closed_by_peer(idle, 10.0));
  ::close(idle);
  CHECK(server.refused_connections() == 1);

  // A flood of idle strangers (more than the server lets wait) does not keep a client out.
  std::vector<int> flood;
  for (int i = 0; i < 100; ++i) {
    const int fd = raw_connect(server.port());
    if (fd >= 0) flood.push_back(fd);
  }
  TcpStore c("127.0.0.1", server.port(), 10.0, secret);
  CHECK(c.get("k") == "v");
  for (int fd : flood) ::close(fd);
}

TEST_CASE("TcpStore: announced giant frames are refused at their header and memory stays bounded", "[auth][store]") {
  const JobSecret secret = JobSecret::generate();
  TcpStoreServer server(0, "127.0.0.1", {.secret = secret});
  const std::string chunk(1 << 20, 'z');
  // Three strangers announce 249 MB frames and stream data: each is closed after its first
  // bytes (the only frame a stranger may send is the 64-byte handshake answer).
  for (int i = 0; i < 3; ++i) {
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    raw_send(fd, le32(249u << 20));
    for (int k = 0; k < 4; ++k) raw_send(fd, chunk);
    CHECK(closed_by_peer(fd, 5.0));
    ::close(fd);
  }
  CHECK(server.peak_buffered_bytes() <= 3 * 68);
  CHECK(server.refused_connections() == 3);

  // Authenticated peers are capped per request type too: a set larger than its cap, and a
  // get larger than any key list, are refused at their first five bytes.
  for (const auto& [op, size] : std::vector<std::pair<char, uint32_t>>{{char(1), 249u << 20}, {char(3), 2u << 20}}) {
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    raw_authenticate(fd, secret);
    raw_send(fd, le32(size) + std::string(1, op));
    for (int k = 0; k < 4; ++k) raw_send(fd, chunk);
    CHECK(closed_by_peer(fd, 5.0));
    ::close(fd);
  }
  CHECK(server.peak_buffered_bytes() < (1u << 20));

  // The client refuses to send what the server would refuse.
  TcpStore job("127.0.0.1", server.port(), 10.0, secret);
  CHECK_THROWS_WITH(job.set("big", std::string(kMaxStoreValueBytes + 1, 'x')), Catch::Contains("exceeds the store's"));
  job.set("after", "ok");
  CHECK(job.get("after") == "ok");
}

TEST_CASE("TcpStoreServer binds exactly the address it is given, loopback by default", "[auth][store]") {
  TcpStoreServer by_default;
  CHECK(by_default.bound_host() == "127.0.0.1");
  TcpStoreServer loopback(0, "127.0.0.1");
  CHECK(loopback.bound_host() == "127.0.0.1");
  const auto other = non_loopback_ipv4();
  if (!other) {
    WARN("no non-loopback IPv4 address on this machine: checked the bound address only");
    return;
  }
  // Not reachable through another address of this machine...
  const int fd = raw_connect(by_default.port(), other->c_str());
  CHECK(fd < 0);
  if (fd >= 0) ::close(fd);
  // ... and a server given that address is not reachable through loopback.
  TcpStoreServer outside(0, *other);
  CHECK(outside.bound_host() == *other);
  const int via_loopback = raw_connect(outside.port(), "127.0.0.1");
  CHECK(via_loopback < 0);
  if (via_loopback >= 0) ::close(via_loopback);
}

TEST_CASE("Parameter server: a client without the job secret cannot read, assign or shut it down", "[auth][ps]") {
  if (!ps::rpc_available()) {
    WARN("built without ZeroMQ: skipped");
    return;
  }
  const JobSecret secret = JobSecret::generate();
  ScopedEnv env(kJobSecretEnv, secret.text().c_str());  // the server's and the job's clients' secret
  const std::string address = "127.0.0.1:" + std::to_string(find_free_port("127.0.0.1"));
  ParameterServer server(address, "ps 0");
  ps::RpcClient job(address, "ps 0");
  using nlohmann::json;
  job.call(ps::kCreate,
           ps::RpcMessage{json{{"items", json::array({json{{"key", "dense/kernel#0"}, {"mode", ps::kCreateOverwrite}}})}},
                          {Tensor::from_vector<float>({1.f, 2.f, 3.f})}},
           10);

  ps::RpcClient stranger(address, "ps 0", JobSecret::generate());
  auto refused = [&](const char* method, ps::RpcMessage request) {
    try {
      stranger.call(method, request, 0.5);
      return false;
    } catch (const ps::RpcError& e) {
      INFO(e.what());
      return e.status() == ps::RpcStatus::Unavailable && std::string(e.what()).find("not reachable") != std::string::npos;
    }
  };
  CHECK(refused(ps::kRead, ps::RpcMessage{json{{"keys", json::array({"dense/kernel#0"})}}, {}}));
  CHECK(refused(ps::kUpdate,
                ps::RpcMessage{json{{"items", json::array({json{{"key", "dense/kernel#0"}, {"op", ps::kOpAssign}}})}},
                               {Tensor::from_vector<float>({NAN, NAN, NAN})}}));
  CHECK(refused(ps::kShutdown, ps::RpcMessage{}));

  // The variable is untouched and the server still serves the job.
  const ps::RpcMessage back = job.call(ps::kRead, ps::RpcMessage{json{{"keys", json::array({"dense/kernel#0"})}}, {}}, 10);
  REQUIRE(back.tensors.size() == 1);
  CHECK(back.tensors[0].to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f});
  CHECK(job.call(ps::kPing, {}, 10).header.contains("incarnation"));
}

TEST_CASE("RpcServer given a host name listens on the address it resolves to, not on every interface", "[auth][ps]") {
  if (!ps::rpc_available()) {
    WARN("built without ZeroMQ: skipped");
    return;
  }
  char name[256] = {0};
  REQUIRE(::gethostname(name, sizeof(name) - 1) == 0);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &res) != 0 || res == nullptr) {
    WARN("the host name '" << name << "' does not resolve here: skipped");
    return;
  }
  char text[NI_MAXHOST] = {0};
  REQUIRE(::getnameinfo(res->ai_addr, res->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) == 0);
  const bool ipv6 = res->ai_family == AF_INET6;
  ::freeaddrinfo(res);
  const JobSecret secret = JobSecret::generate();
  ps::RpcServer server(name, 0, "named server", secret);
  server.add_method("echo", [](const ps::RpcMessage& m) { return m; });
  server.start();
  const std::string resolved = ipv6 ? "[" + std::string(text) + "]" : std::string(text);
  ps::RpcClient direct(resolved + ":" + std::to_string(server.port()), "named server", secret);
  CHECK(direct.call("echo", ps::RpcMessage{nlohmann::json{{"x", 2}}, {}}, 10).header.at("x") == 2);
  if (std::string(text) == "127.0.0.1") {
    WARN("'" << name << "' resolves to 127.0.0.1: checked that the server is reachable there only");
    return;
  }
  // Another local address of this machine does not reach it.
  ps::RpcClient via_loopback("127.0.0.1:" + std::to_string(server.port()), "named server", secret);
  CHECK_THROWS_AS(via_loopback.call("echo", {}, 0.5), ps::RpcError);
}

TEST_CASE("RpcServer counts and logs refused handshakes", "[auth][ps]") {
  if (!ps::rpc_available()) {
    WARN("built without ZeroMQ: skipped");
    return;
  }
  const JobSecret secret = JobSecret::generate();
  ps::RpcServer server("127.0.0.1", 0, "test server", secret);
  server.add_method("echo", [](const ps::RpcMessage& m) { return m; });
  server.start();
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  ps::RpcClient stranger(address, "test server", JobSecret::generate());
  CHECK_THROWS_AS(stranger.call("echo", {}, 0.3), ps::RpcError);
  // The monitor reports the failed handshakes asynchronously: wait for the first, bounded.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (server.refused_connections() == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(server.refused_connections() >= 1);
  ps::RpcClient job(address, "test server", secret);
  CHECK(job.call("echo", ps::RpcMessage{nlohmann::json{{"x", 1}}, {}}, 10).header.at("x") == 1);
}

}  // namespace job_auth_test
