// Front-ends of shape ops. reshape/permute/slice/broadcast_to/expand_dims/squeeze are views
// (they share storage and need no kernel); concat/pad/gather/scatter_add/one_hot copy.
#include <algorithm>

#include <strata/core/checked_math.h>
#include <strata/core/op_common.h>

namespace strata {

using detail::make_view;

bool is_view_op(OpId op) {
  return op == OpId::Reshape || op == OpId::Permute || op == OpId::Slice ||
         op == OpId::BroadcastTo;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  detail::require_defined("reshape", x);
  Shape target = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      STRATA_CHECK(infer < 0, "reshape: more than one -1 in target shape ", shape_str(shape));
      infer = int64_t(i);
    } else {
      STRATA_CHECK(target[i] >= 0, "reshape: negative extent in target shape ", shape_str(shape));
      known = checked_mul(known, target[i], "reshape", shape);
    }
  }
  if (infer >= 0) {
    STRATA_CHECK(known != 0 && x.numel() % known == 0, "reshape: cannot reshape ",
                 shape_str(x.shape()), " (", x.numel(), " elements) to ", shape_str(shape));
    target[size_t(infer)] = x.numel() / known;
  }
  STRATA_CHECK(numel_of(target) == x.numel(), "reshape: cannot reshape ", shape_str(x.shape()),
               " (", x.numel(), " elements) to ", shape_str(shape), " (", numel_of(target),
               " elements)");
  Tensor src = contiguous(x);
  OpAttrs attrs;
  attrs.shape = target;
  Strides strides = contiguous_strides(target);
  return make_view(OpId::Reshape, attrs, src, std::move(target), std::move(strides), src.offset());
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& perm) {
  detail::require_defined("transpose", x);
  STRATA_CHECK(int64_t(perm.size()) == x.ndim(), "transpose: permutation of length ",
               perm.size(), " for a tensor of rank ", x.ndim(), " (shape ", shape_str(x.shape()),
               ")");
  std::vector<int64_t> p(perm.size());
  std::vector<bool> seen(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    p[i] = normalize_axis(perm[i], x.ndim(), "transpose");
    STRATA_CHECK(!seen[size_t(p[i])], "transpose: axis ", perm[i], " repeated in permutation");
    seen[size_t(p[i])] = true;
  }
  Shape shape(p.size());
  Strides strides(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    shape[i] = x.shape()[size_t(p[i])];
    strides[i] = x.strides()[size_t(p[i])];
  }
  OpAttrs attrs;
  attrs.axes = p;
  return make_view(OpId::Permute, attrs, x, std::move(shape), std::move(strides), x.offset());
}

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) { return permute(x, perm); }

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  detail::require_defined("slice", x);
  STRATA_CHECK(x.ndim() > 0, "slice: cannot slice a rank-0 tensor");
  axis = normalize_axis(axis, x.ndim(), "slice");
  STRATA_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = x.shape()[size_t(axis)];
  // Python semantics: negative bounds count from the end, then clamp to [0, n].
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = x.shape();
  Strides strides = x.strides();
  // Counted without end - start + step, which overflows for a huge step (INT64_MAX made
  // the extent -1); NumPy's a[0:3:huge] is the one element a[0].
  const int64_t count = end > start ? 1 + (end - start - 1) / step : 0;
  shape[size_t(axis)] = count;
  const int64_t offset = x.offset() + start * strides[size_t(axis)];
  // An axis of 0 or 1 elements is never stepped along: it keeps its stride, which a huge
  // step would otherwise overflow for nothing.
  if (count > 1) {
    STRATA_CHECK(!__builtin_mul_overflow(strides[size_t(axis)], step, &strides[size_t(axis)]),
                 "slice: step ", step, " times the stride ", x.strides()[size_t(axis)],
                 " of axis ", axis, " of shape ", shape_str(x.shape()), " overflows int64");
  }
  OpAttrs attrs;
  attrs.axis = axis;
  attrs.start = start;
  attrs.end = end;
  attrs.step = step;
  return make_view(OpId::Slice, attrs, x, std::move(shape), std::move(strides), offset);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  detail::require_defined("broadcast_to", x);
  STRATA_CHECK(shape.size() >= x.shape().size(), "broadcast_to: cannot broadcast ",
               shape_str(x.shape()), " to lower rank ", shape_str(shape));
  const size_t lead = shape.size() - x.shape().size();
  for (size_t i = 0; i < x.shape().size(); ++i) {
    STRATA_CHECK(x.shape()[i] == shape[lead + i] || x.shape()[i] == 1, "broadcast_to: cannot broadcast ",
                 shape_str(x.shape()), " to ", shape_str(shape));
  }
  // A view allocates nothing, but its element count must still be representable: every
  // later op (contiguous, a reduction) multiplies the extents.
  checked_numel(shape, "broadcast_to");
  if (x.shape() == shape) return x;
  OpAttrs attrs;
  attrs.shape = shape;
  return make_view(OpId::BroadcastTo, attrs, x, shape, broadcast_strides(x.shape(), x.strides(), shape),
                   x.offset());
}

