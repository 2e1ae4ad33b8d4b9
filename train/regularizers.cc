#include <strata/train/regularizers.h>

#include <cmath>

#include <strata/core/error.h>
#include <strata/core/ops.h>

namespace strata::regularizers {

namespace {

void check_factor(const char* regularizer, const char* name, double value) {
  STRATA_CHECK(std::isfinite(value) && value >= 0.0, "regularizers::", regularizer, ": ", name,
               " must be a finite number >= 0, got ", value);
}

// The weight as the penalty's dtype: float16/bfloat16 widen to float32 so that the sum
// of many squares neither overflows nor loses the small terms.
Tensor penalty_input(const char* regularizer, const Tensor& weight) {
  STRATA_CHECK(weight.defined(), "regularizers::", regularizer, ": undefined weight");
  STRATA_CHECK(is_floating(weight.dtype()), "regularizers::", regularizer,
               ": expected a floating weight, got ", dtype_name(weight.dtype()));
  const DType dt = weight.dtype();
  return (dt == kFloat16 || dt == kBFloat16) ? cast(weight, kFloat32) : weight;
}

}  // namespace

L1::L1(double l1_factor) : l1(l1_factor) { check_factor("L1", "l1", l1); }
L2::L2(double l2_factor) : l2(l2_factor) { check_factor("L2", "l2", l2); }
L1L2::L1L2(double l1_factor, double l2_factor) : l1(l1_factor), l2(l2_factor) {
  check_factor("L1L2", "l1", l1);
  check_factor("L1L2", "l2", l2);
}

Tensor L1::operator()(const Tensor& weight) const {
  return sum(abs(penalty_input("L1", weight))) * l1;
}

Tensor L2::operator()(const Tensor& weight) const {
  return sum(square(penalty_input("L2", weight))) * l2;
}

Tensor L1L2::operator()(const Tensor& weight) const {
  const Tensor w = penalty_input("L1L2", weight);
  return sum(abs(w)) * l1 + sum(square(w)) * l2;
}

}  // namespace strata::regularizers
