#include <strata/data/labeled_arrays.h>

#include <strata/core/error.h>

namespace strata::data {

LabeledArrays LabeledArrays::slice(int64_t begin, int64_t end) const {
  STRATA_CHECK(0 <= begin && begin <= end && end <= size(), "LabeledArrays::slice: range [", begin,
               ", ", end, ") outside [0, ", size(), ")");
  return {features.slice(0, begin, end), labels.slice(0, begin, end)};
}

Dataset LabeledArrays::dataset() const {
  STRATA_CHECK(features.defined() && labels.defined(), "LabeledArrays::dataset: empty arrays");
  return Dataset::from_tensor_slices({features, labels});
}

}  // namespace strata::data
