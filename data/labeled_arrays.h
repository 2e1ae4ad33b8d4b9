// LabeledArrays: a whole labelled dataset in memory (features [N, ...], labels [N]), as
// the readers load it, with record ranges and the Dataset over it.
//
//   auto all = data::read_mnist(dir, data::Split::Test);
//   auto train = all.slice(0, 8000).dataset();      // elements {image [28,28,1], label []}
//   auto eval = all.slice(8000, 10000).dataset();
#pragma once

#include <cstdint>

#include <strata/core/tensor.h>
#include <strata/data/dataset.h>

namespace strata::data {

struct LabeledArrays {
  Tensor features;  // [N, ...] float32
  Tensor labels;    // [N] int64

  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
  // Records [begin, end) as views (no copy); throws unless 0 <= begin <= end <= size().
  LabeledArrays slice(int64_t begin, int64_t end) const;
  // from_tensor_slices({features, labels}).
  Dataset dataset() const;
};

}  // namespace strata::data
