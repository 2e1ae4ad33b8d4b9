// ParameterServer: the variable store of a parameter-server job, served over RPC
// (distribute/ps/rpc.h). Each "ps" task of the cluster runs one; workers and the chief
// read variables from it and send it updates (distribute/ps/ps_variable.h).
//
// Requests are handled one at a time in arrival order, and each update request (any
// number of assign / add / sub on any variables) is validated whole and then applied
// whole before the next request is looked at: concurrent workers never lose an update
// and never see half of one. Variables are keyed by strings chosen by the strategy
// ("dense/kernel#0/part_1"); the server also keeps the strategy's placement directory
// (which shards a variable has and where), used by workers to find the variables the
// chief created.
//
// A program runs its parameter servers with
//
//   auto resolver = distribute::ClusterResolver::from_environment();
//   if (resolver.task_type() == "ps") { distribute::run_parameter_server(resolver); return 0; }
//
// which returns when the chief shuts the job down and throws when the chief is lost
// (ServerOptions).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <strata/core/dtype.h>
#include <strata/core/shape.h>
#include <strata/distribute/cluster_resolver.h>
#include <strata/distribute/ps/server_options.h>

namespace strata::distribute {

class ParameterServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks one, see port()). `name` appears in
  // messages, e.g. "/job:ps/replica:0/task:0 (127.0.0.1:4000)"; `chief` names the chief.
  ParameterServer(const std::string& address, std::string name, std::string chief = "the chief",
                  ServerOptions options = {});
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  int port() const;
  // A random id chosen at start: a restarted server (whose variables are gone) has a
  // different one, which is how the chief tells a restart from a slow reply.
  uint64_t incarnation() const { return incarnation_; }

  // Blocks until the chief sends "shutdown" (returns) or is lost (throws strata::Error).
  void join();
  // Stops serving now (idempotent).
  void stop();

  // The stored variables: key -> (dtype, shape).
  std::map<std::string, std::pair<DType, Shape>> variables() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t incarnation_;
};

// Runs this task's parameter server (task type "ps") until the chief shuts the job down;
// throws strata::Error when the chief is lost or the address cannot be bound. Logs one
// line to stderr when it starts.
void run_parameter_server(const ClusterResolver& resolver, const ServerOptions& options = {});

}  // namespace strata::distribute
