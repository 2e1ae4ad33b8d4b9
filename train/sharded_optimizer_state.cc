#include <strata/train/sharded_optimizer_state.h>

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include <strata/autograd/tape.h>
#include <strata/core/ops.h>
#include <strata/distribute/distributed_variable.h>
#include <strata/distribute/local_replica_context.h>
#include <strata/distribute/sharded_collectives.h>
#include <strata/distribute/strategy.h>
#include <strata/train/clip.h>

namespace strata::optim {

using distribute::LocalReplicaContext;
using distribute::Strategy;

namespace {
Tensor flat(const Tensor& t) { return reshape(t, {t.numel()}); }

// The strategy's replica context on this thread, when it is one of `strategy`'s.
LocalReplicaContext* local_context(const Strategy& strategy) { return strategy.current_local_context(); }
}  // namespace

// ---- ShardedSlotImpl ----

ShardedSlotImpl::ShardedSlotImpl(Strategy& strategy, const Tensor& initial, autograd::VariableOptions options)
    : VariableImpl(std::move(options)),
      strategy_(strategy),
      shape_(initial.shape()),
      dtype_(initial.dtype()),
      numel_(initial.numel()),
      replicas_(strategy.num_replicas_in_sync()) {
  autograd::StopRecording no_tape;
  const Tensor whole_flat = flat(initial.contiguous());
  const int local = strategy.num_local_replicas();
  for (int l = 0; l < local; ++l) {
    const auto [begin, end] = distribute::shard_range(numel_, replicas_, strategy.worker_index() * local + l);
    Tensor chunk = Tensor::empty({end - begin}, dtype_, strategy.devices()[size_t(l)]);
    if (end > begin) chunk.copy_(whole_flat.slice(0, begin, end));
    chunks_.push_back(chunk);
  }
}

int64_t ShardedSlotImpl::bytes_of_replica(int replica) const {
  const auto [begin, end] = distribute::shard_range(numel_, replicas_, replica);
  return (end - begin) * int64_t(dtype_size(dtype_));
}

Tensor ShardedSlotImpl::value() const {
  if (LocalReplicaContext* ctx = local_context(strategy_)) return chunks_[size_t(ctx->local_index())];
  return whole();
}

Tensor ShardedSlotImpl::whole() const {
  autograd::StopRecording no_tape;
  STRATA_CHECK(local_context(strategy_) == nullptr, "ShardedSlot '", options_.name,
               "': the whole slot is read in cross-replica context only (in replica context value() is this "
               "replica's chunk)");
  const int local = strategy_.num_local_replicas();
  const int64_t width = distribute::shard_width(numel_, replicas_);
  // Every replica's chunk padded to the chunk width, as the rows of a [N, width] matrix:
  // the whole slot is its first numel elements.
  Tensor out = zeros({int64_t(replicas_) * width}, dtype_, strategy_.devices()[0]);
  distribute::Communicator* workers = strategy_.num_workers() > 1 ? strategy_.worker_communicator() : nullptr;
  if (!workers) {
    for (int l = 0; l < local; ++l) {
      if (chunks_[size_t(l)].numel() > 0) out.slice(0, l * width, l * width + chunks_[size_t(l)].numel()).copy_(chunks_[size_t(l)]);
    }
  } else {
    // Several workers: a collective, so every worker reads its sharded slots in the same
    // order (saving a checkpoint: every worker saves, the non-chiefs to a temporary path).
    Tensor mine = zeros({int64_t(local) * width}, dtype_, workers->buffer_device());
    for (int l = 0; l < local; ++l) {
      if (chunks_[size_t(l)].numel() > 0)
        mine.slice(0, l * width, l * width + chunks_[size_t(l)].numel()).copy_(chunks_[size_t(l)]);
    }
    Tensor all = Tensor::empty({int64_t(replicas_) * width}, dtype_, workers->buffer_device());
    workers->all_gather(mine, all);
    out.copy_(all);
  }
  return reshape(out.slice(0, 0, numel_), shape_).contiguous();
}

void ShardedSlotImpl::assign(const Tensor& v) {
  autograd::StopRecording no_tape;
  STRATA_CHECK(local_context(strategy_) == nullptr, "ShardedSlot '", options_.name,
               "'.assign: a sharded optimizer slot is updated by its optimizer only in replica context; assign the "
               "whole slot in cross-replica context (outside run())");
  STRATA_CHECK(v.defined() && v.shape() == shape_, "ShardedSlot '", options_.name, "'.assign: expected the whole slot ",
               dtype_name(dtype_), shape_str(shape_), ", got ",
               v.defined() ? dtype_name(v.dtype()) + shape_str(v.shape()) : std::string("undefined"));
  const Tensor whole_flat = flat(v.dtype() == dtype_ ? v.contiguous() : cast(v, dtype_).contiguous());
  const int local = strategy_.num_local_replicas();
  for (int l = 0; l < local; ++l) {
    const auto [begin, end] = distribute::shard_range(numel_, replicas_, strategy_.worker_index() * local + l);
    if (end > begin) chunks_[size_t(l)].copy_(whole_flat.slice(0, begin, end));
  }
}

// ---- deciding and creating ----

namespace {
// The strategy of a mirrored variable whose slots are sharded, or nullptr.
Strategy* sharding_strategy(const Variable& var) {
  auto* mirrored = dynamic_cast<const distribute::MirroredVariableImpl*>(&var.impl());
  if (!mirrored) return nullptr;
  Strategy& s = mirrored->strategy();
  return s.shard_optimizer_state() && s.num_replicas_in_sync() > 1 ? &s : nullptr;
}
}  // namespace

bool slots_are_sharded(const Variable& var) { return sharding_strategy(var) != nullptr; }

std::vector<Variable> create_sharded_slots(const std::vector<std::string>& slot_names, const Variable& var) {
  Strategy* strategy = sharding_strategy(var);
  STRATA_CHECK(strategy != nullptr, "optim: create_sharded_slots: the slots of '", var.name(),
               "' are not sharded (internal error)");
  autograd::StopRecording no_tape;
  auto create = [&] {
    auto slots = std::make_shared<std::vector<Variable>>();
    const Tensor zero = zeros_like(var.value());
    for (const auto& slot : slot_names) {
      autograd::VariableOptions options;
      options.name = var.name() + "/" + slot;
      options.trainable = false;
      // The moving average starts as a copy of the variable (train/ema.h), the rest at 0.
      const Tensor& initial = slot == kAverageSlot ? var.value() : zero;
      slots->emplace_back(std::make_shared<ShardedSlotImpl>(*strategy, initial, options));
    }
    return slots;
  };
  LocalReplicaContext* ctx = local_context(*strategy);
  if (!ctx || strategy->num_local_replicas() == 1) return *create();
  // Inside run(): created once, by the first local replica, and shared (every replica
  // asks for the same variables' slots in the same order, as get_or_create_slots says).
  auto shared = ctx->run_once_shared("create_sharded_slots(" + var.name() + ")",
                                     [&]() -> std::shared_ptr<void> { return create(); });
  return *std::static_pointer_cast<std::vector<Variable>>(shared);
}

bool sharded_step() {
  distribute::ReplicaContext* ctx = distribute::get_replica_context();
  if (!ctx) return false;
  const Strategy& s = ctx->strategy();
  return s.shard_optimizer_state() && s.num_replicas_in_sync() > 1 && s.current_local_context() != nullptr;
}

// ---- the sharded step ----

void Optimizer::apply_sharded(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                              bool aggregate_gradients) const {
  OptimizerImpl& s = impl();
  detail::check_apply_arguments(s.name(), grads, vars);
  autograd::StopRecording no_tape;
  auto* ctx = dynamic_cast<LocalReplicaContext*>(distribute::get_replica_context());
  STRATA_CHECK(ctx != nullptr, "optim::", s.name(), "::apply_gradients: ZeRO-1 needs a replica context (internal error)");
  Strategy& strategy = ctx->strategy();
  const std::string where = "optim::" + s.name() + "::apply_gradients (shard_optimizer_state, strategy '" +
                            strategy.name() + "')";
  STRATA_CHECK(s.elementwise(), where, ": the optimizer's update is not elementwise, so its state cannot be sharded "
               "by flat ranges (ZeRO-1 supports SGD, Adam and AdamW); turn shard_optimizer_state off for it");
  const int n = strategy.num_replicas_in_sync(), me = ctx->replica_id_in_sync_group();
  const int local = strategy.num_local_replicas();

  // The variables with a gradient, grouped by dtype (one reduce-scatter and one all-gather
  // per dtype), each with its chunk range and its column offset in the packed matrix.
  struct Item {
    Tensor param;  // this replica's whole component, flat
    Tensor grad;   // the whole gradient, flat (aggregate_gradients = false: already summed)
    int64_t numel, width, offset;
    std::vector<Tensor> slots;  // this replica's chunks
    Tensor grad_chunk;
    bool one_copy = false;  // the local replicas share the parameter (logical CPU devices)
  };
  std::map<DType, std::vector<Item>> groups;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Variable& var = vars[i];
    auto* mirrored = dynamic_cast<const distribute::MirroredVariableImpl*>(&var.impl());
    STRATA_CHECK(mirrored && &mirrored->strategy() == &strategy, where, ": variable '", var.name(), "' is a ",
                 var.impl().kind(), ", not a mirrored variable of this strategy; ZeRO-1 shards the optimizer state "
                 "of variables created in the strategy's scope");
    // The update writes through a flat view of the component: a non-contiguous one would
    // flatten into a copy, and the update would be lost.
    STRATA_CHECK(var.value().is_contiguous(), where, ": variable '", var.name(),
                 "' is not contiguous in memory; ZeRO-1 updates variables in place through a flat view");
    const std::vector<Variable> slot_vars = get_or_create_slots(var);
    Item item{flat(var.value()), Tensor(), var.value().numel(), 0, 0, {}, Tensor(), !var.impl().is_replicated()};
    for (const auto& sv : slot_vars) {
      auto* sharded = dynamic_cast<const ShardedSlotImpl*>(&sv.impl());
      STRATA_CHECK(sharded != nullptr, where, ": the slot '", sv.name(), "' is a ", sv.impl().kind(),
                   " created before shard_optimizer_state was turned on; set it before the optimizer's first step, "
                   "build() or restore");
      item.slots.push_back(sv.value());
    }
    Tensor g = grads[i];
    if (g.device() != item.param.device()) g = g.to(item.param.device());
    item.grad = flat(g);
    item.width = distribute::shard_width(item.numel, n);
    groups[var.dtype()].push_back(std::move(item));
  }

