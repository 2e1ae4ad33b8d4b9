// Front-ends of the random ops: argument checks, then the registered kernel of the
// output's device draws element i from (seed, i) (core/philox.h).
#include <strata/core/random.h>

#include <numeric>
#include <vector>

#include <strata/core/checked_math.h>
#include <strata/core/op_common.h>
#include <strata/core/philox.h>

namespace strata::random {

void Philox::block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]) {
  philox::block(key, counter_hi, counter_lo, out);
}

namespace {

void check_float(DType dtype, const char* op) {
  STRATA_CHECK(is_floating(dtype), op, ": expected a floating dtype, got ", dtype);
}

Tensor draw(OpId op, const Shape& shape, const RandomAttrs& attrs, DType dtype, Device device) {
  return detail::compute1(op, OpAttrs(attrs), {}, shape, dtype, device);
}

}  // namespace

Tensor uniform(const Shape& shape, Seed seed_arg, double low, double high, DType dtype,
               Device device) {
  check_float(dtype, "random::uniform");
  STRATA_CHECK(low <= high, "random::uniform: low ", low, " > high ", high);
  return draw(OpId::RandomUniform, shape, RandomAttrs{seed_arg.value(), low, high}, dtype, device);
}

Tensor normal(const Shape& shape, Seed seed_arg, double mean, double stddev, DType dtype,
              Device device) {
  check_float(dtype, "random::normal");
  STRATA_CHECK(stddev >= 0, "random::normal: stddev must be >= 0, got ", stddev);
  return draw(OpId::RandomNormal, shape, RandomAttrs{seed_arg.value(), mean, stddev}, dtype, device);
}

Tensor truncated_normal(const Shape& shape, Seed seed_arg, double mean, double stddev,
                        DType dtype, Device device) {
  check_float(dtype, "random::truncated_normal");
  STRATA_CHECK(stddev >= 0, "random::truncated_normal: stddev must be >= 0, got ", stddev);
  return draw(OpId::RandomTruncatedNormal, shape, RandomAttrs{seed_arg.value(), mean, stddev}, dtype, device);
}

Tensor bernoulli(const Shape& shape, double p, Seed seed_arg, DType dtype, Device device) {
  STRATA_CHECK(p >= 0 && p <= 1, "random::bernoulli: probability must be in [0,1], got ", p);
  return draw(OpId::RandomBernoulli, shape, RandomAttrs{seed_arg.value(), p, 0.0}, dtype, device);
}

Tensor permutation(int64_t n, Seed seed_arg) {
  const uint64_t seed = seed_arg.value();
  // Fisher-Yates is sequential by nature: it runs on the host, for index tensors.
  STRATA_CHECK(n >= 0, "random::permutation: n must be >= 0, got ", n);
  // Drawn straight into a host tensor, whose allocator reports memory it cannot get as a
  // strata::Error; an impossible byte count is refused first under this op's name (a
  // std::vector of 2^62 elements threw std::length_error).
  checked_nbytes({n}, sizeof(int64_t), "random::permutation");
  Tensor host = Tensor::empty({n}, kInt64, Device());
  int64_t* v = host.data<int64_t>();
  std::iota(v, v + n, int64_t(0));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = int64_t(philox::uniform01(seed, philox::kPermutation, uint64_t(i)) * double(i + 1));
    std::swap(v[i], v[std::min(j, i)]);
  }
  const Device device = current_device();
  return device == Device() ? host : host.to(device);
}

}  // namespace strata::random
