// TcpStore: the rendezvous key-value store of a multi-worker job, over TCP.
//
// Gloo ships FileStore, HashStore and RedisStore but no network store, and NCCL needs its
// unique id passed from rank 0 to everyone: so, as PyTorch's TCPStore does, the chief
// hosts a small key-value service (TcpStoreServer, one background thread) and every
// worker — the chief included — talks to it through a TcpStore client. The gloo backend
// adapts the client to gloo::rendezvous::Store (set, get, wait(keys[, timeout])).
//
// Every call is bounded: a missing key, a dead server or an unreachable host raise
// strata::Error within the timeout, naming the key(s) waited for and the store address.
// Values are arbitrary bytes. Messages are length-prefixed frames over plain sockets;
// this is glue for a few small messages, not a data path.
//
// Authentication (docs/SECURITY.md): on connect the server sends a random 32-byte nonce;
// the client answers with its own nonce and HMAC-SHA256(job secret, "client" || both
// nonces); the server checks it in constant time before serving any request, and proves
// itself back with HMAC(secret, "server" || both nonces). A connection that sends anything
// else, or nothing within the handshake timeout, is closed; each refused address is logged
// once. Frames are capped per request type (a set's value: kMaxStoreValueBytes; other
// requests: 1 MiB; the handshake: its exact size) and checked as soon as their header
// arrives, and a connection's unread input is bounded, so no peer can grow the server's
// memory by announcing a large frame.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <strata/distribute/job_secret.h>

namespace strata::distribute {

// The largest value set() accepts (Gloo addresses and NCCL ids are bytes to kilobytes).
inline constexpr size_t kMaxStoreValueBytes = size_t(64) << 20;
// The longest key.
inline constexpr size_t kMaxStoreKeyBytes = size_t(64) << 10;

struct TcpStoreServerOptions {
  // The job's secret; unset: JobSecret::current() (the environment's, else this process's own).
  std::optional<JobSecret> secret;
  // A connection that has not authenticated within this many seconds is closed.
  double handshake_timeout_seconds = 10.0;
};

// The server: a thread that owns a listening socket and the key-value map. Requests that
// wait (get, wait) are parked until their keys appear or their deadline passes, so one
// thread serves any number of clients.
class TcpStoreServer {
 public:
  // Listens on exactly bind_host:port (a host name: the first address it resolves to;
  // "0.0.0.0" only when asked for; port 0 = pick a free one).
  explicit TcpStoreServer(int port = 0, const std::string& bind_host = "127.0.0.1",
                          TcpStoreServerOptions options = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // The numeric address the socket is bound to ("127.0.0.1"), as getsockname reports it.
  const std::string& bound_host() const { return bound_host_; }
  // Closes every connection and joins the thread (the destructor calls it too).
  void stop();

  // Observables of the defences, for tests and diagnostics: the most bytes ever held in
  // connections' input buffers at once, and the connections refused so far.
  size_t peak_buffered_bytes() const { return peak_buffered_.load(); }
  int64_t refused_connections() const { return refused_.load(); }

  // The server's request handling without sockets, for the fuzz target and its replay
  // test (fuzz/tcp_store_fuzz.cc): `input` is what one connection sends (frames), fed to a
  // fresh server state exactly as the serving thread would feed it, then every parked
  // request is resolved as if its deadline had passed. Returns the reply bytes.
  static std::string serve_bytes_for_testing(std::string_view input);

 private:
  struct State;
  void serve();

  int port_ = 0;
  int listen_fd_ = -1;
  double handshake_timeout_ = 10.0;
  std::string bound_host_;
  int wake_pipe_[2] = {-1, -1};
  std::unique_ptr<State> state_;
  std::atomic<size_t> peak_buffered_{0};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

// A client connection. Calls are serialised by a mutex: a thread blocked in wait() holds
// the connection, so threads that must wait independently use one client each.
class TcpStore {
 public:
  // Connects to host:port, retrying until `timeout_seconds` (the server may start after
  // the client), and authenticates with `secret` (unset: JobSecret::current()). The
  // timeout is also the default bound of every call.
  TcpStore(const std::string& host, int port, double timeout_seconds = 300.0,
           std::optional<JobSecret> secret = std::nullopt);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Like set, but the server deletes the key when this client disconnects (its process
  // exits or dies): a liveness marker, as ZooKeeper's ephemeral nodes.
  void set_ephemeral(const std::string& key, const std::string& value);
  // Waits for the key to exist (up to the timeout), then returns its value.
  std::string get(const std::string& key);
  std::string get(const std::string& key, double timeout_seconds);
  // Adds `delta` to the integer stored at `key` (absent = 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // True when every key exists; never waits.
  bool check(const std::vector<std::string>& keys);
  // Waits until every key exists; throws strata::Error naming the missing ones.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, double timeout_seconds);
  // Deletes a key; false when it did not exist.
  bool remove(const std::string& key);

  double timeout_seconds() const { return timeout_seconds_; }
  // "host:port" of the server.
  const std::string& address() const { return address_; }
  // The job secret this client authenticated with (the job's other connections, such as
  // Gloo's pairs, prove the same one).
  const JobSecret& secret() const { return secret_; }

 private:
  std::string request(const std::string& payload, double timeout_seconds, const char* op,
                      const std::string& what);
  void authenticate(const JobSecret& secret, double timeout_seconds);

  std::string address_;
  double timeout_seconds_;
  JobSecret secret_;
  int fd_ = -1;
  std::mutex mu_;
};

// A TCP port on `host` that nothing listens on right now (the kernel's pick). Another
// process may take it before it is used: launchers accept that race, as torchrun does.
int find_free_port(const std::string& host = "127.0.0.1");

}  // namespace strata::distribute