  // 1. This replica's chunk of every summed gradient.
  for (auto& [dtype, items] : groups) {
    int64_t width = 0;
    for (auto& it : items) it.offset = std::exchange(width, width + it.width);
    if (!aggregate_gradients) {
      for (auto& it : items) {
        const auto [begin, end] = distribute::shard_range(it.numel, n, me);
        it.grad_chunk = it.grad.slice(0, begin, end);
      }
      continue;
    }
    if (width == 0) continue;  // only empty variables: nothing to reduce (the same everywhere)
    Tensor rows = zeros({int64_t(n), width}, dtype, ctx->device());
    for (int r = 0; r < n; ++r) {
      Tensor row = reshape(rows.slice(0, r, r + 1), {width});
      for (auto& it : items) {
        const auto [begin, end] = distribute::shard_range(it.numel, n, r);
        if (end > begin) row.slice(0, it.offset, it.offset + (end - begin)).copy_(it.grad.slice(0, begin, end));
      }
    }
    const Tensor mine = distribute::reduce_scatter_rows(*ctx, rows);
    for (auto& it : items) {
      const auto [begin, end] = distribute::shard_range(it.numel, n, me);
      it.grad_chunk = mine.slice(0, it.offset, it.offset + (end - begin));
    }
  }

  // 2. Clipping by the global norm: every replica adds the squares of its chunks and the
  //    partial sums are all-reduced (every replica calls it, with 0 when it has nothing).
  if (s.global_clipnorm_ > 0) {
    std::vector<Tensor> chunks;
    for (auto& [dtype, items] : groups)
      for (auto& it : items) chunks.push_back(it.grad_chunk);
    Tensor partial = sum_of_squares(chunks);
    if (!partial.defined()) partial = zeros(Shape{}, kFloat64, ctx->device());
    const Tensor norm = sqrt(ctx->all_reduce(distribute::ReduceOp::Sum, partial));
    const std::vector<Tensor> clipped = scale_gradients_to_norm(chunks, norm, s.global_clipnorm_);
    size_t k = 0;
    for (auto& [dtype, items] : groups)
      for (auto& it : items) it.grad_chunk = clipped[k++];
  }

