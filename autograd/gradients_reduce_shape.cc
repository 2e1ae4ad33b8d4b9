// Gradients of reductions, cumsum and the shape/indexing ops.
#include <strata/autograd/gradient_registry.h>
#include <strata/core/ops.h>

namespace strata::autograd {

namespace {

using Grads = std::vector<Tensor>;

Tensor zero_like_scalar(const Tensor& t) { return scalar_like(t, 0.0); }

// The reduced gradient (or output) reshaped so it broadcasts against the input.
Tensor keepdims_shape(const Tensor& t, const GradContext& c) {
  if (c.attrs.keepdims) return t;
  Shape s = c.input_meta[0].shape;
  for (int64_t a : c.attrs.axes) s[size_t(a)] = 1;
  return reshape(t, s);
}

Grads reduce_vjp(const GradContext& c, const Tensor& g) {
  const Shape& in_shape = c.input_meta[0].shape;
  Tensor gk = keepdims_shape(g, c);
  switch (c.op) {
    case OpId::Sum: return {broadcast_to(gk, in_shape)};
    case OpId::Max:
    case OpId::Min: {
      // Split the gradient evenly among tied extrema, as TensorFlow does.
      const Tensor& x = c.inputs[0];
      Tensor mask = cast(equal(x, keepdims_shape(c.output, c)), x.dtype());
      Tensor count = sum(mask, c.attrs.axes, /*keepdims=*/true);
      return {mask * (gk / count)};
    }
    case OpId::Prod: {
      // d prod / dx_i is the product of the other elements. y / x_i gives it only when no
      // element of the slice is zero; with exactly one zero the zero's gradient is the
      // product of the rest and every other gradient is 0; with two or more all are 0.
      // (At zeros the result is exact to first order; the second derivative through
      // a zero is taken as 0.)
      const Tensor& x = c.inputs[0];
      Tensor zero = equal(x, zero_like_scalar(x));
      Tensor num_zeros = sum(cast(zero, x.dtype()), c.attrs.axes, /*keepdims=*/true);
      Tensor x_safe = where(zero, ones_like(x), x);
      Tensor rest = prod(x_safe, c.attrs.axes, /*keepdims=*/true);  // product of non-zeros
      Tensor zero_s = zero_like_scalar(x);
      Tensor d = where(equal(num_zeros, zero_s), rest / x_safe,
                       where(logical_and(zero, equal(num_zeros, scalar_like(x, 1.0))),
                             broadcast_to(rest, in_shape), zero_s));
      return {gk * d};
    }
    case OpId::LogSumExp: return {gk * exp(c.inputs[0] - keepdims_shape(c.output, c))};
    case OpId::Cumsum: {
      const auto& a = c.attrs.get<CumsumAttrs>(OpId::Cumsum);
      return {cumsum(g, c.attrs.axis, a.exclusive, !a.reverse)};
    }
    default: break;
  }
  fail(op_name(c.op), ": no gradient (internal error)");
}

Grads shape_vjp(const GradContext& c, const Tensor& g) {
  const Shape& in_shape = c.input_meta[0].shape;
  switch (c.op) {
    case OpId::Reshape: return {reshape(g, in_shape)};
    case OpId::Permute: {
      std::vector<int64_t> inverse(c.attrs.axes.size());
      for (size_t i = 0; i < inverse.size(); ++i) inverse[size_t(c.attrs.axes[i])] = int64_t(i);
      return {permute(g, inverse)};
    }
    case OpId::BroadcastTo: return {unbroadcast(g, in_shape)};
    case OpId::Slice: {
      const int64_t axis = c.attrs.axis, n = in_shape[size_t(axis)];
      if (c.attrs.step == 1) {
        std::vector<std::pair<int64_t, int64_t>> pads(in_shape.size(), {0, 0});
        pads[size_t(axis)] = {c.attrs.start, n - c.attrs.end};
        return {pad(g, pads)};
      }
      Tensor idx = arange(double(c.attrs.start), double(c.attrs.end), double(c.attrs.step), kInt64);
      return {scatter_add(g, idx, in_shape, axis)};
    }
    case OpId::Pad: {
      Tensor r = g;
      for (size_t d = 0; d < in_shape.size(); ++d) {
        const int64_t before = c.attrs.pads[2 * d];
        if (before != 0 || c.attrs.pads[2 * d + 1] != 0) r = slice(r, int64_t(d), before, before + in_shape[d]);
      }
      return {r};
    }
    case OpId::Concat: {
      Grads out;
      int64_t start = 0;
      for (const TensorMeta& m : c.input_meta) {
        const int64_t len = m.shape[size_t(c.attrs.axis)];
        out.push_back(slice(g, c.attrs.axis, start, start + len));
        start += len;
      }
      return out;
    }
    case OpId::Gather: return {scatter_add(g, c.inputs[1], in_shape, c.attrs.axis), Tensor()};
    case OpId::ScatterAdd: return {gather(g, c.inputs[1], c.attrs.axis), Tensor()};
    default: break;
  }
  fail(op_name(c.op), ": no gradient (internal error)");
}

}  // namespace

void register_reduce_shape_gradients() {
  register_gradient(OpId::Sum, GradientDef{reduce_vjp, /*needs_inputs=*/false});
  register_gradient(OpId::Cumsum, GradientDef{reduce_vjp, /*needs_inputs=*/false});
  for (OpId op : {OpId::Max, OpId::Min, OpId::LogSumExp}) {
    register_gradient(op, GradientDef{reduce_vjp, /*needs_inputs=*/true, /*needs_output=*/true});
  }
  register_gradient(OpId::Prod, GradientDef{reduce_vjp, /*needs_inputs=*/true});
  mark_not_differentiable(OpId::ArgMax);
  mark_not_differentiable(OpId::ArgMin);
  for (OpId op : {OpId::Reshape, OpId::Permute, OpId::BroadcastTo, OpId::Slice, OpId::Pad, OpId::Concat}) {
    register_gradient(op, GradientDef{shape_vjp, /*needs_inputs=*/false});
  }
  register_gradient(OpId::Gather, GradientDef{shape_vjp, /*needs_inputs=*/true});
  register_gradient(OpId::ScatterAdd, GradientDef{shape_vjp, /*needs_inputs=*/true});
  mark_not_differentiable(OpId::OneHot);
  // Creation and random ops have no inputs to differentiate.
  for (OpId op : {OpId::Fill, OpId::Arange, OpId::Linspace, OpId::Eye, OpId::RandomUniform,
                  OpId::RandomNormal, OpId::RandomTruncatedNormal, OpId::RandomBernoulli}) {
    mark_not_differentiable(op);
  }
}

}  // namespace strata::autograd
