// Front-ends of reductions, arg-reductions and cumulative sums.
#include <limits>

#include <strata/core/op_common.h>

namespace strata {

namespace {

// Output shape and normalised axis list of a reduction.
Shape reduced_shape(const Shape& in, const std::vector<int64_t>& axes, bool keepdims) {
  Shape out;
  size_t k = 0;
  for (int64_t i = 0; i < int64_t(in.size()); ++i) {
    const bool reduced = k < axes.size() && axes[k] == i;
    if (reduced) {
      ++k;
      if (keepdims) out.push_back(1);
    } else {
      out.push_back(in[size_t(i)]);
    }
  }
  return out;
}

std::vector<int64_t> resolve_axes(const Tensor& x, const Axes& axes, const char* op) {
  if (!axes) {
    std::vector<int64_t> all(static_cast<size_t>(x.ndim()));
    for (int64_t i = 0; i < x.ndim(); ++i) all[size_t(i)] = i;
    return all;
  }
  return normalize_axes(*axes, x.ndim(), op);
}

Tensor reduce(OpId op, const Tensor& x, const Axes& axes, bool keepdims) {
  const char* name = op_name(op);
  detail::require_defined(name, x);
  STRATA_CHECK(x.dtype() != kBool, name, ": cannot reduce a bool tensor (cast it first)");
  if (op == OpId::LogSumExp) detail::require_float(name, x);
  OpAttrs attrs;
  attrs.axes = resolve_axes(x, axes, name);
  attrs.keepdims = keepdims;
  if (op == OpId::Max || op == OpId::Min || op == OpId::LogSumExp) {
    for (int64_t a : attrs.axes) {
      STRATA_CHECK(x.shape()[size_t(a)] > 0, name, ": cannot reduce over the empty axis ", a,
                   " of shape ", shape_str(x.shape()), " (the result has no identity)");
    }
  }
  return detail::compute1(op, attrs, {x}, reduced_shape(x.shape(), attrs.axes, keepdims),
                          x.dtype(), x.device());
}

Tensor arg_reduce(OpId op, const Tensor& x, int64_t axis, bool keepdims) {
  const char* name = op_name(op);
  detail::require_defined(name, x);
  OpAttrs attrs;
  attrs.axis = normalize_axis(axis, x.ndim(), name);
  attrs.axes = {attrs.axis};
  attrs.keepdims = keepdims;
  STRATA_CHECK(x.shape()[size_t(attrs.axis)] > 0, name, ": axis ", axis, " of shape ",
               shape_str(x.shape()), " is empty");
  return detail::compute1(op, attrs, {x}, reduced_shape(x.shape(), attrs.axes, keepdims), kInt64,
                          x.device());
}

}  // namespace

Tensor sum(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(OpId::Sum, x, axes, keepdims); }
Tensor max(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(OpId::Max, x, axes, keepdims); }
Tensor min(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(OpId::Min, x, axes, keepdims); }
Tensor prod(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(OpId::Prod, x, axes, keepdims); }
Tensor logsumexp(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce(OpId::LogSumExp, x, axes, keepdims);
}

Tensor mean(const Tensor& x, const Axes& axes, bool keepdims) {
  detail::require_defined("mean", x);
  detail::require_float("mean", x);
  const std::vector<int64_t> ax = resolve_axes(x, axes, "mean");
  int64_t count = 1;
  for (int64_t a : ax) count *= x.shape()[size_t(a)];
  // Half types are summed in float32, as NumPy and TensorFlow do: a float16 sum overflows
  // past 65504 (the mean of 70000 ones was inf), and the divisor would too. The mean is
  // cast back to the input's dtype.
  const bool half = is_half(x.dtype());
  Tensor s = sum(half ? cast(x, kFloat32) : x, std::vector<int64_t>(ax), keepdims);
  if (count == 0) return half ? cast(s * std::numeric_limits<double>::quiet_NaN(), x.dtype())
                              : s * std::numeric_limits<double>::quiet_NaN();
  if (half) return cast(s / double(count), x.dtype());
  return s / double(count);
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) { return arg_reduce(OpId::ArgMax, x, axis, keepdims); }
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims) { return arg_reduce(OpId::ArgMin, x, axis, keepdims); }

Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  detail::require_defined("cumsum", x);
  STRATA_CHECK(x.dtype() != kBool, "cumsum: expected a numeric tensor, got bool");
  OpAttrs attrs(CumsumAttrs{exclusive, reverse});
  attrs.axis = normalize_axis(axis, x.ndim(), "cumsum");
  return detail::compute1(OpId::Cumsum, attrs, {x}, x.shape(), x.dtype(), x.device());
}

}  // namespace strata
