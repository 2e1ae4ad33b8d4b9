// DType: the element types a Tensor can hold, their sizes and NumPy-style promotion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>

#include <strata/core/half.h>

namespace strata {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, Bool };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "float32", "f32", "int64", ...; throws strata::Error on an unknown name.
DType dtype_from_name(const std::string& name);
inline bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
inline bool is_integral(DType t) { return t == DType::Int32 || t == DType::Int64; }
// Half-width floats are stored as 16 bits and computed in float32 on the CPU.
inline bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// Result type of a binary op (NumPy rules for int/float mixes): bool < ints < floats; two
// different float widths are an error (callers cast explicitly), reported naming `op`.
DType promote_types(DType a, DType b, const char* op);

std::ostream& operator<<(std::ostream& os, DType t);

// C++ type <-> DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <typename T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Float -> integer conversion without undefined behaviour: truncates toward zero, NaN gives
// 0 and values beyond I's range saturate (a plain static_cast is undefined there in C++).
template <typename I>
inline I float_to_int(double v) {
  if (!(v == v)) return I(0);
  if (v >= double(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  if (v <= double(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  return static_cast<I>(v);
}

// Calls fn(T{}) with the C++ type of `t` — the one switch over dtypes kernels share.
template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(Half{});
    case DType::BFloat16: return fn(BFloat16{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::Bool: return fn(bool{});
  }
  return fn(float{});
}

}  // namespace strata
