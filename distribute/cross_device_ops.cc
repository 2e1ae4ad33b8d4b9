#include <strata/distribute/cross_device_ops.h>

#include <algorithm>
#include <cctype>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/collective/nccl_communicator.h>

namespace strata::distribute {

const char* cross_device_ops_name(CrossDeviceOps ops) {
  switch (ops) {
    case CrossDeviceOps::Default: return "default";
    case CrossDeviceOps::ReductionToOneDevice: return "ReductionToOneDevice";
    case CrossDeviceOps::HierarchicalCopyAllReduce: return "HierarchicalCopyAllReduce";
    case CrossDeviceOps::NcclAllReduce: return "NcclAllReduce";
  }
  return "?";
}

CrossDeviceOps cross_device_ops_from_name(const std::string& name) {
  std::string s;
  for (char c : name) {
    if (c != '_' && c != '-') s += char(std::tolower(static_cast<unsigned char>(c)));
  }
  if (s == "default" || s == "auto") return CrossDeviceOps::Default;
  if (s == "reductiontoonedevice") return CrossDeviceOps::ReductionToOneDevice;
  if (s == "hierarchicalcopy" || s == "hierarchicalcopyallreduce") return CrossDeviceOps::HierarchicalCopyAllReduce;
  if (s == "nccl" || s == "ncclallreduce") return CrossDeviceOps::NcclAllReduce;
  fail("cross_device_ops: unknown name '", name,
       "' (expected default, reduction_to_one_device, hierarchical_copy or nccl)");
}

CrossDeviceOps resolve_cross_device_ops(CrossDeviceOps requested, const std::vector<Device>& devices) {
  if (requested == CrossDeviceOps::NcclAllReduce) {
    if (nccl_can_reduce(devices)) return requested;
    std::string listed;
    for (const Device& d : devices) listed += (listed.empty() ? "" : ", ") + d.str();
    STRATA_CHECK(nccl_backend() != nullptr, "cross_device_ops: NcclAllReduce is not available in this build (strata "
                 "was built without the CUDA backend or without NCCL); use HierarchicalCopyAllReduce or "
                 "ReductionToOneDevice");
    fail("cross_device_ops: NcclAllReduce is not available for the devices [", listed, "]: NCCL needs every replica on "
         "its own visible GPU (", nccl_backend()->device_count(), " visible); a GPU listed twice (logical replicas "
         "of one GPU) reduces in device memory with HierarchicalCopyAllReduce or ReductionToOneDevice");
  }
  if (requested != CrossDeviceOps::Default) return requested;
  const bool any_cpu = std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cpu(); });
  if (any_cpu) return CrossDeviceOps::ReductionToOneDevice;
  // TensorFlow's choice on GPUs: NCCL where it can run; logical GPUs sharing one device
  // (which NCCL refuses) reduce in device memory.
  if (devices.size() > 1 && nccl_can_reduce(devices)) return CrossDeviceOps::NcclAllReduce;
  return CrossDeviceOps::HierarchicalCopyAllReduce;
}

InProcessAlgorithm in_process_algorithm(CrossDeviceOps ops) {
  switch (ops) {
    case CrossDeviceOps::HierarchicalCopyAllReduce: return InProcessAlgorithm::ReduceScatterAllGather;
    case CrossDeviceOps::Default:
    case CrossDeviceOps::ReductionToOneDevice:
    case CrossDeviceOps::NcclAllReduce: return InProcessAlgorithm::ReduceToFirst;
  }
  return InProcessAlgorithm::ReduceToFirst;
}

Tensor cross_device_reduce(CrossDeviceOps ops, ReduceOp op, const std::vector<Tensor>& values, Device destination) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(!values.empty(), "cross_device_reduce: no values");
  if (ops != CrossDeviceOps::HierarchicalCopyAllReduce || values.size() == 1) {
    return fold_reduce(values, op, destination);
  }
  // Reduce-scatter over the flattened values (slice s folded separately), then gather the
  // slices onto the destination. fold_reduce checks that shapes and dtypes agree.
  const Tensor& first = values[0];
  for (const Tensor& v : values) {
    STRATA_CHECK(v.defined() && v.shape() == first.shape() && v.dtype() == first.dtype(), "cross_device_reduce(",
                 reduce_op_name(op), "): replica values differ in shape or dtype: ",
                 v.defined() ? std::string(dtype_name(v.dtype())) + shape_str(v.shape()) : std::string("undefined"),
                 " vs ", dtype_name(first.dtype()), shape_str(first.shape()));
  }
  const int64_t numel = first.numel();
  const int parts = int(values.size());
  Tensor out = Tensor::empty({numel}, first.dtype(), destination);
  const int64_t base = numel / parts, extra = numel % parts;
  int64_t begin = 0;
  for (int s = 0; s < parts; ++s) {
    const int64_t end = begin + base + (s < extra ? 1 : 0);
    if (end > begin) {
      std::vector<Tensor> slices;
      for (const Tensor& v : values) slices.push_back(reshape(v, {numel}).slice(0, begin, end));
      out.slice(0, begin, end).copy_(fold_reduce(slices, op, destination));
    }
    begin = end;
  }
  return reshape(out, first.shape());
}

}  // namespace strata::distribute
