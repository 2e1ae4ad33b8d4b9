// make_strategy: builds a strategy from a name and options, for programs that pick one
// from a flag (strata-train's --strategy, --replicas, --devices).
//
//   auto strategy = distribute::make_strategy("mirrored", {.replicas = 2});
//
// Names: "default", "one_device", "mirrored", "central_storage", "multi_worker" (a
// MultiWorkerMirroredStrategy over the cluster in the environment; replicas / devices
// are each worker's local replicas). "parameter_server" is recognised but throws: that
// strategy is driven by a ClusterCoordinator (distribute/ps/), not by run(). Options that do
// not apply to the named strategy (more than one device for one_device, cross_device_ops
// for anything but mirrored, ...) throw too.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/device.h>
#include <strata/distribute/collective/communicator.h>
#include <strata/distribute/cross_device_ops.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

struct StrategyOptions {
  // Number of replicas (logical CPU devices cpu:0..N-1) when `devices` is empty; 0 means
  // one. With `devices` it must be 0 or equal to their number.
  int replicas = 0;
  // The replicas' devices (one_device: at most one; mirrored / central_storage: any).
  // mirrored with neither replicas nor devices: every visible GPU, else cpu:0.
  std::vector<Device> devices = {};
  // Logical replicas per GPU (TensorFlow's virtual GPUs, docs/GPU.md): each GPU of
  // `devices` (every visible GPU when none are given) runs this many replicas. 0 or 1:
  // one per GPU. mirrored, central_storage and multi_worker.
  int virtual_gpus = 0;
  // mirrored only.
  CrossDeviceOps cross_device_ops = CrossDeviceOps::Default;
  // Collective timeouts and gradient packing (mirrored, central_storage).
  CommunicationOptions communication = {};
  // central_storage only (default cpu:0).
  std::optional<Device> parameter_device = std::nullopt;
  // ZeRO-1: shard the optimizer state across the replicas (Strategy::set_shard_optimizer_state,
  // docs/ZERO.md). default, one_device (no effect: one replica), mirrored, multi_worker;
  // central_storage refuses it.
  bool shard_optimizer_state = false;
  // mirrored and multi_worker on logical CPU devices: one copy of each mirrored variable
  // for the local replicas (Strategy::set_share_cpu_variables).
  bool share_cpu_variables = false;
};

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyOptions& options = {});

// The names make_strategy recognises, in the order strata-train lists them.
const std::vector<std::string>& strategy_names();
// True for the names make_strategy can build (all but "parameter_server").
bool strategy_available(const std::string& name);

}  // namespace strata::distribute
