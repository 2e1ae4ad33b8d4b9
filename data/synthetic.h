// A built-in, deterministic, learnable classification dataset (the default demo and the
// tests' data): each class c has a mean vector mu_c with entries ~ N(0, separation^2),
// and an example of class c is mu_c + N(0, noise^2) noise per feature. Labels are drawn
// uniformly. With the defaults (784 features, separation 0.15, noise 1) class means are
// ~6 noise standard deviations apart: an MLP reaches high accuracy in a few hundred
// steps, yet the task is not trivially separable at initialisation.
//
// Everything derives from counter-based hashes of (seed, index), so the data are the same
// on every machine and thread count, and any prefix of a larger set equals the smaller set.
#pragma once

#include <cstdint>

#include <strata/core/shape.h>
#include <strata/data/dataset.h>
#include <strata/data/labeled_arrays.h>

namespace strata::data {

// The per-example feature shape of the image variant (for the CNN): MNIST's.
inline const Shape kSyntheticImageShape{28, 28, 1};

struct SyntheticOptions {
  int64_t num_examples = 10000;
  int64_t num_classes = 10;
  Shape feature_shape{784};  // kSyntheticImageShape for the image variant
  uint64_t seed = 0;
  double separation = 0.15;  // standard deviation of the class-mean entries
  double noise = 1.0;        // standard deviation of the per-example noise
};

// features float32 [num_examples, feature_shape...], labels int64 [num_examples].
LabeledArrays make_synthetic_classification(const SyntheticOptions& options = {});
// The Dataset of {features, label} elements over make_synthetic_classification.
Dataset synthetic_classification(const SyntheticOptions& options = {});

}  // namespace strata::data
