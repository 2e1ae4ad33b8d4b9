// Row mode (Note [row mode] in data/dataset_node.h): from_tensor_slices, and shuffle, repeat,
// take, skip and shard over it, hand row indices to batch, which gathers the rows straight
// from the source tensors. Every pipeline here is compared with the same pipeline forced
// into element mode by an identity map right after the source (map yields elements, not
// rows): the elements, their order, and resumed iterators must be the same.
#include <functional>
#include <string>
#include <vector>

#include <strata/core/ops.h>
#include <strata/data/dataset.h>
#include "tests/data/data_test_util.h"

using namespace strata;
using data::Dataset;
using data::Element;
using data::IteratorState;

namespace {

using RowStages = std::function<Dataset(const Dataset&)>;

Element rows_identity(const Element& e) { return e; }

// Features [n, 3, 2] float32 with distinct values, labels [n] int64.
std::vector<Tensor> rows_source(int64_t n) {
  Tensor features = arange(0, double(n * 6), 1, kFloat32).reshape({n, 3, 2});
  Tensor labels = arange(100, double(100 + n), 1, kInt64);
  return {features, labels};
}

std::vector<std::string> rows_drain_iteration(const Dataset& ds, uint64_t iteration) {
  auto it = ds.make_iterator(iteration);
  return testing::drain(it);
}

// The stages over the row-mode source and over the element-mode source give the same
// elements, in the same order, in two iterations (two shuffle orders).
void check_same_as_elements(const std::vector<Tensor>& source, const RowStages& stages) {
  const Dataset rows = stages(Dataset::from_tensor_slices(source));
  const Dataset elements = stages(Dataset::from_tensor_slices(source).map(rows_identity));
  INFO("pipeline " << rows.describe());
  for (uint64_t iteration : {0, 1}) {
    const auto expected = rows_drain_iteration(elements, iteration);
    REQUIRE(!expected.empty());
    CHECK(rows_drain_iteration(rows, iteration) == expected);
  }
}

// Saves after `consumed` elements, restores into a fresh pipeline, and checks the rest.
void check_rows_resume(const std::function<Dataset()>& build, int64_t consumed) {
  INFO("pipeline " << build().describe() << ", saved after " << consumed << " elements");
  auto it = build().make_iterator(3);
  testing::take_n(it, consumed);
  const IteratorState state = it.save();
  const auto rest = testing::drain(it);
  auto resumed = build().make_iterator(0);
  resumed.restore(IteratorState::from_string(state.to_string()));
  CHECK(testing::drain(resumed) == rest);
}

}  // namespace

TEST_CASE("row mode: batch over selected, reordered and repeated rows equals element mode", "[data]") {
  const auto source = rows_source(23);
  check_same_as_elements(source, [](const Dataset& d) { return d.batch(4); });
  check_same_as_elements(source, [](const Dataset& d) { return d.shuffle(7, 3).batch(4); });
  check_same_as_elements(source, [](const Dataset& d) { return d.shuffle(7, 3).repeat(3).batch(5, true); });
  check_same_as_elements(source, [](const Dataset& d) {
    return d.skip(2).take(17).shard(3, 1).shuffle(4, 9).repeat(2).batch(3);
  });
  // A buffer larger than the data; batches that span epochs.
  check_same_as_elements(source, [](const Dataset& d) { return d.repeat(2).shuffle(50, 1).batch(6); });
  check_same_as_elements(source, [](const Dataset& d) {
    return d.shuffle(5, 2, /*reshuffle_each_iteration=*/false).repeat(3).batch(7);
  });
  // Unbatched: shuffle in row mode still yields views of the source rows.
  check_same_as_elements(source, [](const Dataset& d) { return d.shuffle(8, 4).take(20); });
  auto it = Dataset::from_tensor_slices(source).shuffle(8, 4).make_iterator();
  auto e = it.next();
  REQUIRE(e);
  CHECK((*e)[0].shares_storage(source[0]));
  CHECK((*e)[0].shape() == Shape{3, 2});
  // A gathered batch is a fresh tensor, as a stacked one is.
  auto batch = *Dataset::from_tensor_slices(source).shuffle(8, 4).batch(5).make_iterator().next();
  CHECK(!batch[0].shares_storage(source[0]));
  CHECK(batch[0].shape() == Shape{5, 3, 2});
  CHECK(batch[1].shape() == Shape{5});
  CHECK(batch[1].dtype() == kInt64);
  // After the end, next() stays at the end.
  auto short_it = Dataset::from_tensor_slices(source).take(3).batch(2).make_iterator();
  CHECK(short_it.next()->at(0).dim(0) == 2);
  CHECK(short_it.next()->at(0).dim(0) == 1);
  CHECK(!short_it.next());
  CHECK(!short_it.next());
}

