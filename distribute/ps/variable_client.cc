#include <strata/distribute/ps/variable_client.h>

#include <atomic>

#include <strata/distribute/ps/protocol.h>
#include <strata/distribute/ps/rpc.h>
#include <strata/distribute/ps/task_label.h>

namespace strata::distribute {

using nlohmann::json;

VariableClient::VariableClient(const ClusterSpec& spec, std::string from, double rpc_timeout_seconds,
                               double startup_timeout_seconds)
    : from_(std::move(from)), rpc_timeout_(rpc_timeout_seconds), startup_timeout_(startup_timeout_seconds) {
  const int n = spec.num_tasks("ps");
  STRATA_CHECK(n >= 1, "ParameterServerStrategy: the cluster has no 'ps' task: ", spec.to_json());
  answered_ = std::make_unique<std::atomic<bool>[]>(size_t(n));
  failed_ = std::make_unique<std::atomic<bool>[]>(size_t(n));
  failed_error_.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    labels_.push_back(ps::task_label(spec, "ps", i));
    clients_.push_back(std::make_unique<ps::RpcClient>(spec.task_address("ps", i), labels_.back()));
    answered_[size_t(i)] = false;
    failed_[size_t(i)] = false;
  }
}

VariableClient::~VariableClient() = default;

const std::string& VariableClient::ps_label(int ps) const {
  STRATA_CHECK(ps >= 0 && ps < num_ps(), "VariableClient: parameter server ", ps, " out of range [0, ", num_ps(),
               ")");
  return labels_[size_t(ps)];
}

void VariableClient::mark_failed(int ps, const std::string& error) {
  ps_label(ps);  // range check
  std::lock_guard<std::mutex> lock(failed_mu_);
  if (failed_[size_t(ps)].load()) return;  // the first reason stands
  failed_error_[size_t(ps)] = error;
  failed_[size_t(ps)] = true;  // after the error: a call that sees the flag reads it under the lock
}

json VariableClient::call(int ps, const char* method, json header, std::vector<Tensor> tensors,
                          std::vector<Tensor>* reply_tensors) {
  ps_label(ps);  // range check
  header[ps::kFrom] = from_;
  const bool first = !answered_[size_t(ps)].load();
  const double timeout = first ? std::max(startup_timeout_, rpc_timeout_) : rpc_timeout_;
  try {
    // The failed flag ends the wait early: the chief's coordinator knows a dead server
    // within its heartbeat timeout, and the chief reading variables (for a checkpoint, the
    // global step) must not wait the whole RPC timeout on it before the job fails.
    ps::RpcMessage reply = clients_[size_t(ps)]->call(method, ps::RpcMessage{std::move(header), std::move(tensors)},
                                                      timeout, &failed_[size_t(ps)]);
    answered_[size_t(ps)] = true;
    if (reply_tensors) *reply_tensors = std::move(reply.tensors);
    return std::move(reply.header);
  } catch (const ps::RpcError& e) {
    if (!e.peer_unreachable()) throw;
    if (failed_[size_t(ps)].load()) {  // the coordinator's reason, which names the server
      std::lock_guard<std::mutex> lock(failed_mu_);
      throw ParameterServerUnavailable(ps, failed_error_[size_t(ps)]);
    }
    throw ParameterServerUnavailable(ps, "parameter server " + labels_[size_t(ps)] + " is unavailable" +
                                             (first ? " (it never answered)" : "") + ": " + e.what());
  }
}

void VariableClient::create(int ps, const std::vector<Item>& items) {
  json list = json::array();
  std::vector<Tensor> tensors;
  for (const Item& it : items) {
    list.push_back({{"key", it.key}, {"mode", it.op}});
    tensors.push_back(it.value);
  }
  call(ps, ps::kCreate, json{{"items", list}}, std::move(tensors));
}

std::vector<Tensor> VariableClient::read(int ps, const std::vector<std::string>& keys) {
  std::vector<Tensor> out;
  call(ps, ps::kRead, json{{"keys", keys}}, {}, &out);
  STRATA_CHECK(out.size() == keys.size(), "VariableClient::read: ", labels_[size_t(ps)], " returned ", out.size(),
               " tensors for ", keys.size(), " keys");
  return out;
}

void VariableClient::update(int ps, const std::vector<Item>& items) {
  json list = json::array();
  std::vector<Tensor> tensors;
  for (const Item& it : items) {
    list.push_back({{"key", it.key}, {"op", it.op}});
    tensors.push_back(it.value);
  }
  call(ps, ps::kUpdate, json{{"items", list}}, std::move(tensors));
}

void VariableClient::put_placement(const std::string& key, const json& placement) {
  call(0, ps::kPutPlacement, json{{"key", key}, {"placement", placement}}, {});
}

std::optional<json> VariableClient::get_placement(const std::string& key) {
  json reply = call(0, ps::kGetPlacement, json{{"key", key}}, {});
  if (!reply.value("found", false)) return std::nullopt;
  return reply.at("placement");
}

}  // namespace strata::distribute
