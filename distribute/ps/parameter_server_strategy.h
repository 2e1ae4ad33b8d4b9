// ParameterServerStrategy: asynchronous data-parallel training with variables on
// parameter servers, driven by a ClusterCoordinator (tf.distribute.ParameterServerStrategy
// with tf.distribute.coordinator.ClusterCoordinator).
//
// The cluster (TF_CONFIG) has a "chief" (the coordinator), "worker" tasks and "ps" tasks;
// every task runs the same program:
//
//   auto resolver = distribute::ClusterResolver::from_environment();
//   if (resolver.task_type() == "ps") { distribute::run_parameter_server(resolver); return 0; }
//   distribute::ParameterServerStrategy strategy(resolver, distribute::MinSizePartitioner(256 << 10, 2));
//   nn::Sequential model; optim::Optimizer opt;
//   { auto scope = strategy.scope(); model = ...; opt = optim::SGD(0.1); }
//   distribute::ClusterCoordinator coordinator(strategy);
//   auto per_worker = coordinator.create_per_worker_dataset(dataset_fn);
//   coordinator.register_function("train_step", [&](distribute::ClosureArgs& args) {
//     data::Batch batch = args.next(0);            // from this worker's iterator
//     return strategy.run(step, batch).values();   // step: forward, tape, opt.apply_gradients
//   });
//   if (resolver.task_type() == "worker") { coordinator.serve(); return 0; }
//   auto it = per_worker.make_iterator();
//   for (int i = 0; i < steps; ++i) coordinator.schedule("train_step", {it});
//   coordinator.join();
//
// Variables created in scope() live on the parameter servers (ps_variable.h): whole, on
// the next server round-robin, or — when `variable_partitioner` returns n > 1 for its
// shape — as n shards along axis 0, each on the next server round-robin. The chief
// creates and initialises them; a worker building the same model finds the chief's
// variables (matched by name and by how many variables of that name it created before)
// and waits for them (up to startup_timeout_seconds). Each worker has one replica on its
// default device and trains independently: num_replicas_in_sync() is 1, gradients are
// not all-reduced, and each step's updates reach the servers atomically when the step
// commits.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <strata/distribute/cluster_resolver.h>
#include <strata/distribute/ps/partitioners.h>
#include <strata/distribute/ps/ps_variable.h>
#include <strata/distribute/ps/variable_client.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

struct ParameterServerStrategyOptions {
  // Deadline of every request to a parameter server once it has answered once.
  double rpc_timeout_seconds = 30.0;
  // How long to wait for a parameter server to come up, and on a worker for the chief to
  // create a variable.
  double startup_timeout_seconds = 120.0;
};

class ParameterServerStrategy final : public Strategy {
 public:
  // The resolver must describe a cluster with a chief, at least one worker and one ps,
  // and this task must be the chief or a worker (parameter servers run
  // run_parameter_server instead).
  explicit ParameterServerStrategy(ClusterResolver cluster_resolver, VariablePartitioner variable_partitioner = {},
                                   ParameterServerStrategyOptions options = {});
  ~ParameterServerStrategy() override;

  std::string name() const override { return "parameter_server"; }
  const ClusterResolver& cluster_resolver() const { return resolver_; }
  bool is_chief() const { return resolver_.task_type() == "chief"; }
  int num_ps() const { return client_->num_ps(); }
  // Worker tasks in the cluster (not counting the chief).
  int cluster_num_workers() const { return resolver_.cluster_spec().num_tasks("worker"); }
  const ParameterServerStrategyOptions& options() const { return options_; }

  // Where a variable of this strategy lives; throws for any other variable.
  const VariablePlacement& placement(const Variable& var) const;

  // ---- used by PsVariableImpl, StepScope and ClusterCoordinator ----
  VariableClient& client() { return *client_; }
  // Fetches whole variables (one request per server involved).
  std::vector<Tensor> read_variables(const std::vector<const VariablePlacement*>& placements);
  struct Write {
    const VariablePlacement* placement = nullptr;
    std::string op;  // protocol kOpAssign / kOpAdd / kOpSub
    Tensor value;    // whole-variable shape and dtype
  };
  // Sends writes, split into shards, one atomic request per server.
  void write_variables(const std::vector<Write>& writes);
  // Every live variable of this strategy (for a step's prefetch).
  std::vector<std::shared_ptr<PsVariableImpl>> live_variables() const;
  std::shared_ptr<autograd::VariableImpl> create_slot(const PsVariableImpl& parent, const Tensor& initial,
                                                      const autograd::VariableOptions& options);

 protected:
  std::shared_ptr<autograd::VariableImpl> create_variable(const Tensor& initial,
                                                          const autograd::VariableOptions& options) override;

 private:
  std::shared_ptr<PsVariableImpl> track(std::shared_ptr<const VariablePlacement> placement,
                                        const autograd::VariableOptions& options);
  std::string next_key(const std::string& base);

  ClusterResolver resolver_;
  VariablePartitioner partitioner_;
  ParameterServerStrategyOptions options_;
  std::unique_ptr<VariableClient> client_;
  mutable std::mutex mu_;
  std::map<std::string, int> name_counts_;
  int64_t round_robin_ = 0;
  std::vector<std::weak_ptr<PsVariableImpl>> live_;
};

}  // namespace strata::distribute
