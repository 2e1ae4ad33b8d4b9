// Shape and stride helpers: element counts, contiguous strides, axis normalisation and
// NumPy broadcasting. Shapes are plain vectors of int64 extents (rank 0 = scalar).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace strata {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// "[2,3]" — the form every error message uses.
std::string shape_str(const Shape& shape);

// Maps a possibly negative axis into [0, rank); throws naming `op` when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);
// Normalises, sorts and de-duplicates a list of axes (duplicates are an error).
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op);

// NumPy broadcasting of two shapes; throws naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Strides that read a tensor of shape `from` (with strides `from_strides`) as if it had
// been broadcast to `to` (broadcast dimensions get stride 0). `from` must broadcast to `to`.
Strides broadcast_strides(const Shape& from, const Strides& from_strides, const Shape& to);

}  // namespace strata
