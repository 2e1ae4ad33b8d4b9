#include <strata/distribute/ps/parameter_server.h>

#include <iostream>
#include <mutex>
#include <random>
#include <unordered_map>

#include <strata/core/ops.h>
#include <strata/distribute/ps/protocol.h>
#include <strata/distribute/ps/rpc.h>
#include <strata/distribute/ps/task_label.h>

namespace strata::distribute {

using nlohmann::json;
using ps::RpcMessage;

struct ParameterServer::Impl {
  std::string name;
  ps::ChiefWatch watch;
  ps::RpcServer server;
  // Handlers run on the server's one socket thread; the mutex is for variables() and
  // for the moment the server stops.
  mutable std::mutex mu;
  std::unordered_map<std::string, Tensor> store;
  std::unordered_map<std::string, json> directory;

  Impl(const std::string& address, std::string n, std::string chief, ServerOptions options)
      : name(std::move(n)),
        watch(options, name, std::move(chief)),
        server(split_host_port(address, "ParameterServer address").first,
               split_host_port(address, "ParameterServer address").second, name) {}

  void note_sender(const RpcMessage& request) {
    if (request.header.value(ps::kFrom, std::string()) == ps::kFromChief) watch.touch();
  }

  const Tensor& find(const std::string& key, const char* method) const {
    auto it = store.find(key);
    STRATA_CHECK(it != store.end(), name, ": ", method, ": no variable '", key, "' on this parameter server");
    return it->second;
  }

  RpcMessage create(const RpcMessage& request) {
    const json& items = request.header.at("items");
    STRATA_CHECK(items.size() == request.tensors.size(), name, ": create: ", items.size(), " items but ",
                 request.tensors.size(), " tensors");
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string key = items[i].at("key");
      const std::string mode = items[i].at("mode");
      const Tensor& initial = request.tensors[i];
      auto it = store.find(key);
      if (it != store.end() && mode == ps::kCreateIfAbsent) {
        STRATA_CHECK(it->second.dtype() == initial.dtype() && it->second.shape() == initial.shape(), name,
                     ": create: variable '", key, "' exists as ", dtype_name(it->second.dtype()),
                     shape_str(it->second.shape()), ", requested ", dtype_name(initial.dtype()),
                     shape_str(initial.shape()));
        continue;
      }
      STRATA_CHECK(mode == ps::kCreateIfAbsent || mode == ps::kCreateOverwrite, name, ": create: unknown mode '",
                   mode, "'");
      store[key] = initial;  // the decoded tensor is fresh: the store owns it
    }
    return {};
  }

  RpcMessage read(const RpcMessage& request) {
    RpcMessage reply;
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& k : request.header.at("keys")) reply.tensors.push_back(find(k, "read"));
    return reply;  // copied into the reply's frames before the next request runs
  }

  RpcMessage update(const RpcMessage& request) {
    const json& items = request.header.at("items");
    STRATA_CHECK(items.size() == request.tensors.size(), name, ": update: ", items.size(), " items but ",
                 request.tensors.size(), " tensors");
    std::lock_guard<std::mutex> lock(mu);
    // Validate everything first: an update request is applied whole or not at all.
    std::vector<const Tensor*> targets;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string key = items[i].at("key");
      const std::string op = items[i].at("op");
      const Tensor& target = find(key, "update");
      const Tensor& v = request.tensors[i];
      STRATA_CHECK(op == ps::kOpAssign || op == ps::kOpAdd || op == ps::kOpSub, name, ": update: unknown op '", op,
                   "'");
      STRATA_CHECK(v.shape() == target.shape() && v.dtype() == target.dtype(), name, ": update: ", op, " of ",
                   dtype_name(v.dtype()), shape_str(v.shape()), " on variable '", key, "' of ",
                   dtype_name(target.dtype()), shape_str(target.shape()));
      STRATA_CHECK(op == ps::kOpAssign || target.dtype() != kBool, name, ": update: ", op,
                   " on the bool variable '", key, "'");
      targets.push_back(&target);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string op = items[i].at("op");
      const Tensor& target = *targets[i];
      const Tensor& v = request.tensors[i];
      if (op == ps::kOpAssign) {
        target.copy_(v);
      } else if (op == ps::kOpAdd) {
        target.copy_(add(target, v));
      } else {
        target.copy_(sub(target, v));
      }
    }
    return {};
  }

  RpcMessage put_placement(const RpcMessage& request) {
    std::lock_guard<std::mutex> lock(mu);
    directory[request.header.at("key").get<std::string>()] = request.header.at("placement");
    return {};
  }

  RpcMessage get_placement(const RpcMessage& request) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = directory.find(request.header.at("key").get<std::string>());
    if (it == directory.end()) return RpcMessage{json{{"found", false}}, {}};
    return RpcMessage{json{{"found", true}, {"placement", it->second}}, {}};
  }
};