  // 3. Update this replica's chunk of every variable with its chunk of the slots.
  const int64_t count = s.iterations_.value().item<int64_t>();
  UpdateContext uctx;
  {
    std::lock_guard<std::mutex> lock(s.mu_);
    uctx.learning_rate = s.learning_rate_(count);
  }
  uctx.step = count + 1;
  for (auto& [dtype, items] : groups) {
    for (auto& it : items) {
      const auto [begin, end] = distribute::shard_range(it.numel, n, me);
      if (end > begin) s.apply_update(it.param.slice(0, begin, end), it.grad_chunk, it.slots, uctx);
    }
  }

  // 4. Every replica's updated chunks into every replica's copy.
  for (auto& [dtype, items] : groups) {
    int64_t width = 0;
    for (auto& it : items) width += it.width;
    if (width == 0) continue;
    Tensor row = zeros({width}, dtype, ctx->device());
    for (auto& it : items) {
      const auto [begin, end] = distribute::shard_range(it.numel, n, me);
      if (end > begin) row.slice(0, it.offset, it.offset + (end - begin)).copy_(it.param.slice(0, begin, end));
    }
    const Tensor all = distribute::all_gather_rows(*ctx, row);
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;  // updated in place already
      const Tensor their = reshape(all.slice(0, r, r + 1), {width});
      for (auto& it : items) {
        // One copy: a local replica r updated its range in place before the gather; the
        // ranges of other workers' replicas are copied by one local replica each.
        if (it.one_copy && (r / local == me / local || r % local != me % local)) continue;
        const auto [begin, end] = distribute::shard_range(it.numel, n, r);
        if (end > begin) it.param.slice(0, begin, end).copy_(their.slice(0, it.offset, it.offset + (end - begin)));
      }
    }
  }

  // One copy written by several local replicas: wait for them all before anyone reads it.
  bool any_one_copy = false;
  for (auto& [dtype, items] : groups)
    for (auto& it : items) any_one_copy = any_one_copy || it.one_copy;
  if (any_one_copy && strategy.num_workers() > 1) ctx->run_once([] {});

  // The step counter, as the unsharded step advances it: on every replica's own copy, or
  // once when the local replicas share it (an optimizer created outside the scope).
  const bool shared_iterations = strategy.num_local_replicas() > 1 && !s.iterations_.impl().is_replicated();
  auto increment = [&] { s.iterations_.value().copy_(Tensor::scalar(double(uctx.step), kInt64)); };
  if (shared_iterations) {
    ctx->run_once([&] {
      autograd::StopRecording paused;
      increment();
    });
  } else {
    increment();
  }
}

// ---- accounting ----

OptimizerStateBytes optimizer_state_bytes(const Optimizer& optimizer) {
  OptimizerStateBytes out;
  int64_t unsharded = 0;       // held whole by every replica
  std::vector<int64_t> shards;  // per replica in sync
  for (const auto& [var, slots] : optimizer.all_slots()) {
    for (const Variable& slot : slots) {
      if (auto* sharded = dynamic_cast<const ShardedSlotImpl*>(&slot.impl())) {
        out.total += numel_of(sharded->whole_shape()) * int64_t(dtype_size(sharded->dtype()));
        if (shards.size() < size_t(sharded->replicas())) shards.resize(size_t(sharded->replicas()), 0);
        for (int r = 0; r < sharded->replicas(); ++r) shards[size_t(r)] += sharded->bytes_of_replica(r);
      } else {
        // The variable's shape and dtype: no read of the slot itself.
        const int64_t bytes = numel_of(var.shape()) * int64_t(dtype_size(var.dtype()));
        out.total += bytes;
        unsharded += bytes;
      }
    }
  }
  out.per_replica = unsharded + (shards.empty() ? 0 : *std::max_element(shards.begin(), shards.end()));
  return out;
}

}  // namespace strata::optim
