// The pipelines the iterator_state fuzz target restores states into, shared with the seed
// writer (fuzz/make_seeds.cc), which saves their states at several positions. Between them
// they hold every stage whose record carries more than a tag: the read-ahead stages
// (prefetch, parallel map) with their anchors, shuffle's buffer, unbatch, repeat, take, skip,
// shard, zip, enumerate, cache, from_generator, the split between replicas in both of its
// modes, and the per-replica pipelines of distribute_datasets_from_function. Every pipeline is finite and short, so that a state asking to replay a huge
// number of elements ends at the input's end instead of running for long.
#pragma once

#include <vector>

#include <strata/core/ops.h>
#include <strata/data/dataset.h>
#include <strata/distribute/replica_pipelines_stage.h>
#include <strata/distribute/replica_split_stage.h>

namespace strata::fuzz {

inline std::vector<data::Dataset> iterator_state_pipelines() {
  using data::Dataset;
  const Dataset numbers = Dataset::range(40);
  const Dataset rows = Dataset::from_tensor_slices(arange(0, 24).reshape({12, 2}));
  const Dataset generated = Dataset::from_generator([] {
    return [i = int64_t(0)]() mutable -> std::optional<data::Element> {
      if (i == 10) return std::nullopt;
      return data::Element{Tensor::scalar(double(i++))};
    };
  });
  auto split = [](const Dataset& input, distribute::ReplicaSplitOptions::Mode mode, int total, int local, int first) {
    distribute::ReplicaSplitOptions o;
    o.mode = mode;
    o.total_parts = total;
    o.local_parts = local;
    o.first_part = first;
    o.devices.assign(size_t(local), Device());
    return distribute::split_between_replicas(input, o);
  };
  const auto identity = [](const data::Element& e) { return e; };
  return {
      numbers.shuffle(7, 1).batch(4).repeat(2).prefetch(2),
      rows.map(identity, 2).batch(3).unbatch().skip(1).take(9).enumerate(),
      Dataset::zip({numbers.shard(3, 1), rows.repeat(2)}).filter([](const data::Element& e) {
        return e[0].item<int64_t>() % 2 == 0;
      }).cache().repeat(2),
      generated.shuffle(3, 4, /*reshuffle_each_iteration=*/false).batch(2),
      split(numbers.shuffle(5, 2).batch(6).repeat(2), distribute::ReplicaSplitOptions::Mode::Rebatch, 4, 2, 0)
          .prefetch(1),
      split(numbers.batch(8), distribute::ReplicaSplitOptions::Mode::Keep, 3, 1, 2),
      // Three replicas' pipelines that end at different steps.
      distribute::combine_replica_pipelines(
          {numbers.shuffle(4, 3).batch(5), rows.batch(2), numbers.take(6).batch(3).repeat(2)},
          std::vector<Device>(3, Device()), /*fetch=*/false),
  };
}

}  // namespace strata::fuzz
