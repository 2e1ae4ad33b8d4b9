// The stage that splits global batches between replicas (distribute/replica_split_stage.h):
// its elements in both modes, and resuming from a state saved after any element — in the
// middle of a rebatched batch, at a short last batch, from the record of the map it
// replaced — matching the uninterrupted run exactly.
#include <algorithm>

#include <strata/core/ops.h>
#include <strata/data/dataset.h>
#include <strata/data/iterator_state.h>
#include <strata/distribute/distributed_dataset.h>
#include <strata/distribute/replica_split_stage.h>
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"

using namespace strata;
using namespace strata::distribute;

namespace {

// Every element as its parts' ids, one vector per part (one component per part).
using SplitParts = std::vector<std::vector<int64_t>>;

std::vector<int64_t> split_ids_of(const Tensor& t) { return t.to_vector<int64_t>(); }

SplitParts split_parts_of(const data::Element& e) {
  SplitParts out;
  for (const Tensor& t : e) out.push_back(t.to_vector<int64_t>());
  return out;
}

std::vector<SplitParts> drain_parts(data::Iterator& it) {
  std::vector<SplitParts> out;
  while (auto e = it.next()) out.push_back(split_parts_of(*e));
  return out;
}

ReplicaSplitOptions split_options(ReplicaSplitOptions::Mode mode, int total, int local, int first = 0) {
  ReplicaSplitOptions o;
  o.mode = mode;
  o.total_parts = total;
  o.local_parts = local;
  o.first_part = first;
  o.devices.assign(size_t(local), Device());
  return o;
}

// Saving after each k elements (through the state's text form) and resuming in a fresh
// iterator yields exactly the uninterrupted rest.
void check_split_resumes_everywhere(const data::Dataset& ds) {
  auto straight = ds.make_iterator(0);
  const std::vector<SplitParts> all = drain_parts(straight);
  REQUIRE(!all.empty());
  for (size_t k = 0; k <= all.size(); ++k) {
    INFO("saved after " << k << " of " << all.size() << " elements");
    auto first = ds.make_iterator(0);
    for (size_t i = 0; i < k; ++i) REQUIRE(split_parts_of(*first.next()) == all[i]);
    const auto state = data::IteratorState::from_string(first.save().to_string());
    auto resumed = ds.make_iterator(0);
    resumed.restore(state);
    const std::vector<SplitParts> rest = drain_parts(resumed);
    REQUIRE(rest == std::vector<SplitParts>(all.begin() + std::ptrdiff_t(k), all.end()));
  }
}

}  // namespace

TEST_CASE("split_between_replicas: rebatching hands out every part of every batch in order") {
  // 10 examples in batches of 4: parts of 1 (4 replicas), the last batch of 2 fills the
  // first two replicas' parts (TensorFlow's rebatching) and leaves two empty.
  auto ds = split_between_replicas(data::Dataset::range(10).batch(4),
                                   split_options(ReplicaSplitOptions::Mode::Rebatch, 4, 2));
  auto it = ds.make_iterator();
  const std::vector<SplitParts> all = drain_parts(it);
  REQUIRE(all == std::vector<SplitParts>{{{0}, {1}}, {{2}, {3}}, {{4}, {5}}, {{6}, {7}}, {{8}, {9}}, {{}, {}}});
  REQUIRE(ds.cardinality() == 6);
}

TEST_CASE("split_between_replicas: keeping a worker's parts of each global batch") {
  auto ds = split_between_replicas(data::Dataset::range(12).batch(6), split_options(ReplicaSplitOptions::Mode::Keep, 3, 1, 2));
  auto it = ds.make_iterator();
  REQUIRE(drain_parts(it) == std::vector<SplitParts>{{{4, 5}}, {{10, 11}}});
  REQUIRE_THROWS_WITH(split_between_replicas(data::Dataset::range(4), split_options(ReplicaSplitOptions::Mode::Keep, 2, 2, 1)),
                      Catch::Contains("parts [1, 3) outside the 2 parts"));
  REQUIRE_THROWS_WITH(split_between_replicas(data::Dataset::range(4), split_options(ReplicaSplitOptions::Mode::Rebatch, 2, 3)),
                      Catch::Contains("total parts (2) must be a positive multiple of the local parts (3)"));
}

TEST_CASE("split_between_replicas: a position saved after any element resumes exactly") {
  // Shuffled (re-derived on restore from the anchor), repeated (two epochs of different
  // orders), with a short batch at the end of each epoch.
  const auto input = data::Dataset::range(22).shuffle(9, 5).batch(4).repeat(2);
  for (int local : {1, 2}) {
    for (int workers : {1, 2, 3}) {
      INFO(local << " local replicas, " << workers << " workers");
      check_split_resumes_everywhere(
          split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Rebatch, workers * local, local)));
      check_split_resumes_everywhere(split_between_replicas(
          input, split_options(ReplicaSplitOptions::Mode::Keep, workers * local, local, (workers - 1) * local)));
    }
  }
  // Behind the read-ahead stage experimental_distribute_dataset puts after it.
  check_split_resumes_everywhere(
      split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Rebatch, 4, 2)).prefetch(1));
}