Tensor expand_dims(const Tensor& x, int64_t axis) {
  detail::require_defined("expand_dims", x);
  axis = normalize_axis(axis, x.ndim() + 1, "expand_dims");
  Shape shape = x.shape();
  Strides strides = x.strides();
  shape.insert(shape.begin() + axis, 1);
  strides.insert(strides.begin() + axis, 1);
  OpAttrs attrs;
  attrs.shape = shape;
  return make_view(OpId::Reshape, attrs, x, std::move(shape), std::move(strides), x.offset());
}

Tensor squeeze(const Tensor& x, int64_t axis) {
  detail::require_defined("squeeze", x);
  axis = normalize_axis(axis, x.ndim(), "squeeze");
  STRATA_CHECK(x.shape()[size_t(axis)] == 1, "squeeze: axis ", axis, " of shape ",
               shape_str(x.shape()), " has extent ", x.shape()[size_t(axis)], ", expected 1");
  Shape shape = x.shape();
  Strides strides = x.strides();
  shape.erase(shape.begin() + axis);
  strides.erase(strides.begin() + axis);
  OpAttrs attrs;
  attrs.shape = shape;
  return make_view(OpId::Reshape, attrs, x, std::move(shape), std::move(strides), x.offset());
}

Tensor flatten(const Tensor& x, int64_t start_axis) {
  detail::require_defined("flatten", x);
  start_axis = normalize_axis(start_axis, std::max<int64_t>(x.ndim(), 1), "flatten");
  Shape shape(x.shape().begin(), x.shape().begin() + std::min<int64_t>(start_axis, x.ndim()));
  shape.push_back(-1);
  if (x.numel() == 0) {
    int64_t rest = 1;
    for (int64_t i = start_axis; i < x.ndim(); ++i) rest *= x.shape()[size_t(i)];
    shape.back() = rest;
  }
  return reshape(x, shape);
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  STRATA_CHECK(!xs.empty(), "concat: expected at least one tensor");
  const Device device = detail::op_device("concat", xs);
  const Tensor& first = xs[0];
  STRATA_CHECK(first.ndim() > 0, "concat: cannot concatenate rank-0 tensors (use stack)");
  axis = normalize_axis(axis, first.ndim(), "concat");
  Shape shape = first.shape();
  shape[size_t(axis)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    STRATA_CHECK(t.dtype() == first.dtype(), "concat: dtype mismatch: input 0 is ",
                 first.dtype(), ", input ", i, " is ", t.dtype());
    bool ok = t.ndim() == first.ndim();
    for (int64_t d = 0; ok && d < t.ndim(); ++d) {
      ok = d == axis || t.shape()[size_t(d)] == first.shape()[size_t(d)];
    }
    STRATA_CHECK(ok, "concat: shapes ", shape_str(first.shape()), " and ", shape_str(t.shape()),
                 " differ outside axis ", axis);
    shape[size_t(axis)] = checked_add(shape[size_t(axis)], t.shape()[size_t(axis)], "concat", shape);
  }
  OpAttrs attrs;
  attrs.axis = axis;
  const Tensor out[1] = {Tensor::empty(shape, first.dtype(), device)};
  detail::compute(OpId::Concat, attrs, xs, out);
  return out[0];
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis) {
  STRATA_CHECK(!xs.empty(), "stack: expected at least one tensor");
  axis = normalize_axis(axis, xs[0].ndim() + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    STRATA_CHECK(xs[i].shape() == xs[0].shape(), "stack: shape mismatch: input 0 is ",
                 shape_str(xs[0].shape()), ", input ", i, " is ", shape_str(xs[i].shape()));
    expanded.push_back(expand_dims(xs[i], axis));
  }
  return concat(expanded, axis);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  axis = normalize_axis(axis, x.ndim(), "split");
  const int64_t n = x.shape()[size_t(axis)];
  // Each size is compared with what is left of the axis rather than summed: a running sum
  // overflows ({INT64_MAX, INT64_MAX, 5} wrapped to 3 and passed for an axis of 3).
  int64_t left = n;
  for (int64_t s : sizes) {
    STRATA_CHECK(s >= 0, "split: negative size ", s);
    STRATA_CHECK(s <= left, "split: sizes add up to more than the ", n, " elements of axis ",
                 axis, " of shape ", shape_str(x.shape()), " (size ", s, " with ", left, " left)");
    left -= s;
  }
  STRATA_CHECK(left == 0, "split: sizes add up to ", n - left, " but axis ", axis, " of shape ",
               shape_str(x.shape()), " has ", n);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(x, axis, start, start + s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t num_splits, int64_t axis) {
  axis = normalize_axis(axis, x.ndim(), "split");
  // A count above a non-empty axis's length never divides it. An empty axis splits into
  // num_splits empty pieces, as in NumPy and TensorFlow, but each piece is a tensor (and a
  // tape record): past kMaxEmptySplits the count is a mistake, not a request (2^62 pieces
  // threw std::length_error).
  constexpr int64_t kMaxEmptySplits = int64_t(1) << 16;
  STRATA_CHECK(x.shape()[size_t(axis)] > 0 || num_splits <= kMaxEmptySplits, "split: axis ", axis,
               " of shape ", shape_str(x.shape()), " is empty; splitting it into ", num_splits,
               " empty pieces exceeds the limit of ", kMaxEmptySplits);
  STRATA_CHECK(num_splits > 0 && x.shape()[size_t(axis)] % num_splits == 0, "split: axis ", axis,
               " of shape ", shape_str(x.shape()), " does not split evenly into ", num_splits);
  return split(x, std::vector<int64_t>(size_t(num_splits), x.shape()[size_t(axis)] / num_splits),
               axis);
}

Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& pads, double value) {
  detail::require_defined("pad", x);
  STRATA_CHECK(int64_t(pads.size()) == x.ndim(), "pad: ", pads.size(),
               " (before, after) pairs for a tensor of rank ", x.ndim());
  OpAttrs attrs(PadAttrs{value});
  Shape shape = x.shape();
  for (size_t i = 0; i < pads.size(); ++i) {
    STRATA_CHECK(pads[i].first >= 0 && pads[i].second >= 0, "pad: negative padding on axis ", i);
    attrs.pads.push_back(pads[i].first);
    attrs.pads.push_back(pads[i].second);
    shape[i] = checked_add(checked_add(shape[i], pads[i].first, "pad", shape), pads[i].second, "pad", shape);
  }
  return detail::compute1(OpId::Pad, attrs, {x}, shape, x.dtype(), x.device());
}

