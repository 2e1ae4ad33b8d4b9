// VariableClient: a worker's or the chief's connections to every parameter server of the
// job, with the variable operations the strategy needs (create, read, update, the
// placement directory), each batched per server and bounded by a deadline.
//
// A parameter server that does not answer makes every operation on it throw
// ParameterServerUnavailable naming the task ("/job:ps/replica:0/task:1 (127.0.0.1:4001)");
// the coordinator turns that into the job's failure, as TensorFlow does for a PS failure.
// Before a server has answered once, calls wait up to the startup timeout for it to come
// up (tasks start in any order); afterwards up to the RPC timeout — or until the chief's
// ClusterCoordinator, whose heartbeats find a dead server within seconds, declares it
// failed (mark_failed): calls to it then throw at once, those already waiting included.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/core/tensor.h>
#include <strata/distribute/cluster_resolver.h>

namespace strata::distribute {

namespace ps {
class RpcClient;
}

class ParameterServerUnavailable : public Error {
 public:
  ParameterServerUnavailable(int ps_index, const std::string& message) : Error(message), ps_index_(ps_index) {}
  int ps_index() const { return ps_index_; }

 private:
  int ps_index_;
};

class VariableClient {
 public:
  // `from` is "chief" or "worker" (servers take the chief's requests as its heartbeat).
  VariableClient(const ClusterSpec& spec, std::string from, double rpc_timeout_seconds,
                 double startup_timeout_seconds);
  ~VariableClient();

  int num_ps() const { return int(labels_.size()); }
  // "/job:ps/replica:0/task:i (address)".
  const std::string& ps_label(int ps) const;

  struct Item {
    std::string key;
    std::string op;  // create: protocol kCreate* mode; update: kOpAssign/kOpAdd/kOpSub
    Tensor value;
  };
  void create(int ps, const std::vector<Item>& items);
  std::vector<Tensor> read(int ps, const std::vector<std::string>& keys);
  // Applied atomically by the server (all items or none).
  void update(int ps, const std::vector<Item>& items);
  // The placement directory lives on parameter server 0.
  void put_placement(const std::string& key, const nlohmann::json& placement);
  std::optional<nlohmann::json> get_placement(const std::string& key);

  // Parameter server `ps` has failed (the coordinator's heartbeats say so): every call to
  // it, from now on and already waiting, throws ParameterServerUnavailable with `error`
  // (which names the server) instead of waiting out the RPC timeout. Thread-safe.
  void mark_failed(int ps, const std::string& error);

 private:
  nlohmann::json call(int ps, const char* method, nlohmann::json header, std::vector<Tensor> tensors,
                      std::vector<Tensor>* reply_tensors = nullptr);

  std::string from_;
  double rpc_timeout_, startup_timeout_;
  std::vector<std::string> labels_;
  std::vector<std::unique_ptr<ps::RpcClient>> clients_;
  std::unique_ptr<std::atomic<bool>[]> answered_;
  // Set by mark_failed; the RPC client watches it while a call waits.
  std::unique_ptr<std::atomic<bool>[]> failed_;
  std::mutex failed_mu_;
  std::vector<std::string> failed_error_;  // by server, under failed_mu_
};

}  // namespace strata::distribute
