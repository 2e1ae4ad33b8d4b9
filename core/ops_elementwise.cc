// Front-ends of the unary and binary (broadcasting) elementwise ops.
#include <strata/core/op_common.h>

namespace strata {

using detail::compute1;
using detail::op_device;

namespace {

enum class UnaryKind { FloatOnly, Numeric, AnyToBool, BoolOnly };

Tensor unary(OpId op, const Tensor& x, UnaryKind kind, const OpAttrs& attrs = {}) {
  const char* name = op_name(op);
  detail::require_defined(name, x);
  DType out = x.dtype();
  switch (kind) {
    case UnaryKind::FloatOnly:
      detail::require_float(name, x);
      break;
    case UnaryKind::Numeric:
      STRATA_CHECK(x.dtype() != kBool, name, ": expected a numeric tensor, got bool");
      break;
    case UnaryKind::AnyToBool:
      out = kBool;
      break;
    case UnaryKind::BoolOnly:
      STRATA_CHECK(x.dtype() == kBool, name, ": expected a bool tensor, got ", x.dtype());
      break;
  }
  return compute1(op, attrs, {x}, x.shape(), out, x.device());
}

enum class BinaryKind { Arithmetic, FloatOnly, Compare, Logical };

Tensor binary(OpId op, const Tensor& a0, const Tensor& b0, BinaryKind kind) {
  const char* name = op_name(op);
  const Device device = op_device(name, {&a0, &b0});
  // Host scalars stay on the host: every backend's kernels read them there (no copy per call).
  Tensor a = a0, b = b0;
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  DType common = promote_types(a.dtype(), b.dtype(), name);
  if (kind == BinaryKind::Logical) {
    STRATA_CHECK(a.dtype() == kBool && b.dtype() == kBool, name, ": expected bool tensors, got ",
                 a.dtype(), " and ", b.dtype());
  } else if (kind == BinaryKind::FloatOnly) {
    STRATA_CHECK(is_floating(common), name, ": expected floating-point tensors, got ", a.dtype(),
                 " and ", b.dtype(), " (cast integers to a float dtype first)");
  } else if (kind == BinaryKind::Arithmetic) {
    STRATA_CHECK(common != kBool, name, ": expected numeric tensors, got bool and bool");
  }
  if (a.dtype() != common) a = cast(a, common);
  if (b.dtype() != common) b = cast(b, common);
  const DType out = (kind == BinaryKind::Compare || kind == BinaryKind::Logical) ? kBool : common;
  return compute1(op, OpAttrs{}, {a, b}, shape, out, device);
}

}  // namespace

Tensor neg(const Tensor& x) { return unary(OpId::Neg, x, UnaryKind::Numeric); }
Tensor exp(const Tensor& x) { return unary(OpId::Exp, x, UnaryKind::FloatOnly); }
Tensor log(const Tensor& x) { return unary(OpId::Log, x, UnaryKind::FloatOnly); }
Tensor sqrt(const Tensor& x) { return unary(OpId::Sqrt, x, UnaryKind::FloatOnly); }
Tensor rsqrt(const Tensor& x) { return unary(OpId::Rsqrt, x, UnaryKind::FloatOnly); }
Tensor abs(const Tensor& x) { return unary(OpId::Abs, x, UnaryKind::Numeric); }
Tensor square(const Tensor& x) { return unary(OpId::Square, x, UnaryKind::Numeric); }
Tensor sin(const Tensor& x) { return unary(OpId::Sin, x, UnaryKind::FloatOnly); }
Tensor cos(const Tensor& x) { return unary(OpId::Cos, x, UnaryKind::FloatOnly); }
Tensor tanh(const Tensor& x) { return unary(OpId::Tanh, x, UnaryKind::FloatOnly); }
Tensor sigmoid(const Tensor& x) { return unary(OpId::Sigmoid, x, UnaryKind::FloatOnly); }
Tensor relu(const Tensor& x) { return unary(OpId::Relu, x, UnaryKind::Numeric); }
Tensor softplus(const Tensor& x) { return unary(OpId::Softplus, x, UnaryKind::FloatOnly); }
Tensor gelu(const Tensor& x, bool approximate_tanh) {
  return unary(OpId::Gelu, x, UnaryKind::FloatOnly, OpAttrs(GeluAttrs{approximate_tanh}));
}
Tensor erf(const Tensor& x) { return unary(OpId::Erf, x, UnaryKind::FloatOnly); }
Tensor sign(const Tensor& x) { return unary(OpId::Sign, x, UnaryKind::Numeric); }
Tensor reciprocal(const Tensor& x) { return unary(OpId::Reciprocal, x, UnaryKind::FloatOnly); }
Tensor floor(const Tensor& x) { return unary(OpId::Floor, x, UnaryKind::Numeric); }
Tensor is_finite(const Tensor& x) { return unary(OpId::IsFinite, x, UnaryKind::AnyToBool); }
Tensor logical_not(const Tensor& x) { return unary(OpId::LogicalNot, x, UnaryKind::BoolOnly); }
Tensor stop_gradient(const Tensor& x) { return unary(OpId::StopGradient, x, UnaryKind::FloatOnly); }

Tensor cast(const Tensor& x, DType dtype) {
  detail::require_defined("cast", x);
  if (x.dtype() == dtype) return x;
  OpAttrs attrs;
  attrs.dtype = dtype;
  return compute1(OpId::Cast, attrs, {x}, x.shape(), dtype, x.device());
}

Tensor contiguous(const Tensor& x) {
  detail::require_defined("contiguous", x);
  if (x.is_contiguous()) return x;
  return compute1(OpId::Copy, OpAttrs{}, {x}, x.shape(), x.dtype(), x.device());
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(OpId::Add, a, b, BinaryKind::Arithmetic); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(OpId::Sub, a, b, BinaryKind::Arithmetic); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpId::Mul, a, b, BinaryKind::Arithmetic); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(OpId::Div, a, b, BinaryKind::FloatOnly); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(OpId::Pow, a, b, BinaryKind::FloatOnly); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpId::Maximum, a, b, BinaryKind::Arithmetic); }
Tensor relu_grad(const Tensor& x, const Tensor& g) { return binary(OpId::ReluGrad, x, g, BinaryKind::Arithmetic); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpId::Minimum, a, b, BinaryKind::Arithmetic); }
Tensor equal(const Tensor& a, const Tensor& b) { return binary(OpId::Equal, a, b, BinaryKind::Compare); }
Tensor not_equal(const Tensor& a, const Tensor& b) { return binary(OpId::NotEqual, a, b, BinaryKind::Compare); }
Tensor less(const Tensor& a, const Tensor& b) { return binary(OpId::Less, a, b, BinaryKind::Compare); }
Tensor less_equal(const Tensor& a, const Tensor& b) { return binary(OpId::LessEqual, a, b, BinaryKind::Compare); }
Tensor greater(const Tensor& a, const Tensor& b) { return binary(OpId::Greater, a, b, BinaryKind::Compare); }
Tensor greater_equal(const Tensor& a, const Tensor& b) { return binary(OpId::GreaterEqual, a, b, BinaryKind::Compare); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return binary(OpId::LogicalAnd, a, b, BinaryKind::Logical); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary(OpId::LogicalOr, a, b, BinaryKind::Logical); }