ParameterServer::ParameterServer(const std::string& address, std::string name, std::string chief,
                                 ServerOptions options)
    : impl_(std::make_unique<Impl>(address, std::move(name), std::move(chief), options)),
      incarnation_(std::random_device{}() * 0x100000000ull + std::random_device{}()) {
  Impl& s = *impl_;
  auto method = [&s](const char* m, RpcMessage (Impl::*fn)(const RpcMessage&)) {
    s.server.add_method(m, [&s, fn](const RpcMessage& request) {
      s.note_sender(request);
      return (s.*fn)(request);
    });
  };
  method(ps::kCreate, &Impl::create);
  method(ps::kRead, &Impl::read);
  method(ps::kUpdate, &Impl::update);
  method(ps::kPutPlacement, &Impl::put_placement);
  method(ps::kGetPlacement, &Impl::get_placement);
  const uint64_t incarnation = incarnation_;
  s.server.add_method(ps::kPing, [&s, incarnation](const RpcMessage& request) {
    s.note_sender(request);
    std::lock_guard<std::mutex> lock(s.mu);
    return RpcMessage{json{{"incarnation", incarnation}, {"variables", s.store.size()}}, {}};
  });
  s.server.add_method(ps::kShutdown, [&s](const RpcMessage& request) {
    s.note_sender(request);
    s.watch.shutdown();
    return RpcMessage{};
  });
  s.server.start();
}

ParameterServer::~ParameterServer() { stop(); }

int ParameterServer::port() const { return impl_->server.port(); }

void ParameterServer::join() {
  impl_->watch.join();
}

void ParameterServer::stop() {
  impl_->watch.shutdown();
  impl_->server.stop();
}

std::map<std::string, std::pair<DType, Shape>> ParameterServer::variables() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::map<std::string, std::pair<DType, Shape>> out;
  for (const auto& [key, value] : impl_->store) out.emplace(key, std::make_pair(value.dtype(), value.shape()));
  return out;
}

void run_parameter_server(const ClusterResolver& resolver, const ServerOptions& options) {
  STRATA_CHECK(resolver.task_type() == "ps", "run_parameter_server: this task is '", resolver.task_type(), "' ",
               resolver.task_id(), ", not a parameter server ('ps')");
  const ClusterSpec& spec = resolver.cluster_spec();
  STRATA_CHECK(spec.has_job("chief"), "run_parameter_server: the cluster has no 'chief' task (the coordinator): ",
               spec.to_json());
  const std::string address = spec.task_address("ps", resolver.task_id());
  ParameterServer server(address, ps::task_label(spec, "ps", resolver.task_id()), ps::task_label(spec, "chief", 0),
                         options);
  std::cerr << "strata: parameter server " << ps::task_label(spec, "ps", resolver.task_id()) << " serving"
            << std::endl;
  server.join();
  server.stop();
}

}  // namespace strata::distribute
