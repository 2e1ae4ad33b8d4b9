#include <strata/core/dtype.h>

#include <strata/core/error.h>

namespace strata {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "float") return DType::Float32;
  if (name == "float64" || name == "f64" || name == "double") return DType::Float64;
  if (name == "float16" || name == "f16" || name == "half") return DType::Float16;
  if (name == "bfloat16" || name == "bf16") return DType::BFloat16;
  if (name == "int32" || name == "i32") return DType::Int32;
  if (name == "int64" || name == "i64") return DType::Int64;
  if (name == "bool") return DType::Bool;
  fail("dtype: unknown dtype name '", name,
       "' (expected float32, float64, float16, bfloat16, int32, int64 or bool)");
}

namespace {
int rank_of(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::Int32: return 1;
    case DType::Int64: return 2;
    default: return 3;
  }
}
}  // namespace

DType promote_types(DType a, DType b, const char* op) {
  if (a == b) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    fail(op, ": cannot mix float dtypes ", dtype_name(a), " and ", dtype_name(b),
         " without an explicit cast");
  }
  if (fa) return a;
  if (fb) return b;
  return rank_of(a) >= rank_of(b) ? a : b;
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace strata