Tensor where(const Tensor& cond0, const Tensor& a0, const Tensor& b0) {
  const Device device = op_device("where", {&cond0, &a0, &b0});
  Tensor cond = cond0, a = a0, b = b0;  // host scalars stay on the host
  STRATA_CHECK(cond.dtype() == kBool, "where: condition must be bool, got ", cond.dtype());
  const DType common = promote_types(a.dtype(), b.dtype(), "where");
  if (a.dtype() != common) a = cast(a, common);
  if (b.dtype() != common) b = cast(b, common);
  const Shape shape =
      broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  return compute1(OpId::Where, OpAttrs{}, {cond, a, b}, shape, common, device);
}

Tensor clip(const Tensor& x, double lo, double hi) {
  STRATA_CHECK(lo <= hi, "clip: lower bound ", lo, " exceeds upper bound ", hi);
  return minimum(maximum(x, scalar_like(x, lo)), scalar_like(x, hi));
}

Tensor scalar_like(const Tensor& t, double value) {
  return full({}, value, t.dtype(), Device());
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor operator/(const Tensor& a, double b) {
  return is_floating(a.dtype()) ? div(a, scalar_like(a, b)) : div(cast(a, kFloat32), full({}, b));
}
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(b, a), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(b, a), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(b, a), b); }

}  // namespace strata
