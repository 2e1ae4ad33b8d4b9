// Cross-device ops: how MirroredStrategy combines per-replica tensors
// (tf.distribute.CrossDeviceOps). Both in-process implementations fold the replicas'
// values in replica order, so they return bitwise equal results; they differ in who does
// the work:
//  - ReductionToOneDevice: everything is reduced on one device (the destination, or the
//    first replica's inside a collective), then copied to every replica;
//  - HierarchicalCopyAllReduce: the flat buffer is cut into one slice per replica and each
//    replica reduces its slice (a reduce-scatter), then every replica gathers all slices
//    (an all-gather) — the work is spread over the replicas.
//  - NcclAllReduce: the replicas' all-reduces run on NCCL, one communicator per GPU
//    (distribute/collective/nccl_communicator.h); it needs every replica on its own GPU.
//    Cross-replica reductions (Strategy::reduce) fold as ReductionToOneDevice does.
#pragma once

#include <string>
#include <vector>

#include <strata/core/device.h>
#include <strata/core/tensor.h>
#include <strata/distribute/collective/communicator.h>
#include <strata/distribute/collective/in_process.h>

namespace strata::distribute {

enum class CrossDeviceOps { Default, ReductionToOneDevice, HierarchicalCopyAllReduce, NcclAllReduce };
const char* cross_device_ops_name(CrossDeviceOps ops);
// "default" | "reduction_to_one_device" | "hierarchical_copy" | "nccl" (also the class
// names, case-insensitive); throws strata::Error otherwise.
CrossDeviceOps cross_device_ops_from_name(const std::string& name);

// What Default means for these devices (TensorFlow's choice): ReductionToOneDevice when
// any device is a CPU, otherwise NcclAllReduce where NCCL can reduce them (several
// distinct GPUs), else HierarchicalCopyAllReduce (one GPU, or logical GPUs sharing one).
// Throws for NcclAllReduce in a build without NCCL or for devices NCCL cannot reduce.
CrossDeviceOps resolve_cross_device_ops(CrossDeviceOps requested, const std::vector<Device>& devices);

// The in-process collective algorithm implementing a (resolved) choice.
InProcessAlgorithm in_process_algorithm(CrossDeviceOps ops);

// Reduces one value per replica onto `destination` with the given cross-device ops
// (cross-replica context; the values may live on different devices).
Tensor cross_device_reduce(CrossDeviceOps ops, ReduceOp op, const std::vector<Tensor>& values, Device destination);

}  // namespace strata::distribute