TEST_CASE("row mode: sources whose rows are not one contiguous block", "[data]") {
  // Rows of a transpose are strided: batch falls back to stacking row views.
  Tensor base = arange(0, 2 * 3 * 11, 1, kFloat32).reshape({3, 2, 11});
  Tensor strided = base.permute({2, 1, 0});  // [11, 2, 3], rows not contiguous
  check_same_as_elements({strided}, [](const Dataset& d) { return d.shuffle(6, 1).batch(4); });
  // Rows of width zero, and a broadcast source whose rows all alias one block.
  check_same_as_elements({zeros({9, 0}), arange(0, 9, 1, kInt64)},
                         [](const Dataset& d) { return d.shuffle(3, 2).batch(4); });
  Tensor broadcast = arange(0, 3, 1, kFloat32).reshape({1, 3}).broadcast_to({10, 3});
  check_same_as_elements({broadcast, arange(0, 10, 1, kInt64)},
                         [](const Dataset& d) { return d.shuffle(4, 5).repeat(2).batch(3); });
  // A row-mode slice of a larger array (nonzero offset, as LabeledArrays::slice makes).
  Tensor big = arange(0, 40 * 5, 1, kFloat64).reshape({40, 5});
  check_same_as_elements({big.slice(0, 7, 31)}, [](const Dataset& d) { return d.shuffle(9, 8).batch(5); });
}

TEST_CASE("row mode: iterators resume from saved states", "[data][state]") {
  const auto source = rows_source(37);
  const std::function<Dataset()> epochs = [&] {
    return Dataset::from_tensor_slices(source).shuffle(10, 5).repeat(3).batch(4);
  };
  for (int64_t k = 0; k <= 28; ++k) check_rows_resume(epochs, k);
  const std::function<Dataset()> selected = [&] {
    return Dataset::from_tensor_slices(source).skip(3).shard(2, 1).take(15).repeat().shuffle(8, 1).take(40);
  };
  for (int64_t k : {0, 1, 7, 8, 9, 20, 39, 40}) check_rows_resume(selected, k);
  // Prefetch snapshots the row-mode shuffle's state on its thread; restore replays rows.
  const std::function<Dataset()> prefetched = [&] {
    return Dataset::from_tensor_slices(rows_source(300)).shuffle(100, 1).batch(7).prefetch(2);
  };
  for (int64_t k : {0, 1, 5, 20, 42, 43}) check_rows_resume(prefetched, k);

  // A state saved mid-epoch restores to the batches the uninterrupted iterator yields.
  const Dataset ds = Dataset::from_tensor_slices(source).shuffle(10, 5).batch(4);
  auto whole = ds.make_iterator(0);
  const auto expected = testing::drain(whole);
  auto it = ds.make_iterator(0);
  const auto head = testing::take_n(it, 4);
  auto resumed = ds.make_iterator(7);
  resumed.restore(it.save());
  auto rest = testing::drain(resumed);
  std::vector<std::string> joined = head;
  joined.insert(joined.end(), rest.begin(), rest.end());
  CHECK(joined == expected);
}
