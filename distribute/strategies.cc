// The concrete single-process strategies: Default, OneDevice, Mirrored, CentralStorage.
#include <strata/core/allocator.h>
#include <strata/core/dispatch.h>
#include <strata/core/stream.h>
#include <strata/distribute/distributed_variable.h>
#include <strata/distribute/strategy.h>

namespace strata::distribute {

// ---- default ----

DefaultStrategy::DefaultStrategy() : Strategy({Device()}) {}

DefaultStrategy& DefaultStrategy::instance() {
  static DefaultStrategy* s = new DefaultStrategy();  // never destroyed (used during exit)
  return *s;
}

std::shared_ptr<autograd::VariableImpl> DefaultStrategy::create_variable(const Tensor& initial,
                                                                         const autograd::VariableOptions& options) {
  return std::make_shared<autograd::LocalVariableImpl>(initial, options);
}

// ---- one device ----

OneDeviceStrategy::OneDeviceStrategy(Device device) : Strategy({device}) {
  // visible_gpus() first: it registers the (lazily registered) backends.
  STRATA_CHECK(device.is_cpu() || device.index < MirroredStrategy::visible_gpus(), "OneDeviceStrategy: device ", device,
               " is not available (strata was built without the CUDA backend, or no GPU is present)");
}

std::shared_ptr<autograd::VariableImpl> OneDeviceStrategy::create_variable(const Tensor& initial,
                                                                           const autograd::VariableOptions& options) {
  autograd::VariableOptions o = options;
  o.device = devices()[0];
  return std::make_shared<autograd::LocalVariableImpl>(initial, o);
}

// ---- mirrored ----

std::vector<Device> MirroredStrategy::cpu_devices(int n) {
  STRATA_CHECK(n >= 1, "MirroredStrategy: the number of CPU replicas must be >= 1, got ", n);
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

int MirroredStrategy::visible_gpus() {
  // Backends register lazily (core/dispatch.h): run their registration before asking, or a
  // process whose first act is to build a strategy sees no GPU.
  ensure_backends_registered();
  StreamBackend* b = stream_backend(DeviceType::CUDA);
  return b && has_allocator(DeviceType::CUDA) ? b->device_count() : 0;
}

std::vector<Device> MirroredStrategy::gpu_devices(int replicas_per_gpu) {
  STRATA_CHECK(replicas_per_gpu >= 1, "MirroredStrategy: the number of replicas per GPU must be >= 1, got ",
               replicas_per_gpu);
  const int n = visible_gpus();
  STRATA_CHECK(n > 0, "MirroredStrategy: no GPU is visible (strata was built without the CUDA backend, or no CUDA "
               "device is present)");
  std::vector<Device> d;
  for (int g = 0; g < n; ++g) {
    for (int k = 0; k < replicas_per_gpu; ++k) d.push_back(cuda(g));
  }
  return d;
}

namespace {
std::vector<Device> checked_devices(const char* who, std::vector<Device> devices, bool gpus_by_default = false) {
  if (devices.empty()) {
    // TensorFlow's MirroredStrategy() takes every visible GPU, else the CPU.
    devices = gpus_by_default && MirroredStrategy::visible_gpus() > 0 ? MirroredStrategy::gpu_devices(1)
                                                                       : MirroredStrategy::cpu_devices(1);
  }
  for (const Device& d : devices) {
    STRATA_CHECK(d.is_cpu() || d.index < MirroredStrategy::visible_gpus(), who, ": device ", d,
                 " is not available (strata was built without the CUDA backend, or no GPU is present)");
  }
  return devices;
}
}  // namespace

MirroredStrategy::MirroredStrategy(std::vector<Device> devices, CrossDeviceOps cross_device_ops,
                                   CommunicationOptions options)
    : Strategy(checked_devices("MirroredStrategy", std::move(devices), /*gpus_by_default=*/true), options,
               cross_device_ops) {}

std::shared_ptr<autograd::VariableImpl> MirroredStrategy::create_variable(const Tensor& initial,
                                                                          const autograd::VariableOptions& options) {
  return make_distributed_variable(*this, initial, options);
}

// ---- central storage ----

CentralStorageStrategy::CentralStorageStrategy(std::vector<Device> compute_devices,
                                               std::optional<Device> parameter_device, CommunicationOptions options)
    : Strategy(checked_devices("CentralStorageStrategy", std::move(compute_devices)), options,
               CrossDeviceOps::ReductionToOneDevice),
      parameter_device_(parameter_device.value_or(Device())) {
  STRATA_CHECK(parameter_device_.is_cpu() || has_allocator(DeviceType::CUDA), "CentralStorageStrategy: parameter device ",
               parameter_device_, " is not available (strata was built without the CUDA backend, or no GPU is present)");
}

std::shared_ptr<autograd::VariableImpl> CentralStorageStrategy::create_variable(
    const Tensor& initial, const autograd::VariableOptions& options) {
  if (num_local_replicas() == 1) {  // as TensorFlow: one replica needs no aggregation
    autograd::VariableOptions o = options;
    o.device = parameter_device_;
    return std::make_shared<autograd::LocalVariableImpl>(initial, o);
  }
  return std::make_shared<AggregatingVariableImpl>(*this, initial, options);
}

}  // namespace strata::distribute
