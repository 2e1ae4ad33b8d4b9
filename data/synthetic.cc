#include <strata/data/synthetic.h>

#include <cmath>
#include <numbers>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>

namespace strata::data {

namespace {

// Two independent standard normals from one 64-bit hash (Box-Muller on its halves).
void normal_pair(uint64_t h, double* z0, double* z1) {
  const double u1 = (double(uint32_t(h >> 32)) + 1.0) * 0x1.0p-32;  // (0, 1]
  const double u2 = double(uint32_t(h)) * 0x1.0p-32;                // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * std::numbers::pi * u2;
  *z0 = r * std::cos(a);
  *z1 = r * std::sin(a);
}

// Fills out[0..n) with N(0, stddev^2) values of one stream.
void fill_normal(uint64_t stream, int64_t n, double stddev, float* out, double* add = nullptr) {
  for (int64_t k = 0; k < n; k += 2) {
    double z0, z1;
    normal_pair(detail::mix_keys(stream, uint64_t(k / 2)), &z0, &z1);
    out[k] = float((add ? add[k] : 0.0) + stddev * z0);
    if (k + 1 < n) out[k + 1] = float((add ? add[k + 1] : 0.0) + stddev * z1);
  }
}

}  // namespace

LabeledArrays make_synthetic_classification(const SyntheticOptions& o) {
  constexpr const char* op = "synthetic_classification";
  STRATA_CHECK(o.num_examples >= 0, op, ": num_examples must be >= 0, got ", o.num_examples);
  STRATA_CHECK(o.num_classes >= 2, op, ": num_classes must be >= 2, got ", o.num_classes);
  STRATA_CHECK(!o.feature_shape.empty() && numel_of(o.feature_shape) > 0, op,
               ": feature_shape must be non-empty with positive extents, got ",
               shape_str(o.feature_shape));
  for (int64_t d : o.feature_shape) {
    STRATA_CHECK(d > 0, op, ": feature_shape ", shape_str(o.feature_shape), " has a non-positive extent");
  }
  STRATA_CHECK(o.separation > 0 && o.noise >= 0, op, ": separation must be > 0 and noise >= 0");

  const int64_t dim = numel_of(o.feature_shape);
  const uint64_t base = detail::mix_keys(o.seed, 0x53594e5448ULL);  // "SYNTH"
  // Class means, one stream per class.
  std::vector<double> means(static_cast<size_t>(o.num_classes * dim));
  {
    std::vector<float> tmp(static_cast<size_t>(dim));
    for (int64_t c = 0; c < o.num_classes; ++c) {
      fill_normal(detail::mix_keys(base, uint64_t(c) * 2 + 1), dim, o.separation, tmp.data());
      for (int64_t d = 0; d < dim; ++d) means[size_t(c * dim + d)] = tmp[size_t(d)];
    }
  }

  Shape shape{o.num_examples};
  shape.insert(shape.end(), o.feature_shape.begin(), o.feature_shape.end());
  LabeledArrays out;
  out.features = Tensor::empty(shape, kFloat32, Device());  // host memory, filled below
  out.labels = Tensor::empty({o.num_examples}, kInt64, Device());
  float* x = out.features.data<float>();
  int64_t* y = out.labels.data<int64_t>();
  const uint64_t label_stream = detail::mix_keys(base, 0x4c4142454cULL);  // "LABEL"
  for (int64_t i = 0; i < o.num_examples; ++i) {
    const uint64_t h = detail::mix_keys(label_stream, uint64_t(i));
    const int64_t c = int64_t((static_cast<unsigned __int128>(h) * uint64_t(o.num_classes)) >> 64);
    y[i] = c;
    const uint64_t example_stream = detail::mix_keys(detail::mix_keys(base, 0x4e4f495345ULL), uint64_t(i));
    fill_normal(example_stream, dim, o.noise, x + i * dim, means.data() + c * dim);
  }
  return out;
}

Dataset synthetic_classification(const SyntheticOptions& options) {
  return make_synthetic_classification(options).dataset();
}

}  // namespace strata::data
