// Shared pieces of the tests that train one model under several strategies and compare
// the results: a small classification dataset and an exact comparison of tensors.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <strata/core/tensor.h>
#include <strata/data/dataset.h>

namespace strata::distribute::testing {

// `examples` rows of `features` normal values (from `seed`), labelled 0-3 by the sum of the
// first three features, batched by `batch` (the last batch may be short).
inline data::Dataset classification_dataset(uint32_t seed, int64_t examples, int64_t features, int64_t batch) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(examples * features));
  for (auto& v : x) v = normal(gen);
  std::vector<int64_t> y(static_cast<size_t>(examples));
  for (int64_t i = 0; i < examples; ++i) {
    float s = 0;
    for (int64_t f = 0; f < 3; ++f) s += x[size_t(i * features + f)];
    y[size_t(i)] = s > 1 ? 3 : s > 0 ? 2 : s > -1 ? 1 : 0;
  }
  return data::Dataset::from_tensor_slices(
             std::vector<Tensor>{Tensor::from_vector(x, {examples, features}), Tensor::from_vector(y, {examples})})
      .batch(batch);
}

// Same shapes, dtypes and bits, element for element.
inline bool bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape() || a[i].dtype() != b[i].dtype() ||
        std::memcmp(a[i].contiguous().raw_data(), b[i].contiguous().raw_data(), a[i].nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace strata::distribute::testing
