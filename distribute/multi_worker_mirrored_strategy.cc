#include <strata/distribute/multi_worker_mirrored_strategy.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/core/thread_pool.h>
#include <strata/distribute/collective/gloo_communicator.h>
#include <strata/distribute/collective/nccl_communicator.h>
#include <strata/distribute/collective/tcp_store.h>
#include <strata/distribute/distributed_variable.h>

namespace strata::distribute {

namespace {

std::vector<Device> local_replica_devices(const ClusterResolver& resolver, std::vector<Device> devices) {
  if (devices.empty()) return MirroredStrategy::cpu_devices(resolver.replicas_per_worker().value_or(1));
  for (const Device& d : devices) {
    STRATA_CHECK(d.is_cpu() || d.index < MirroredStrategy::visible_gpus(), "MultiWorkerMirroredStrategy: device ", d,
                 " is not available (strata was built without the CUDA backend, or no such GPU is present)");
  }
  return devices;
}

bool all_gpus(const std::vector<Device>& devices) {
  return std::all_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cuda(); });
}

const char* implementation_name(CommunicationImplementation i) {
  switch (i) {
    case CommunicationImplementation::Auto: return "auto";
    case CommunicationImplementation::Ring: return "ring";
    case CommunicationImplementation::Nccl: return "nccl";
  }
  return "?";
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

// Local waits outlast the cross-worker timeout, so that the Gloo error (naming the lost
// worker) is what the local replicas report.
double local_timeout(const CommunicationOptions& o) { return 2 * o.timeout_seconds + 10; }

// Each strategy object of a job gets its own key prefix on the store; every worker
// creates its strategies in the same order, so the n-th ones meet.
std::string next_prefix() {
  static std::atomic<int> count{0};
  return "mwms" + std::to_string(count++);
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(ClusterResolver cluster_resolver, CommunicationOptions options,
                                                         std::vector<Device> local_devices)
    : Strategy(local_replica_devices(cluster_resolver, std::move(local_devices)), options,
               CrossDeviceOps::ReductionToOneDevice, local_timeout(options)),
      resolver_(std::move(cluster_resolver)) {
  // Between workers: NCCL when this worker's replicas are GPUs (Auto or Nccl), Gloo
  // otherwise (Ring, or CPU replicas) — TensorFlow's CommunicationImplementation.
  const bool gpus = all_gpus(devices());
  const bool use_nccl = options.implementation == CommunicationImplementation::Nccl ||
                        (options.implementation == CommunicationImplementation::Auto && gpus && nccl_available());
  if (options.implementation == CommunicationImplementation::Nccl) {
    STRATA_CHECK(gpus, "MultiWorkerMirroredStrategy: communication 'nccl' needs GPU replicas, but this worker runs on ",
                 devices()[0], " (use auto or ring, which run Gloo on CPUs)");
    STRATA_CHECK(nccl_available(), "MultiWorkerMirroredStrategy: communication 'nccl' is not available: strata was "
                 "built without NCCL or no GPU is visible (use auto or ring)");
  }
  const int workers = resolver_.num_workers();
  const int rank = resolver_.worker_rank();  // throws for ps / evaluator tasks
  set_workers(rank, workers);
  if (workers == 1) return;
  // Workers sharing this host share its cores: each process's intra-op pool gets its part
  // (PLATFORM.md's threading trap), unless STRATA_NUM_THREADS sizes it explicitly.
  if (resolver_.local_size() > 1 && !std::getenv("STRATA_NUM_THREADS")) {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(std::max(1, cores / resolver_.local_size()));
  }
  STRATA_CHECK(use_nccl || gloo_available(), "MultiWorkerMirroredStrategy: ", workers,
               " workers need the Gloo backend (communication '", implementation_name(options.implementation),
               "' on ", devices()[0], "), but strata was built without Gloo (libgloo-dev, STRATA_WITH_GLOO)");
  const std::string host = resolver_.rendezvous_host();
  const int port = resolver_.rendezvous_port();
  // Every worker proves it holds the job's secret to the store (docs/SECURITY.md); the
  // chief's store listens on exactly the rendezvous address, never on every interface.
  const JobSecret secret = JobSecret::require("MultiWorkerMirroredStrategy with " + std::to_string(workers) + " workers");
  if (rank == 0) server_ = std::make_unique<TcpStoreServer>(port, host, TcpStoreServerOptions{.secret = secret});
  store_ = std::make_shared<TcpStore>(host, port, options.timeout_seconds, secret);
  std::shared_ptr<Communicator> comm;
  if (use_nccl) {
    // One NCCL rank per worker process, on its first local GPU; the local replicas are
    // reduced on that GPU first (hierarchical), then across workers.
    NcclProcessGroupOptions o;
    o.rank = rank;
    o.size = workers;
    o.device = devices()[0];
    o.store = store_;
    o.prefix = next_prefix() + "/nccl";
    o.comm = options;
    comm = nccl_backend()->process_group(o);
  } else {
    GlooCommunicatorOptions o;
    o.rank = rank;
    o.size = workers;
    o.store = store_;
    o.prefix = next_prefix();
    const std::string address = resolver_.task_address();
    o.hostname = !address.empty() ? split_host_port(address, "the task address").first
                                  : (is_loopback(host) ? "127.0.0.1" : "");
    o.comm = options;
    // Stall detection: the heartbeat thread's own store client, bounded by the stall
    // timeout (a store that does not answer that long means the chief does not run).
    o.heartbeat_store = std::make_shared<TcpStore>(host, port, options.stall_timeout_seconds, secret);
    o.member = "worker";
    o.store_host_rank = 0;  // the chief hosts the store
    comm = make_gloo_communicator(o);
  }
  // Every worker must run as many local replicas (TensorFlow requires the same number
  // of devices per worker): num_replicas_in_sync and the batch split assume it.
  Tensor counts = Tensor::from_vector(std::vector<int64_t>{num_local_replicas(), -num_local_replicas()}, {2}, kInt64,
                                      comm->buffer_device());
  comm->all_reduce(counts, ReduceOp::Max);
  const auto c = counts.to_vector<int64_t>();
  STRATA_CHECK(c[0] == -c[1], "MultiWorkerMirroredStrategy: workers run different numbers of local replicas (",
               -c[1], " to ", c[0], "; worker ", rank, " runs ", num_local_replicas(),
               "): give every worker the same (STRATA_REPLICAS_PER_WORKER / strata-launch --replicas-per-worker)");
  set_worker_communicator(std::move(comm));
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() {
  // The communicator holds the store client; the chief's server goes last.
  set_worker_communicator(nullptr);
  store_.reset();
  server_.reset();
}

std::shared_ptr<autograd::VariableImpl> MultiWorkerMirroredStrategy::create_variable(
    const Tensor& initial, const autograd::VariableOptions& options) {
  auto impl = make_distributed_variable(*this, initial, options);
  Communicator* workers = worker_communicator();
  auto* distributed = dynamic_cast<DistributedVariableImpl*>(impl.get());
  if (workers && distributed) {
    // Worker 0's initial value everywhere (TensorFlow broadcasts initial values the same
    // way), so that differently seeded workers still start equal.
    autograd::StopRecording no_tape;
    const std::vector<Tensor>& components = distributed->components();
    const Tensor& first = components[0];  // contiguous: a private copy of the initial value
    if (first.device() == workers->buffer_device()) {
      workers->broadcast(first, 0);
    } else {
      // GPU replicas with Gloo: broadcast a host copy.
      Tensor staged = first.to(workers->buffer_device());
      workers->broadcast(staged, 0);
      first.copy_(staged);
    }
    const auto copies = distributed->copies();  // one copy: nothing more to write
    for (size_t i = 1; i < copies.size(); ++i) copies[i].copy_(first);
  }
  return impl;
}

}  // namespace strata::distribute
