#include <strata/train/policy.h>

#include <mutex>

#include <strata/core/error.h>
#include <strata/core/ops.h>

namespace strata::mixed_precision {

Policy::Policy(DType dtype) : name_(dtype_name(dtype)), compute_dtype_(dtype), variable_dtype_(dtype) {
  STRATA_CHECK(is_floating(dtype), "mixed_precision::Policy: expected a floating dtype, got ", dtype);
}

Policy::Policy(const std::string& name) : name_(name) {
  if (name == "mixed_float16" || name == "mixed_bfloat16") {
    compute_dtype_ = name == "mixed_float16" ? kFloat16 : kBFloat16;
    variable_dtype_ = kFloat32;
    return;
  }
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    if (name == dtype_name(t)) {
      compute_dtype_ = variable_dtype_ = t;
      return;
    }
  }
  fail("mixed_precision::Policy: unknown policy '", name,
       "' (expected mixed_float16, mixed_bfloat16, float32, float64, float16 or bfloat16)");
}

namespace {
std::mutex& global_mutex() {
  static std::mutex mu;
  return mu;
}
Policy& global() {
  static Policy policy;
  return policy;
}
}  // namespace

Policy global_policy() {
  std::lock_guard<std::mutex> lock(global_mutex());
  return global();
}

void set_global_policy(const Policy& policy) {
  std::lock_guard<std::mutex> lock(global_mutex());
  global() = policy;
}

PolicyScope::PolicyScope(const Policy& policy) : previous_(global_policy()) { set_global_policy(policy); }

PolicyScope::~PolicyScope() { set_global_policy(previous_); }

Tensor autocast(const Tensor& x, DType dtype) {
  if (!x.defined() || !is_floating(x.dtype()) || x.dtype() == dtype) return x;
  return cast(x, dtype);
}

}  // namespace strata::mixed_precision