TEST_CASE("split_between_replicas: a short last batch is split as in the uninterrupted run after a resume") {
  // Batches of 4, 4, 2 over 2 replicas: the last is split [2, 0] against the full batch of
  // 4, which a fresh iterator knows only from the saved state.
  const auto ds = split_between_replicas(data::Dataset::range(10).batch(4), split_options(ReplicaSplitOptions::Mode::Keep, 2, 2));
  auto it = ds.make_iterator();
  it.next();
  it.next();
  auto resumed = ds.make_iterator();
  resumed.restore(it.save());
  REQUIRE(split_parts_of(*resumed.next()) == SplitParts{{8, 9}, {}});
}

TEST_CASE("split_between_replicas: states of the map it replaced and of other replica counts") {
  const auto input = data::Dataset::range(30).batch(6);
  SECTION("the earlier map's record restores (the full batch is learned again)") {
    auto old_stage = input.map([](const data::Element& e) { return e; });
    auto old_it = old_stage.make_iterator();
    old_it.next();
    old_it.next();
    auto ds = split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Keep, 2, 2));
    auto resumed = ds.make_iterator();
    resumed.restore(old_it.save());
    REQUIRE(split_parts_of(*resumed.next()) == SplitParts{{12, 13, 14}, {15, 16, 17}});
  }
  SECTION("a position between batches restores under another replica count") {
    auto two = split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Rebatch, 2, 1));
    auto it = two.make_iterator();
    it.next();
    it.next();  // both parts of the first batch taken: nothing queued
    auto three = split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Keep, 3, 3));
    auto resumed = three.make_iterator();
    resumed.restore(it.save());
    REQUIRE(split_parts_of(*resumed.next()) == SplitParts{{6, 7}, {8, 9}, {10, 11}});
  }
  SECTION("a position inside a rebatched batch needs the same number of parts") {
    auto two = split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Rebatch, 2, 1));
    auto it = two.make_iterator();
    it.next();  // half of the first batch taken
    auto four = split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Rebatch, 4, 2));
    auto resumed = four.make_iterator();
    REQUIRE_THROWS_WITH(resumed.restore(it.save()),
                        Catch::Contains("part-way through a batch cut into 2 parts") &&
                            Catch::Contains("cuts batches into 4 parts"));
    auto keep = split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Keep, 2, 2));
    auto keep_it = keep.make_iterator();
    REQUIRE_THROWS_WITH(keep_it.restore(it.save()), Catch::Contains("splits each global batch itself"));
  }
  SECTION("a corrupt count of parts taken is refused, never read past the queue") {
    auto four = split_between_replicas(input, split_options(ReplicaSplitOptions::Mode::Rebatch, 4, 2));
    auto it = four.make_iterator();
    it.next();  // 2 of the first batch's 4 parts taken
    data::IteratorState state = it.save();
    std::vector<int64_t> marker;  // the stage's record opens with its marker word
    data::detail::StateWriter(marker).stage(data::detail::StageTag::ReplicaSplit);
    const auto at = std::find(state.words.begin(), state.words.end(), marker[0]);
    REQUIRE(at != state.words.end());
    REQUIRE(*(at + 2) == 2);  // marker, B, parts taken
    *(at + 2) = 1;  // half an element
    REQUIRE_THROWS_WITH(four.make_iterator().restore(state), Catch::Contains("whole elements of 2 parts"));
  }
}

TEST_CASE("distributed iterators: one position shared by the workers is refused where each needs its own") {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto dist = strategy.experimental_distribute_dataset(data::Dataset::range(40).batch(8));
  auto it = dist.make_iterator();
  it.next();
  const JobInputPosition position = it.save_job_position();
  REQUIRE(!position.per_worker);
  REQUIRE(position.states.size() == 1);
  auto resumed = dist.make_iterator();
  resumed.restore_job_position(position);
  REQUIRE(split_ids_of((*resumed.next())[0][0]) == std::vector<int64_t>{8, 9, 10, 11});
  JobInputPosition per_worker{true, {position.states[0], position.states[0]}};
  REQUIRE_THROWS_WITH(dist.make_iterator().restore_job_position(per_worker),
                      Catch::Contains("input positions of 2 workers that each read input of their own") &&
                          Catch::Contains("one worker"));
}
