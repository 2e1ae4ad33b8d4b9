// RPC for the parameter-server strategy, over ZeroMQ (libzmq with the cppzmq binding, both
// Debian packages): no hand-made socket protocol.
//
// A request is a method name, a JSON header and tensors; a reply is a status, a JSON
// header and tensors. Tensors travel as raw bytes, their dtype and shape in the header.
// Clients are ZeroMQ DEALER sockets and servers ROUTER sockets, so a client may have
// several requests in flight (a long "run a closure" call and heartbeats beside it);
// replies are matched to requests by id and late replies to abandoned requests are
// dropped. Every call has a deadline: nothing waits forever on a peer that died.
//
// Authentication (docs/SECURITY.md): every connection is a ZeroMQ CURVE connection whose
// keys are derived from the job secret (JobSecret): the server's keypair and one client
// keypair, both from HMAC(secret, label). A client must know the server's public key to
// complete the handshake and the server admits (through a ZAP handler) only the job's
// client key, so a peer without the secret can neither send a request nor read a reply;
// the traffic is also encrypted. Refused peers are counted and logged once.
//
// Built without ZeroMQ (-DSTRATA_WITH_ZMQ=OFF, or libzmq3-dev/cppzmq-dev missing, as on
// the GPU machine), constructing a server or client throws a strata::Error saying so.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/core/error.h>
#include <strata/core/tensor.h>
#include <strata/distribute/job_secret.h>

namespace strata::distribute::ps {

// True when this build has the ZeroMQ transport.
bool rpc_available();

// A request or a reply. Tensors are sent from host memory (any layout); received tensors
// are fresh contiguous cpu:0 tensors.
struct RpcMessage {
  nlohmann::json header = nlohmann::json::object();
  std::vector<Tensor> tensors;
};

enum class RpcStatus {
  DeadlineExceeded,  // no reply before the deadline
  Unavailable,       // the request could not even be sent (nobody connected) in time
  RemoteError,       // the peer's handler threw; the message is the peer's
  ProtocolError,     // a malformed reply
};
const char* rpc_status_name(RpcStatus status);

// What RpcClient throws: names the peer ("ps 1 (127.0.0.1:4000)"), the method and what
// went wrong.
class RpcError : public Error {
 public:
  RpcError(RpcStatus status, std::string peer, const std::string& message)
      : Error(message), status_(status), peer_(std::move(peer)) {}
  RpcStatus status() const { return status_; }
  const std::string& peer() const { return peer_; }
  // The peer did not answer (as opposed to answering with an error).
  bool peer_unreachable() const { return status_ == RpcStatus::DeadlineExceeded || status_ == RpcStatus::Unavailable; }

 private:
  RpcStatus status_;
  std::string peer_;
};

// Serves methods on tcp://<host>:<port>. Inline methods run on the socket thread, one at a
// time in arrival order (so a parameter server's updates are atomic without locks);
// background methods run in order on one executor thread while the socket thread keeps
// answering inline methods (a worker answers heartbeats while it runs a closure).
class RpcServer {
 public:
  using Handler = std::function<RpcMessage(const RpcMessage& request)>;

  // `name` is used in messages ("ps 0"). Port 0 picks a free port (see port()). Clients
  // must hold `secret` (unset: JobSecret::current()).
  RpcServer(std::string host, int port, std::string name, std::optional<JobSecret> secret = std::nullopt);
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Registers a method; only before start().
  void add_method(const std::string& method, Handler handler, bool background = false);
  // Binds and starts serving; throws strata::Error when the address cannot be bound.
  void start();
  // Stops serving (idempotent); requests in flight get no reply. Joins the threads.
  void stop();
  // The bound port (after start()).
  int port() const;
  const std::string& name() const;
  // Connections refused so far (failed CURVE handshakes: peers without the job secret).
  int64_t refused_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One connection to a server. Thread-safe: calls from several threads are serialised
// (each call holds the connection until its reply arrives or its deadline passes).
class RpcClient {
 public:
  // `address` is "host:port"; `peer` names the server in errors ("ps 0"). Authenticates
  // with `secret` (unset: JobSecret::current()).
  RpcClient(const std::string& address, std::string peer, std::optional<JobSecret> secret = std::nullopt);
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Sends a request and waits for its reply until the deadline; throws RpcError.
  // `abandon`, when given, is checked while waiting (every 100 ms at most): once it is
  // set, the call gives up with RpcError (Unavailable) instead of waiting out the
  // deadline. The owner sets it when another source (the coordinator's heartbeats) has
  // found the peer dead: a request to a dead peer otherwise waits the whole timeout.
  RpcMessage call(const std::string& method, const RpcMessage& request, double timeout_seconds,
                  const std::atomic<bool>* abandon = nullptr);

  // The two halves of call(), for a caller that interleaves a long request with others
  // on the same connection. send() returns the request's id; it throws RpcError
  // (Unavailable) when the request cannot be queued to a connected peer within the
  // timeout.
  uint64_t send(const std::string& method, const RpcMessage& request, double timeout_seconds);
  struct Reply {
    uint64_t id = 0;
    bool ok = true;      // false: the peer's handler threw `error`
    std::string error;
    RpcMessage message;
  };
  // The next reply to any request sent since the last reset(), or nullopt after
  // `timeout_seconds` without one.
  std::optional<Reply> receive(double timeout_seconds);

  // Drops the connection with its queued requests and any late replies; the next send
  // reconnects. Used when the peer is declared dead, so that a request queued for it is
  // never delivered to its restarted successor.
  void reset();

  const std::string& peer() const { return peer_; }
  const std::string& address() const { return address_; }

 private:
  uint64_t send_locked(const std::string& method, const RpcMessage& request, double timeout_seconds,
                       const std::atomic<bool>* abandon = nullptr);
  std::optional<Reply> receive_locked(double timeout_seconds);

  struct Impl;
  std::string address_;
  std::string peer_;
  std::unique_ptr<Impl> impl_;
};

// "host:port" -> the ZeroMQ endpoint for connecting ("tcp://host:port", IPv6 bracketed).
std::string connect_endpoint(const std::string& address);

}  // namespace strata::distribute::ps
