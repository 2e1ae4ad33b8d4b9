#include <strata/distribute/make_strategy.h>

#include <algorithm>

#include <strata/distribute/cluster_resolver.h>
#include <strata/distribute/multi_worker_mirrored_strategy.h>

namespace strata::distribute {

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"default",         "one_device",   "mirrored",
                                                 "multi_worker",    "central_storage", "parameter_server"};
  return names;
}

bool strategy_available(const std::string& name) {
  return name == "default" || name == "one_device" || name == "mirrored" || name == "central_storage" ||
         name == "multi_worker";
}

namespace {
std::string names_list() {
  std::string out;
  for (const auto& n : strategy_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The replicas' devices from `replicas` / `devices`.
std::vector<Device> replica_devices(const std::string& name, const StrategyOptions& o) {
  STRATA_CHECK(o.replicas >= 0, "make_strategy('", name, "'): replicas must be >= 0, got ", o.replicas);
  STRATA_CHECK(o.virtual_gpus >= 0, "make_strategy('", name, "'): virtual_gpus must be >= 0, got ", o.virtual_gpus);
  if (o.virtual_gpus > 1) {
    // Each GPU split into virtual_gpus logical replicas (the GPU listed that many times).
    std::vector<Device> gpus = o.devices.empty() ? MirroredStrategy::gpu_devices(1) : o.devices;
    std::vector<Device> out;
    for (const Device& d : gpus) {
      STRATA_CHECK(d.is_cuda(), "make_strategy('", name, "'): virtual_gpus splits GPUs, but ", d, " is not one");
      for (int k = 0; k < o.virtual_gpus; ++k) out.push_back(d);
    }
    STRATA_CHECK(o.replicas == 0 || o.replicas == int(out.size()), "make_strategy('", name, "'): ", o.replicas,
                 " replicas requested but ", gpus.size(), " GPU(s) x ", o.virtual_gpus, " virtual GPUs give ",
                 out.size());
    return out;
  }
  if (o.devices.empty()) return MirroredStrategy::cpu_devices(std::max(1, o.replicas));
  STRATA_CHECK(o.replicas == 0 || o.replicas == int(o.devices.size()), "make_strategy('", name, "'): ", o.replicas,
               " replicas requested but ", o.devices.size(), " devices given (one replica per device)");
  return o.devices;
}

void check_single_replica(const std::string& name, const StrategyOptions& o) {
  STRATA_CHECK(o.replicas <= 1 && o.devices.size() <= 1, "make_strategy('", name, "'): the ", name,
               " strategy runs one replica, but ", std::max<size_t>(size_t(std::max(o.replicas, 0)), o.devices.size()),
               " were requested (use 'mirrored' or 'central_storage' for several)");
}

void check_no(const std::string& name, bool given, const char* option) {
  STRATA_CHECK(!given, "make_strategy('", name, "'): option ", option, " does not apply to the ", name, " strategy");
}
}  // namespace

namespace {
std::unique_ptr<Strategy> build_strategy(const std::string& name, const StrategyOptions& options);
}  // namespace

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyOptions& options) {
  STRATA_CHECK(!options.shard_optimizer_state || name != "central_storage",
               "make_strategy('central_storage'): option shard_optimizer_state does not apply: the central_storage "
               "strategy keeps a single copy of every variable and of its optimizer slots on the parameter device, so "
               "there is no replicated optimizer state to shard (use 'mirrored' or 'multi_worker')");
  std::unique_ptr<Strategy> strategy = build_strategy(name, options);
  if (options.shard_optimizer_state) strategy->set_shard_optimizer_state(true);
  if (options.share_cpu_variables) strategy->set_share_cpu_variables(true);
  return strategy;
}

namespace {
std::unique_ptr<Strategy> build_strategy(const std::string& name, const StrategyOptions& options) {
  const bool ops_given = options.cross_device_ops != CrossDeviceOps::Default;
  if (name == "default") {
    check_no(name, options.virtual_gpus > 1, "virtual_gpus");
    check_single_replica(name, options);
    STRATA_CHECK(options.devices.empty() || options.devices[0] == Device(), "make_strategy('default'): the default "
                 "strategy runs on ", Device(), ", not ", options.devices[0], " (use 'one_device')");
    check_no(name, ops_given, "cross_device_ops");
    check_no(name, options.parameter_device.has_value(), "parameter_device");
    return std::make_unique<DefaultStrategy>();
  }
  if (name == "one_device") {
    check_no(name, options.virtual_gpus > 1, "virtual_gpus");
    check_single_replica(name, options);
    check_no(name, ops_given, "cross_device_ops");
    check_no(name, options.parameter_device.has_value(), "parameter_device");
    return std::make_unique<OneDeviceStrategy>(options.devices.empty() ? Device() : options.devices[0]);
  }
  if (name == "mirrored") {
    check_no(name, options.parameter_device.has_value(), "parameter_device");
    // Neither replicas nor devices: MirroredStrategy's own choice (every GPU, else cpu:0).
    const bool pick = options.replicas == 0 && options.devices.empty() && options.virtual_gpus <= 1;
    return std::make_unique<MirroredStrategy>(pick ? std::vector<Device>{} : replica_devices(name, options),
                                              options.cross_device_ops, options.communication);
  }
  if (name == "central_storage") {
    check_no(name, ops_given, "cross_device_ops");
    return std::make_unique<CentralStorageStrategy>(replica_devices(name, options), options.parameter_device,
                                                    options.communication);
  }
  if (name == "multi_worker") {
    // The cluster comes from the environment (TF_CONFIG, mpirun, Slurm); replicas and
    // devices are this worker's local replicas (default: STRATA_REPLICAS_PER_WORKER, else 1).
    check_no(name, ops_given, "cross_device_ops");
    check_no(name, options.parameter_device.has_value(), "parameter_device");
    ClusterResolver resolver = ClusterResolver::from_environment();
    std::vector<Device> local;
    if (options.replicas > 0 || !options.devices.empty() || options.virtual_gpus > 1) {
      local = replica_devices(name, options);
    }
    return std::make_unique<MultiWorkerMirroredStrategy>(std::move(resolver), options.communication, std::move(local));
  }
  if (name == "parameter_server") {
    // As in TensorFlow, a ParameterServerStrategy is driven by a ClusterCoordinator that
    // schedules registered step functions on workers; it cannot stand in for a strategy
    // whose run() executes the step here.
    fail("make_strategy: the 'parameter_server' strategy is driven by a ClusterCoordinator and is not built "
         "here: construct distribute::ParameterServerStrategy(resolver, partitioner) and a ClusterCoordinator "
         "(distribute/ps/), or run `strata-launch --workers N --ps M -- strata-train --strategy parameter_server`");
  }
  fail("make_strategy: unknown strategy '", name, "' (expected one of: ", names_list(), ")");
}

}  // namespace

}  // namespace strata::distribute
