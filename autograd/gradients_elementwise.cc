// Gradients of the unary and binary elementwise ops, where and cast.
#include <cmath>

#include <strata/autograd/gradient_registry.h>
#include <strata/core/ops.h>

namespace strata::autograd {

namespace {

using Grads = std::vector<Tensor>;

const Tensor& x0(const GradContext& c) { return c.inputs[0]; }
const Tensor& y(const GradContext& c) { return c.output; }

Tensor zero_like_scalar(const Tensor& t) { return scalar_like(t, 0.0); }

Grads unary_vjp(const GradContext& c, const Tensor& g) {
  const Tensor& x = x0(c);
  switch (c.op) {
    case OpId::Neg: return {-g};
    case OpId::Exp: return {g * y(c)};
    case OpId::Log: return {g / x};
    case OpId::Sqrt: return {g * 0.5 / y(c)};
    case OpId::Rsqrt: return {g * -0.5 * y(c) * y(c) * y(c)};
    case OpId::Abs: return {g * sign(x)};
    case OpId::Square: return {g * 2.0 * x};
    case OpId::Sin: return {g * cos(x)};
    case OpId::Cos: return {-(g * sin(x))};
    case OpId::Tanh: return {g * (1.0 - square(y(c)))};
    case OpId::Sigmoid: return {g * y(c) * (1.0 - y(c))};
    case OpId::Relu: return {relu_grad(x, g)};  // one pass: no bool mask, no select
    case OpId::Softplus: return {g * sigmoid(x)};
    case OpId::Erf: return {g * (2.0 / std::sqrt(M_PI)) * exp(-square(x))};
    case OpId::Gelu:
      if (c.attrs.get<GeluAttrs>(OpId::Gelu).approximate_tanh) {
        // d/dx 0.5x(1+t), t = tanh(k(x + 0.044715x^3))
        const double k = std::sqrt(2.0 / M_PI);
        Tensor t = tanh(k * (x + 0.044715 * x * x * x));
        Tensor dt = (1.0 - square(t)) * k * (1.0 + 0.134145 * square(x));
        return {g * (0.5 * (1.0 + t) + 0.5 * x * dt)};
      } else {
        // Phi(x) + x phi(x)
        Tensor cdf = 0.5 * (1.0 + erf(x * M_SQRT1_2));
        Tensor pdf = exp(-0.5 * square(x)) * (1.0 / std::sqrt(2.0 * M_PI));
        return {g * (cdf + x * pdf)};
      }
    case OpId::Reciprocal: return {-(g * square(y(c)))};
    case OpId::Copy:  // also a copy to another device: the gradient goes back
      return {g.device() == c.input_meta[0].device ? g : g.to(c.input_meta[0].device)};
    case OpId::Cast:
      return {is_floating(c.input_meta[0].dtype) ? cast(g, c.input_meta[0].dtype) : Tensor()};
    default: break;
  }
  fail(op_name(c.op), ": no gradient (internal error)");
}

Grads binary_vjp(const GradContext& c, const Tensor& g) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Shape& sa = c.input_meta[0].shape;
  const Shape& sb = c.input_meta[1].shape;
  switch (c.op) {
    // Inputs that lead to no source (c.wants) get no gradient: no reduction, no product.
    case OpId::Add:
      return {c.wants(0) ? unbroadcast(g, sa) : Tensor(), c.wants(1) ? unbroadcast(g, sb) : Tensor()};
    case OpId::Sub:
      return {c.wants(0) ? unbroadcast(g, sa) : Tensor(), c.wants(1) ? unbroadcast(-g, sb) : Tensor()};
    case OpId::Mul:
      return {c.wants(0) ? unbroadcast(g * b, sa) : Tensor(), c.wants(1) ? unbroadcast(g * a, sb) : Tensor()};
    case OpId::Div:
      return {c.wants(0) ? unbroadcast(g / b, sa) : Tensor(),
              c.wants(1) ? unbroadcast(-(g * a) / square(b), sb) : Tensor()};
    case OpId::Pow: {
      // d/da = b a^(b-1); d/db = a^b log a, taken as 0 where a <= 0 (as TensorFlow does).
      Tensor ga = g * b * pow(a, b - 1.0);
      Tensor safe_log = where(greater(a, zero_like_scalar(a)), log(where(greater(a, zero_like_scalar(a)), a, ones_like(a))),
                              zeros_like(a));
      Tensor gb = g * c.output * safe_log;
      return {unbroadcast(ga, sa), unbroadcast(gb, sb)};
    }
    case OpId::ReluGrad:
      // Piecewise constant in x (TensorFlow's ReluGradGrad): zero there; linear in g.
      return {c.wants(0) ? zeros_like(a) : Tensor(), c.wants(1) ? unbroadcast(relu_grad(a, g), sb) : Tensor()};
    case OpId::Maximum:
    case OpId::Minimum: {
      // Ties send the gradient to the first operand (TensorFlow's convention).
      Tensor mask = c.op == OpId::Maximum ? greater_equal(a, b) : less_equal(a, b);
      Tensor zero = zero_like_scalar(g);
      return {unbroadcast(where(mask, g, zero), sa), unbroadcast(where(mask, zero, g), sb)};
    }
    default: break;
  }
  fail(op_name(c.op), ": no gradient (internal error)");
}

Grads where_vjp(const GradContext& c, const Tensor& g) {
  const Tensor& cond = c.inputs[0];
  Tensor zero = scalar_like(g, 0.0);
  return {Tensor(), unbroadcast(where(cond, g, zero), c.input_meta[1].shape),
          unbroadcast(where(cond, zero, g), c.input_meta[2].shape)};
}

}  // namespace

void register_elementwise_gradients() {
  for (OpId op : {OpId::Neg, OpId::Copy, OpId::Cast}) {
    register_gradient(op, GradientDef{unary_vjp, /*needs_inputs=*/false});
  }
  for (OpId op : {OpId::Log, OpId::Abs, OpId::Square, OpId::Sin, OpId::Cos, OpId::Relu,
                  OpId::Softplus, OpId::Gelu, OpId::Erf}) {
    register_gradient(op, GradientDef{unary_vjp, /*needs_inputs=*/true});
  }
  for (OpId op : {OpId::Exp, OpId::Sqrt, OpId::Rsqrt, OpId::Tanh, OpId::Sigmoid, OpId::Reciprocal}) {
    register_gradient(op, GradientDef{unary_vjp, /*needs_inputs=*/false, /*needs_output=*/true});
  }
  for (OpId op : {OpId::Sign, OpId::Floor, OpId::IsFinite, OpId::LogicalNot, OpId::StopGradient}) {
    mark_not_differentiable(op);
  }
  for (OpId op : {OpId::Add, OpId::Sub}) {
    register_gradient(op, GradientDef{binary_vjp, /*needs_inputs=*/false});
  }
  for (OpId op : {OpId::Mul, OpId::Div, OpId::Maximum, OpId::Minimum, OpId::ReluGrad}) {
    register_gradient(op, GradientDef{binary_vjp, /*needs_inputs=*/true});
  }
  register_gradient(OpId::Pow, GradientDef{binary_vjp, true, /*needs_output=*/true});
  for (OpId op : {OpId::Equal, OpId::NotEqual, OpId::Less, OpId::LessEqual, OpId::Greater,
                  OpId::GreaterEqual, OpId::LogicalAnd, OpId::LogicalOr}) {
    mark_not_differentiable(op);
  }
  register_gradient(OpId::Where, GradientDef{where_vjp, /*needs_inputs=*/true});
}

}  // namespace strata::autograd