namespace {
void require_indices(const char* op, const Tensor& indices) {
  STRATA_CHECK(is_integral(indices.dtype()), op, ": indices must be int32 or int64, got ",
               indices.dtype());
}
}  // namespace

Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis) {
  detail::require_defined("gather", x);
  require_indices("gather", indices);
  detail::op_device("gather", {&x, &indices});
  STRATA_CHECK(x.ndim() > 0, "gather: cannot gather from a rank-0 tensor");
  axis = normalize_axis(axis, x.ndim(), "gather");
  Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  OpAttrs attrs;
  attrs.axis = axis;
  return detail::compute1(OpId::Gather, attrs, {x, indices}, shape, x.dtype(), x.device());
}

Tensor scatter_add(const Tensor& updates, const Tensor& indices, const Shape& shape,
                   int64_t axis) {
  detail::require_defined("scatter_add", updates);
  require_indices("scatter_add", indices);
  STRATA_CHECK(updates.dtype() != kBool, "scatter_add: expected numeric updates, got bool");
  axis = normalize_axis(axis, int64_t(shape.size()), "scatter_add");
  Shape expected(shape.begin(), shape.begin() + axis);
  expected.insert(expected.end(), indices.shape().begin(), indices.shape().end());
  expected.insert(expected.end(), shape.begin() + axis + 1, shape.end());
  STRATA_CHECK(updates.shape() == expected, "scatter_add: updates have shape ",
               shape_str(updates.shape()), ", expected ", shape_str(expected), " for indices ",
               shape_str(indices.shape()), " into ", shape_str(shape), " along axis ", axis);
  OpAttrs attrs;
  attrs.axis = axis;
  attrs.shape = shape;
  return detail::compute1(OpId::ScatterAdd, attrs, {updates, indices}, shape, updates.dtype(),
                          updates.device());
}

Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype) {
  require_indices("one_hot", indices);
  STRATA_CHECK(depth >= 0, "one_hot: depth must be >= 0, got ", depth);
  OpAttrs attrs;
  attrs.depth = depth;
  Shape shape = indices.shape();
  shape.push_back(depth);
  return detail::compute1(OpId::OneHot, attrs, {indices}, shape, dtype, indices.device());
}

Tensor embedding(const Tensor& table, const Tensor& ids) {
  STRATA_CHECK(table.defined() && table.ndim() == 2, "embedding: table must be rank 2 [V,D], got ",
               table.defined() ? shape_str(table.shape()) : "undefined");
  return gather(table, ids, 0);
}

}  // namespace strata
