// Sharded optimizer state (ZeRO-1, docs/ZERO.md): under a strategy with
// shard_optimizer_state (Strategy::set_shard_optimizer_state, strata-train
// --shard-optimizer-state), each of the N replicas in sync keeps only its 1/N chunk of
// every optimizer slot of a mirrored variable, instead of a full copy per replica.
//
// One step (Optimizer::apply_gradients on every replica, in replica context):
//   1. the gradients are packed per dtype into a [N, S] matrix (distribute/sharded_collectives.h)
//      and reduce-scattered: replica g receives the summed gradient of its chunk of every
//      variable only (skipped with aggregate_gradients = false: they are summed already);
//   2. with global_clipnorm, the global norm is the square root of the all-reduced sum of
//      the replicas' partial sums of squares;
//   3. replica g updates its chunk of each variable in place with its chunk of the slots
//      (the optimizer's update must be elementwise: OptimizerImpl::elementwise());
//   4. the updated chunks are all-gathered, so every replica's copy of every variable is
//      whole again; then `iterations` advances as in the unsharded step.
// The gradients are summed in the order the unsharded all_reduce sums them and the update
// kernels are elementwise, so parameters and slots are bitwise those of the unsharded step
// (with clipping, the norm's partial sums are added in another order: equal to rounding).
//
// Checkpoints: a ShardedSlot saves the WHOLE slot under the same name as an unsharded one,
// and restores from a whole slot, so checkpoints move freely between sharded and plain
// strategies and replica counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <strata/autograd/variable.h>
#include <strata/train/optimizer.h>

namespace strata::distribute {
class Strategy;
}

namespace strata::optim {

// An optimizer slot of which each local replica holds only its chunk (a flat [len] tensor
// on the replica's device; the chunk of replica_id_in_sync_group over the strategy's
// replicas in sync, distribute::shard_range).
//  - value(): in replica context, the replica's chunk (updated in place by the optimizer);
//    in cross-replica context, a copy of the whole slot (with several workers that read is
//    a collective over every worker, like a sync-on-read variable's).
//  - assign (and assign_add / assign_sub): cross-replica context only, with whole values.
//  - checkpoint_value() / restore_checkpoint_value(): the whole slot, shaped like the
//    variable (the former a collective with several workers).
class ShardedSlotImpl final : public autograd::VariableImpl {
 public:
  // Every local replica's chunk of `initial` (the whole slot, shaped like its variable).
  ShardedSlotImpl(distribute::Strategy& strategy, const Tensor& initial, autograd::VariableOptions options);

  Tensor value() const override;
  void assign(const Tensor& v) override;
  Tensor checkpoint_value() const override { return whole(); }
  void restore_checkpoint_value(const Tensor& v) override { assign(v); }
  bool is_replicated() const override { return true; }
  std::string kind() const override { return "ShardedSlot"; }

  // The whole slot's shape and dtype, and how it is sharded.
  const Shape& whole_shape() const { return shape_; }
  DType dtype() const override { return dtype_; }
  // The whole slot's shape, in every context (no collective; value() in replica context
  // is the replica's flat chunk).
  Shape shape() const override { return shape_; }
  int replicas() const { return replicas_; }
  // Local replica l's chunk (global replica worker_index * local replicas + l).
  const Tensor& chunk(int local) const { return chunks_[size_t(local)]; }
  // The bytes replica g (replica_id_in_sync_group) holds.
  int64_t bytes_of_replica(int replica) const;
  distribute::Strategy& strategy() const { return strategy_; }

 private:
  // The whole slot assembled from every replica's chunk (a collective across workers).
  Tensor whole() const;

  distribute::Strategy& strategy_;
  Shape shape_;
  DType dtype_;
  int64_t numel_;
  int replicas_;
  std::vector<Tensor> chunks_;  // one per local replica
};

// True when `var`'s slots are to be ShardedSlots: a mirrored variable of a strategy with
// shard_optimizer_state and more than one replica in sync.
bool slots_are_sharded(const Variable& var);
// The ShardedSlots of `var`, zero, one per name (in cross-replica context, or inside run:
// created once and shared by the local replicas, which must all call it in the same order).
std::vector<Variable> create_sharded_slots(const std::vector<std::string>& slot_names, const Variable& var);
// True when apply_gradients called here takes the sharded path: in replica context of a
// strategy with shard_optimizer_state and more than one replica in sync.
bool sharded_step();

// Optimizer-state (slot) bytes: `total` for one whole copy of every slot, `per_replica` the
// most any replica in sync holds (= total unsharded; about total / N under ZeRO-1). The
// step counter and a wrapper's own scalars are not counted. Reads no tensor values.
struct OptimizerStateBytes {
  int64_t per_replica = 0;
  int64_t total = 0;
};
OptimizerStateBytes optimizer_state_bytes(const Optimizer& optimizer);

}  // namespace strata::optim
