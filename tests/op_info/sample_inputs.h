// Sample inputs for the op-info table: values drawn from a named domain, reproducibly from
// a seed, in any dtype.
//
// A domain is what an op needs of its inputs for finite differences to be valid (and for
// the forward result to be finite): log needs positive values, abs and relu values away
// from their kink at 0, max and maximum values without ties. Values are drawn in float64
// on cpu:0 and cast to the sample's dtype, so every dtype and device sees the same numbers
// (as far as the dtype can hold them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/core/shape.h>
#include <strata/core/tensor.h>

namespace strata::testing {

enum class Domain {
  Any,            // uniform in [-2, 2); integers -4..4; random bools
  Positive,       // uniform in [0.25, 2.5); integers 1..5; true
  AwayFromZero,   // |v| in [0.25, 2] with a random sign; integers +-1..4; true
  Grid,           // pairwise distinct multiples of 1/8 (no ties); distinct integers
  OffGrid,        // distinct odd multiples of 1/16: never equal to a Grid value
  FewValues,      // integers in -2..2, so that ties and equal pairs are common
  Indices,        // integer indices, drawn in range by the sample builder
  WithNonFinite,  // as Any, with inf, -inf and NaN at every third element of a float tensor
};

const char* domain_name(Domain d);

// "" when every element of t lies in domain d (for its dtype), else the first offender.
std::string check_domain(const Tensor& t, Domain d);

// Hands a sample builder its dtype and fresh reproducible values: each call draws from the
// next seed.
class SampleMaker {
 public:
  SampleMaker(DType dtype, std::vector<Domain> domains, uint64_t seed);

  // The sample set's dtype.
  DType dtype() const { return dtype_; }
  // Values for input `k`, drawn from the entry's domain for k, in the sample dtype (or in
  // `dtype` for an input of another type, e.g. a bool condition).
  Tensor input(size_t k, const Shape& shape);
  Tensor input(size_t k, const Shape& shape, DType dtype);
  // Indices in [0, extent), int64 unless said otherwise.
  Tensor indices(const Shape& shape, int64_t extent, DType dtype = kInt64);
  // A fresh seed, for ops that take one (random ops).
  uint64_t next_seed() { return seed_++; }

 private:
  DType dtype_;
  std::vector<Domain> domains_;
  uint64_t seed_;
};

// Draws `shape` values from domain d in dtype, on cpu:0.
Tensor draw(const Shape& shape, Domain d, DType dtype, uint64_t seed);

}  // namespace strata::testing
