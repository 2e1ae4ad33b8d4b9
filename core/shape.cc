#include <strata/core/shape.h>

#include <algorithm>
#include <sstream>

#include <strata/core/checked_math.h>
#include <strata/core/error.h>

namespace strata {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d, "numel", shape);
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc = checked_mul(acc, std::max<int64_t>(shape[i], 1), "contiguous_strides", shape);
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  STRATA_CHECK(axis >= -rank && axis < rank, op, ": axis ", axis, " is out of range for rank ",
               rank, " (expected ", -rank, " <= axis < ", rank, ")");
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank,
                                    const char* op) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank, op));
  std::sort(out.begin(), out.end());
  STRATA_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op,
               ": repeated axis in the axis list");
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    STRATA_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ",
                 shape_str(b), " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Strides broadcast_strides(const Shape& from, const Strides& from_strides, const Shape& to) {
  Strides s(to.size(), 0);
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    s[lead + i] = (from[i] == 1 && to[lead + i] != 1) ? 0 : from_strides[i];
  }
  return s;
}

}  // namespace strata
